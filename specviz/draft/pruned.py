"""A small draft cut from the target: a few of its layers, sharing its embeddings.

The draft is an ordinary `LlamaForCausalLM` with `len(layers)` decoder layers,
initialised from the chosen target layers (plus the target's final norm) and then
healed by distillation (`train.py` beside this file). It reuses the target's token
embedding and lm_head *tensors*: they are not trained and not shipped.

On disk a draft directory holds:
- `vocab.json` (optional): the token ids the draft's head keeps (`VocabSubsetHead`);
  logits of every other token are -inf, which keeps speculation exact (q need only
  be a distribution) and makes the draft's forward a fraction of the target's;
- `config.json`: the draft's LlamaConfig (vocabulary and widths of the target,
  `num_hidden_layers` = number of kept layers);
- `draft.safetensors`: only the draft's own weights (decoder layers + final norm),
  bf16, without `model.embed_tokens.weight` / `lm_head.weight`;
- `draft.json`: which target it belongs to and which target layers it started from.

`load_offline_draft(target_model, dir)` assembles it: it builds the draft on the
meta device, loads the shipped weights, and points its embedding and lm_head at the
target's modules, so the draft costs only its layers in memory. A plain
`AutoModelForCausalLM.from_pretrained(dir)` would NOT work (no embeddings on disk).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..engine.drafts import DraftFormat
from ..engine.lean import VocabSubsetHead
from ..engine.quant import kernel_head
from ..errors import InvalidInput, ModelLoadError
from .vocab import load_vocab

WEIGHTS_FILE = "draft.safetensors"
META_FILE = "draft.json"
SHARED_PREFIXES = ("model.embed_tokens.", "lm_head.")


def parse_layers(spec: str, n_target_layers: int) -> list[int]:
    """'0,1,28,29' -> sorted unique target layer indices (negatives count from the end)."""
    try:
        items = [int(s) for s in spec.replace(" ", "").split(",") if s]
    except ValueError as exc:
        raise InvalidInput(f"--layers must be comma-separated integers, got '{spec}'") from exc
    layers = sorted({i % n_target_layers if -n_target_layers <= i < n_target_layers else i for i in items})
    if not layers or layers[0] < 0 or layers[-1] >= n_target_layers:
        raise InvalidInput(f"--layers must name 1..{n_target_layers} layers in 0..{n_target_layers - 1}, got {items}")
    return layers


def _empty_draft(cfg, target):
    """The draft of config `cfg`, its embedding and lm_head the target's (same tensors, no copy)."""
    from transformers import AutoModelForCausalLM

    # Built on the meta device: no 28M-parameter random embedding is ever allocated.
    with torch.device("meta"):
        draft = AutoModelForCausalLM.from_config(cfg)
    draft.model.embed_tokens = target.model.embed_tokens
    draft.lm_head = target.lm_head
    return draft


def build_draft(target, layers: list[int], dtype: torch.dtype = torch.float32):
    """A new draft whose layer i starts as target layer layers[i]; embeddings shared with the target."""
    cfg = target.config.__class__.from_dict(target.config.to_dict())
    cfg.num_hidden_layers = len(layers)
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = list(cfg.layer_types[:len(layers)])
    cfg.tie_word_embeddings = True
    draft = _empty_draft(cfg, target)
    own = {}
    for i, src in enumerate(layers):
        for name, tensor in target.model.layers[src].state_dict().items():
            own[f"model.layers.{i}.{name}"] = tensor.detach().to(dtype).clone()
    own["model.norm.weight"] = target.model.norm.weight.detach().to(dtype).clone()
    draft.load_state_dict(own, strict=False, assign=True)
    _init_buffers(draft, target)
    return draft


def _init_buffers(draft, target) -> None:
    # Non-persistent buffers (rotary inv_freq) stay on meta after load_state_dict; take the target's.
    draft.model.rotary_emb = target.model.rotary_emb
    for name, p in list(draft.named_parameters()) + list(draft.named_buffers()):
        if p.is_meta:
            raise ModelLoadError(f"draft weight {name} was not initialised")


