"""The Llama layer's arithmetic, written once: RMSNorm, rotary embedding, one decoder layer.

The target's lean forward (`engine.lean.LeanLlama`) and the feature draft's layers
(`specviz.draft.feature`) both run `decoder_layer`; each supplies its own weights
(prepacked oneDNN matrices, plain or int8 linears) and its own K/V storage. The ops
are transformers' own, in its order, so a lean fp32 forward equals the model's.
"""

from __future__ import annotations

import warnings
from typing import Callable, List, Optional, Protocol, Tuple

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
        out = F.scaled_dot_product_attention(q.view(batch, heads // groups, groups, d), keys, values,
                                             attn_mask=mask, scale=scale)
        return out.view(batch, heads, n, d)
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, is_causal=causal, scale=scale,
                                          enable_gqa=groups > 1)


class Attention(torch.nn.Module):
    """`attend` as a module: what a `RowsLayer` calls, so that another kernel can stand in its place
    (`native.RowAttention`, batch-invariant)."""

    def forward(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: Optional[torch.Tensor],
                causal: bool, scale: float, groups: int) -> torch.Tensor:
        return attend(q, keys, values, mask, causal, scale, groups)


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
    attn = attend(q, keys, values, mask, causal, layer.scale, layer.n_heads // layer.n_kv)
    x = x + layer.o_proj(attn.transpose(1, 2).reshape(B, n, -1))
    gate, up = layer.gate_up(rms_norm(x, layer.post_norm, layer.eps))
    return x + layer.down_proj(F.silu(gate) * up)


# A product over rows (n, in) in fp32 -> (n, out) in fp32 or bf16 (its `rows` method; `RowsLayer` widens bf16
# exactly), over the rows RMS-normalised first (`normed_rows(x, weight, eps)`: `rms_rows` unless the kernel
# fuses the norm) and over SwiGLU's rows (`glu_rows(gate_up)`: `glu` unless fused): a weight-only kernel that
# casts what it must, as a `torch.nn.Module` TorchScript can compile.
Product = torch.nn.Module


class RowsProduct(torch.nn.Module):
    """A `Product` whose kernel fuses neither the norm nor SwiGLU: both run as torch ops before its `rows`."""

    @torch.jit.export
    def normed_rows(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return self.rows(rms_rows(x, weight, eps))

    @torch.jit.export
    def glu_rows(self, gate_up: torch.Tensor) -> torch.Tensor:
        return self.rows(glu(gate_up))


def glu(gate_up: torch.Tensor) -> torch.Tensor:
    """SwiGLU's silu(gate) * up from rows [gate | up] (the stacked gate|up product's), in fp32."""
    gate, up = gate_up.float().chunk(2, -1)
    return F.silu(gate) * up


def rms_rows(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm of fp32 rows in fp32. Under TorchScript these four ops took half the time of `torch.rms_norm` at
    one row (10.5 against 20 us on a Zen 4 EPYC), with the same numbers."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class RowsLayer(torch.nn.Module):
    """A decoder layer as a CPU's decoding loop runs weight-only products: rows (n, hidden) in fp32.

    `decoder_layer` keeps transformers' ops and dtypes so that a lean forward equals the model's bit for
    bit. Weight-only kernels (the 4-bit target's int4, the feature draft's fbgemm int8) round anyway, so
    their layers drop what only exactness needs: the residual stream, K/V and attention stay in fp32
    (one bf16 decoding row's attention took 98 us a layer, fp32's 21 on an AVX-512 EPYC, and fbgemm
    quantises its input from fp32 itself), the batch dimension goes, q and k rotate as one tensor and
    the products take 2-D rows (`rows`). At 1-16 rows every op costs about its dispatch: the 4-bit
    target's forward ran 1.07x faster than through `decoder_layer` on fp32 activations (paired rounds).
    The layers run inside `RowsStack`, compiled by TorchScript, where an op's dispatch costs less still.
    """

    def __init__(self, input_norm: torch.Tensor, post_norm: torch.Tensor, qkv: Product, o: Product,
                 gate_up: Product, down: Product, n_heads: int, n_kv: int, head_dim: int, eps: float,
                 scale: float, attention: Optional[torch.nn.Module] = None):
        super().__init__()
        self.attention = Attention() if attention is None else attention
        self.register_buffer("input_norm", input_norm, persistent=False)   # fp32
        self.register_buffer("post_norm", post_norm, persistent=False)
        self.qkv, self.o, self.gate_up, self.down = qkv, o, gate_up, down   # q|k|v and gate|up: one matrix each
        self.n_heads, self.n_kv, self.head_dim = n_heads, n_kv, head_dim
        self.eps, self.scale = float(eps), float(scale)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: torch.Tensor,
                values: torch.Tensor, start: int, slots: Optional[torch.Tensor], end: int,
                mask: Optional[torch.Tensor], causal: bool) -> torch.Tensor:
        """x (n, hidden) -> the layer's output; cos, sin (n, 1, head_dim). K/V (1, kv heads, slots, d) take
        the n new rows at `slots` (index_copy_) or, with `slots` None, at start, start + 1, ...; attention
        reads slots [0, end), or every slot with `end` -1 (a captured shape's one width)."""
        # Every index is a narrow, not a slice per dimension: in a 4-bit forward each aten call is a cost.
        n, heads, kv_heads, d = x.size(0), self.n_heads, self.n_kv, self.head_dim
        qkv = self.qkv.normed_rows(x, self.input_norm, self.eps).view(n, heads + 2 * kv_heads, d)
        qk = rotate(qkv.narrow(1, 0, heads + kv_heads), cos, sin).transpose(0, 1).unsqueeze(0)
        k = qk.narrow(1, heads, kv_heads)
        v = qkv.narrow(1, heads + kv_heads, kv_heads).transpose(0, 1).unsqueeze(0)
        if slots is None:
            keys.narrow(2, start, n).copy_(k)
            values.narrow(2, start, n).copy_(v)
        else:
            keys.index_copy_(2, slots, k)
            values.index_copy_(2, slots, v.to(values.dtype))   # index_copy_ does not widen
        if end >= 0:
            keys, values = keys.narrow(2, 0, end), values.narrow(2, 0, end)
        attn = self.attention(qk.narrow(1, 0, heads), keys, values, mask, causal, self.scale, heads // kv_heads)
        x = x + self.o.rows(attn[0].transpose(0, 1).reshape(n, heads * d))
        # The products may give bf16 (the int4 kernel's own): adding to the fp32 stream, rotating by fp32 tables
        # or copying into the fp32 cache widens them exactly, one op fewer each; SwiGLU widens first (`glu`).
        return x + self.down.glu_rows(self.gate_up.normed_rows(x, self.post_norm, self.eps))

    @classmethod
    def of(cls, layer, products: tuple[Product, Product, Product, Product],
           attention: Optional[torch.nn.Module] = None) -> "RowsLayer":
        """The rows form of a layer that `decoder_layer` reads (its norms and shape), over `products`
        (q|k|v, o, gate|up, down), attending through `attention` (default `Attention`)."""
        return cls(layer.input_norm.float(), layer.post_norm.float(), *products, layer.n_heads, layer.n_kv,
                   layer.head_dim, layer.eps, layer.scale, attention)


class RowsStack(torch.nn.Module):
    """A model's `RowsLayer`s in order, as one call: what TorchScript compiles (`rows_stack`).

    At one decoding row the 4-bit target's 30 layers run about 40 small ops each, and in eager PyTorch each
    op pays Python's dispatch, a third of the token's time. TorchScript runs the same ops, the same kernels
    in the same order (so the same numbers, bit for bit), from its C++ interpreter: one 4-bit forward took
    10.5 ms against 13.2 eager on a 2-core Zen 4 EPYC (`torch.compile` compiled for 78 s there and then
    ran slower than eager: 0.86-0.94x).
    """

    def __init__(self, layers: list[RowsLayer]):
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: List[torch.Tensor],
                values: List[torch.Tensor], start: int, slots: Optional[torch.Tensor], end: int,
                mask: Optional[torch.Tensor], causal: bool, taps: List[int]) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        """Every layer over x (n, hidden), layer i's K/V in keys[i], values[i] (as `RowsLayer.forward`);
        returns the last layer's output and the outputs of the layers `taps` names."""
        tapped: List[torch.Tensor] = []
        i = 0
        for layer in self.layers:
            x = layer(x, cos, sin, keys[i], values[i], start, slots, end, mask, causal)
            if i in taps:
                tapped.append(x)
            i += 1
        return x, tapped


def rows_stack(layers: list[RowsLayer]) -> RowsStack:
    """`layers` as one `RowsStack`, compiled by TorchScript; the same module run eagerly where this torch
    cannot compile it (the same ops: only slower)."""
    stack = RowsStack(layers)
    try:
        with warnings.catch_warnings():
            # torch 2.13 calls TorchScript deprecated in favour of torch.compile, which compiled these layers for
            # 78 s on 2 cores and then ran them slower than eager; should TorchScript go, the eager stack runs.
            warnings.simplefilter("ignore", DeprecationWarning)
            return torch.jit.script(stack)
    except Exception as exc:   # noqa: BLE001 - TorchScript's errors have no common type; eager runs the same ops
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        warnings.warn(f"TorchScript could not compile the rows layers ({reason}); running them eagerly",
                      RuntimeWarning, stacklevel=2)
        return stack
