"""A lean batch-1 Llama-family forward for the decoding loops, gpt-fast style.

transformers' module machinery (hooks, mask building, cache objects, output
dataclasses) costs several milliseconds per forward on a CPU, which is a large
share of a 4-layer draft's forward and a fifth of the target's. `LeanLlama` runs
the very same tensor ops over the model's own weights (no copies) with a
preallocated KV cache and precomputed rotary tables, so greedy fp32 output equals
the model's own forward. Qwen2 is Llama's layer with biases on q, k and v (and a
sliding window that is off unless its config turns it on), so it runs here too:
the Space's Qwen2.5 pair gets the lean forward and the static, graph-ready step.

One object serves every decoder, through `engine.static.StaticForward`:
- the prompt: `forward(ids, 0)`, plainly causal;
- every step (AR's token, Sequoia's tree, a Lookahead window, a draft level):
  `forward_static`, each row's slot and position and an additive mask over the
  cache given as tensors, then `keep(...)` to move the accepted tokens' K/V next
  to the committed prefix.
`forward(ids, start, positions=..., mask=...)` is the same read with the mask
made on the host (the profiler's timed reads).

It also honours a draft head restricted to part of the vocabulary
(`VocabSubsetHead`): the logits then cover only `vocab_ids`.

The layer arithmetic is `engine.llama`'s (shared with the feature draft). On a CPU
in bf16 its matrices are multiplied through oneDNN with the weights reordered once
into oneDNN's blocked layout (`engine.kernels.Dense`), instead of `F.linear`,
which reorders them on every call: the same kernel, so the same bits (checked on
each model before it is used), and a forward of the offline default 1.24x faster
for one token and about 1.5x for the 4-16 of a Sequoia tree.
"""

from __future__ import annotations

import contextlib
import copy

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import DynamicCache

from .kernels import Dense, Q4Layer, biases_together, pack, packed_weights, rows_together
from .llama import DecoderLayer, LayerStack, layer_stack, rms_norm, rotary_tables
from .model_state import state_of, weights_version
from . import native
from .quant import WeightOnlyLayers


