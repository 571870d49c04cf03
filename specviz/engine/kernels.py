"""The linear kernels every decoding forward multiplies through: the products a `llama.DecoderLayer` calls
(`llama.Product`: rows in, rows out), and where each runs.

They are chosen for a CPU's small decoding batches (1-16 rows), where a kernel call's fixed cost is as large
as its arithmetic:

- `Dense`: `F.linear`, or oneDNN's product over a prepacked bf16 copy of the weight (`packed_weights`), over
  q|k|v and gate|up stacked as one matrix each (`rows_together`): the same kernel as `F.linear`, so the same
  bits (checked on each model before use);
- `Int8Rows`: weight-only int8, gpt-fast's `_weight_int8pack_mm` (the target's `--dtype int8`) or fbgemm's
  dynamic linear (a bf16 feature draft's levels; `Fbgemm` is its face in a compiled layer stack);
- `Int4Linear`: torch's int4 weight-only kernel over a GGUF's Q4_1 codes (q4 where SpecViz's kernel is not built);
- `Q4Rows`, `Q8Rows`: SpecViz's own kernel (`native`, csrc/q4_rows.cpp) over the GGUF's Q4_1 and Q8_0 codes as
  they are, and `Q4Layer`, a whole layer of them as one op (the layer's fast path, equal to it bit for bit).

What makes the weights these kernels read (GGUF reading, quantisation, a model's or a draft's weight-only copy)
is `quant`'s. `rows_together` re-points a model's linears at row blocks of one stacked matrix, and
`packed_weights` keeps the prepacked copies in the model's state (`model_state`), keyed by the weights' versions.
"""

from __future__ import annotations

import threading
import warnings
from typing import Optional

import torch
import torch.nn.functional as F

from . import native
from .llama import DecoderLayer, Product
from .model_state import state_of, weights_version

GROUP = 32   # weights per Q4_1 or Q8_0 block, and the kernels' group size


class Dense(Product):
    """x @ weight.T (+ bias): `F.linear`, or oneDNN's product over a prepacked copy of the weight
    (`pack`) where `packed` is given.

    `F.linear` in bf16 on a CPU reaches the same oneDNN kernel but first reorders the weight into the
    kernel's blocked layout, on every call; at a decoding step's 1-16 rows that reorder costs as much as
    the multiplication (the 3072 x 576 gate|up matrix: 101 us a call against 46 us prepacked)."""

    def __init__(self, weight: torch.Tensor, packed: Optional[torch.Tensor] = None,
                 bias: Optional[torch.Tensor] = None):
        super().__init__()
        self.weight, self.packed, self.bias = weight, packed, bias

    @torch.jit.export
    def rows(self, x: torch.Tensor) -> torch.Tensor:
        packed = self.packed
        if packed is None:
            return F.linear(x, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x, packed, self.bias, "none", [], "")

    forward = rows


def rows_together(*linears: torch.nn.Linear) -> torch.Tensor:
    """The linears' weights stacked as one matrix (q|k|v, gate|up), without a second copy of them.

    One matmul instead of three (or two) per layer makes a CPU decoding forward of the offline
    default 9% faster: its matrices are small and each call has a fixed cost. The first call
    moves the weights into one new tensor and re-points the linears at row blocks of it (the same
    numbers, so transformers' forward is unchanged); later calls find them adjacent and rebuild
    the view. Weights moved since (`.to(...)`) are simply stacked again; weights made under
    inference_mode are stacked as a copy.
    """
    with _STACKING:   # races starting together on one model: one of them re-points its linears
        return _rows_together(linears)


# `rows_together` re-points a shared model's linears: two threads doing it at once would each stack and
# re-point, leaving linears spread over two stacked copies (same numbers, twice the memory).
_STACKING = threading.Lock()


def _rows_together(linears) -> torch.Tensor:
    weights = [m.weight for m in linears]
    first, cols = weights[0], weights[0].shape[1]
    rows = sum(w.shape[0] for w in weights)
    if _adjacent_rows(weights):
        return first.detach().new_empty(0).set_(first.untyped_storage(), first.storage_offset(), (rows, cols))
    if any(w.is_inference() for w in weights):   # made under inference_mode: a parameter cannot view them
        return torch.cat([w.detach() for w in weights])
    with torch.inference_mode(False), torch.no_grad():   # parameters may not point into inference tensors
        stacked = torch.cat([w.detach() for w in weights]).contiguous()
        offset = 0
        for m in linears:
            n = m.weight.shape[0]
            m.weight.data = stacked[offset:offset + n]
            offset += n
    return stacked.detach()


