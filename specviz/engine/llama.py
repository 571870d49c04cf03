"""The Llama layer, written once: RMSNorm, rotary embedding, one decoder layer over a small linear interface.

Every forward SpecViz runs goes through `DecoderLayer`: the target's lean forward in fp32, bf16 and the
weight-only precisions (`engine.lean.LeanLlama`), the feature draft's levels, its static (graph-captured)
form and its training. What differs between them is only the layer's four products (`Product`: dense,
oneDNN-prepacked, torch's int4, gpt-fast's int8, fbgemm, SpecViz's q4 and q8 kernels) and its attention
(`Attention`, or the batch-invariant `native.RowAttention`). On SpecViz's own kernel a whole layer runs as
one op (`kernels.Q4Layer`, the C++ `q4_layer`): this layer's fast path, kept equal to it bit for bit by
tests/test_q4_kernel.py.

The ops are transformers' own, in its order and its dtypes, so a lean fp32 or bf16 forward equals the
model's; a weight-only forward keeps its residual stream, K/V and attention in fp32 (its products round
anyway) and widens what its kernels give.
"""

from __future__ import annotations

import warnings
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' RMSNorm: normalised in fp32, cast back to x's dtype, times `weight`. On fp32 rows the
    casts are skipped (x * r * w is w * (x * r) bit for bit), which under TorchScript halves a decoding
    row's norm against `torch.rms_norm` (10.5 against 20 us on a Zen 4 EPYC)."""
    if x.dtype == torch.float32:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def glu(gate_up: torch.Tensor) -> torch.Tensor:
    """SwiGLU's silu(gate) * up from rows [gate | up] (the stacked gate|up product's)."""
    gate, up = gate_up.chunk(2, -1)
    return F.silu(gate) * up


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


def attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: Optional[torch.Tensor], causal: bool,
           scale: float, groups: int) -> torch.Tensor:
    """`scaled_dot_product_attention` of q (B, heads, n, d) over keys and values (B, kv heads, S, d), each kv
    head shared by `groups` consecutive query heads (GQA), under `mask` (B or 1, 1, n, S) or causal.

    One bf16 or fp16 decoding row on a CPU goes in as one head of `groups` rows per kv head: through
    `enable_gqa` the kernel took 122 us a layer for SmolLM2's 9 heads on 3 over ~150 keys and 294 us over
    400, as one head of three rows 35 and 69 us (a Zen 4 EPYC, 2 threads; a bf16 forward 1.09x and 1.33x
    faster there). Each row is the same product over the same keys, rounded in another order (not the same
    bits). An fp32 row, several rows (a tree: no faster there, the mask tiled per head) and other devices
    keep `enable_gqa`."""
    batch, heads, n, d = q.shape
    if (n == 1 and groups > 1 and q.dtype != torch.float32 and q.device.type == "cpu"
            and (mask is None or mask.size(1) == 1)):
        out = F.scaled_dot_product_attention(q.reshape(batch, heads // groups, groups, d), keys, values,
                                             attn_mask=mask, scale=scale)
        return out.view(batch, heads, n, d)
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, is_causal=causal, scale=scale,
                                          enable_gqa=groups > 1)


class Attention(torch.nn.Module):
    """`attend` as a module: what a `DecoderLayer` calls, so that another kernel can stand in its place
    (`native.RowAttention`, batch-invariant)."""

    def forward(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: Optional[torch.Tensor],
                causal: bool, scale: float, groups: int) -> torch.Tensor:
        return attend(q, keys, values, mask, causal, scale, groups)


