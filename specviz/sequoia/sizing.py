"""Hardware-aware choice of Sequoia's tree size N and depth D.

Time per generated token for the best tree of n nodes and d levels:

    (draft time of its levels + t_target(n)) / best(n, d)

where t_target(n) is one target forward over n new tokens and the draft time is
one draft forward per level over that level's nodes, both measured on this
machine (`engine.profiler.forward_curve`, cached per model, device and dtype). The plan
(curves, predicted-speedup table, choice) is plain dicts for the CLI and the app,
and is cached per (pair, sampling, acceptance vector). `resolve_tree` turns a
decoder's options (auto, budget + depth, or an explicit parent list) into its tree.
"""

from __future__ import annotations

import numpy as np

from ..engine.models import dtype_name
from ..engine.profiler import forward_curve, forward_kind, load_cached, save_cached
from ..engine.sampling import SamplingConfig
from ..errors import InvalidInput
from .acceptance import acceptance_for
from .tree import TreeShape, check_parents
from .tree_dp import build_tables, optimal_tree

DRAFT_SIZES = [1, 2, 4, 8, 16, 32, 64]
MAX_TREE_BUDGET = 1024


def _model_key(name: str, pair) -> str:
    # The same key Lookahead uses for the target, so one measurement serves both methods.
    return f"{name}|{pair.device.type}|{dtype_name(pair.dtype)}:target"


def measured_curves(pair, refresh: bool = False) -> tuple[dict[int, float], dict[int, float]]:
    """(t_target(n), t_draft(n)) in ms; the draft curve is the target's when it drafts for itself."""
    target_ms = forward_curve(pair.target, _model_key(pair.target_name, pair), refresh=refresh)
    if pair.draft_is_target:
        draft_ms = {n: target_ms[n] for n in DRAFT_SIZES if n in target_ms}
    else:
        draft_ms = forward_curve(pair.draft, _model_key(pair.draft_name, pair), sizes=DRAFT_SIZES,
                                 refresh=refresh)
    return target_ms, draft_ms


def _interp(curve: dict[int, float], n) -> float:
    xs = sorted(curve)
    return float(np.interp(n, xs, [curve[x] for x in xs]))


def tree_cost_ms(parents: list[int], target_ms: dict, draft_ms: dict, pending: int = 1) -> float:
    """Predicted ms of one step: a draft forward per level that has children, then the target."""
    shape = TreeShape.from_parents(parents)
    draft = 0.0
    for level in range(shape.depth):
        start, end = shape.level_ranges[level]
        draft += _interp(draft_ms, pending if level == 0 else end - start)
    return draft + _interp(target_ms, shape.size)


def default_limits(pair) -> tuple[int, int]:
    return (128, 12) if pair.device.type == "cpu" else (256, 16)


def plan_from_curves(acceptance: list[float], target_ms: dict, draft_ms: dict, max_budget: int,
                     max_depth: int, by_depth: list[list[float]] | None = None) -> dict:
    """The predicted-speedup table and the choice, from measured curves (no model needed).

    by_depth: per-depth acceptance vectors (row k for tree level k + 1); the DP then
    values every level with its own row instead of the level-1 vector everywhere.
    """
    max_budget = int(min(max_budget, max(target_ms)))
    tables = build_tables(acceptance, max_budget, max_depth, by_depth=by_depth)
    ar_ms = _interp(target_ms, 1)
    grid = sorted(set(range(2, min(16, max_budget) + 1)) | set(range(16, max_budget + 1, 8))
                  | {n for n in target_ms if 2 <= n <= max_budget})
    table, best = [], None
    for d in range(1, max_depth + 1):
        for n in grid:
            value = tables.best[d, n]
            if not np.isfinite(value):
                continue
            parents = tables.parents(n, d)
            step_ms = tree_cost_ms(parents, target_ms, draft_ms)
            row = {"budget": n, "depth": d, "value": round(float(value), 4), "ms_per_step": round(step_ms, 3),
                   "ms_per_token": round(step_ms / value, 3),
                   "predicted_speedup": round(float(value) * ar_ms / step_ms, 4)}
            if best is None or row["ms_per_token"] < best[0]["ms_per_token"]:
                best = (row, parents)
            if n in target_ms:
                table.append(row)
    row, parents = best
    choice = {**row, "parents": parents, "tree_depth": TreeShape.from_parents(parents).depth}
    return {"acceptance": list(acceptance), "acceptance_by_depth": by_depth, "target_ms": {str(k): round(v, 3) for k, v in target_ms.items()},
            "draft_ms": {str(k): round(v, 3) for k, v in draft_ms.items()}, "ar_ms_per_token": round(ar_ms, 3),
            "table": table, "choice": choice,
            "speculation_pays": row["predicted_speedup"] > 1.0}


