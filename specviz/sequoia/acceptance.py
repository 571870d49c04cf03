"""Acceptance vectors: storing them and finding the right one (`measure.py` measures them).

p[k-1] is the probability that the k-th child drawn without replacement at a
node is the one the target accepts (`measure.profile_acceptance_by_depth` counts
it on a comb of trees with the decoder itself).

Where a vector comes from, in order of preference:
1. one measured on this machine (`profile-acceptance`), cached per
   (target, draft, temperature, top-p);
2. one shipped in `assets/acceptance/*.json` for the pair (nearest temperature);
3. a default (said so in the decoder's settings): nearly 1 for a target that
   drafts for itself, otherwise a typical small-draft vector.

A vector may come with per-depth vectors (`by_depth`, row k = the nodes of tree
level k + 1, measured by `measure.profile_acceptance_by_depth`): a feature draft
feeds on its own predicted features below level 1 and loses accuracy with depth,
so the tree DP then values each level with its own row (`tree_dp.build_tables`).
It may also come with the same rows for the children of nodes drawn at rank 2 or
below (`under_lower_ranks`), which such a draft predicts from a feature meant for
its likeliest token, and the DP values those subtrees with them.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..engine.profiler import load_cached
from ..engine.sampling import SamplingConfig
from ..paths import assets_dir

ASSET_DIR = assets_dir() / "acceptance"

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


def _by_depth(data: dict, key: str = "acceptance_by_depth") -> list[list[float]] | None:
    """The per-level rows stored under `key`, where there are several."""
    rows = data.get(key)
    if isinstance(rows, list) and len(rows) > 1 and all(isinstance(r, list) and r for r in rows):
        return rows
    return None


def _vectors(data: dict, source: str) -> dict:
    """What `acceptance_for` returns for a stored measurement: the vector, its per-depth rows and the
    rows under lower-ranked parents where it has them (those only beside per-depth rows)."""
    by_depth = _by_depth(data)
    lower = _by_depth(data, "acceptance_under_lower_ranks") if by_depth else None
    return {"acceptance": data["acceptance"], "by_depth": by_depth, "under_lower_ranks": lower, "source": source}


def acceptance_for(pair, sampling: SamplingConfig) -> dict:
    """{"acceptance": [...], "source": "..."} for this pair and sampling setting."""
    key = profile_key(pair.target_name, pair.draft_name, sampling)
    cached = load_cached("acceptance", key)
    if cached and isinstance(cached.get("acceptance"), list):
        return _vectors(cached, f"measured on this machine ({key})")
    target, draft = model_id(pair.target_name), model_id(pair.draft_name)
    shipped = _shipped(target, draft)
    if shipped:
        best = min(shipped, key=lambda d: (abs(float(d.get("temperature", 0)) - sampling.temperature),
                                           abs(float(d.get("top_p", 1)) - sampling.top_p)))
        return _vectors(best, f"shipped {Path(best['path']).name} (temperature {best.get('temperature')}, "
                              f"top-p {best.get('top_p')})")
    if pair.draft_is_target:
        return {"acceptance": list(SELF_ACCEPTANCE),
                "source": "default for a target drafting for itself (no measured vector)"}
    return {"acceptance": list(DEFAULT_ACCEPTANCE), "source": "default (no measured vector for this pair)"}
