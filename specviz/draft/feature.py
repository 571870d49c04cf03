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

import copy
import json
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from ..engine.lean import attention_kernels
from ..errors import ModelLoadError
from .vocab import load_vocab

FEATURE_META = "feature.json"
FEATURE_WEIGHTS = "feature.safetensors"
KIND = "specviz-feature-draft"

_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def int8_decoding_supported(device: torch.device, dtype: torch.dtype) -> bool:
    """Where the decoding forward runs its linears in weight-only int8: a bf16 draft on a CPU.

    On a CPU one draft level is bound by reading its weights (the head's 15.7k rows
    alone are 18 MB in bf16); int8 halves the bytes and the CPU kernel
    (`_weight_int8pack_mm`, gpt-fast's recipe) runs the head about 2.8x faster.
    With fp32 activations the same kernel is 2.7x *slower* than a dense fp32 matmul,
    so fp32 drafts stay dense. A draft only proposes, so its precision can cost
    acceptance, never exactness.
    """
    return device.type == "cpu" and dtype == torch.bfloat16 and hasattr(torch, "_weight_int8pack_mm")


def _fbgemm_available() -> bool:
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
        w = weight.detach().float()
        scales = w.abs().amax(dim=1).clamp(min=1e-12) / 127
        self.register_buffer("weight", (w / scales[:, None]).round().clamp(-127, 127).to(torch.int8))
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
            kernel = "fbgemm" if _fbgemm_available() and self.weight.device.type == "cpu" else "int8pack"
        self.kernel, self.packed, self.reduce_range = kernel, None, not _has_vnni()
        if kernel == "fbgemm" and pack:
            zeros = torch.zeros(self.weight.shape[0], dtype=torch.long)
            with warnings.catch_warnings():   # torch deprecates quantized tensors; the kernel stays (torch pinned)
                warnings.filterwarnings("ignore", message=".*quantized tensor creation.*")
                qweight = torch._make_per_channel_quantized_tensor(self.weight, self.scales.double(), zeros, 0)
            bias = None if self.bias is None else self.bias.float()
            self.packed = torch.ops.quantized.linear_prepack(qweight, bias)

    def rows(self, ids: torch.Tensor) -> "Int8Linear":
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


def _layer_qkv(layer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """(B, n, H) -> q (B, heads, n, d), k, v (B, kv, n, d), rotated."""
    B, n, _ = x.shape
    h = rms_norm(x, layer.input_norm, layer.eps)
    stacked = layer._modules.get("qkv_proj")   # int8 decoding copies (`int8_copy`)
    if stacked is not None:
        q, k, v = stacked(h).split((layer.n_heads * layer.head_dim, layer.n_kv * layer.head_dim,
                                    layer.n_kv * layer.head_dim), dim=-1)
    else:
        q, k, v = layer.q_proj(h), layer.k_proj(h), layer.v_proj(h)
    q = q.reshape(B, n, layer.n_heads, layer.head_dim).transpose(1, 2)
    k = k.reshape(B, n, layer.n_kv, layer.head_dim).transpose(1, 2)
    v = v.reshape(B, n, layer.n_kv, layer.head_dim).transpose(1, 2)
    q = q * cos + _rotate_half(q) * sin
    k = k * cos + _rotate_half(k) * sin
    return q, k, v


def _layer_block(layer, x: torch.Tensor, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                 mask: torch.Tensor | None, causal: bool = False) -> torch.Tensor:
    """Attention of q over keys/values, then o_proj and the MLP, both residual: the layer's output."""
    B, _, n, _ = q.shape
    with attention_kernels(q.device):   # no cuDNN plan per key length (see engine.lean)
        attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, is_causal=causal,
                                              scale=layer.scale, enable_gqa=layer.n_heads != layer.n_kv)
    x = x + layer.o_proj(attn.transpose(1, 2).reshape(B, n, -1))
    h = rms_norm(x, layer.post_norm, layer.eps)
    stacked = layer._modules.get("gate_up_proj")
    if stacked is not None:
        gate, up = stacked(h).chunk(2, dim=-1)
    else:
        gate, up = layer.gate_proj(h), layer.up_proj(h)
    return x + layer.down_proj(F.silu(gate) * up)


