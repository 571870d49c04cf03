"""The Llama layer's arithmetic, written once: RMSNorm, rotary embedding, one decoder layer.

The target's lean forward (`engine.lean.LeanLlama`) and the feature draft's layers
(`specviz.draft.feature`) both run `decoder_layer`; each supplies its own weights
(prepacked oneDNN matrices, plain or int8 linears) and its own K/V storage. The ops
are transformers' own, in its order, so a lean fp32 forward equals the model's.
"""

from __future__ import annotations

from typing import Callable, Protocol

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary_tables(positions: torch.Tensor, inv_freq: torch.Tensor, attention_scaling: float,
                  dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (len(positions), head_dim) for the given positions, computed as transformers does."""
    freqs = positions.float()[:, None] * inv_freq.float()[None, :]
    angles = torch.cat((freqs, freqs), dim=-1)
    return (angles.cos() * attention_scaling).to(dtype), (angles.sin() * attention_scaling).to(dtype)


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
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    keys, values = kv(index, k, v)
    attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, is_causal=causal, scale=layer.scale,
                                          enable_gqa=layer.n_heads != layer.n_kv)
    x = x + layer.o_proj(attn.transpose(1, 2).reshape(B, n, -1))
    gate, up = layer.gate_up(rms_norm(x, layer.post_norm, layer.eps))
    return x + layer.down_proj(F.silu(gate) * up)
