"""The Llama layer's arithmetic, written once: RMSNorm, rotary embedding, one decoder layer.

The target's lean forward (`engine.lean.LeanLlama`) and the feature draft's layers
(`specviz.draft.feature`) both run `decoder_layer`; each supplies its own weights
(prepacked oneDNN matrices, plain or int8 linears) and its own K/V storage. The ops
are transformers' own, in its order, so a lean fp32 forward equals the model's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def rotary_tables(positions: torch.Tensor, inv_freq: torch.Tensor, attention_scaling: float,
                  dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and signed sin (len(positions), head_dim) for the given positions, computed as transformers does,
    the sin's first half negated: `rotate(x, cos, sin)` is then transformers' `x * cos + rotate_half(x) * sin`."""
    freqs = positions.float()[:, None] * inv_freq.float()[None, :]
    angles = torch.cat((freqs, freqs), dim=-1)
    half = angles.shape[-1] // 2
    sin = angles.sin() * attention_scaling
    sin[:, :half].neg_()
    return (angles.cos() * attention_scaling).to(dtype), sin.to(dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """The rotary embedding over x's last dimension, with `rotary_tables`' tables.

    transformers' `rotate_half(x) * sin` is `cat(-x2, x1) * sin`; `roll(x) * signed_sin` is
    `cat(x2 * -sin, x1 * sin)`, the same products bit for bit (IEEE negation is exact), in two ops
    where rotate_half takes four (two slices, a negation and a cat): at one decoding row, where
    every op costs its dispatch, q and k took 19.6 us a layer against 36.5 (one row, joint q|k)."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * signed_sin


class LayerWeights(Protocol):
    """What `decoder_layer` reads from a layer: norms, shape, and its four projections."""

    input_norm: torch.Tensor
    post_norm: torch.Tensor
    eps: float
    n_heads: int
    n_kv: int
    head_dim: int
    scale: float

    def qkv(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...

    def o_proj(self, x: torch.Tensor) -> torch.Tensor: ...

    def gate_up(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...

    def down_proj(self, x: torch.Tensor) -> torch.Tensor: ...


# kv(i, k, v): keeps layer i's new keys and values (B, kv heads, n, d) wherever the caller caches them,
# and returns all the keys and values its queries attend to.
KeyValues = Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def decoder_layer(layer: LayerWeights, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: KeyValues,
                  index: int, mask: torch.Tensor | None, causal: bool) -> torch.Tensor:
    """One Llama decoder layer over x (B, n, hidden): attention (under `mask`, or causal) and the MLP,
    both residual. Attention runs in whatever `engine.lean.attention_kernels` context the caller holds."""
    B, n, _ = x.shape
    q, k, v = layer.qkv(rms_norm(x, layer.input_norm, layer.eps))
    q = q.view(B, n, layer.n_heads, layer.head_dim).transpose(1, 2)
    k = k.view(B, n, layer.n_kv, layer.head_dim).transpose(1, 2)
    v = v.view(B, n, layer.n_kv, layer.head_dim).transpose(1, 2)
    q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    keys, values = kv(index, k, v)
    attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, is_causal=causal, scale=layer.scale,
                                          enable_gqa=layer.n_heads != layer.n_kv)
    x = x + layer.o_proj(attn.transpose(1, 2).reshape(B, n, -1))
    gate, up = layer.gate_up(rms_norm(x, layer.post_norm, layer.eps))
    return x + layer.down_proj(F.silu(gate) * up)


# A product over rows (n, in) in fp32 -> (n, out) in fp32: a weight-only kernel that casts what it must.
Product = Callable[[torch.Tensor], torch.Tensor]


@dataclass(eq=False)
class RowsLayer:
    """A decoder layer as a CPU's decoding loop runs weight-only products: rows (n, hidden) in fp32.

    `decoder_layer` keeps transformers' ops and dtypes so that a lean forward equals the model's bit for
    bit. Weight-only kernels (the 4-bit target's int4, the feature draft's fbgemm int8) round anyway, so
    their layers drop what only exactness needs: the residual stream, K/V and attention stay in fp32
    (one bf16 decoding row's attention took 98 us a layer, fp32's 21 on an AVX-512 EPYC, and fbgemm
    quantises its input from fp32 itself), the batch dimension goes, q and k rotate as one tensor and
    each norm is one call (`F.rms_norm`). At 1-16 rows every op costs about its dispatch: the 4-bit
    target's forward ran 1.07x faster than through `decoder_layer` on fp32 activations (paired rounds).
    """

    input_norm: torch.Tensor   # fp32
    post_norm: torch.Tensor
    qkv: Product               # q|k|v as one matrix
    o: Product
    gate_up: Product           # gate|up as one matrix
    down: Product
    n_heads: int
    n_kv: int
    head_dim: int
    eps: float
    scale: float

    def __call__(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: KeyValues, index: int,
                 mask: torch.Tensor | None, causal: bool) -> torch.Tensor:
        """x (n, hidden) -> the layer's output; cos, sin (n, 1, head_dim); `kv` as for `decoder_layer`."""
        n, heads, kv_heads, d = x.shape[0], self.n_heads, self.n_kv, self.head_dim
        qkv = self.qkv(F.rms_norm(x, x.shape[-1:], self.input_norm, self.eps))
        qk = rotate(qkv[:, :(heads + kv_heads) * d].view(n, heads + kv_heads, d), cos, sin)
        keys, values = kv(index, qk[:, heads:].transpose(0, 1).unsqueeze(0),
                          qkv[:, (heads + kv_heads) * d:].view(n, kv_heads, d).transpose(0, 1).unsqueeze(0))
        attn = F.scaled_dot_product_attention(qk[:, :heads].transpose(0, 1).unsqueeze(0), keys, values,
                                              attn_mask=mask, is_causal=causal, scale=self.scale,
                                              enable_gqa=heads != kv_heads)
        x = x + self.o(attn[0].transpose(0, 1).reshape(n, -1))
        gate, up = self.gate_up(F.rms_norm(x, x.shape[-1:], self.post_norm, self.eps)).chunk(2, -1)
        return x + self.down(F.silu(gate) * up)

    @classmethod
    def of(cls, layer, products: tuple[Product, Product, Product, Product]) -> "RowsLayer":
        """The rows form of a layer that `decoder_layer` reads (its norms and shape), over `products`
        (q|k|v, o, gate|up, down)."""
        return cls(layer.input_norm.float(), layer.post_norm.float(), *products, layer.n_heads, layer.n_kv,
                   layer.head_dim, layer.eps, layer.scale)