def biases_together(*linears: torch.nn.Linear) -> torch.Tensor | None:
    """The linears' biases stacked as `rows_together` stacks their weights (zeros for a linear without one),
    or None where none has a bias (Llama's). A copy: biases are a few thousand numbers."""
    if all(m.bias is None for m in linears):
        return None
    return torch.cat([m.weight.new_zeros(m.weight.shape[0]) if m.bias is None else m.bias.detach()
                      for m in linears])


def _adjacent_rows(weights: list[torch.Tensor]) -> bool:
    """True when the matrices are consecutive row blocks of one contiguous storage."""
    first = weights[0]
    offset = first.storage_offset()
    for w in weights:
        if (not w.is_contiguous() or w.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
                or w.storage_offset() != offset or w.shape[1] != first.shape[1]):
            return False
        offset += w.numel()
    return True


def packed_matmul_supported(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether this torch can multiply by oneDNN-prepacked weights here (a CPU, bf16, oneDNN built in)."""
    return (device.type == "cpu" and dtype == torch.bfloat16 and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight") and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


def pack(weight: torch.Tensor) -> torch.Tensor:
    """oneDNN's prepacked copy of a (out, in) weight, for `Dense`."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), None)


def _same_bits(weight: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None) -> bool:
    """The prepacked product equals `F.linear`'s bit for bit on a few row counts (else it is not used)."""
    gen = torch.Generator().manual_seed(0)
    for rows in (1, 3, 12):
        x = torch.randn(rows, weight.shape[1], generator=gen).to(weight.dtype)
        if not torch.equal(Dense(weight, packed, bias).rows(x), F.linear(x, weight, bias)):
            return False
    return True


def packed_weights(model, weights: list[torch.Tensor], first_bias: torch.Tensor | None = None
                   ) -> list[torch.Tensor] | None:
    """oneDNN-prepacked copies of `weights` (a model's own), made once per model and kept on it
    while the weights stay the same, or None where they cannot be used: not a CPU in bf16, or a
    product that would not equal `F.linear`'s bit for bit (checked on the first weight, with
    `first_bias` where its forward adds one: Qwen2's q|k|v)."""
    first = weights[0]
    if not packed_matmul_supported(first.device, first.dtype):
        return None
    # The model's parameters say whether anything changed (`weights_version`; the stacked q|k|v views made per
    # forward have version counters of their own).
    versions = (tuple((w.data_ptr(), tuple(w.shape)) for w in weights), weights_version(model))
    cached = state_of(model).packed
    if cached is not None and cached[0] == versions:
        return cached[1]
    try:
        with torch.no_grad():
            packed = [pack(first)]
            if not _same_bits(first, packed[0], first_bias):
                return None
            packed += [pack(w) for w in weights[1:]]
    except RuntimeError:   # a oneDNN build without bf16 kernels for this CPU
        return None
    # The weights are kept with their copies: a freed one's address could come back with other numbers.
    state_of(model).packed = (versions, packed, list(weights))
    return packed


def int8_decoding_supported(device: torch.device, dtype: torch.dtype) -> bool:
    """Where the decoding forward runs its linears in weight-only int8: a bf16 draft on a CPU.

    On a CPU one draft level is bound by reading its weights (the head's 15.7k rows
    alone are 18 MB in bf16); int8 halves the bytes and the CPU kernel
    (`_weight_int8pack_mm`, gpt-fast's recipe) runs the head about 2.8x faster.
    With fp32 activations the same kernel is 2.7x *slower* than a dense fp32 matmul,
    so fp32 drafts stay dense. A draft only proposes, so its precision can cost
    acceptance, never exactness.
    """
    return device.type == "cpu" and dtype == torch.bfloat16 and int8_kernel_available()


def int8_kernel_available() -> bool:
    """Whether this torch has gpt-fast's weight-only int8 kernel (`_weight_int8pack_mm`)."""
    return hasattr(torch, "_weight_int8pack_mm")


def fbgemm_available() -> bool:
    """Whether fbgemm's dynamic int8 linear runs here (x86 CPUs: the PyTorch wheels build it in). Weights
    are packed for the active quantized engine, so it must be fbgemm's (x86's default "x86" routes to it)."""
    return ("fbgemm" in torch.backends.quantized.supported_engines and hasattr(torch.ops.quantized, "linear_dynamic")
            and torch.backends.quantized.engine in ("x86", "fbgemm"))


def _has_vnni() -> bool:
    """VNNI sums u8 x s8 products straight into 32 bits; without it fbgemm's 16-bit pair sums can
    saturate unless x keeps 7 bits (`reduce_range`), which costs the draft's head ~0.5 points of
    agreement at a tree level's few rows."""
    check = getattr(torch.cpu, "_is_vnni_supported", None)
    return bool(check and check())


def int8_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes, scales) for weight (out, in): symmetric int8 with one fp32 scale per output row, the
    row's largest magnitude mapped to 127 (gpt-fast's recipe)."""
    w = weight.detach().float()
    scales = w.abs().amax(dim=1).clamp(min=1e-12) / 127
    return (w / scales[:, None]).round().clamp(-127, 127).to(torch.int8), scales


class Int8Rows(Product):
    """x @ W^T (+ b) for W in weight-only int8: int8 codes and one scale per output row (symmetric,
    `int8_per_channel`), read by one of two CPU kernels.

    - gpt-fast's `_weight_int8pack_mm` (`kernel="int8pack"`: the target's `--dtype int8`, and every device)
      takes its activations in bf16 (with fp32 ones it ran 10x slower, a reference loop) and reads W once per
      row of x. On a Zen 4 EPYC (2 threads) a forward of the offline default's layers took 19.2 ms at one row
      against bf16's 29.0, but 31.5 against 30 at 8 rows (`auto` weighs both).
    - fbgemm's dynamic linear (`kernel="fbgemm"`, where it is built in: a bf16 feature draft's levels) reads
      W once for all rows, over a packed copy (about the same bytes again), but rounds x to 8 bits per call
      (7 without VNNI, `_has_vnni`) with one scale: with a draft's head cold in cache after a target forward,
      0.39 ms against 0.63 at one row and 0.42 against 1.83 at eight. SmolLM2's outlier dimensions do not
      survive that rounding in the target (top-1 agreement with fp32 0.76, int8pack's 0.97); a draft only
      proposes, so there it costs acceptance, never exactness (`test_int8_decoding_levels_track_the_trained_draft`).

    A module, for TorchScript (`llama.LayerStack`), which compiles `rows` (int8pack's; fbgemm's is `Fbgemm`).
    """

    __jit_ignored_attributes__ = ["packed"]

    def __init__(self, codes: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None,
                 kernel: str = "int8pack", pack: bool = True):
        super().__init__()
        self.register_buffer("codes", codes, persistent=False)          # (out, in) int8
        self.register_buffer("scales", scales.to(torch.bfloat16), persistent=False)
        self.has_bias = bias is not None                                  # Qwen2's q|k|v
        self.register_buffer("bias", torch.zeros(0) if bias is None else bias.detach().float(), persistent=False)
        self.out_features, self.in_features = codes.shape
        self.kernel, self.reduce_range = kernel, not _has_vnni()
        # fbgemm's packed copy, where it is used (`pack=False`: a whole head that is only ever `cut`, which packs the cut).
        self.packed = self._packed() if kernel == "fbgemm" and pack else None

    @classmethod
    def of(cls, *linears: torch.nn.Linear, kernel: str = "int8pack", pack: bool = True) -> "Int8Rows":
        """The linears quantised and stacked as one product (q|k|v, gate|up): every row keeps its own scale,
        so stacking is exact."""
        return cls.quantized(torch.cat([m.weight.detach() for m in linears]), biases_together(*linears), kernel, pack)

    @classmethod
    def quantized(cls, weight: torch.Tensor, bias: torch.Tensor | None = None, kernel: str = "int8pack",
                  pack: bool = True) -> "Int8Rows":
        return cls(*int8_per_channel(weight), bias, kernel, pack)

    def _packed(self):
        zeros = torch.zeros(self.out_features, dtype=torch.long)
        with warnings.catch_warnings():   # torch deprecates quantized tensors; the kernel stays (torch pinned)
            warnings.filterwarnings("ignore", message=".*quantized tensor creation.*")
            qweight = torch._make_per_channel_quantized_tensor(self.codes, self.scales.double(), zeros, 0)
        return torch.ops.quantized.linear_prepack(qweight, self.bias if self.has_bias else None)

    def cut(self, ids: torch.Tensor) -> "Int8Rows":
        """The same product keeping output rows `ids` (a head over a vocabulary subset): with one scale per
        row, cutting the quantised matrix equals quantising the cut one, and costs no requantisation."""
        return Int8Rows(self.codes.index_select(0, ids).contiguous(), self.scales.index_select(0, ids).contiguous(),
                        self.bias.index_select(0, ids) if self.has_bias else None, self.kernel)

    @staticmethod
    def stacked(parts: list["Int8Rows"]) -> "Int8Rows":
        """One product whose output rows are the parts' in order (q|k|v, gate|up): one kernel call instead
        of several, and exact, since every row keeps its own scale."""
        bias = torch.cat([p.bias for p in parts]) if parts[0].has_bias else None
        return Int8Rows(torch.cat([p.codes for p in parts]), torch.cat([p.scales for p in parts]), bias,
                        parts[0].kernel)

    @torch.jit.unused
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in) -> (..., out) in x's dtype, through fbgemm where it is packed, else `rows`."""
        rows = x.reshape(-1, self.in_features)
        if self.packed is not None:   # the bias is in the packed weights
            out = torch.ops.quantized.linear_dynamic(rows.float(), self.packed, self.reduce_range)
        else:
            out = self.rows(rows)
        return out.view(list(x.shape[:-1]) + [self.out_features]).to(x.dtype)

    @torch.jit.export
    def rows(self, x: torch.Tensor) -> torch.Tensor:
        """Rows (n, in) -> (n, out) through int8pack: bf16 without a bias (widened where `llama.DecoderLayer`
        adds or rotates), fp32 with one."""
        out = torch._weight_int8pack_mm(x.to(torch.bfloat16), self.codes, self.scales)
        if self.has_bias:
            return out + self.bias
        return out


def int8_kernel(device: torch.device) -> str:
    """The int8 kernel a draft's products run on `device` (`Int8Rows`): fbgemm's on a CPU where it is built in."""
    return "fbgemm" if fbgemm_available() and device.type == "cpu" else "int8pack"


class Fbgemm(Product):
    """One of fbgemm's packed int8 products as a `llama.DecoderLayer` product: fp32 rows in and out (a module,
    which TorchScript compiles into the layers, `llama.LayerStack`; only its `rows` is ever called)."""

    def __init__(self, linear: Int8Rows):
        super().__init__()
        self.packed, self.reduce_range = linear.packed, bool(linear.reduce_range)

    @torch.jit.export
    def rows(self, x: torch.Tensor) -> torch.Tensor:
        """What `llama.DecoderLayer` calls: fbgemm takes and gives fp32 rows as they are."""
        return torch.ops.quantized.linear_dynamic(x, self.packed, self.reduce_range)


def int4_kernel_available() -> bool:
    return hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu") and hasattr(
        torch.ops.aten, "_convert_weight_to_int4pack_for_cpu")


