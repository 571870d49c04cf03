"""The CPU kernels the decoding forwards run, kept apart from the forwards' arithmetic.

Two families, both chosen for a CPU's small decoding batches (1-16 rows), where a
kernel call's fixed cost is as large as its arithmetic:

- oneDNN-prepacked bf16 matrices (`llama.Dense`, `packed_weights`) and stacked q|k|v and
  gate|up weights (`rows_together`), which the target's lean forward uses: the same
  kernel as `F.linear`, so the same bits (checked on each model before use);
- weight-only int8 linears (`Int8Linear`, gpt-fast's `_weight_int8pack_mm` or fbgemm's
  dynamic linear) and the fp32-activation layers over fbgemm's packed weights
  (`fbgemm_layers`), which a feature draft's levels use: a draft only proposes, so its
  precision can cost acceptance, never exactness.

Both rewrite or cache state outside the forward: `rows_together` re-points a model's
linears at row blocks of one stacked matrix, and `packed_weights` keeps the prepacked
copies on the model (`model.__dict__`), keyed by the parameters' versions.
"""

from __future__ import annotations

import copy
import threading
import warnings

import torch
import torch.nn.functional as F

from .llama import DecoderLayer, Dense, LayerStack, Product, layer_stack
from .model_state import fresh_state, state_of

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
    """oneDNN's prepacked copy of a (out, in) weight, for `llama.Dense`."""
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
    # The model's parameters say whether anything changed (an optimiser step bumps their version
    # counters; the stacked q|k|v views made per forward have counters of their own). Inference
    # tensors keep no counter, and cannot change outside inference_mode.
    versions = (tuple((w.data_ptr(), tuple(w.shape)) for w in weights),
                tuple((p.data_ptr(), -1 if p.is_inference() else p._version) for p in model.parameters()))
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