def own_state_dict(draft) -> dict[str, torch.Tensor]:
    """The draft's weights without the shared embedding / lm_head."""
    return {k: v for k, v in draft.state_dict().items() if not k.startswith(SHARED_PREFIXES)}


def save_weights(tensors: dict[str, torch.Tensor], path: Path) -> None:
    from safetensors.torch import save_file

    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.chmod(0o644)  # safetensors writes 0600
    tmp.replace(path)  # atomic: a crash never leaves half a checkpoint


def save_draft(draft, out_dir: str | Path, layers: list[int], target_name: str, extra: dict | None = None) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # clone(): a lean forward may have stacked q|k|v into one storage (`lean.rows_together`), and
    # safetensors refuses tensors that share memory.
    save_weights({k: v.detach().to(torch.bfloat16).cpu().clone() for k, v in own_state_dict(draft).items()},
                 out / WEIGHTS_FILE)
    (out / "config.json").write_text(json.dumps({**draft.config.to_dict(), "dtype": "bfloat16"}, indent=2))
    meta = {"target": target_name, "target_layers": layers,
            "shared_from_target": ["model.embed_tokens.weight", "lm_head.weight", "rotary_emb"],
            "note": "assemble with specviz.draft.pruned.load_offline_draft(target_model, dir)", **(extra or {})}
    (out / META_FILE).write_text(json.dumps(meta, indent=2))


def is_draft_dir(path: str | Path | None) -> bool:
    return path is not None and (Path(path) / META_FILE).exists() and (Path(path) / WEIGHTS_FILE).exists()


def load_offline_draft(target_model, dir_: str | Path, dtype: torch.dtype | None = None):
    """Assemble a shipped draft around `target_model` (sharing its embeddings); eval mode, no grad."""
    from safetensors.torch import load_file
    from transformers import AutoConfig

    dir_ = Path(dir_)
    if not is_draft_dir(dir_):
        raise ModelLoadError(f"{dir_} is not a SpecViz draft directory (needs {WEIGHTS_FILE} and {META_FILE})")
    cfg = AutoConfig.from_pretrained(dir_)
    tcfg = target_model.config
    if (cfg.vocab_size, cfg.hidden_size) != (tcfg.vocab_size, tcfg.hidden_size):
        raise ModelLoadError(f"draft in {dir_} was built for vocab {cfg.vocab_size} x hidden {cfg.hidden_size}, "
                             f"the target has {tcfg.vocab_size} x {tcfg.hidden_size}")
    dtype = dtype or target_model.dtype
    device = target_model.device
    draft = _empty_draft(cfg, target_model)
    weights = {k: v.to(device=device, dtype=dtype) for k, v in load_file(str(dir_ / WEIGHTS_FILE)).items()}
    missing = set(own_state_dict(draft)) - set(weights)
    if missing:
        raise ModelLoadError(f"draft checkpoint in {dir_} lacks {sorted(missing)[:3]}")
    draft.load_state_dict(weights, strict=False, assign=True)
    _init_buffers(draft, target_model)
    vocab_ids = load_vocab(dir_, tcfg.vocab_size)
    if vocab_ids is not None:
        # On a q4 target the subset is cut from the GGUF's own head codes, on SpecViz's kernel.
        draft.lm_head = VocabSubsetHead(target_model.lm_head.weight, vocab_ids, kernel_head(target_model))
    draft.generation_config = target_model.generation_config
    draft.eval()
    draft.requires_grad_(False)
    return draft


def draft_display_name(dir_: str | Path) -> str:
    layers = json.loads((Path(dir_) / META_FILE).read_text())["target_layers"]
    return f"SpecViz distilled draft ({len(layers)} layers)"


# How the engine finds, loads and names this draft (`engine.drafts`).
DRAFT_FORMAT = DraftFormat(is_dir=is_draft_dir, load=load_offline_draft, display_name=draft_display_name)