class Int4Linear(Product):
    """x @ W^T for W in torch's int4 CPU layout (`_convert_weight_to_int4pack_for_cpu`, groups of 32).

    The kernel takes its activations in the table's dtype. On an AVX2 CPU (torch 2.13) bf16 is the
    fast one: one row through a 1536 x 576 matrix took ~143 us in bf16 against ~1.9 ms in fp32 (fp32
    runs a reference loop). So the tables are bf16, and an fp32 forward's rows are cast to bf16 for
    the product and back (a few hundred numbers: ~7 us), keeping the rest of that forward in fp32.
    A module, so that TorchScript compiles it into the layers that call it (`llama.LayerStack`).
    """

    def __init__(self, packed: torch.Tensor, scales_and_zeros: torch.Tensor):
        super().__init__()
        self.register_buffer("packed", packed, persistent=False)
        self.register_buffer("scales_and_zeros", scales_and_zeros, persistent=False)
        self.group = GROUP   # an attribute: TorchScript reads no module globals

    @classmethod
    def of(cls, weight, dtype: torch.dtype = torch.bfloat16) -> "Int4Linear":
        """From a `quant.Q4Weight` (its formats are `quant`'s, which imports this module)."""
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(weight.codes.to(torch.int32), 1)
        return cls(packed, weight.scales_and_zeros(dtype))

    @torch.jit.export
    def rows(self, x: torch.Tensor) -> torch.Tensor:
        """Rows (n, in) -> (n, out), cast to the tables' dtype for the kernel; the output in that dtype as the
        kernel gives it (bf16 for a bf16 table, which `llama.DecoderLayer` widens where it adds or rotates)."""
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x.to(self.scales_and_zeros.dtype), self.packed, self.group,
                                                         self.scales_and_zeros)