def plan_tree(pair, sampling: SamplingConfig | None = None, max_budget: int | None = None,
              max_depth: int | None = None, refresh: bool = False) -> dict:
    """Everything `--tree auto` decides, as plain data: curves, table, choice (cached)."""
    sampling = (sampling or SamplingConfig()).validated()
    default_n, default_d = default_limits(pair)
    max_budget, max_depth = int(max_budget or default_n), int(max_depth or default_d)
    acc = acceptance_for(pair, sampling)
    kinds = f"{forward_kind(pair.target)}/{forward_kind(pair.draft)}"   # curves belong to the forwards timed
    key = f"{pair.key}|{kinds}|T{sampling.temperature:g}|p{sampling.top_p:g}|N{max_budget}|D{max_depth}"
    cached = None if refresh else load_cached("sequoia-plan", key)
    if cached and cached.get("acceptance") == list(acc["acceptance"]) and \
            cached.get("acceptance_by_depth") == acc.get("by_depth"):
        return cached
    target_ms, draft_ms = measured_curves(pair, refresh=refresh)
    plan = plan_from_curves(acc["acceptance"], target_ms, draft_ms, max_budget, max_depth, acc.get("by_depth"))
    plan.update(key=pair.key, device=str(pair.device), dtype=dtype_name(pair.dtype),
                acceptance_source=acc["source"], temperature=sampling.temperature, top_p=sampling.top_p)
    save_cached("sequoia-plan", key, plan)
    return plan


def _check_int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not value.is_integer()):
        raise InvalidInput(f"{name} must be a whole number, got {value!r}")
    value = int(value)
    if value < low:
        raise InvalidInput(f"{name} must be at least {low}, got {value}")
    return value


def resolve_tree(pair, sampling, tree_budget, tree_depth, tree_parents) -> tuple[list[int], dict]:
    """The tree to use (a breadth-first parent list) and settings that say where it came from."""
    if tree_parents is not None:
        parents = check_parents(tree_parents)
        if len(parents) > MAX_TREE_BUDGET:
            raise InvalidInput(f"a tree of {len(parents)} nodes is too large (at most {MAX_TREE_BUDGET})")
        return parents, {"tree": "explicit"}
    if tree_budget is None and tree_depth is None:
        plan = plan_tree(pair, sampling)
        choice = plan["choice"]
        return choice["parents"], {
            "tree": "auto", "acceptance": plan["acceptance"], "acceptance_source": plan["acceptance_source"],
            "predicted_tokens_per_step": choice["value"], "predicted_speedup": choice["predicted_speedup"],
            "plan": plan}  # the app's hardware panel shows it
    if tree_budget is None or tree_depth is None:
        raise InvalidInput("give both a tree budget and a tree depth, or neither (auto)")
    budget = _check_int("tree budget (nodes including the root)", tree_budget, 1)
    depth = _check_int("tree depth", tree_depth, 0)
    if budget > MAX_TREE_BUDGET:
        raise InvalidInput(f"tree budget {budget} is too large (at most {MAX_TREE_BUDGET})")
    depth = min(depth, budget - 1)
    acc = acceptance_for(pair, sampling)
    if acc.get("by_depth"):
        tables = build_tables(acc["acceptance"], budget, depth, by_depth=acc["by_depth"])
        if not np.isfinite(tables.best[depth, budget]):
            optimal_tree(acc["acceptance"], budget, depth)   # raises the explanatory error
        parents, value = tables.parents(budget, depth), float(tables.best[depth, budget])
    else:
        result = optimal_tree(acc["acceptance"], budget, depth)
        parents, value = result.parents, result.value
    return parents, {"tree": "manual", "acceptance": acc["acceptance"], "acceptance_by_depth": acc.get("by_depth"),
                     "acceptance_source": acc["source"], "predicted_tokens_per_step": value}
