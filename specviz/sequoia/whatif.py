"""Sequoia's column of the what-if panel (`Method.whatif`): the tree DP's prediction for any budget and depth,
priced with the machine's (or the run's, or an uploaded profile's) t(n) and the draft's cost a level.

Predicted accepted length = best(n, d) from the acceptance vector (`tree_dp`), step time = d draft levels +
t(n) + the step's other work, speedup = as the race's summary measures it (`ui.whatif.speedup_over_baseline`).
Pure functions of a trace and the plan `auto` cached: no model, no gradio.
"""

from __future__ import annotations

import math
from functools import lru_cache

from ..engine.curve import interpolate
from ..request import ILLUSTRATIVE_TREE
from ..trace import PHASE_DRAFT, RaceTrace, RunTrace, TreePayload
from ..ui import measured
from ..ui.figures import METHOD_COLORS, children
from ..ui.whatif import curve_of, method_column, other_ms, speedup_over_baseline
from .method import METHOD

PLAN = ("sequoia-plan", "pair")     # the plans `auto` caches for it: per model pair (`sequoia.sizing`)
# The panel's sliders it reads: option name -> (least, most, default, label). They span sizes worth predicting,
# not every size a race accepts.
SLIDERS = {"tree_budget": (2, 128, 16, "Tree budget n"), "tree_depth": (1, 12, 4, "Tree depth d")}


def plan_curve(plan: dict) -> dict[int, float]:
    return curve_of(plan.get("target_ms"))