def register_outliers(module: torch.nn.Module, outliers: torch.Tensor | None, weights: torch.Tensor | None) -> None:
    module.register_buffer("outliers", torch.zeros(0, dtype=torch.int32) if outliers is None else outliers,
                           persistent=False)                                   # (k,) int32 input positions
    module.register_buffer("outlier_weights", torch.zeros(0) if weights is None else weights,
                           persistent=False)                                   # (out / 16, k, 16) fp32


def outlier_tables(weight: torch.Tensor, outliers: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(positions int32, their weight columns as the kernel reads them: (out / 16, k, 16) fp32) from the
    dequantised (out, in) matrix: the kernel multiplies those inputs by these exact weights in fp32."""
    if outliers is None or outliers.numel() == 0:
        return None, None
    columns = weight.float()[:, outliers.long()]                                 # (out, k)
    return outliers.to(torch.int32).contiguous(), Q4Rows.tables_of(columns)


class Q4Rows(torch.nn.Module):
    """x @ W^T for W in Q4_1 through SpecViz's own kernel (`torch.ops.specviz.q4_rows`, `engine.native`):
    llama.cpp's product, the activations rounded to int8 in blocks of 32 and the weights' 4-bit codes
    multiplied in with AVX-512 VNNI, sixteen output rows a tile. The weights are the GGUF's codes and fp16
    d, m as they are, rearranged (`codes_of`, `tables_of`). A module, so that TorchScript compiles it into
    the layers that call it (`llama.LayerStack`).
    """

    TILE = 16   # output rows per tile: one 512-bit register of fp32 sums
    LAYOUT = "tile16-q8head-outliers"   # names what cached files hold and how: a new layout never reads an old one

    def __init__(self, codes: torch.Tensor, d: torch.Tensor, m: torch.Tensor, outliers: torch.Tensor | None = None,
                 outlier_weights: torch.Tensor | None = None):
        super().__init__()
        self.register_buffer("codes", codes, persistent=False)   # (out / 16, in / 32, 256) uint8
        self.register_buffer("d", d, persistent=False)           # (out / 16, in / 32, 16) fp16
        self.register_buffer("m", m, persistent=False)
        register_outliers(self, outliers, outlier_weights)

    @classmethod
    def codes_of(cls, weight) -> torch.Tensor:
        """A `quant.Q4Weight`'s codes in the kernel's byte layout (see csrc/q4_rows.cpp): per tile of 16 rows, block and pair j of
        four-code groups, byte 4i + k holds row i's code 8j + k (low nibble) and 8j + 4 + k (high)."""
        out, cols = weight.shape
        codes = weight.codes.view(out // cls.TILE, cls.TILE, cols // GROUP, 4, 2, 4)   # tile, i, block, j, half, k
        codes = codes.permute(0, 2, 3, 4, 1, 5)                                          # tile, block, j, half, i, k
        return (codes[:, :, :, 0] | (codes[:, :, :, 1] << 4)).reshape(out // cls.TILE, cols // GROUP, 256).contiguous()

    @classmethod
    def tables_of(cls, table: torch.Tensor) -> torch.Tensor:
        """A per-output-row table (out, n: d or m per block, or outlier columns) as the kernel reads it:
        (out / 16, n, 16)."""
        out, blocks = table.shape
        return table.view(out // cls.TILE, cls.TILE, blocks).transpose(1, 2).contiguous()

    @classmethod
    def of(cls, weight, outliers: torch.Tensor | None = None) -> "Q4Rows":
        """From a `quant.Q4Weight`; `outliers`: input positions whose values the kernel keeps out of the int8
        rounding (`quant.calibrate_outliers`)."""
        return cls(cls.codes_of(weight), cls.tables_of(weight.d), cls.tables_of(weight.m),
                   *outlier_tables(weight.dequantize(), outliers))

    @classmethod
    def fits(cls, shape: tuple[int, int]) -> bool:
        """Whether the kernel reads an (out, in) matrix: whole tiles of output rows, whole blocks along a row."""
        return shape[0] % cls.TILE == 0 and shape[1] % GROUP == 0

    @torch.jit.export
    def rows(self, x: torch.Tensor) -> torch.Tensor:
        """fp32 rows (n, in) -> fp32 (n, out)."""
        return torch.ops.specviz.q4_rows(x, self.codes, self.d, self.m, self.outliers, self.outlier_weights)

    @torch.jit.export
    def normed_rows(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """`rows` of x RMS-normalised by `weight`, the norm fused into the kernel's rounding of the rows (its
        seven small ops cost more than a one-row product)."""
        return torch.ops.specviz.q4_rows_normed(x, weight, eps, self.codes, self.d, self.m, self.outliers,
                                                self.outlier_weights)

    @torch.jit.export
    def glu_rows(self, gate_up: torch.Tensor) -> torch.Tensor:
        """`rows` of SwiGLU's silu(gate) * up from [gate | up], fused into the kernel's rounding of the rows."""
        return torch.ops.specviz.q4_rows_glu(gate_up, self.codes, self.d, self.m, self.outliers, self.outlier_weights)


class Q4Layer(torch.nn.Module):
    """A `llama.DecoderLayer` whose products are all `Q4Rows` (the 4-bit target's) or all `Q8Rows` (a feature draft's
    beside it, `kernel_copy`) and whose attention is `native.RowAttention`, run as one op
    (`torch.ops.specviz.q4_layer`, `q8_layer`): the same kernels in the same order, so the same bits, without the
    ~20 small torch ops between them (views, the rotation, the cache writes, the residual sums), each of which
    cost its dispatch at a decoding row. Called as `DecoderLayer` is, from the compiled `llama.LayerStack`."""

    def __init__(self, layer: DecoderLayer):
        super().__init__()
        self.register_buffer("input_norm", layer.input_norm.float().contiguous(), persistent=False)
        self.register_buffer("post_norm", layer.post_norm.float().contiguous(), persistent=False)
        self.products = torch.nn.ModuleList([layer.qkv, layer.o, layer.gate_up, layer.down])   # kept alive
        self.q8 = isinstance(layer.qkv, Q8Rows)
        # Q8_0 has no m: its lists carry d there, which the kernel's 8-bit path never reads.
        self.qkv, self.o, self.gate_up, self.down = (
            [p.codes, p.d, p.d if self.q8 else p.m, p.outliers, p.outlier_weights]
            for p in (layer.qkv, layer.o, layer.gate_up, layer.down))
        self.n_heads, self.n_kv = layer.n_heads, layer.n_kv
        self.eps, self.scale = layer.eps, layer.scale

    @staticmethod
    def fits(layer: DecoderLayer) -> bool:
        """Whether `layer` runs as one op: every product on SpecViz's kernel in one format (no bias), attention
        its `attend_rows`."""
        products = (layer.qkv, layer.o, layer.gate_up, layer.down)
        one_format = (all(isinstance(p, Q4Rows) for p in products)
                      or all(isinstance(p, Q8Rows) and p.bias is None for p in products))
        return one_format and isinstance(layer.attention, native.RowAttention)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: torch.Tensor,
                values: torch.Tensor, start: int, slots: Optional[torch.Tensor], end: int,
                mask: Optional[torch.Tensor], causal: bool) -> torch.Tensor:
        if self.q8:
            return torch.ops.specviz.q8_layer(x, cos, sin, keys, values, start, slots, end, mask, causal,
                                              self.input_norm, self.post_norm, self.eps, self.scale, self.n_heads,
                                              self.n_kv, self.qkv, self.o, self.gate_up, self.down)
        return torch.ops.specviz.q4_layer(x, cos, sin, keys, values, start, slots, end, mask, causal, self.input_norm,
                                          self.post_norm, self.eps, self.scale, self.n_heads, self.n_kv, self.qkv,
                                          self.o, self.gate_up, self.down)


ZERO_CODES = int.from_bytes(bytes([128] * 4), "little", signed=True)   # four Q8 codes of 0 (q + 128) as one int32


class Q8Rows(torch.nn.Module):
    """x @ W^T for W in Q8_0 (the GGUF's tied head) through the same kernel (`torch.ops.specviz.q8_rows`):
    the head's codes read as they are, half the bf16 head's bytes. Callable as the lean forward's head."""

    def __init__(self, codes: torch.Tensor, d: torch.Tensor, outliers: torch.Tensor | None = None,
                 outlier_weights: torch.Tensor | None = None, out_features: int | None = None,
                 bias: torch.Tensor | None = None):
        super().__init__()
        self.register_buffer("codes", codes, persistent=False)   # (out / 16, in / 32, 512) uint8: q + 128
        self.register_buffer("d", d, persistent=False)           # (out / 16, in / 32, 16) fp16
        register_outliers(self, outliers, outlier_weights)
        self.bias = None if bias is None else bias.detach().float()   # a draft's fusion has one (`kernel_copy`)
        # The rows that are real: a cut head's last tile is padded with zero rows (`cut`), which `forward` drops.
        self.out_features = d.shape[0] * Q4Rows.TILE if out_features is None else out_features

    @classmethod
    def of(cls, weight, outliers: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> "Q8Rows":
        """From a `quant.Q8Weight`."""
        out, cols = weight.shape
        tile = Q4Rows.TILE
        unsigned = (weight.codes.to(torch.int16) + 128).to(torch.uint8)   # vpdpbusd's unsigned side
        codes = unsigned.view(out // tile, tile, cols // GROUP, 8, 4).permute(0, 2, 3, 1, 4)   # tile, block, group, i, k
        return cls(codes.reshape(out // tile, cols // GROUP, 512).contiguous(), Q4Rows.tables_of(weight.d),
                   *outlier_tables(weight.dequantize(), outliers), bias=bias)

    def cut(self, ids: torch.Tensor) -> "Q8Rows":
        """The head over rows `ids` only, in that order (a head over a vocabulary subset): their codes gathered
        from the tiles as they are and tiled anew, no requantisation, so each logit is the whole head's.
        The 15.7k rows of the feature draft's subset take a few ms; a widening's few dozen, well under one."""
        tile = Q4Rows.TILE
        blocks = self.codes.shape[1]
        ids = ids.to(self.codes.device, torch.long)
        pad = -ids.numel() % tile
        # A group's four codes move as one int32 (a quarter of the elements to copy).
        codes = self._row_major().index_select(0, ids)                        # (n, block, group) int32
        codes = torch.cat([codes, codes.new_full((pad, blocks, 8), ZERO_CODES)])
        codes = codes.view(-1, tile, blocks, 8).permute(0, 2, 3, 1).contiguous().view(torch.uint8)
        codes = codes.view(-1, blocks, 512)

        def rows_of(table: torch.Tensor) -> torch.Tensor:   # a (tiles, k, 16) table's rows `ids`, re-tiled
            # Picked from the tiles where they are: untiling the whole table first cost a widening ~5 ms.
            picked = table[ids // tile, :, ids % tile]
            return Q4Rows.tables_of(torch.cat([picked, picked.new_zeros(pad, picked.shape[1])]))

        outliers = (self.outliers, rows_of(self.outlier_weights)) if self.outliers.numel() else (None, None)
        return Q8Rows(codes, rows_of(self.d), *outliers, out_features=ids.numel())

    def _row_major(self) -> torch.Tensor:
        """The codes a row at a time, (out, block, group) with a group's four codes as one int32, untiled once (the
        head's 28 MB again, kept while this head is): gathering rows from the tiles took 20 ms for 15.7k rows."""
        found = self.__dict__.get("_rows")
        if found is None:
            tiles, blocks, _ = self.codes.shape
            found = self.__dict__["_rows"] = (self.codes.view(torch.int32).view(tiles, blocks, 8, Q4Rows.TILE)
                                              .permute(0, 3, 1, 2).reshape(-1, blocks, 8))
        return found

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Rows (n, in) -> fp32 logits (n, out) (the kernel reads fp32 rows)."""
        out = torch.ops.specviz.q8_rows(x.float(), self.codes, self.d, self.outliers, self.outlier_weights)
        out = out if out.shape[1] == self.out_features else out[:, :self.out_features]
        return out if self.bias is None else out + self.bias