class Product(torch.nn.Module):
    """The small linear interface a `DecoderLayer` multiplies through: `rows(x)` for rows (..., in) -> (..., out),
    and the same over rows RMS-normalised first (`normed_rows`) and over SwiGLU's rows (`glu_rows`), which a
    kernel may fuse into its rounding of the rows (`kernels.Q4Rows`). A module, so that TorchScript compiles it
    into the layers that call it. A product may give bf16 rows to an fp32 layer: the layer widens them."""

    def rows(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @torch.jit.export
    def normed_rows(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return self.rows(rms_norm(x, weight, eps))

    @torch.jit.export
    def glu_rows(self, gate_up: torch.Tensor) -> torch.Tensor:
        return self.rows(glu(gate_up))


class Linears(Product):
    """Several linear modules (a trainable draft's q, k and v, or its gate and up) as one product: each
    multiplies as it would alone, their outputs side by side. What training reads (gradients reach each
    module's weights) and what a draft's dense levels run (the same numbers as its modules one by one)."""

    def __init__(self, *linears: torch.nn.Module):
        super().__init__()
        self.linears = torch.nn.ModuleList(linears)

    def rows(self, x: torch.Tensor) -> torch.Tensor:
        if len(self.linears) == 1:
            return self.linears[0](x)
        return torch.cat([linear(x) for linear in self.linears], dim=-1)


class DecoderLayer(torch.nn.Module):
    """One Llama (or Qwen2: biases on q, k and v) decoder layer over its four products (q|k|v, o, gate|up,
    down) and an attention: attention and the MLP, both residual.

    x is rows (n, hidden), one sequence (the decoding loops), or (B, n, hidden) (training); the residual
    stream, K/V and attention run in x's dtype: the model's own for a dense forward, fp32 for a weight-only
    one. Every index is a narrow, not a slice per dimension: at a decoding row each aten call is a cost.
    `forward` writes the new K/V into a cache and attends over it; `project` and `finish` are its two halves,
    for a caller that keeps K/V its own way (training's unrolled steps, `layers_over`).
    """

    def __init__(self, input_norm: torch.Tensor, post_norm: torch.Tensor, qkv: Product, o: Product,
                 gate_up: Product, down: Product, n_heads: int, n_kv: int, head_dim: int, eps: float,
                 scale: float, attention: Optional[torch.nn.Module] = None):
        super().__init__()
        self.attention = Attention() if attention is None else attention
        self.input_norm, self.post_norm = input_norm, post_norm   # in the stream's dtype
        self.qkv, self.o, self.gate_up, self.down = qkv, o, gate_up, down
        self.n_heads, self.n_kv, self.head_dim = n_heads, n_kv, head_dim
        self.eps, self.scale = float(eps), float(scale)

    @classmethod
    def of(cls, layer, products: tuple[Product, Product, Product, Product], dtype: torch.dtype = torch.float32,
           attention: Optional[torch.nn.Module] = None) -> "DecoderLayer":
        """The layer over `products` (q|k|v, o, gate|up, down) of a module that carries a layer's norms and shape
        (`input_norm`, `post_norm`, `n_heads`, `n_kv`, `head_dim`, `eps`, `scale`: a feature draft's), its norms
        in the stream's `dtype`."""
        return cls(layer.input_norm.to(dtype), layer.post_norm.to(dtype), *products, layer.n_heads, layer.n_kv,
                   layer.head_dim, layer.eps, layer.scale, attention)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: torch.Tensor,
                values: torch.Tensor, start: int, slots: Optional[torch.Tensor], end: int,
                mask: Optional[torch.Tensor], causal: bool) -> torch.Tensor:
        """The layer's output; cos, sin (n, 1, head_dim). K/V (B, kv heads, slots, d) take the n new rows at
        `slots` (index_copy_) or, with `slots` None, at start, start + 1, ...; attention reads slots [0, end),
        or every slot with `end` -1 (a captured shape's one width), under `mask` (additive) or causal."""
        q, k, v = self.project(x, cos, sin)
        if slots is None:
            n = k.size(2)
            keys.narrow(2, start, n).copy_(k)
            values.narrow(2, start, n).copy_(v)
        else:
            keys.index_copy_(2, slots, k)   # k is rotated in the stream's dtype; v may be a kernel's bf16,
            values.index_copy_(2, slots, v.to(values.dtype))   # and index_copy_ does not widen
        if end >= 0:
            keys, values = keys.narrow(2, 0, end), values.narrow(2, 0, end)
        return self.finish(x, q, keys, values, mask, causal)

    @torch.jit.export
    def project(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q (B, heads, n, d) and the new k, v (B, kv heads, n, d), q and k rotated as one tensor."""
        heads, kv_heads, d = self.n_heads, self.n_kv, self.head_dim
        qkv = self.qkv.normed_rows(x, self.input_norm, self.eps)
        qkv = qkv.view(-1, x.size(-2), heads + 2 * kv_heads, d)
        qk = rotate(qkv.narrow(2, 0, heads + kv_heads), cos, sin).transpose(1, 2)
        v = qkv.narrow(2, heads + kv_heads, kv_heads).transpose(1, 2)
        return qk.narrow(1, 0, heads), qk.narrow(1, heads, kv_heads), v

    @torch.jit.export
    def finish(self, x: torch.Tensor, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
               mask: Optional[torch.Tensor], causal: bool) -> torch.Tensor:
        """Attention of q over keys and values, then the MLP, both residual."""
        heads = self.n_heads
        attn = self.attention(q, keys, values, mask, causal, self.scale, heads // self.n_kv)
        shape = list(x.shape[:-1])
        shape.append(heads * self.head_dim)
        # The products may give bf16 to an fp32 stream (the int4 kernel's own): the sum widens them exactly,
        # and SwiGLU's rows are widened first.
        x = x + self.o.rows(attn.transpose(1, 2).reshape(shape))
        gate_up = self.gate_up.normed_rows(x, self.post_norm, self.eps)
        return x + self.down.glu_rows(gate_up.to(x.dtype))


class LayerStack(torch.nn.Module):
    """A model's layers in order, as one call: what TorchScript compiles (`layer_stack`).

    At one decoding row the 4-bit target's 30 layers run about 40 small ops each, and in eager PyTorch each
    op pays Python's dispatch, a third of the token's time. TorchScript runs the same ops, the same kernels
    in the same order (so the same numbers, bit for bit), from its C++ interpreter: one 4-bit forward took
    10.5 ms against 13.2 eager on a 2-core Zen 4 EPYC (`torch.compile` compiled for 78 s there and then
    ran slower than eager: 0.86-0.94x).
    """

    def __init__(self, layers: list[torch.nn.Module]):
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: List[torch.Tensor],
                values: List[torch.Tensor], start: int, slots: Optional[torch.Tensor], end: int,
                mask: Optional[torch.Tensor], causal: bool, taps: List[int]) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        """Every layer over x, layer i's K/V in keys[i], values[i] (as `DecoderLayer.forward`); returns the last
        layer's output and the outputs of the layers `taps` names."""
        tapped: List[torch.Tensor] = []
        i = 0
        for layer in self.layers:
            x = layer(x, cos, sin, keys[i], values[i], start, slots, end, mask, causal)
            if i in taps:
                tapped.append(x)
            i += 1
        return x, tapped


def layer_stack(layers: list[torch.nn.Module], script: bool = True) -> LayerStack:
    """`layers` as one `LayerStack`, compiled by TorchScript with `script`; the same module run eagerly where it
    is not asked for or this torch cannot compile it (the same ops: only slower at a decoding row)."""
    stack = LayerStack(layers)
    if not script:
        return stack
    try:
        with warnings.catch_warnings():
            # torch 2.13 calls TorchScript deprecated in favour of torch.compile, which compiled these layers for
            # 78 s on 2 cores and then ran them slower than eager; should TorchScript go, the eager stack runs.
            warnings.simplefilter("ignore", DeprecationWarning)
            return torch.jit.script(stack)
    except Exception as exc:   # noqa: BLE001 - TorchScript's errors have no common type; eager runs the same ops
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        warnings.warn(f"TorchScript could not compile the decoder layers ({reason}); running them eagerly",
                      RuntimeWarning, stacklevel=2)
        return stack


def layers_over(layers: list[DecoderLayer], x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv,
                mask: Optional[torch.Tensor], causal: bool) -> torch.Tensor:
    """`layers` over x, each layer's new K/V kept by `kv(i, k, v)`, which returns every key and value its
    queries attend to (training's unrolled steps keep them in lists; `lambda i, k, v: (k, v)` is plain
    causal self-attention). cos, sin (n, head_dim)."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    for i, layer in enumerate(layers):
        q, k, v = layer.project(x, cos, sin)
        keys, values = kv(i, k, v)
        x = layer.finish(x, q, keys, values, mask, causal)
    return x