class Int8Linear(torch.nn.Module):
    """y = x W^T (+ b) with W stored as int8 rows and one scale per row (symmetric, per output channel).

    Two CPU kernels read the same int8 weights. `_weight_int8pack_mm` (gpt-fast's) keeps x in
    bf16 but runs one pass over W per row of x, so a tree level of 8 nodes reads the head 8
    times. fbgemm's dynamic linear (`quantized::linear_dynamic`) also quantises x, per call, to
    8-bit integers (7 without VNNI, `_has_vnni`) and reads W once for all rows: with the head cold
    in cache after a target forward, 0.39 ms against 0.63 ms at one row and 0.42 against 1.83 at
    eight. It is used on a CPU where fbgemm is built in (x86; `kernel="int8pack"` forces the
    other, which is also what other devices get); quantising x moves the
    draft's features slightly (bounded by `test_int8_decoding_levels_track_the_trained_draft`),
    never the output, which the target decides.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, kernel: str | None = None,
                 pack: bool = True):
        super().__init__()
        codes, scales = int8_per_channel(weight)
        self.register_buffer("weight", codes)
        self.register_buffer("scales", scales.to(weight.dtype))
        self.bias = None if bias is None else bias.detach()
        self._pack(kernel, pack)

    @classmethod
    def _from(cls, weight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None, kernel: str) -> "Int8Linear":
        layer = cls.__new__(cls)
        torch.nn.Module.__init__(layer)
        layer.register_buffer("weight", weight)
        layer.register_buffer("scales", scales)
        layer.bias = bias
        layer._pack(kernel)
        return layer

    def _pack(self, kernel: str | None, pack: bool = True) -> None:
        """Prepare fbgemm's packed copy of the weights (about the same bytes again) where it is used
        (`pack=False`: a whole head that is only ever cut by `rows`, which packs the cut)."""
        if kernel is None:
            kernel = "fbgemm" if fbgemm_available() and self.weight.device.type == "cpu" else "int8pack"
        self.kernel, self.packed, self.reduce_range = kernel, None, not _has_vnni()
        if kernel == "fbgemm" and pack:
            zeros = torch.zeros(self.weight.shape[0], dtype=torch.long)
            with warnings.catch_warnings():   # torch deprecates quantized tensors; the kernel stays (torch pinned)
                warnings.filterwarnings("ignore", message=".*quantized tensor creation.*")
                qweight = torch._make_per_channel_quantized_tensor(self.weight, self.scales.double(), zeros, 0)
            bias = None if self.bias is None else self.bias.float()
            self.packed = torch.ops.quantized.linear_prepack(qweight, bias)

    def cut(self, ids: torch.Tensor) -> "Int8Linear":
        """The same layer keeping output rows `ids` (a head over a vocabulary subset): with one scale per
        row, cutting the quantised matrix equals quantising the cut one, and costs no requantisation."""
        return Int8Linear._from(self.weight.index_select(0, ids).contiguous(),
                                self.scales.index_select(0, ids).contiguous(),
                                None if self.bias is None else self.bias.index_select(0, ids), self.kernel)

    @staticmethod
    def stacked(parts: list["Int8Linear"]) -> "Int8Linear":
        """One layer whose output rows are the parts' in order (q|k|v, gate|up): one kernel call instead
        of several, and exact, since every row keeps its own scale."""
        bias = None if parts[0].bias is None else torch.cat([p.bias for p in parts])
        return Int8Linear._from(torch.cat([p.weight for p in parts]), torch.cat([p.scales for p in parts]),
                                bias, parts[0].kernel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        rows = x.reshape(-1, shape[-1])
        if self.packed is not None:   # the bias is in the packed weights
            out = torch.ops.quantized.linear_dynamic(rows.float(), self.packed, self.reduce_range).to(x.dtype)
            return out.view(*shape[:-1], out.shape[-1])
        out = torch._weight_int8pack_mm(rows, self.weight, self.scales.to(x.dtype))
        out = out.view(*shape[:-1], out.shape[-1])
        return out if self.bias is None else out + self.bias


def int8_copy(draft: torch.nn.Module) -> torch.nn.Module:
    """The same draft with every linear in weight-only int8; norms, rotary and the target's tensors shared.

    A shallow copy with its own module table (its later layers copied the same way): the trained
    module is left as it is.
    """
    clone = copy.copy(draft)
    fresh_state(clone)   # its own caches: sharing the original's would keep every earlier copy alive
    # The fusion layers keep gpt-fast's kernel: fbgemm quantises its input per call with one scale, and
    # cat(embedding, feature) spans two scales (the embedding's ~0.02 rounds away: agreement 0.20).
    # Parts that are stacked below are packed only once stacked.
    stacked_parts = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
    modules = {name: Int8Linear(m.weight, m.bias, kernel="int8pack" if name in ("fc", "fc_taps") else None,
                                pack=name not in stacked_parts)
               if isinstance(m, torch.nn.Linear) else int8_copy(m) for name, m in draft._modules.items()}
    # A decoder layer's q|k|v and gate|up each become one matrix (as in the target's lean forward):
    # at a tree level's few rows every kernel call costs about as much as its arithmetic.
    for name, parts in (("qkv_proj", ("q_proj", "k_proj", "v_proj")), ("gate_up_proj", ("gate_proj", "up_proj"))):
        if all(isinstance(modules.get(p), Int8Linear) for p in parts):
            modules[name] = Int8Linear.stacked([modules.pop(p) for p in parts])
    clone.__dict__["_modules"] = modules
    return clone


class Fbgemm(Product):
    """One of fbgemm's packed int8 products as a `llama.DecoderLayer` product: fp32 rows in and out (a module,
    which TorchScript compiles into the layers, `llama.LayerStack`; only its `rows` is ever called)."""

    def __init__(self, linear: Int8Linear):
        super().__init__()
        self.packed, self.reduce_range = linear.packed, bool(linear.reduce_range)

    @torch.jit.export
    def rows(self, x: torch.Tensor) -> torch.Tensor:
        """What `llama.DecoderLayer` calls: fbgemm takes and gives fp32 rows as they are."""
        return torch.ops.quantized.linear_dynamic(x, self.packed, self.reduce_range)


def fbgemm_layers(int8_draft) -> LayerStack | None:
    """The layers of an int8 copy as `DecoderLayer`s over fbgemm's products (one `LayerStack`), or None where a
    layer's linears are not all fbgemm's.

    fbgemm rounds every linear's input to 8 bits per call (`Int8Linear`), so rounding the activations
    to bf16 between the linears, as the trained module's dtype would, buys no speed and only adds a
    conversion on either side of each linear. At a tree level's 1-8 rows every small op costs about
    as much as its arithmetic: a level runs 1.1-1.3x faster, a chat step's drafting 3.95 -> 3.35 ms
    (README, *fp32 activations in the draft's levels*), and the draft proposes what it did within
    fbgemm's rounding."""
    # Compiled once per int8 copy and kept on it: a draft makes a forward per prompt. A copy on SpecViz's own
    # kernel (`quant.kernel_copy`) brings its stack with it.
    state = state_of(int8_draft)
    if state.draft_stack is not None:
        return state.draft_stack
    layers = int8_draft.decoder_layers()
    names = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
    if not all(getattr(layer._modules.get(name), "packed", None) is not None for layer in layers for name in names):
        return None
    state.draft_stack = layer_stack(
        [DecoderLayer.of(layer, tuple(Fbgemm(layer._modules[name]) for name in names)) for layer in layers])
    return state.draft_stack
