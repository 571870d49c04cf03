"""Acceptance vectors: measuring them, storing them, and finding the right one.

p[k-1] is the probability that the k-th child drawn without replacement at a
node is the one the target accepts. We measure it with the decoder itself on a
star tree (root + W children): each verification step accepts rank k or none.

Where a vector comes from, in order of preference:
1. one measured on this machine (`profile-acceptance`), cached per
   (target, draft, temperature, top-p);
2. one shipped in `assets/acceptance/*.json` for the pair (nearest temperature);
3. a default (said so in the decoder's settings): nearly 1 for a target that
   drafts for itself, otherwise a typical small-draft vector.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .errors import InvalidInput
from .models import REPO_ROOT
from .profiler import load_cached, save_cached
from .sampling import SamplingConfig

ASSET_DIR = REPO_ROOT / "assets" / "acceptance"

# A small draft of a chat model, the notes' example extended with a decaying tail.
DEFAULT_ACCEPTANCE = [0.63, 0.11, 0.06, 0.04, 0.03, 0.02, 0.015, 0.012, 0.01, 0.008, 0.006, 0.005]
# The target drafting for itself agrees with itself except for rounding in batched forwards.
SELF_ACCEPTANCE = [0.97, 0.02, 0.005, 0.003]


def model_id(name: str) -> str:
    """A name that means the same model on any machine: local paths lose their directory."""
    name = name.strip()
    if "/" in name and Path(name).expanduser().exists():
        return Path(name).name
    return name


def profile_key(target_name: str, draft_name: str, sampling: SamplingConfig) -> str:
    return f"{model_id(target_name)}|{model_id(draft_name)}|T{sampling.temperature:g}|p{sampling.top_p:g}"


def _shipped(target: str, draft: str) -> list[dict]:
    found = []
    for path in sorted(ASSET_DIR.glob("*.json")) if ASSET_DIR.is_dir() else []:
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if model_id(str(data.get("target", ""))) == target and model_id(str(data.get("draft", ""))) == draft \
                and isinstance(data.get("acceptance"), list):
            found.append({**data, "path": str(path)})
    return found


def acceptance_for(pair, sampling: SamplingConfig) -> dict:
    """{"acceptance": [...], "source": "..."} for this pair and sampling setting."""
    key = profile_key(pair.target_name, pair.draft_name, sampling)
    cached = load_cached("acceptance", key)
    if cached and isinstance(cached.get("acceptance"), list):
        return {"acceptance": cached["acceptance"], "source": f"measured on this machine ({key})"}
    target, draft = model_id(pair.target_name), model_id(pair.draft_name)
    shipped = _shipped(target, draft)
    if shipped:
        best = min(shipped, key=lambda d: (abs(float(d.get("temperature", 0)) - sampling.temperature),
                                           abs(float(d.get("top_p", 1)) - sampling.top_p)))
        return {"acceptance": best["acceptance"],
                "source": f"shipped {Path(best['path']).name} (temperature {best.get('temperature')}, "
                          f"top-p {best.get('top_p')})"}
    if pair.draft_is_target:
        return {"acceptance": list(SELF_ACCEPTANCE),
                "source": "default for a target drafting for itself (no measured vector)"}
    return {"acceptance": list(DEFAULT_ACCEPTANCE), "source": "default (no measured vector for this pair)"}


def star_tree(width: int) -> list[int]:
    return [-1] + [0] * width


def profile_acceptance(pair, prompts: list[str], width: int, sampling: SamplingConfig, steps: int = 300,
                       max_new_tokens: int = 128, show_progress: bool = True, save: bool = True) -> dict:
    """Measure p on real prompts with a star tree of `width` children; cache and return it."""
    from .decoders.sequoia import SequoiaDecoder
    from .text import encode_prompt

    if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= 64:
        raise InvalidInput(f"width must be a whole number from 1 to 64, got {width!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InvalidInput(f"steps must be a positive whole number, got {steps!r}")
    if not prompts:
        raise InvalidInput("no prompts to profile on")
    sampling = sampling.validated()
    counts = [0] * width
    done = 0
    bar = None
    if show_progress:
        from tqdm import tqdm

        bar = tqdm(total=steps, desc="acceptance", unit="step", file=sys.stderr)
    run = 0
    while done < steps:
        prompt = prompts[run % len(prompts)]
        seed = None if sampling.seed is None else sampling.seed + run
        cfg = SamplingConfig(sampling.temperature, sampling.top_p, sampling.top_k, seed)
        ids = encode_prompt(pair.tokenizer, prompt)
        room = min(max_new_tokens, pair.max_context - len(ids))
        if room < 2:
            raise InvalidInput("a prompt fills the model's context; use shorter prompts")
        decoder = SequoiaDecoder(pair, prompt, ids, cfg, room, tree_parents=star_tree(width))
        while not decoder.done and done < steps:
            record = decoder.step()
            payload = record.payload
            if payload is None or payload.depth == 0:
                continue  # the prefill, or a step cut to the root near the end
            if payload.accepted_path:
                counts[payload.accepted_path[0] - 1] += 1  # children are nodes 1..W in rank order
            done += 1
            if bar is not None:
                bar.update(1)
        decoder.close()
        run += 1
    if bar is not None:
        bar.close()
    result = {
        "target": model_id(pair.target_name), "draft": model_id(pair.draft_name),
        "temperature": sampling.temperature, "top_p": sampling.top_p, "width": width, "steps": done,
        "counts": counts, "rejected_all": done - sum(counts),
        "acceptance": [round(c / done, 6) for c in counts],
        "device": str(pair.device), "dtype": str(pair.dtype).replace("torch.", ""),
    }
    if save:
        save_cached("acceptance", profile_key(pair.target_name, pair.draft_name, sampling), result)
    return result