def _trace_draft_ms(run: RunTrace | None) -> float | None:
    per_level = []
    for rec in (run.steps if run else []):
        p = rec.payload
        if isinstance(p, TreePayload) and p.depth and rec.time_ms.get(PHASE_DRAFT):
            per_level.append(rec.time_ms[PHASE_DRAFT] / p.depth)
    return sorted(per_level)[len(per_level) // 2] if per_level else None


def _trace_acceptance(run: RunTrace | None) -> list[float] | None:
    """The vector the run used (its settings), else the root's accepted rank counted over its trees."""
    if run is None:
        return None
    acc = run.settings.get("acceptance") if isinstance(run.settings, dict) else None
    if isinstance(acc, list) and acc:
        return [float(a) for a in acc]
    counts, steps = {}, 0
    for rec in run.steps:
        p = rec.payload
        if not isinstance(p, TreePayload) or not p.nodes:
            continue
        steps += 1
        for rank, n in enumerate(children(p).get(p.nodes[0].id, []), 1):
            if n.status == "accepted":
                counts[rank] = counts.get(rank, 0) + 1
    if not steps or not counts:
        return None
    return [counts.get(k, 0) / steps for k in range(1, max(counts) + 1)]


def inputs(trace: RaceTrace | None, plan: dict, from_run: bool, profile: dict | None) -> dict:
    """The draft's cost a level and the acceptance vector: counted on the run's own trees where `from_run`,
    else the plan's, else what the trace holds; an uploaded profile's draft costs replace them all."""
    run = trace.runs.get(METHOD.id) if trace else None
    counted = measured.tree_acceptance(run) if from_run else None
    per_level = measured.draft_ms_per_level(run) if from_run else None
    draft = {1: per_level, 64: per_level} if per_level else curve_of(plan.get("draft_ms"))
    if not draft:
        per_level = _trace_draft_ms(run)
        draft = {1: per_level, 64: per_level} if per_level else {}
    if profile and profile.get("draft_ms"):
        draft = profile["draft_ms"]
    own = counted["acceptance"] if counted else None
    return {"draft_ms": draft, "acceptance": own or plan.get("acceptance") or _trace_acceptance(run),
            "by_depth": counted["by_depth"] if own else plan.get("acceptance_by_depth"),
            "under_lower_ranks": counted["under_lower_ranks"] if own else plan.get("acceptance_under_lower_ranks"),
            "sequoia_plan": plan or None}


@lru_cache(maxsize=8)
def _tables(acceptance: tuple, by_depth: tuple | None, budget: int, depth: int, lower: tuple | None = None):
    from .tree_dp import build_tables

    def rows(frozen):
        return [list(r) for r in frozen] if frozen else None

    return build_tables(list(acceptance), budget, depth, by_depth=rows(by_depth), under_lower_ranks=rows(lower))


def _freeze(by_depth):
    return tuple(tuple(float(x) for x in row) for row in by_depth) if by_depth else None


def point(inp: dict, budget: int, depth: int, max_budget: int = 128, max_depth: int = 12) -> dict | None:
    """Predicted accepted length, step time (and its parts) and speedup for the best tree of `budget` nodes and
    `depth` levels."""
    from .tree import TreeShape

    acc, target, draft = inp.get("acceptance"), inp.get("target_ms"), inp.get("draft_ms")
    if not acc or not target or len(target) < 2:
        return None
    budget, depth = int(budget), int(min(depth, budget - 1))
    tables = _tables(tuple(float(a) for a in acc), _freeze(inp.get("by_depth")), max(max_budget, budget),
                     max(max_depth, depth), _freeze(inp.get("under_lower_ranks")))
    value = float(tables.best[depth, budget])
    if not math.isfinite(value):
        return None
    shape = TreeShape.from_parents(tables.parents(budget, depth))
    draft_ms = sum(interpolate(draft, rows) for rows in shape.draft_rows) if draft else 0.0
    target_ms, other = interpolate(target, shape.size), other_ms(inp, METHOD.id)
    return {"budget": budget, "depth": shape.depth, "tokens_per_step": value, "target_ms": target_ms,
            "draft_ms": draft_ms, "other_ms": other, "step_ms": draft_ms + target_ms + other,
            "speedup": speedup_over_baseline(inp, METHOD.id, value, target_ms, draft_ms, other)}


def line(inp: dict, sizes: dict) -> list[tuple[float, float]]:
    """(tree budget, predicted speedup) for budgets 2..128 at the sliders' depth: the panel's curve."""
    depth = int(sizes["tree_depth"])
    return [(float(n), p["speedup"]) for n in range(2, 129, 2)
            if (p := point(inp, n, min(depth, n - 1))) is not None]


def column(inp: dict, done: dict, sizes: dict) -> str:
    """The panel's Sequoia column: predictions at the sliders' tree, auto's, the illustrative one, the last run."""
    budget, depth = int(sizes["tree_budget"]), int(sizes["tree_depth"])
    sq = point(inp, budget, depth)
    if sq is None:
        return (f'<div><b style="color:{METHOD_COLORS[METHOD.id]}">{METHOD.label}</b>: no acceptance vector for '
                f'this pair yet (run {METHOD.label} once).</div>')
    auto = (inp.get("sequoia_plan") or {}).get("choice")
    ap = point(inp, int(auto["budget"]), int(auto.get("tree_depth", auto["depth"]))) if auto else None
    got, last_run = done.get(METHOD.id), None
    if got:
        # An adaptive run's tree changed every step: place it at its average size, not its cap.
        adaptive = got["settings"].get("tree") == "adaptive"
        n_run = got["nodes_per_step"] if adaptive else int(got["settings"].get("tree_budget") or budget)
        last_run = (got, f"adaptive, {n_run:.1f} nodes on average" if adaptive else f"{n_run} nodes", n_run)
    ill = ILLUSTRATIVE_TREE["tree_budget"], ILLUSTRATIVE_TREE["tree_depth"]
    return method_column(
        METHOD.id, (sq, f"your tree: {budget} nodes, depth {sq['depth']}",
                    f"your tree ({budget} nodes, depth {sq['depth']})"),
        (ap, f"{ap['budget']} nodes, depth {ap['depth']}", "") if ap else None,
        (point(inp, *ill), f"{ill[0]} nodes, depth {ill[1]}"), last_run, "budget",
        f"{METHOD.label}: predicted speedup against tree budget (depth {depth})", "tree budget n", line(inp, sizes))
