"""A feature-conditioned draft (EAGLE style) for a Llama-architecture target.

The draft reads the target's own features: at slot j it takes the pair
(f_j, x_{j+1}), where f_j is the target's final-normed hidden state at position
j and x_{j+1} the next token, fuses them (`fc`: Linear 2H -> H over
cat(embed(x_{j+1}), f_j)), runs ONE decoder layer of the target's shape (its own
K/V cache, rotary positions = slot; `layers=N` stacks N, see `DraftLayer`), normalises (a trainable copy of the
target's final RMSNorm) and predicts f_{j+1}; the target's frozen lm_head,
restricted to a vocabulary subset, turns that prediction into logits for
x_{j+2}. Embedding and head are the target's tensors, never copied to disk.

A draft may also tap some of the target's earlier layers (`taps`, EAGLE-3's
low/mid/high idea): the final-normed state is tuned to predict x_{j+1}, while
earlier layers still carry what the next token after it needs. At a true
position the feature row is then [f_j | h^(a)_j | h^(b)_j ...], each tap
RMS-normed and fused by `fc_taps` (zero-initialised, so a draft trained without
taps starts exactly where it was); a predicted feature has no taps, and a row of
width H simply skips them.

In a Sequoia tree (`specviz.sequoia.decoder`), the root's pair uses the true
feature of the last verified position; a deeper node's pair uses its parent's
*predicted* feature, so accuracy falls with depth (measured per depth by
`featuretrain.evaluate_depths`).

On disk a feature-draft directory holds `feature.json` (what it is, for which
target, its taps and layer count, training summary), `feature.safetensors` (fc +
layers + norm, bf16) and
`vocab.json` (the head's token ids, `specviz.draft.vocab`).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from ..engine import native
from ..engine.drafts import DraftFormat
from ..engine.lean import attention_backends, attention_kernels, causal_mask, picked_rows
from ..engine.llama import DecoderLayer, Linears, layer_stack, layers_over, rms_norm, rotary_tables
from ..engine.model_state import state_of, weights_version
from ..engine.kernels import Int8Rows, Q8Rows, fbgemm_available, int8_decoding_supported, int8_kernel
from ..engine.quant import fbgemm_layers, int8_copy, kernel_copy, kernel_copy_fits, kernel_head
from ..errors import ModelLoadError
from .vocab import load_vocab

FEATURE_META = "feature.json"
FEATURE_WEIGHTS = "feature.safetensors"
KIND = "specviz-feature-draft"



def _products(layer) -> tuple[Linears, Linears, Linears, Linears]:
    """A draft layer's q|k|v, o, gate|up and down as `llama.DecoderLayer` multiplies through them: its own modules
    (so training's gradients reach them), q|k|v and gate|up one module each in an int8 copy (`int8_copy`)."""
    modules = layer._modules

    def joined(stacked: str, parts: tuple[str, ...]) -> Linears:
        return Linears(modules[stacked]) if stacked in modules else Linears(*(modules[p] for p in parts))

    return (joined("qkv_proj", ("q_proj", "k_proj", "v_proj")), Linears(modules["o_proj"]),
            joined("gate_up_proj", ("gate_proj", "up_proj")), Linears(modules["down_proj"]))


class DraftLayer(torch.nn.Module):
    """A Llama decoder layer of the target's shape: a draft's second and later layers.

    The first layer's weights live on `FeatureDraft` itself under the same names (the
    format of the drafts shipped before there could be more than one); both run the
    target's layer (`engine.llama.DecoderLayer`) over the same projections (`layers`).
    """

    def __init__(self, cfg, **kw):
        super().__init__()
        _layer_shape(self, cfg)
        _layer_params(self, cfg, **kw)

    def copy_from(self, src, zero_output: bool) -> None:
        """Weights from a transformers decoder layer; `zero_output` zeroes o_proj and down_proj, so the
        layer adds nothing yet and a draft warm-started with it predicts exactly as before."""
        with torch.no_grad():
            self.input_norm.copy_(src.input_layernorm.weight)
            self.post_norm.copy_(src.post_attention_layernorm.weight)
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                getattr(self, name).weight.copy_(getattr(src.self_attn, name).weight)
            for name in ("gate_proj", "up_proj", "down_proj"):
                getattr(self, name).weight.copy_(getattr(src.mlp, name).weight)
            if zero_output:
                self.o_proj.weight.zero_()
                self.down_proj.weight.zero_()


def _layer_shape(layer, cfg) -> None:
    layer.hidden = cfg.hidden_size
    layer.n_heads, layer.n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    layer.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // layer.n_heads
    layer.eps = cfg.rms_norm_eps
    layer.scale = layer.head_dim ** -0.5


def _layer_params(layer, cfg, **kw) -> None:
    H, inter = cfg.hidden_size, cfg.intermediate_size
    layer.input_norm = torch.nn.Parameter(torch.ones(H, **kw))
    layer.q_proj = torch.nn.Linear(H, layer.n_heads * layer.head_dim, bias=False, **kw)
    layer.k_proj = torch.nn.Linear(H, layer.n_kv * layer.head_dim, bias=False, **kw)
    layer.v_proj = torch.nn.Linear(H, layer.n_kv * layer.head_dim, bias=False, **kw)
    layer.o_proj = torch.nn.Linear(layer.n_heads * layer.head_dim, H, bias=False, **kw)
    layer.post_norm = torch.nn.Parameter(torch.ones(H, **kw))
    layer.gate_proj = torch.nn.Linear(H, inter, bias=False, **kw)
    layer.up_proj = torch.nn.Linear(H, inter, bias=False, **kw)
    layer.down_proj = torch.nn.Linear(inter, H, bias=False, **kw)


class FeatureDraft(torch.nn.Module):
    """fc -> Llama decoder layer(s) -> RMSNorm -> the target's head over a vocabulary subset."""

    is_feature_draft = True
    drafter_kind = "feature"   # its tree decoders draft through `feature_drafter.FeatureDrafter`

    def __init__(self, target, vocab_ids: torch.Tensor, dtype: torch.dtype | None = None,
                 taps: tuple[int, ...] = (), layers: int = 1):
        super().__init__()
        cfg = target.config
        last = cfg.num_hidden_layers - 1
        if any(not 0 <= t < last for t in taps):
            raise ValueError(f"taps must be layers 0..{last - 1} of the target (its last layer is the feature)")
        if layers < 1:
            raise ValueError(f"a feature draft has at least one layer, not {layers}")
        self.taps = tuple(int(t) for t in taps)
        self.n_layers = int(layers)
        self.config = cfg
        H = cfg.hidden_size
        _layer_shape(self, cfg)
        dtype = dtype or target.dtype
        device = target.device
        kw = dict(device=device, dtype=dtype)
        self.fc = torch.nn.Linear(2 * H, H, bias=True, **kw)
        if self.taps:
            self.fc_taps = torch.nn.Linear(len(self.taps) * H, H, bias=False, **kw)
            torch.nn.init.zeros_(self.fc_taps.weight)
            self.tap_norm = torch.nn.Parameter(torch.ones(len(self.taps), H, **kw))
        _layer_params(self, cfg, **kw)
        if layers > 1:   # not registered for one layer: the state dict stays the shipped format
            self.more_layers = torch.nn.ModuleList(DraftLayer(cfg, **kw) for _ in range(layers - 1))
        self.norm = torch.nn.Parameter(torch.ones(H, **kw))
        # The target's tensors (shared, frozen, not parameters of this module).
        self._target = [target]   # a list: not registered as a submodule
        self.register_buffer("vocab_ids", vocab_ids.to(device, torch.long), persistent=False)
        self.register_buffer("head", target.lm_head.weight.detach().index_select(0, self.vocab_ids).to(dtype)
                             .contiguous(), persistent=False)
        self.register_buffer("inv_freq", target.model.rotary_emb.inv_freq.detach().float().to(device),
                             persistent=False)
        self.attention_scaling = float(getattr(target.model.rotary_emb, "attention_scaling", 1.0))
        self.generation_config = target.generation_config
        # What the profiler's cache key reads (`engine.profiler.forward_kind`): the head's rows. Not a module.
        self.lm_head = SimpleNamespace(vocab_ids=self.vocab_ids)

    def int8_parts(self) -> tuple["FeatureDraft", Int8Rows | Q8Rows, Int8Rows | Q8Rows]:
        """This draft with int8 linears, the target's whole head in int8 (rows cut per decoder for the
        tokens a prompt adds), and the head over the draft's own rows, packed for its kernel. Next to a q4
        target on SpecViz's kernel, both heads are its GGUF's Q8_0 codes instead (`kernels.Q8Rows`).

        Quantised once and kept while the weights stay the same (an optimiser step bumps their
        version counters), so a decoder per prompt does not pay 60 ms of quantisation, nor fbgemm's
        50 ms of packing the head's 15.7k rows, each time.
        """
        q8_head = kernel_head(self._target[0])
        versions = weights_version(self) + (
            self.vocab_ids.data_ptr(), self.vocab_ids.numel(), id(q8_head))   # the own-rows head is cut by them
        state = state_of(self)
        cached = state.int8_parts
        if cached is None or cached[0] != versions:
            # A q4 target's head is the GGUF's Q8_0 codes on SpecViz's kernel: the rows are cut from them as they
            # are, not requantised from their bf16 copy.
            head = q8_head if q8_head is not None else Int8Rows.quantized(
                self._target[0].lm_head.weight.to(self.fc.weight.dtype), kernel=int8_kernel(self.fc.weight.device),
                pack=False)
            parts = kernel_copy(self) if self._on_the_kernel(q8_head) else int8_copy(self)
            cached = state.int8_parts = (versions, parts, head, head.cut(self.vocab_ids))
        return cached[1], cached[2], cached[3]

    @property
    def decoding_kind(self) -> str:
        """What the decoding forward runs (the profiler's cache key: int8 levels cost less than bf16 ones)."""
        # "-stacked": q|k|v and gate|up run as one int8 matrix each, so older curves overstate a level;
        # "-fbgemm": and the head and layer run fbgemm's kernel (`kernels.Int8Rows`), cheaper again;
        # "-fp32": and the layers run on fp32 activations (`engine.llama.RowsLayer`), fewer ops a level;
        # "-ts": and TorchScript runs them (`engine.llama.RowsStack`), each op's dispatch cheaper.
        # "-q8head": and the head is a q4 target's Q8_0 codes on SpecViz's kernel (`kernels.Q8Rows`).
        kind = "feature"
        if int8_decoding_supported(self.fc.weight.device, self.fc.weight.dtype):
            kind = "feature-int8-fbgemm-fp32-ts" if fbgemm_available() else "feature-int8-stacked"
            q8_head = kernel_head(self._target[0])
            kind += "-q8head" if q8_head is not None else ""
            # The head, the fusion and the layers all Q8_0 on SpecViz's kernel (`quant.kernel_copy`), named with the
            # kernel's source as the target's forward is: a changed kernel's levels are measured afresh.
            if self._on_the_kernel(q8_head):
                kind = f"feature-q8head-q8layers-{native.source_digest()}"
        return kind if self.n_layers == 1 else f"{kind}-{self.n_layers}layers"

    def _on_the_kernel(self, q8_head) -> bool:
        """Whether the draft's own products run on SpecViz's kernel: beside a q4 target whose head is on it
        (`q8_head`, `quant.kernel_head`), where `quant.kernel_copy` reads the draft."""
        return q8_head is not None and kernel_copy_fits(self)

    # -- construction ---------------------------------------------------------------------------

    def init_from_target(self, target) -> None:
        """Layer from the target's last layer, norm = the target's final norm, fc = [I | I] (embed + feature);
        later layers from the same layer with their outputs zeroed (they start as the identity)."""
        src = target.model.layers[-1]
        DraftLayer.copy_from(self, src, zero_output=False)
        for layer in self.decoder_layers()[1:]:
            layer.copy_from(src, zero_output=True)
        with torch.no_grad():
            self.norm.copy_(target.model.norm.weight)
            eye = torch.eye(self.hidden, device=self.fc.weight.device, dtype=self.fc.weight.dtype)
            self.fc.weight.copy_(torch.cat([eye, eye], dim=1))
            self.fc.bias.zero_()

    def own_state(self) -> dict[str, torch.Tensor]:
        return dict(self.state_dict())

    # -- the layers -----------------------------------------------------------------------------

    def decoder_layers(self) -> list:
        """The first layer (this module's own weights) and any after it."""
        return [self, *getattr(self, "more_layers", ())]

    def layers(self, dtype: torch.dtype | None = None) -> list[DecoderLayer]:
        """The draft's layers as the target's `DecoderLayer`, over this module's own weights (read at each call,
        so they follow training), the residual stream in `dtype` (default the weights')."""
        dtype = dtype or self.fc.weight.dtype
        return [DecoderLayer.of(layer, _products(layer), dtype) for layer in self.decoder_layers()]

    def layers_then_norm(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv,
                         mask: torch.Tensor | None, causal: bool = False) -> torch.Tensor:
        """The decoder layers over fused pairs x (B, n, hidden), then the final norm: the predicted features.

        kv(i, k, v) keeps layer i's new keys and values wherever the caller keeps them and
        returns all the keys and values its queries attend to (under `mask`); cos, sin (n, head_dim).
        """
        with attention_kernels(x.device):   # no cuDNN plan per key length (see engine.lean)
            x = layers_over(self.layers(x.dtype), x, cos, sin, kv, mask, causal)
        return rms_norm(x, self.norm, self.eps)

    def rotary(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        return rotary_tables(positions, self.inv_freq, self.attention_scaling, dtype)

    def fuse(self, token_ids: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        H = self.hidden
        emb = F.embedding(token_ids, self._target[0].model.embed_tokens.weight).to(features.dtype)
        x = self.fc(torch.cat([emb, features[..., :H]], dim=-1))
        if features.shape[-1] > H:   # a true position: the tapped layers join in
            taps = features[..., H:].unflatten(-1, (len(self.taps), H))
            x = x + self.fc_taps(rms_norm(taps, self.tap_norm, self.eps).flatten(-2))
        return x

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """Logits over the head's vocabulary subset (row r = token vocab_ids[r])."""
        shape = features.shape
        return F.linear(features.reshape(-1, shape[-1]), self.head.to(features.dtype)).view(*shape[:-1], -1)

    def decoding_forward(self, max_len: int) -> "FeatureDraftForward":
        """The batch-1 forward over a preallocated cache that the decoding loops use."""
        return FeatureDraftForward(self, max_len)

    def timing_forward(self, max_len: int) -> "FeatureLevelTiming":
        """What the profiler times as one of this draft's tree levels (`engine.profiler.timing_forward`)."""
        return FeatureLevelTiming(self, max_len)

    def forward(self, token_ids: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """Teacher-forced pass over whole rows (B, n): slot j reads (features[:, j], token_ids[:, j]);
        returns the predicted next features (B, n, H)."""
        n = token_ids.shape[1]
        x = self.fuse(token_ids, features)
        cos, sin = self.rotary(torch.arange(n, device=x.device), x.dtype)
        return self.layers_then_norm(x, cos, sin, lambda i, k, v: (k, v), None, causal=True)


# ---------------------------------------------------------------------------
# Saving and loading
# ---------------------------------------------------------------------------


def is_feature_draft_dir(path: str | Path | None) -> bool:
    return path is not None and (Path(path) / FEATURE_META).exists() and (Path(path) / FEATURE_WEIGHTS).exists()


def save_feature_draft(draft: FeatureDraft, out_dir: str | Path, target_name: str, extra: dict | None = None) -> None:
    from .pruned import save_weights

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_weights({k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in draft.own_state().items()},
                 out / FEATURE_WEIGHTS)
    meta = {"kind": KIND, "target": target_name, "hidden_size": draft.hidden,
            "vocab_size": int(draft.config.vocab_size), "head_rows": int(draft.vocab_ids.numel()),
            "shared_from_target": ["model.embed_tokens.weight", "lm_head.weight", "rotary_emb"],
            "taps": list(draft.taps), "layers": draft.n_layers,
            "note": "assemble with specviz.draft.feature.load_feature_draft(target_model, dir)", **(extra or {})}
    (out / FEATURE_META).write_text(json.dumps(meta, indent=2))


def load_feature_draft(target_model, dir_: str | Path, dtype: torch.dtype | None = None) -> FeatureDraft:
    from safetensors.torch import load_file

    dir_ = Path(dir_)
    if not is_feature_draft_dir(dir_):
        raise ModelLoadError(f"{dir_} is not a SpecViz feature-draft directory")
    meta = json.loads((dir_ / FEATURE_META).read_text())
    cfg = target_model.config
    if (meta.get("hidden_size"), meta.get("vocab_size")) != (cfg.hidden_size, cfg.vocab_size):
        raise ModelLoadError(f"the feature draft in {dir_} was built for hidden {meta.get('hidden_size')} x "
                             f"vocab {meta.get('vocab_size')}; the target has {cfg.hidden_size} x {cfg.vocab_size}")
    vocab_ids = load_vocab(dir_, cfg.vocab_size)
    if vocab_ids is None:
        vocab_ids = torch.arange(cfg.vocab_size)
    taps = tuple(meta.get("taps", ()))
    if any(not 0 <= t < cfg.num_hidden_layers - 1 for t in taps):
        raise ModelLoadError(f"the feature draft in {dir_} taps layers {list(taps)}; the target has "
                             f"{cfg.num_hidden_layers}")
    layers = meta.get("layers", 1)
    if not isinstance(layers, int) or layers < 1:
        raise ModelLoadError(f"the feature draft in {dir_} has layers = {layers!r} in {FEATURE_META}")
    draft = FeatureDraft(target_model, vocab_ids, dtype or target_model.dtype, taps, layers)
    weights = load_file(str(dir_ / FEATURE_WEIGHTS))
    missing = set(draft.own_state()) - set(weights)
    if missing:
        raise ModelLoadError(f"feature draft in {dir_} lacks {sorted(missing)[:3]}")
    # Weights this draft would not read (taps its feature.json does not name, or parts of a newer
    # format) mean a different draft than the one trained: refuse rather than silently drop them.
    unread = set(weights) - set(draft.own_state())
    if unread:
        raise ModelLoadError(f"feature draft in {dir_} holds weights this draft does not read "
                             f"({sorted(unread)[:3]}): its feature.json does not describe them")
    draft.load_state_dict({k: v.to(draft.fc.weight.dtype) for k, v in weights.items()}, strict=False)
    draft.eval()
    draft.requires_grad_(False)
    return draft


def feature_draft_display_name(dir_: str | Path) -> str:
    try:
        layers = int(json.loads((Path(dir_) / FEATURE_META).read_text()).get("layers", 1))
    except (OSError, ValueError, TypeError):
        layers = 1
    return f"SpecViz feature draft ({layers} layer{'s' if layers > 1 else ''}, reads the target's hidden states)"


# How the engine finds, loads and names this draft (`engine.drafts`).
DRAFT_FORMAT = DraftFormat(is_dir=is_feature_draft_dir, load=load_feature_draft,
                           display_name=feature_draft_display_name)


# ---------------------------------------------------------------------------
# The decoding-time forward: a preallocated K/V cache, batch 1
# ---------------------------------------------------------------------------


class FeatureDraftForward:
    """The draft's forward for the decoding loop over a preallocated cache of `max_len` slots.

    `forward(ids, feats, start, positions, mask)` writes the new pairs' K/V into
    slots start.. and returns the predicted features of every new row; `logits`
    maps features to head logits (rows over `vocab_ids`: the draft's own rows
    first, then those of any other token in the `vocab_ids` given to `reset_head`,
    then the widened ones). On a CPU the linears and the head run in weight-only int8
    (`int8_decoding_supported`); where fbgemm or SpecViz's kernel runs them, the layers run on fp32
    activations as one compiled stack (`engine.llama.LayerStack`), so `dtype` (the features', masks' and
    cache's) is fp32.
    """

    def __init__(self, draft: FeatureDraft, max_len: int, int8: bool | None = None):
        self.max_len = max_len
        dev = draft.fc.weight.device
        self.device, self.dtype = dev, draft.fc.weight.dtype
        # `int8` None: where `int8_decoding_supported` says; True/False forces either form (the tests compare them).
        self.int8 = int8_decoding_supported(dev, self.dtype) if int8 is None else int8
        self._own_ids = draft.vocab_ids
        if self.int8:
            self.draft, self._full_head, self._own_head = draft.int8_parts()
        else:
            self.draft, self._full_head = draft, draft._target[0].lm_head.weight.detach()
        self.reset_head()
        self.fuse_dtype, self.final_norm = self.dtype, self.draft.norm
        self.layers = fbgemm_layers(self.draft) if self.int8 else None
        # fbgemm's layers run on fp32 activations: the features, masks and K/V are fp32, and the final norm is
        # torch's fused one (the numbers these levels were measured and shipped with).
        self.fp32 = self.layers is not None
        if self.fp32:
            self.dtype, self.final_norm = torch.float32, self.draft.norm.float()
        else:
            self.layers = layer_stack(self.draft.layers(self.dtype), script=False)
        self.cos, self.sin = draft.rotary(torch.arange(max_len, device=dev), self.dtype)
        self.cos, self.sin = self.cos.unsqueeze(1), self.sin.unsqueeze(1)   # (slots, 1, head_dim): the layer's
        self.backends = attention_backends(dev)   # looked up once: a level is on the decoding loop
        shape = (1, draft.n_kv, max_len, draft.head_dim)
        self.keys = [torch.empty(shape, dtype=self.dtype, device=dev) for _ in range(draft.n_layers)]
        self.values = [torch.empty(shape, dtype=self.dtype, device=dev) for _ in range(draft.n_layers)]

    @torch.inference_mode()
    def forward(self, token_ids: torch.Tensor, features: torch.Tensor, start: int,
                positions: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        d = self.draft
        n = token_ids.shape[-1]
        end = start + n
        if end > self.max_len:
            raise ValueError(f"FeatureDraftForward: {end} slots needed, {self.max_len} allocated")
        if positions is None:
            cos, sin = self.cos[start:end], self.sin[start:end]
        else:
            cos, sin = self.cos.index_select(0, positions), self.sin.index_select(0, positions)
        causal = False
        if mask is None:
            if n > 1 and start > 0:   # new rows see the cache and, causally, each other
                mask = causal_mask(n, start, self.dtype, self.device)
            else:
                causal = n > 1
        elif mask.dtype != self.dtype:
            mask = mask.to(self.dtype)   # a fixed tree's prepared mask is in the models' dtype
        # The fusion in the draft's dtype (gpt-fast's int8 kernel wants bf16), then the stream's to the features.
        x = d.fuse(token_ids.view(n), features.view(n, -1).to(self.fuse_dtype)).to(self.dtype)
        with attention_kernels(self.device, self.backends):   # no cuDNN plan per key length (see engine.lean)
            x = self.layers(x, cos, sin, self.keys, self.values, start, None, end, mask, causal, [])[0]
        if self.fp32:
            return F.rms_norm(x, (d.hidden,), self.final_norm, d.eps)
        return rms_norm(x, self.final_norm, d.eps)

    __call__ = forward

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        return self.head(features)

    def reset_head(self, vocab_ids: torch.Tensor | None = None) -> None:
        """The head over the draft's own rows, then `vocab_ids`' others (rows any `widen` added are dropped)."""
        own = self._own_ids
        # The draft's own rows come first: their head is prepared once per draft, not per prompt.
        self.vocab_ids = own if vocab_ids is None else torch.cat(
            [own, (ids := vocab_ids.to(self.device))[~torch.isin(ids, own)]])
        self.head = self._head_rows()

    def widen(self, token_ids: torch.Tensor) -> None:
        """Give the head rows for `token_ids` too, after its current rows (so row r keeps its token)."""
        self.vocab_ids = torch.cat([self.vocab_ids, token_ids.to(self.device, torch.long)])
        self.head = self._head_rows()

    def _head_rows(self):
        """The head over `vocab_ids`' rows of the target's head (int8 on a CPU: one scale per row); the
        draft's own cut while the rows are its own."""
        if self.int8:
            own, extra = self._own_head, self.vocab_ids[self._own_ids.numel():]
            if not extra.numel():
                return own
            more = self._full_head.cut(extra)   # a few dozen rows: cut (and packed) in well under a ms
            return lambda x: torch.cat([own(x), more(x)], dim=-1)
        head = self.draft.head if self.vocab_ids is self._own_ids else (
            self._full_head.index_select(0, self.vocab_ids).to(self.dtype).contiguous())
        return lambda x: F.linear(x, head)


class FeatureLevelTiming:
    """A feature draft behind the (ids, start, positions, mask, rows) interface, for timing only.

    The profiler times `make_forward(model)(ids, start, ...)`; a feature-conditioned draft
    also reads one feature per token, so this feeds it fixed random features and returns
    its head's logits: the cost of one tree level as Sequoia runs it.
    """

    def __init__(self, model: FeatureDraft, max_len: int):
        self.inner = model.decoding_forward(max_len)
        self.vocab_ids = self.inner.vocab_ids
        gen = torch.Generator().manual_seed(0)
        self.features = torch.randn(max_len, model.hidden, generator=gen).to(self.inner.device, self.inner.dtype)

    def forward(self, input_ids: torch.Tensor, start: int, positions: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, rows: torch.Tensor | int = 1) -> torch.Tensor:
        n = input_ids.shape[-1]
        out = self.inner(input_ids.view(-1), self.features[start:start + n], start, positions=positions, mask=mask)
        return self.inner.logits(picked_rows(out, rows))

    __call__ = forward