# On CUDA, scaled_dot_product_attention may pick cuDNN's kernel, which builds and caches an execution
# plan per input shape. Decoding changes the key length at every step, so every step paid for a new
# plan: on an H100 (torch 2.11), AR on the offline default ran 9.5-15 tok/s with cuDNN allowed and
# 50-62 tok/s without it, Sequoia 5-7 against 39-49. Flash and memory-efficient attention need no plan.
def attention_backends(device: torch.device) -> list | None:
    if device.type != "cuda":
        return None
    return [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def attention_kernels(device: torch.device, backends: list | None = None):
    """A context that keeps scaled_dot_product_attention off cuDNN on CUDA (nothing elsewhere);
    `backends`, when given, is `attention_backends(device)` already looked up (the decoding loop's way)."""
    backends = backends if backends is not None else attention_backends(device)
    return sdpa_kernel(backends) if backends else contextlib.nullcontext()


# Architectures whose decoder layer is Llama's, up to biases on the projections (which `LeanLlama` adds).
LEAN_MODEL_TYPES = ("llama", "qwen2")


def lean_llama_supported(model) -> bool:
    """True when `LeanLlama` computes exactly what the model's own forward does."""
    inner = getattr(model, "model", None)
    return (lean_config_supported(model.config) and inner is not None
            and getattr(model.config, "_attn_implementation", "sdpa") in ("sdpa", "eager")
            and hasattr(inner, "rotary_emb") and hasattr(model, "lm_head"))


def lean_config_supported(cfg) -> bool:
    """What `lean_llama_supported` reads from the config alone (so before any weights are loaded): a Llama
    or Qwen2 layer with plain rotary positions (not Llama 3's rescaled ones) and full attention."""
    rope = getattr(cfg, "rope_parameters", None) or {}
    # Qwen2's sliding-window layers (`use_sliding_window`, off in Qwen2.5's configs) see a band, not a prefix.
    layer_types = getattr(cfg, "layer_types", None) or ()
    return (getattr(cfg, "model_type", None) in LEAN_MODEL_TYPES
            and rope.get("rope_type", "default") == "default"
            and all(kind == "full_attention" for kind in layer_types)
            and getattr(cfg, "hidden_act", "silu") == "silu" and getattr(cfg, "pretraining_tp", 1) == 1)


class VocabSubsetHead(torch.nn.Module):
    """An output head over part of the vocabulary: logits elsewhere are -inf.

    A draft only has to propose tokens from *some* distribution q for Sequoia's
    verification to stay exact, so restricting its head to the tokens a target
    actually writes (plus the prompt's) loses a little acceptance and saves most
    of a small draft's forward: the full 49k-row head is 2/3 of a 4-layer draft.
    As a module it serves transformers' own forward (assisted generation,
    evaluation) with full-vocabulary logits; `LeanLlama` uses `weight` directly.
    """

    def __init__(self, full_weight: torch.Tensor, vocab_ids: torch.Tensor, full_rows=None):
        super().__init__()
        self.vocab_size = full_weight.shape[0]
        self.full_weight = full_weight   # the target's head, shared: a wider subset can be cut from it
        # The same head as SpecViz's q4 kernel reads it (`kernels.Q8Rows`: a q4 target's GGUF codes), or None:
        # where it is given, `LeanLlama` cuts the subset from it. In a tuple, so it is not this module's child.
        self.full_rows = (full_rows,)
        self.register_buffer("vocab_ids", vocab_ids.to(full_weight.device, torch.long), persistent=False)
        self.register_buffer("weight", full_weight.detach().index_select(0, self.vocab_ids).contiguous(),
                             persistent=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        # 2-D matmul: a 3-D input can route F.linear through bmm, which copies the weight every call.
        sub = F.linear(hidden.reshape(-1, hidden.shape[-1]), self.weight)
        out = sub.new_full((sub.shape[0], self.vocab_size), float("-inf"))
        out[:, self.vocab_ids] = sub
        return out.view(*hidden.shape[:-1], self.vocab_size)


def causal_mask(n: int, start: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The additive (1, 1, n, start + n) mask of n new rows after `start` cached slots: each row sees every
    cached slot and, causally, the new rows up to its own (0 where it sees, the dtype's least value elsewhere)."""
    return torch.full((1, 1, n, start + n), torch.finfo(dtype).min, dtype=dtype, device=device).triu_(start + 1)


def picked_rows(x: torch.Tensor, rows: torch.Tensor | int) -> torch.Tensor:
    """The rows of x (n, width) a forward returns logits for: `rows` is how many last rows, or an index tensor."""
    return x[-rows:] if isinstance(rows, int) else x.index_select(0, rows)


def tapped_features(normed: torch.Tensor, hidden_states, taps: tuple[int, ...]) -> torch.Tensor:
    """Feature rows [final-normed | layer t's output for t in taps]; transformers' `hidden_states[t + 1]`
    is layer t's output (its last entry is the final-normed state, never a tap)."""
    if not taps:
        return normed
    return torch.cat([normed] + [hidden_states[t + 1].to(normed.dtype) for t in taps], dim=-1)


class LeanLlama:
    """Batch-1 Llama (or Qwen2) forward over `model`'s weights with a preallocated cache of `max_len` slots."""

    def __init__(self, model, max_len: int, vocab_ids: torch.Tensor | None = None):
        cfg, inner = model.config, model.model
        head = model.lm_head
        device = inner.embed_tokens.weight.device
        self.device, self.max_len = device, max_len
        weight_only = WeightOnlyLayers.of(model)
        self.weight_only = weight_only is not None and device.type == "cpu"
        # What the residual stream, the cache and attention run in: the weights' dtype, except on a weight-only
        # path (q4, int8), where they run in fp32 (`WeightOnlyLayers.ACTIVATIONS` says why) and only the
        # products read bf16.
        self.dtype = WeightOnlyLayers.ACTIVATIONS if self.weight_only else inner.embed_tokens.weight.dtype
        self.attention_backends = attention_backends(device)
        self.eps = cfg.rms_norm_eps
        self.n_heads, self.n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.embed, self.final_norm = inner.embed_tokens.weight, inner.norm.weight
        # The head's rows and the token id of each row (None: the whole vocabulary, row = token id).
        full = self._full_head = head.full_weight if isinstance(head, VocabSubsetHead) else head.weight
        if vocab_ids is not None:
            self.vocab_ids = vocab_ids.to(device)
            self.lm_head = full.index_select(0, self.vocab_ids).contiguous()
        else:
            self.vocab_ids = getattr(head, "vocab_ids", None)
            self.lm_head = head.weight
        self.head_dtype = self.lm_head.dtype   # what the head's rows are cast to
        # The whole head on SpecViz's q4 kernel (the GGUF's Q8_0 codes), where this model's head is a q4
        # target's, or a subset of one: the subset is then cut from it (`cut_head`), not from the dense rows.
        self._full_rows = (head.full_rows[0] if isinstance(head, VocabSubsetHead) else
                           weight_only.head if self.weight_only else None)
        # The head is packed with the layers only when it is the model's own and dense (a vocabulary subset cut
        # here is a new tensor each time, packed for this forward alone).
        own_head = self.lm_head is head.weight
        pack_head = own_head and self._full_rows is None
        if self.weight_only:
            # Weight-only layers (`--dtype q4`, `--dtype int8`): the layers' products run the int4 or int8
            # kernel. A dense head (int8; q4 on torch's int4 kernel, whose tied Q8_0 head no int4/int8 kernel
            # reads as it is) runs in the model's dtype: on an AVX2 CPU (fp32 model) a bf16 or an fbgemm int8
            # copy of it made ar 3% faster and not exact to the file. The model's own head is prepacked where
            # oneDNN can (`packed_weights` says None where it cannot: an AVX2-only CPU has no bf16 reorder).
            packed = packed_weights(model, [self.lm_head]) if pack_head else None
            # Never captured (a weight-only forward runs on a CPU): its captured form is the compiled one too.
            self.stack = self.traced_stack = _weight_only_stack(model, weight_only)
        else:
            matrices, biases = dense_parts(inner.layers)
            packed = packed_weights(model, matrices + ([self.lm_head] if pack_head else []), biases[0])
            self.stack, self.traced_stack = _dense_stack(model, matrices, biases, packed, self.dtype)
        self.packed = packed is not None
        if self._full_rows is None:
            self.head = Dense(self.lm_head, (packed[-1] if own_head else pack(self.lm_head)) if packed else None)
        elif self.vocab_ids is None:
            # q4 on SpecViz's own kernel: the GGUF's Q8_0 head as it is (half the bf16 head's bytes, 2.5 ms of a 9 ms
            # token at one row on a Zen 4 EPYC), on fp32 rows.
            self.head, self.head_dtype = self._full_rows, torch.float32
        else:
            self._cut_rows()   # a vocabulary subset of a q4 target's head, on the kernel
        # Rotary tables for every position this run can reach, computed as transformers does.
        rotary = inner.rotary_emb
        self.cos, self.sin = rotary_tables(torch.arange(max_len, device=device), rotary.inv_freq.to(device),
                                           rotary.attention_scaling, self.dtype)
        # One tensor for every layer's keys (and one for values), each layer a view: `keep` then moves
        # the accepted slots of all layers in one gather instead of one per layer and tensor.
        shape = (len(inner.layers), 1, self.n_kv, max_len, self.head_dim)
        self.all_keys = torch.empty(shape, dtype=self.dtype, device=device)
        self.all_values = torch.empty(shape, dtype=self.dtype, device=device)
        self.keys, self.values = list(self.all_keys.unbind(0)), list(self.all_values.unbind(0))

    def forward(self, input_ids: torch.Tensor, start: int, positions: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, rows: torch.Tensor | int = 1, hidden: bool = False,
                taps: tuple[int, ...] = ()):
        """Logits (rows, vocab) after writing `input_ids`' K/V into slots start, start+1, ...

        positions: each token's position (default: its slot); mask: additive
        (1, 1, n, start + n) over the cached slots and the new tokens (default:
        causal). rows: an index tensor of rows to return, or how many last rows.
        hidden: also return the final-normed hidden states of ALL n new tokens
        (n, hidden), the features a feature-conditioned draft reads; the norm is
        computed once for every row either way, so asking costs nothing extra.
        taps: with `hidden`, layers whose outputs join each row after the normed
        state (n, hidden x (1 + len(taps))), for a draft that taps them.
        """
        n = input_ids.shape[1]
        end = start + n
        if end > self.max_len:
            raise ValueError(f"LeanLlama: {end} slots needed, {self.max_len} allocated")
        if positions is None:
            cos, sin = self.cos[start:end], self.sin[start:end]
        else:
            cos, sin = self.cos.index_select(0, positions), self.sin.index_select(0, positions)
        if mask is None and n > 1 and start > 0:
            mask = causal_mask(n, start, self.dtype, self.device)
        causal = mask is None and n > 1   # a prefill from slot 0: plainly causal
        return self._run(input_ids, (start, None, end), cos, sin, mask, causal, rows, hidden, taps)

    __call__ = forward

    def forward_static(self, input_ids: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor,
                       mask: torch.Tensor | None, rows: torch.Tensor, hidden: bool = False,
                       taps: tuple[int, ...] = (), end: int | None = None):
        """`forward` with every argument a tensor, for graph capture: nothing depends on data.

        K/V go to the slots `slots` names (index_copy_, so the slot is data, not shape), and attention
        spans slots [0, end) under the additive `mask` (1, 1, n, end), which blocks every slot a row may
        not see. `end` None is the whole preallocated cache (the captured form: one width for every step;
        the caches start zeroed, so unwritten slots are finite); an int is the filled slots only (the
        eager form, which skips the empty tail and may pass no mask where a row sees every slot).
        Returns the logits of `rows` (an index tensor), and with `hidden` the features of every row.
        """
        cos, sin = self.cos.index_select(0, positions), self.sin.index_select(0, positions)
        return self._run(input_ids, (0, slots, -1 if end is None else end), cos, sin, mask, False, rows, hidden,
                         taps)

    def _run(self, input_ids: torch.Tensor, at: tuple[int, torch.Tensor | None, int], cos, sin, mask,
             causal: bool, rows: torch.Tensor | int, hidden: bool, taps: tuple[int, ...]):
        """Embedding, the decoder layers, norm and head: both forwards' body. `at` is where the new rows'
        K/V go and what attention reads (`DecoderLayer.forward`'s start, slots and end).
        With `hidden`, the outputs of layers `taps` (n, hidden) join each row's features."""
        with attention_kernels(self.device, self.attention_backends):
            x = F.embedding(input_ids[0], self.embed).to(self.dtype)
            # What a graph captures (attention over every slot, `end` -1) runs the layers op by op: a graph records
            # the ops, and TorchScript's interpreter is not traced into.
            stack = self.traced_stack if at[2] < 0 else self.stack
            x, tapped = stack(x, cos.unsqueeze(1), sin.unsqueeze(1), self.keys, self.values, *at, mask, causal,
                              list(taps) if hidden else [])
        if hidden:
            normed = rms_norm(x, self.final_norm, self.eps)
            picked = picked_rows(normed, rows)
            return self.head(picked.to(self.head_dtype)), torch.cat([normed] + tapped, -1) if tapped else normed
        x = picked_rows(x, rows)
        # A 2-D input keeps F.linear on a plain matmul (see VocabSubsetHead.forward).
        return self.head(rms_norm(x, self.final_norm, self.eps).to(self.head_dtype))

    def zero_cache(self) -> None:
        """Zero every slot: `forward_static` attends over unwritten slots (masked), which must be finite."""
        self.all_keys.zero_()
        self.all_values.zero_()

    def widen(self, token_ids: torch.Tensor) -> None:
        """Give a head over a vocabulary subset rows for `token_ids` too, after its current rows."""
        if self.vocab_ids is None:
            return   # the whole vocabulary already
        self.cut_head(torch.cat([self.vocab_ids, token_ids.to(self.device, torch.long)]))

    def cut_head(self, vocab_ids: torch.Tensor) -> None:
        """The head over exactly `vocab_ids`' rows (a kept forward starting a new prompt's subset)."""
        self.vocab_ids = vocab_ids.to(self.device, torch.long)
        if self._full_rows is not None:
            self._cut_rows()
            return
        self.lm_head = self._full_head.index_select(0, self.vocab_ids).contiguous()
        self.head = Dense(self.lm_head, pack(self.lm_head) if self.packed else None)
        self.head_dtype = self.lm_head.dtype

    def _cut_rows(self) -> None:
        """The head over `vocab_ids` cut from the GGUF's Q8_0 codes (`kernels.Q8Rows.cut`): each logit is the whole
        q4 head's, and its rows are read at half a bf16 subset's bytes."""
        self.head, self.head_dtype = self._full_rows.cut(self.vocab_ids), torch.float32

    def keep(self, prefix_len: int, slots: torch.Tensor) -> None:
        """Move the K/V of `slots` (each >= its destination) to prefix_len, prefix_len + 1, ...

        `slots` may be a fixed-length index (a static step's) whose entries past the kept ones repeat:
        the slots they fill get whatever, masked until rewritten. No host read: numel is shape."""
        n = slots.numel()
        if n == 0:
            return
        for cache in (self.all_keys, self.all_values):   # index_select copies first, so overlap is safe
            cache[:, :, :, prefix_len:prefix_len + n] = cache.index_select(3, slots)

    def copy_prefix(self, other: "LeanLlama", n: int) -> None:
        """Take the first n slots of another cache over the same weights (a self-draft's prefill)."""
        self.all_keys[:, :, :, :n] = other.all_keys[:, :, :, :n]
        self.all_values[:, :, :, :n] = other.all_values[:, :, :, :n]


def keep_positions(cache: DynamicCache, prefix_len: int, keep: torch.Tensor) -> None:
    """Keep the first `prefix_len` slots of transformers' cache plus the slots `keep` (absolute indices,
    ascending, each at or after `prefix_len`), moved in order to `prefix_len`, `prefix_len + 1`, ...; everything
    after them is dropped. transformers 5 exposes each layer's `keys`/`values` (batch, heads, seq, head_dim) on
    `cache.layers`, which is all this touches."""
    n_keep = int(keep.numel())
    for layer in cache.layers:
        if n_keep:
            # Move rather than index_select the whole cache: the prefix is left in place.
            layer.keys[:, :, prefix_len:prefix_len + n_keep] = layer.keys.index_select(2, keep)
            layer.values[:, :, prefix_len:prefix_len + n_keep] = layer.values.index_select(2, keep)
        layer.keys = layer.keys[:, :, :prefix_len + n_keep]
        layer.values = layer.values[:, :, :prefix_len + n_keep]


def crop(cache: DynamicCache, length: int) -> None:
    """Drop every slot of transformers' cache from `length` on."""
    for layer in cache.layers:
        layer.keys = layer.keys[:, :, :length]
        layer.values = layer.values[:, :, :length]


class ModelForward:
    """The model's own forward over transformers' `DynamicCache`, behind `LeanLlama`'s interface (any
    architecture).

    The cache holds exactly the slots before `start`: slots from `start` on are
    overwritten, as in `LeanLlama`, so both can be driven by the same loop.
    """

    vocab_ids = None   # transformers' forward always returns the whole vocabulary

    def __init__(self, model, max_len: int):
        self.model = model
        weights = next(model.parameters())
        self.device, self.dtype = weights.device, weights.dtype
        self.max_len = max_len
        self.cache = DynamicCache(config=model.config)

    def forward(self, input_ids: torch.Tensor, start: int, positions: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, rows: torch.Tensor | int = 1, hidden: bool = False,
                taps: tuple[int, ...] = ()):
        if self.cache.get_seq_length() > start:
            crop(self.cache, start)
        with attention_kernels(input_ids.device):
            return self._forward(input_ids, positions, mask, rows, hidden, taps)

    def _forward(self, input_ids, positions, mask, rows, hidden, taps=()):
        if hidden:   # the final-normed hidden states of every new token, and the logits of `rows`
            out = self.model.model(input_ids=input_ids, attention_mask=mask,
                                   position_ids=None if positions is None else positions.unsqueeze(0),
                                   past_key_values=self.cache, use_cache=True, output_hidden_states=bool(taps))
            normed = out.last_hidden_state[0]
            features = tapped_features(normed, [h[0] for h in out.hidden_states or ()], taps)
            return self.model.lm_head(picked_rows(normed, rows)), features
        return self.model(input_ids=input_ids, attention_mask=mask,
                          position_ids=None if positions is None else positions.unsqueeze(0),
                          past_key_values=self.cache, use_cache=True, logits_to_keep=rows).logits[0]

    __call__ = forward

    def keep(self, prefix_len: int, slots: torch.Tensor) -> None:
        """As `LeanLlama.keep`; a fixed-length index may name slots past this cache's end (a path node the
        draft never read, or the padding after it): only the slots it holds move."""
        length = self.cache.get_seq_length()
        keep_positions(self.cache, prefix_len, slots[slots < length][:max(0, length - prefix_len)])

    def copy_prefix(self, other: "ModelForward", n: int) -> None:
        self.cache = copy.deepcopy(other.cache)
        crop(self.cache, n)


def dense_parts(layers) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
    """Each layer's four matrices (q|k|v and gate|up each one, `rows_together`) and their biases (None where a
    projection has none: Llama's; Qwen2's q|k|v has one)."""
    matrices, biases = [], []
    for layer in layers:
        attn, mlp = layer.self_attn, layer.mlp
        matrices += [rows_together(attn.q_proj, attn.k_proj, attn.v_proj), attn.o_proj.weight,
                     rows_together(mlp.gate_proj, mlp.up_proj), mlp.down_proj.weight]
        biases += [biases_together(attn.q_proj, attn.k_proj, attn.v_proj), biases_together(attn.o_proj),
                   biases_together(mlp.gate_proj, mlp.up_proj), biases_together(mlp.down_proj)]
    return matrices, biases


def decoder_layers(model, products: list, dtype: torch.dtype, attention=None) -> list[DecoderLayer]:
    """The model's layers as `DecoderLayer`s over `products` (four a layer, in order), the residual stream in
    `dtype`; `attention(head_dim)` gives each layer's attention (None: torch's)."""
    cfg, layers = model.config, model.model.layers
    n_heads, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // n_heads
    scale = layers[0].self_attn.scaling
    return [DecoderLayer(layer.input_layernorm.weight.to(dtype), layer.post_attention_layernorm.weight.to(dtype),
                         *products[4 * i:4 * i + 4], n_heads, n_kv, head_dim, cfg.rms_norm_eps, scale,
                         attention(head_dim) if attention else None)
            for i, layer in enumerate(layers)]


def _dense_stack(model, matrices: list[torch.Tensor], biases: list, packed: list | None, dtype: torch.dtype
                 ) -> tuple[LayerStack, LayerStack]:
    """The model's layers over its own matrices (`Dense`, oneDNN-prepacked where `packed`): compiled by TorchScript
    on a CPU (a decoding row's small ops are a share of a bf16 forward there), and as they are, op by op, for
    what a graph captures; kept on the model while its matrices, packed copies and parameters are these (an
    optimiser step bumps a parameter's version counter; the biases are copies, so a changed one needs a new stack)."""
    state = state_of(model)
    key = (tuple((m.data_ptr(), tuple(m.shape)) for m in matrices), id(packed), dtype, weights_version(model))
    kept = state.dense_stack
    if kept is None or kept[0] != key:
        products = [Dense(w, packed[i] if packed else None, biases[i]) for i, w in enumerate(matrices)]
        eager = layer_stack(decoder_layers(model, products, dtype), script=False)
        compiled = layer_stack(list(eager.layers), script=matrices[0].device.type == "cpu")
        kept = state.dense_stack = (key, (compiled, eager), packed)   # the packed copies kept alive with their key
    return kept[1]


def _weight_only_stack(model, weight_only: WeightOnlyLayers):
    """The weight-only layers as one compiled `LayerStack`, made once per model and kept on it (TorchScript
    takes about a second to compile it, and a decoder makes a forward per prompt). Their residual stream, K/V
    and attention run in fp32; on SpecViz's own kernel each layer is one op (`kernels.Q4Layer`): the same
    kernels, bit for bit, with SpecViz's own attention (`native.RowAttention`): each row's bits independent of
    the rows beside it, so greedy speculation on 4-bit weights writes `ar`'s text token for token."""
    state = state_of(model)
    kept = state.weight_only_stack
    if kept is None or kept[0] is not weight_only:
        own = weight_only.kernel == "vnni"
        products = [product for layer in weight_only.layers for product in layer]
        layers = decoder_layers(model, products, WeightOnlyLayers.ACTIVATIONS,
                                 lambda d: native.RowAttention() if own and native.RowAttention.fits(d) else None)
        kept = state.weight_only_stack = (weight_only, layer_stack(
            [Q4Layer(layer) if Q4Layer.fits(layer) else layer for layer in layers]))
    return kept[1]


def make_forward(model, max_len: int, vocab_ids: torch.Tensor | None = None):
    """`LeanLlama` where it is exact for this model, else the model's own forward."""
    if lean_llama_supported(model):
        return LeanLlama(model, max_len, vocab_ids)
    return ModelForward(model, max_len)