class DraftLayer(torch.nn.Module):
    """A Llama decoder layer of the target's shape: a draft's second and later layers.

    The first layer's weights live on `FeatureDraft` itself under the same names (the
    format of the drafts shipped before there could be more than one), and both run the
    same two functions, so there is one copy of the layer's arithmetic.
    """

    def __init__(self, cfg, **kw):
        super().__init__()
        _layer_shape(self, cfg)
        _layer_params(self, cfg, **kw)

    qkv = _layer_qkv
    block = _layer_block

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


class _HeadInfo:
    """Not a module: only says which rows the head keeps (for cache keys and reports)."""

    def __init__(self, vocab_ids: torch.Tensor):
        self.vocab_ids = vocab_ids


class FeatureDraft(torch.nn.Module):
    """fc -> Llama decoder layer(s) -> RMSNorm -> the target's head over a vocabulary subset."""

    is_feature_draft = True

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
        # What the profiler's cache key reads (`engine.profiler.forward_kind`): the head's rows.
        self.lm_head = _HeadInfo(self.vocab_ids)

    def int8_parts(self) -> tuple["FeatureDraft", Int8Linear, Int8Linear]:
        """This draft with int8 linears, the target's whole head in int8 (rows cut per decoder for the
        tokens a prompt adds), and the head over the draft's own rows, packed for its kernel.

        Quantised once and kept while the weights stay the same (an optimiser step bumps their
        version counters), so a decoder per prompt does not pay 60 ms of quantisation, nor fbgemm's
        50 ms of packing the head's 15.7k rows, each time.
        """
        # A draft built under inference_mode has inference tensors, which keep no version counter (and
        # cannot be changed outside inference_mode): their storage is their identity.
        versions = tuple((p.data_ptr(), -1 if p.is_inference() else p._version) for p in self.parameters()) + (
            self.vocab_ids.data_ptr(), self.vocab_ids.numel())   # the own-rows head is cut by them
        cached = self.__dict__.get("_int8_cache")
        if cached is None or cached[0] != versions:
            head = Int8Linear(self._target[0].lm_head.weight.to(self.fc.weight.dtype), pack=False)
            cached = self.__dict__["_int8_cache"] = (versions, int8_copy(self), head, head.rows(self.vocab_ids))
        return cached[1], cached[2], cached[3]

    @property
    def decoding_kind(self) -> str:
        """What the decoding forward runs (the profiler's cache key: int8 levels cost less than bf16 ones)."""
        # "-stacked": q|k|v and gate|up run as one int8 matrix each, so older curves overstate a level;
        # "-fbgemm": and the head and layer run fbgemm's kernel (`Int8Linear`), cheaper again;
        # "-fp32": and the layers run on fp32 activations (`_Fp32Layer`), fewer ops a level.
        kind = "feature"
        if int8_decoding_supported(self.fc.weight.device, self.fc.weight.dtype):
            kind = "feature-int8-fbgemm-fp32" if _fbgemm_available() else "feature-int8-stacked"
        return kind if self.n_layers == 1 else f"{kind}-{self.n_layers}layers"

    @property
    def embed_weight(self) -> torch.Tensor:
        return self._target[0].model.embed_tokens.weight

    # -- construction ---------------------------------------------------------------------------

    def init_from_target(self, target, layer_index: int = -1) -> None:
        """Layer from the target's last layer, norm = the target's final norm, fc = [I | I] (embed + feature);
        later layers from the same layer with their outputs zeroed (they start as the identity)."""
        src = target.model.layers[layer_index]
        DraftLayer.copy_from(self, src, zero_output=False)
        for layer in self.decoder_layers()[1:]:
            layer.copy_from(src, zero_output=True)
        with torch.no_grad():
            self.norm.copy_(target.model.norm.weight)
            eye = torch.eye(self.hidden, device=self.fc.weight.device, dtype=self.fc.weight.dtype)
            self.fc.weight.copy_(torch.cat([eye, eye], dim=1))
            self.fc.bias.zero_()

    def own_state(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in self.state_dict().items()}

    # -- the layers -----------------------------------------------------------------------------

    qkv = _layer_qkv
    block = _layer_block

    def decoder_layers(self) -> list:
        """The first layer (this module's own weights) and any after it."""
        return [self, *getattr(self, "more_layers", ())]

    def layers_then_norm(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv,
                         mask: torch.Tensor | None, causal: bool = False) -> torch.Tensor:
        """The decoder layers over fused pairs x, then the final norm: the predicted features.

        kv(i, k, v) keeps layer i's new keys and values wherever the caller caches them and
        returns all the keys and values its queries attend to (under `mask`).
        """
        for i, layer in enumerate(self.decoder_layers()):
            q, k, v = layer.qkv(x, cos, sin)
            keys, values = kv(i, k, v)
            x = layer.block(x, q, keys, values, mask, causal)
        return rms_norm(x, self.norm, self.eps)

    def rotary(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        angles = torch.cat((freqs, freqs), dim=-1)
        return ((angles.cos() * self.attention_scaling).to(dtype), (angles.sin() * self.attention_scaling).to(dtype))

    def fuse(self, token_ids: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        H = self.hidden
        emb = F.embedding(token_ids, self.embed_weight).to(features.dtype)
        x = self.fc(torch.cat([emb, features[..., :H]], dim=-1))
        if features.shape[-1] > H:   # a true position: the tapped layers join in
            taps = features[..., H:].unflatten(-1, (len(self.taps), H))
            x = x + self.fc_taps(rms_norm(taps, self.tap_norm, self.eps).flatten(-2))
        return x

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """Logits over the head's vocabulary subset (row r = token vocab_ids[r])."""
        shape = features.shape
        return F.linear(features.reshape(-1, shape[-1]), self.head.to(features.dtype)).view(*shape[:-1], -1)

    def decoding_forward(self, max_len: int, vocab_ids: torch.Tensor | None = None) -> "FeatureDraftForward":
        """The batch-1 forward over a preallocated cache that the decoding loops use."""
        return FeatureDraftForward(self, max_len, vocab_ids)

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
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in draft.own_state().items()}
    tmp = out / (FEATURE_WEIGHTS + ".tmp")
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.chmod(0o644)
    tmp.replace(out / FEATURE_WEIGHTS)
    meta = {"kind": KIND, "target": target_name, "hidden_size": draft.hidden,
            "vocab_size": int(draft.config.vocab_size), "head_rows": int(draft.vocab_ids.numel()),
            "shared_from_target": ["model.embed_tokens.weight", "lm_head.weight", "rotary_emb"],
            "taps": list(draft.taps), "layers": draft.n_layers,
            "note": "assemble with specviz.draft.feature.load_feature_draft(target_model, dir)"}
    meta.update(extra or {})
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


# ---------------------------------------------------------------------------
# The decoding-time forward: a preallocated K/V cache, batch 1
# ---------------------------------------------------------------------------


def int8_copy(draft: torch.nn.Module) -> torch.nn.Module:
    """The same draft with every linear in weight-only int8; norms, rotary and the target's tensors shared.

    A shallow copy with its own module table (its later layers copied the same way): the trained
    module is left as it is.
    """
    clone = copy.copy(draft)
    clone.__dict__.pop("_int8_cache", None)   # else each rebuild would keep every earlier copy alive
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


class _Fp32Layer:
    """A decoder layer of an int8 copy as a CPU's decoding loop runs it: fbgemm's linears on fp32
    activations, with no module calls.

    fbgemm rounds every linear's input to 8 bits per call (`Int8Linear`), so rounding the activations
    to bf16 between the linears, as the trained module's dtype would, buys no speed and only adds a
    conversion on either side of each linear; q and k are also rotated as one tensor. At a tree
    level's 1-8 rows every small op costs about as much as its arithmetic: a level runs 1.1-1.3x
    faster, a chat step's drafting 3.95 -> 3.35 ms (README, *fp32 activations in the draft's levels*),
    and the draft proposes what it did within fbgemm's rounding.
    """

    def __init__(self, layer):
        self.input_norm, self.post_norm = layer.input_norm.float(), layer.post_norm.float()
        mods = layer._modules
        self.qkv, self.o = mods["qkv_proj"].packed, mods["o_proj"].packed
        self.gate_up, self.down = mods["gate_up_proj"].packed, mods["down_proj"].packed
        self.reduce_range = mods["o_proj"].reduce_range
        self.hidden, self.heads, self.kv, self.head_dim = layer.hidden, layer.n_heads, layer.n_kv, layer.head_dim
        self.eps, self.scale = layer.eps, layer.scale

    @classmethod
    def of(cls, int8_draft) -> list["_Fp32Layer"] | None:
        """The layers of an int8 copy, or None where a layer's linears are not all fbgemm's."""
        layers = int8_draft.decoder_layers()
        names = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
        if not all(getattr(layer._modules.get(name), "packed", None) is not None
                   for layer in layers for name in names):
            return None
        return [cls(layer) for layer in layers]

    def __call__(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, keys: torch.Tensor,
                 values: torch.Tensor, start: int, end: int, mask: torch.Tensor | None, causal: bool) -> torch.Tensor:
        """x (n, H) fp32 -> the layer's output; writes the rows' K/V into slots start..end of the cache."""
        linear, rr = torch.ops.quantized.linear_dynamic, self.reduce_range
        n, heads, d = x.shape[0], self.heads, self.head_dim
        qkv = linear(F.rms_norm(x, (self.hidden,), self.input_norm, self.eps), self.qkv, rr)
        qk = qkv[:, :(heads + self.kv) * d].view(n, heads + self.kv, d)
        qk = qk * cos + _rotate_half(qk) * sin
        keys[0, :, start:end] = qk[:, heads:].transpose(0, 1)
        values[0, :, start:end] = qkv[:, (heads + self.kv) * d:].view(n, self.kv, d).transpose(0, 1)
        attn = F.scaled_dot_product_attention(qk[:, :heads].transpose(0, 1).unsqueeze(0), keys[:, :, :end],
                                              values[:, :, :end], attn_mask=mask, is_causal=causal,
                                              scale=self.scale, enable_gqa=heads != self.kv)
        x = x + linear(attn[0].transpose(0, 1).reshape(n, -1), self.o, rr)
        gate, up = linear(F.rms_norm(x, (self.hidden,), self.post_norm, self.eps), self.gate_up, rr).chunk(2, -1)
        return x + linear(F.silu(gate) * up, self.down, rr)


class FeatureDraftForward:
    """The draft's forward for the decoding loop over a preallocated cache of `max_len` slots.

    `forward(ids, feats, start, positions, mask)` writes the new pairs' K/V into
    slots start.. and returns the predicted features of every new row; `logits`
    maps features to head logits (rows over `vocab_ids`: the draft's own rows
    first, then those of any other token in the `vocab_ids` given, then the
    widened ones). On a CPU the linears and the head run in weight-only int8
    (`int8_decoding_supported`); where fbgemm runs them, the layers run on fp32
    activations (`_Fp32Layer`), so `dtype` (the features', masks' and cache's) is fp32.
    """

    def __init__(self, draft: FeatureDraft, max_len: int, vocab_ids: torch.Tensor | None = None,
                 int8: bool | None = None):
        self.max_len = max_len
        dev = draft.fc.weight.device
        self.device, self.dtype = dev, draft.fc.weight.dtype
        self.int8 = int8_decoding_supported(dev, self.dtype) if int8 is None else int8
        own = draft.vocab_ids
        # The draft's own rows come first: their head is prepared once per draft, not per prompt.
        self.vocab_ids = own if vocab_ids is None else torch.cat(
            [own, (ids := vocab_ids.to(dev))[~torch.isin(ids, own)]])
        self._own_rows = own.numel()
        if self.int8:
            self.draft, self._full_head, self._own_head = draft.int8_parts()
        else:
            self.draft, self._full_head = draft, draft._target[0].lm_head.weight.detach()
        self.head = self._head_rows()
        # fbgemm's layers run on fp32 activations (`_Fp32Layer`): the features, masks and K/V are fp32.
        self.layers = _Fp32Layer.of(self.draft) if self.int8 else None
        if self.layers is not None:
            self.fuse_dtype, self.dtype, self.final_norm = self.dtype, torch.float32, self.draft.norm.float()
        self.cos, self.sin = draft.rotary(torch.arange(max_len, device=dev), self.dtype)
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
                mask = torch.full((1, 1, n, end), torch.finfo(self.dtype).min, dtype=self.dtype,
                                  device=self.device).triu_(start + 1)
            else:
                causal = n > 1
        elif mask.dtype != self.dtype:
            mask = mask.to(self.dtype)   # a fixed tree's prepared mask is in the models' dtype
        if self.layers is not None:
            return self._fp32_forward(token_ids.view(n), features.view(n, -1), start, end, cos, sin, mask, causal)
        x = d.fuse(token_ids.view(1, n), features.view(1, n, -1).to(self.dtype))
        return d.layers_then_norm(x, cos, sin, lambda i, k, v: self._cache(i, k, v, start, end), mask, causal)[0]

    def _fp32_forward(self, token_ids: torch.Tensor, features: torch.Tensor, start: int, end: int,
                      cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None, causal: bool) -> torch.Tensor:
        """`forward` through `_Fp32Layer`s: the fusion in the draft's dtype (gpt-fast's kernel wants
        bf16), then fp32 to the predicted features."""
        d = self.draft
        x = d.fuse(token_ids, features.to(self.fuse_dtype)).float()
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, self.keys[i], self.values[i], start, end, mask, causal)
        return F.rms_norm(x, (d.hidden,), self.final_norm, d.eps)

    def _cache(self, i: int, k: torch.Tensor, v: torch.Tensor, start: int, end: int):
        self.keys[i][:, :, start:end] = k
        self.values[i][:, :, start:end] = v
        return self.keys[i][:, :, :end], self.values[i][:, :, :end]

    __call__ = forward

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        return self.head(features)

    def widen(self, token_ids: torch.Tensor) -> None:
        """Give the head rows for `token_ids` too, after its current rows (so row r keeps its token)."""
        self.vocab_ids = torch.cat([self.vocab_ids, token_ids.to(self.device, torch.long)])
        self.head = self._head_rows()

    def _head_rows(self):
        """The head over `vocab_ids`' rows of the target's head (int8 on a CPU: one scale per row); the
        draft's own cut while the rows are its own."""
        if self.int8:
            own, extra = self._own_head, self.vocab_ids[self._own_rows:]
            if not extra.numel():
                return own
            more = self._full_head.rows(extra)   # a few dozen rows: cut and packed in well under a ms
            return lambda x: torch.cat([own(x), more(x)], dim=-1)
        head = self.draft.head if self.vocab_ids is self.draft.vocab_ids else (
            self._full_head.index_select(0, self.vocab_ids).to(self.dtype).contiguous())
        return lambda x: F.linear(x, head)
