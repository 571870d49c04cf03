"""Hardware-aware choice of Sequoia's tree size N and depth D.

Time per generated token for the best tree of n nodes and d levels:

    (draft time of its levels + t_target(n) + step overheads) / best(n, d)

where t_target(n) is one target forward over n new tokens and the draft time is
one draft forward per level over that level's nodes, both measured on this
machine (`engine.profiler.forward_curve`, cached per model, device and dtype).
The forwards are not the whole step: each draft level also draws its children
(top-k or Gumbel-top-k, gathers), and each step walks the verification, compacts
the caches and writes its trace record. Left out, those costs (2-4 ms of a 20-30
ms CPU step) made every tree look alike and `auto` chose 2 nodes where 9 ran
1.14x faster. So `StepCosts` (per level, per step, per node) are fitted from the
real decoder's step times on a few trees and cached beside the curves. The plan
(curves, costs, predicted-speedup table, choice) is plain dicts for the CLI and
the app, cached per (pair, sampling mode, acceptance vector: `_plan_key`). `tree_choice` turns a
decoder's options (auto, budget + depth, an explicit parent list, or adaptive) into
its tree before the decoder is built (`engine.methods.make_decoder` asks
`decoder_options`), so a decoder never sizes, profiles or races decoders itself.

Graphs: a decoder whose step is captured (`engine.graphs.capture_wanted`, on CUDA under `auto`)
pays replays, not launches, so its tree is sized from the graphed curves
(`forward_curve(graphs=True)`), its step costs fitted from graphed decoders' steps, and its
plan cached apart (`|graphs` in the keys). `graphs` below is that decision, a bool; uncaptured (every
CPU run) the step's forwards cost what the plain forwards' curves say.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from ..engine import measuring
from ..engine import graphs as graph_modes
from ..engine.curve import interpolate, monotone
from ..engine.profiler import (
    CONTENDED_SHARE,
    SMALL_SIZES,
    cached_forward_curve,
    curve_key,
    dtype_name,
    forward_curve,
    forward_kind,
    load_cached,
    save_cached,
    with_contention,
)
from ..engine.sampling import SamplingConfig
from ..engine.text import encode_prompt
from ..errors import InvalidInput
from ..request import Range
from ..trace import BUDGET_FROM_FREE_ROWS, PHASE_DRAFT, PHASE_TARGET
from .acceptance import acceptance_for
from .adaptive import free_rows
from .decoder import SequoiaDecoder
from .tree import TreeShape, check_parents
from .tree_dp import build_tables, optimal_tree

MAX_TREE_BUDGET = 1024
# Bump when the cost model changes, or what a step costs outside its forwards does, so plans and step
# costs cached under an older one are made again (7: the target's forward priced as a step sees it,
# `StepCosts.in_step`, and `ar` timed on its own decoder).
COST_MODEL = 7
# (budget, depth) of the trees whose real steps the step costs are fitted from: one level, a few, many.
CALIBRATION_TREES = ((4, 1), (12, 3), (32, 5))


def graphs_decided(pair, graphs) -> bool:
    """Whether the decoder being sized captures its step: `graphs` is a mode ('auto', 'on', 'off') or
    already that decision (a bool)."""
    return graph_modes.capture_wanted(graphs, pair.device)


def decoder_graphs(graphs: bool) -> str:
    """The mode the sizing's own decoders run with: the decision it sizes for, never re-decided."""
    return "on" if graphs else "off"


def measured_curves(pair, refresh: bool = False, graphs: bool = False) -> tuple[dict[int, float], dict[int, float], bool]:
    """(t_target(n), t_draft(n)) in ms, and whether both are trusted (measured on quiet cores, so cached).

    The draft curve is the target's when it drafts for itself. `graphs`: the captured forwards' curves.
    """
    target_key = curve_key(pair, "target")   # the one Lookahead and prompt lookup read: measured once for all
    target_ms = forward_curve(pair.target, target_key, refresh=refresh, graphs=graphs)
    trusted = cached_forward_curve(pair.target, target_key, graphs=graphs) == target_ms
    if pair.draft_is_target:
        draft_ms = {n: target_ms[n] for n in SMALL_SIZES if n in target_ms}
    else:
        draft_key = curve_key(pair, "draft")
        draft_ms = forward_curve(pair.draft, draft_key, sizes=SMALL_SIZES, refresh=refresh, graphs=graphs)
        trusted = trusted and cached_forward_curve(pair.draft, draft_key, sizes=SMALL_SIZES,
                                                   graphs=graphs) == draft_ms
    return target_ms, draft_ms, trusted


def _rounded(curve: dict) -> dict:
    """A curve as plans and caches store it: string keys, milliseconds to 3 places."""
    return {str(k): round(float(v), 3) for k, v in curve.items()}


@dataclass(frozen=True)
class StepCosts:
    """What a step costs beyond its profiled forwards (ms), fitted from the real decoder's steps."""

    per_level: float = 0.0   # each draft level: drawing children, gathers, the level's bookkeeping
    per_step: float = 0.0    # each step: the verification walk, cache compaction, the trace record
    per_node: float = 0.0    # each tree node: its probabilities and its row of the trace
    ar_per_step: float = 0.0  # autoregressive's own per-token overhead, for an honest predicted speedup
    per_parent: float = 0.0  # each node that gets children: its draft probabilities and its draws
    # The target's forward over n rows inside a real step over the curve's t(n), at the sizes the steps ran
    # (str(n) -> ratio; 1 is `ar`'s). The curve times forwards back to back; in a step the draft's ~15 MB
    # and the walk's buffers have just pushed the target's scales and K/V out of the cache (a 4-node tree's
    # forward 4.7 ms after a draft against 3.5 back to back, a 2-core Zen 4 at q4), and priced on the curve
    # alone the plan promised 1.5x where the race ran 1.1x.
    in_step: dict = field(default_factory=dict)

    def target_ratio(self, n: int) -> float:
        """`in_step` at n rows: linear in log n between the sizes measured, flat past them; 1 unmeasured."""
        if not self.in_step:
            return 1.0
        points = sorted((int(k), float(v)) for k, v in self.in_step.items())
        return float(np.interp(math.log2(max(n, 1)), [math.log2(k) for k, _ in points], [v for _, v in points]))

    def to_dict(self) -> dict:
        return {k: ({n: round(r, 4) for n, r in v.items()} if isinstance(v, dict) else round(v, 4))
                for k, v in asdict(self).items()}


def draft_forwards_ms(shape: TreeShape, draft_ms: dict) -> float:
    """The profiled draft forwards of one step, over the rows each reads (`TreeShape.draft_rows`)."""
    return sum(interpolate(draft_ms, rows) for rows in shape.draft_rows)


def tree_cost_ms(parents: list[int], target_ms: dict, draft_ms: dict, costs: StepCosts | None = None) -> float:
    """Predicted ms of one step: a draft forward per level that has children, the target, the overheads."""
    shape = TreeShape.from_parents(parents)
    costs = costs or StepCosts()
    parents_drawn = sum(1 for c in shape.children if c)
    return (draft_forwards_ms(shape, draft_ms) + interpolate(target_ms, shape.size) * costs.target_ratio(shape.size)
            + costs.per_level * shape.depth + costs.per_parent * parents_drawn + costs.per_step
            + costs.per_node * shape.size)


def fit_step_costs(samples: list[dict], ar_ms: list[float], target_ms: dict, draft_ms: dict,
                   ar_target_ms: list[float] | None = None) -> StepCosts:
    """StepCosts from measured steps: {"parents", "draft_ms", "rest_ms"} each (rest: wall minus draft),
    and "target_ms", the step's own target forward, where it was timed (`ar_target_ms` likewise).

    Per tree, the median residual over its steps (medians: a CPU step now and then takes
    twice as long); then the draft residuals give the per-level cost (a line through the
    origin in levels) and the rest gives per step + per node (a line in tree size).
    The rest's residual is taken against the forward timed in the same step where there is
    one, not against the curve: a shared machine's speed drifts by more than a step's 3-4 ms
    of work between the curve's measurement and the steps', and the fit then read zero.
    Those timed forwards over the curve at the same sizes are `in_step`: what the plan prices a
    step's target forward at (`tree_cost_ms`), `ar`'s included.
    Costs are clipped at zero: noise must not make a tree look cheaper than its forwards.
    """
    by_tree: dict[tuple, list[dict]] = {}
    for sample in samples:
        by_tree.setdefault(tuple(sample["parents"]), []).append(sample)
    in_step = {}
    if ar_ms and ar_target_ms:
        ar = max(0.0, float(np.median(np.subtract(ar_ms, ar_target_ms))))
        in_step["1"] = _in_step_ratio(ar_target_ms, target_ms, 1)
    else:
        ar = max(0.0, float(np.median(ar_ms)) - interpolate(target_ms, 1)) if ar_ms else 0.0
    if not by_tree:
        return StepCosts(ar_per_step=ar, in_step=in_step)
    levels, drawn, sizes, draft_res, rest_res = [], [], [], [], []
    for parents, steps in by_tree.items():
        shape = TreeShape.from_parents(list(parents))
        levels.append(shape.depth)
        drawn.append(sum(1 for c in shape.children if c))
        sizes.append(shape.size)
        draft_res.append(float(np.median([s["draft_ms"] for s in steps])) - draft_forwards_ms(shape, draft_ms))
        if all("target_ms" in s for s in steps):
            rest_res.append(float(np.median([s["rest_ms"] - s["target_ms"] for s in steps])))
            in_step[str(shape.size)] = _in_step_ratio([s["target_ms"] for s in steps], target_ms, shape.size)
        else:
            rest_res.append(float(np.median([s["rest_ms"] for s in steps])) - interpolate(target_ms, shape.size))
    levels, sizes = np.array(levels, float), np.array(sizes, float)
    per_level, per_parent = _draft_costs(levels, np.array(drawn, float), np.array(draft_res))
    per_node = 0.0
    if len(set(sizes)) > 1:
        per_node = max(0.0, float(np.polyfit(sizes, rest_res, 1)[0]))
    per_step = max(0.0, float(np.mean(np.array(rest_res) - per_node * sizes)))
    return StepCosts(per_level, per_step, per_node, ar, per_parent, in_step)


def _in_step_ratio(timed: list[float], target_ms: dict, n: int) -> float:
    """The median forward timed in steps over the curve's t(n), held to [0.5, 3]: a broken timing must not
    make a forward free or a tree absurd."""
    return min(3.0, max(0.5, float(np.median(timed)) / interpolate(target_ms, n)))


def _draft_costs(levels: np.ndarray, drawn: np.ndarray, residual: np.ndarray) -> tuple[float, float]:
    """(per level, per node drawn from): the draft phase's residual as a line through the origin in both,
    neither below zero. Sampled draws cost per node (a softmax and Gumbel keys per row), so a model in
    levels alone priced a 7-node tree's two levels at what a 32-node tree's five cost each."""
    def one(x):
        return max(0.0, float(x @ residual / max(x @ x, 1e-9)))

    if len(levels) < 2 or np.linalg.matrix_rank(np.stack([levels, drawn], 1)) < 2:
        return one(levels), 0.0
    (a, b), *_ = np.linalg.lstsq(np.stack([levels, drawn], 1), residual, rcond=None)
    if a >= 0 and b >= 0:
        return float(a), float(b)
    return (one(levels), 0.0) if b < 0 else (0.0, one(drawn))


def plan_from_curves(acceptance: list[float], target_ms: dict, draft_ms: dict, max_budget: int,
                     max_depth: int, by_depth: list[list[float]] | None = None,
                     costs: StepCosts | None = None, under_lower_ranks: list[list[float]] | None = None) -> dict:
    """The predicted-speedup table and the choice, from measured curves and step costs (no model needed).

    by_depth: per-depth acceptance vectors (row k for tree level k + 1); the DP then
    values every level with its own row instead of the level-1 vector everywhere;
    under_lower_ranks: the same rows for the children of rank-2-or-lower nodes.
    """
    costs = costs or StepCosts()
    target_ms, draft_ms = monotone(target_ms), monotone(draft_ms)
    max_budget = int(min(max_budget, max(target_ms)))
    tables = build_tables(acceptance, max_budget, max_depth, by_depth=by_depth, under_lower_ranks=under_lower_ranks)
    ar_ms = interpolate(target_ms, 1) * costs.target_ratio(1) + costs.ar_per_step
    grid = sorted(set(range(2, min(16, max_budget) + 1)) | set(range(16, max_budget + 1, 8))
                  | {n for n in target_ms if 2 <= n <= max_budget})
    table, best = [], None
    for d in range(1, max_depth + 1):
        for n in grid:
            value = tables.best[d, n]
            if not np.isfinite(value):
                continue
            parents = tables.parents(n, d)
            step_ms = tree_cost_ms(parents, target_ms, draft_ms, costs=costs)
            row = {"budget": n, "depth": d, "value": round(float(value), 4), "ms_per_step": round(step_ms, 3),
                   "ms_per_token": round(step_ms / value, 3),
                   "predicted_speedup": round(float(value) * ar_ms / step_ms, 4)}
            if best is None or row["ms_per_token"] < best[0]["ms_per_token"]:
                best = (row, parents)
            if n in target_ms:
                table.append(row)
    row, parents = best
    choice = {**row, "parents": parents, "tree_depth": TreeShape.from_parents(parents).depth}
    return {"acceptance": list(acceptance), "acceptance_by_depth": by_depth,
            "acceptance_under_lower_ranks": under_lower_ranks, "target_ms": _rounded(target_ms),
            "draft_ms": _rounded(draft_ms), "ar_ms_per_token": round(ar_ms, 3),
            "step_costs": costs.to_dict(), "cost_model": COST_MODEL, "table": table, "choice": choice,
            "speculation_pays": row["predicted_speedup"] > 1.0}


def one_level_words(plan: dict) -> str:
    """Why `auto` chose a one-level tree, in one sentence from the numbers the plan chose it by: t(1), t(n) of the
    chosen tree's n nodes and of the next larger size the curve measured, what a draft level costs (its forward
    over one row and the step costs' drawing), and the predicted speedups of the chosen tree and of the best
    tree of that larger size. "" for a deeper tree, an adaptive one, or a plan without its table."""
    choice = plan.get("choice") or {}
    if plan.get("chosen") == "adaptive" or choice.get("tree_depth") != 1 or not plan.get("target_ms"):
        return ""
    target = {int(k): float(v) for k, v in plan["target_ms"].items()}
    draft = {int(k): float(v) for k, v in (plan.get("draft_ms") or {}).items()}
    costs = plan.get("step_costs") or {}
    n, t1 = int(choice["budget"]), target[min(target)]
    drawing = float(costs.get("per_level", 0.0) or 0.0) + float(costs.get("per_parent", 0.0) or 0.0)
    forward = interpolate(draft, 1) if draft else 0.0
    words = (f"auto chose a one-level tree of {n} nodes: on this machine t(1) = {t1:.1f} ms and t({n}) = "
             f"{interpolate(target, n):.1f} ms")
    rows = [r for r in plan.get("table") or [] if int(r.get("budget", 0)) > n]
    larger = min((int(r["budget"]) for r in rows), default=None)
    if larger is not None:
        best = min((r for r in rows if int(r["budget"]) == larger),
                   key=lambda r: (-float(r["predicted_speedup"]), int(r["depth"])))
        levels = int(best["depth"])
        words += (f", but t({larger}) = {target.get(larger, interpolate(target, larger)):.1f} ms, and a draft level costs "
                  f"{forward + drawing:.1f} ms ({forward:.1f} ms of draft forward, {drawing:.1f} ms drawing its "
                  f"tokens): predicted {float(choice['predicted_speedup']):.2f}x for this tree against "
                  f"{float(best['predicted_speedup']):.2f}x for the best tree of {larger} nodes "
                  f"({levels} level{'s' * (levels != 1)})")
    else:
        words += (f", and a draft level costs {forward + drawing:.1f} ms: predicted "
                  f"{float(choice['predicted_speedup']):.2f}x")
    return words


def calibration_trees(acceptance, by_depth, under_lower_ranks=None) -> list[list[int]]:
    """The trees whose real steps the step costs are fitted from: the DP's own, at a few sizes.

    Fixed sizes, not the caller's limits: the costs belong to the machine and the pair, and one
    plan's small limits must not leave every later plan with costs fitted from one tiny tree.
    Where the acceptance vector cannot fill a size (too few ranks), the largest tree it can.
    """
    trees = []
    for n, d in CALIBRATION_TREES:
        tables = build_tables(acceptance, n, d, by_depth=by_depth, under_lower_ranks=under_lower_ranks)
        feasible = [m for m in range(n, 1, -1) if np.isfinite(tables.best[d, m])]
        tree = tables.parents(feasible[0], d) if feasible else None
        if tree and tree not in trees:
            trees.append(tree)
    return trees


def _sized_key(pair, sampling: SamplingConfig, graphs: bool, *fields: str) -> str:
    """A cache key of what sizing measures: the pair, its forwards (the curves belong to the forwards timed),
    the sampling mode, then `fields`, and whether the steps are captured.

    Sampling pays for probabilities at every node that greedy does not, top-p / top-k for a sort or a
    top-k over the vocabulary: the three are measured apart (`SamplingConfig.mode`), never per value.
    """
    kinds = f"{forward_kind(pair.target)}/{forward_kind(pair.draft)}"
    return "|".join([pair.key, kinds, sampling.mode, *fields]) + ("|graphs" if graphs else "")


def _costs_key(pair, sampling: SamplingConfig, graphs: bool = False) -> str:
    return _sized_key(pair, sampling, graphs, f"cost-model-{COST_MODEL}")


# Open-ended prompts, so a step count is reached before an end of text; what they say does not matter.
CALIBRATION_PROMPTS = ("Explain how a bicycle works, step by step, for someone who has never ridden one.",
                       "Write a short story about a lighthouse keeper who finds a message in a bottle.")


def _timed_step(decoder) -> tuple:
    """One `step()` and the wall ms around it (`measure_step_times`, `race_trees`)."""
    t0 = time.perf_counter()
    record = decoder.step()
    return record, (time.perf_counter() - t0) * 1000


def _timed_steps(makers: list, steps: int, warmup: int) -> list[list[tuple[float, float, float]]]:
    """(wall ms, draft-phase ms, target-forward ms) of `steps` decoding steps per decoder maker, after
    `warmup` steps.

    Round robin, one step of each decoder per round: a slow spell of a shared machine then
    falls on every tree alike instead of on whichever was being timed. Steps whose tree was
    cut (near max_new_tokens) are not counted: they are smaller trees than the one timed.
    """
    out: list[list[tuple[float, float, float]]] = [[] for _ in makers]
    decoders: list = [None] * len(makers)
    seen, runs = [0] * len(makers), [0] * len(makers)
    max_runs = 4 * len(CALIBRATION_PROMPTS)   # prompts that end at once must not loop for ever

    def active(k: int) -> bool:
        live = decoders[k] is not None and not decoders[k].done
        return len(out[k]) < steps and (live or runs[k] < max_runs)

    # Progress counts timed steps (the warm-up and prefill steps around them are cheap and few).
    measuring.phase("Sequoia's step costs: real steps of a few trees", steps * len(makers))
    try:
        while any(active(k) for k in range(len(makers))):
            for k, make in enumerate(makers):
                if not active(k):
                    continue
                if decoders[k] is None or decoders[k].done:
                    if decoders[k] is not None:
                        decoders[k].close()
                    decoders[k] = make(CALIBRATION_PROMPTS[runs[k] % len(CALIBRATION_PROMPTS)])
                    decoders[k].step()   # the prefill
                    seen[k], runs[k] = 0, runs[k] + 1
                    continue
                record, wall = _timed_step(decoders[k])
                seen[k] += 1
                shape = getattr(decoders[k], "shape", None)   # the baseline's decoder has no tree
                cut = shape is not None and record.payload is not None and record.payload.depth < shape.depth
                if seen[k] > warmup and not record.finished and not cut:
                    out[k].append((wall, record.time_ms.get(PHASE_DRAFT, 0.0), record.time_ms.get(PHASE_TARGET, 0.0)))
                    measuring.tick()
    finally:
        for decoder in decoders:
            if decoder is not None:
                decoder.close()
    return out


def measure_step_times(pair, sampling: SamplingConfig, trees: list[list[int]], steps: int = 24,
                       warmup: int = 3, max_new_tokens: int = 160, graphs: bool = False) -> dict:
    """Real step times of the Sequoia decoder on each tree, and of the baseline's own decoder (what a
    predicted speedup is over: a one-node Sequoia tree, which it once timed instead, pays the tree's
    machinery, 0.7 ms a token where `ar`'s step pays 0.2 at q4), for `fit_step_costs`: {"samples":
    [{parents, draft_ms, rest_ms}], "ar_ms": [...], "waiting_share": the share of the time the threads
    waited for a core (None off Linux)}.

    Wall time around `step()`, so whatever a step costs (the trace record included) counts. `graphs`:
    the decoders' steps are captured (each tree's shapes in its warm-up steps).
    """
    ids = {p: encode_prompt(pair.tokenizer, p) for p in CALIBRATION_PROMPTS}
    room = {p: max(2, min(max_new_tokens, pair.max_context - len(ids[p]))) for p in CALIBRATION_PROMPTS}

    def maker(parents):
        choice = tree_choice(pair, sampling, tree_parents=parents, graphs=graphs)
        # No copies: what is fitted is the drafted tree's own cost (a copy changes the tree step by step).
        return lambda p: SequoiaDecoder(pair, p, ids[p], sampling, room[p], choice, graphs=decoder_graphs(graphs),
                                        copies=0)

    def baseline(p):
        from ..engine.methods import make_decoder
        from ..methods import baseline as baseline_id

        return make_decoder(baseline_id(), pair, p, sampling=sampling, max_new_tokens=room[p], prompt_ids=ids[p],
                            graphs=decoder_graphs(graphs))

    timed, share = with_contention(
        lambda: _timed_steps([maker(t) for t in trees] + [baseline], steps, warmup), pair.device)
    samples = [{"parents": parents, "draft_ms": draft, "rest_ms": wall - draft, "target_ms": target}
               for parents, steps_ in zip(trees, timed) for wall, draft, target in steps_]
    return {"samples": samples, "ar_ms": [wall for wall, _, _ in timed[-1]],
            "ar_target_ms": [target for _, _, target in timed[-1]], "waiting_share": share}


def step_costs_for(pair, sampling: SamplingConfig, acc: dict, target_ms: dict, draft_ms: dict,
                   curves_trusted: bool, refresh: bool = False, graphs: bool = False) -> tuple[StepCosts, bool]:
    """This pair's StepCosts on this machine, and whether they are trusted (and so cached).

    Measured once (a few seconds of real decoding). The costs are residuals against the forward
    curves, so a cached entry holds only with the curves and calibration trees it was fitted with;
    costs from busy cores, or against curves from busy cores, are used for one plan and not kept.
    """
    key = _costs_key(pair, sampling, graphs)
    trees = calibration_trees(acc["acceptance"], acc.get("by_depth"), acc.get("under_lower_ranks"))
    cached = None if refresh else load_cached("sequoia-step-costs", key)
    if cached and cached.get("trees") == trees and cached.get("target_ms") == _rounded(target_ms) \
            and cached.get("draft_ms") == _rounded(draft_ms):
        try:
            return StepCosts(**cached["costs"]), True
        except (KeyError, TypeError):
            pass   # a damaged entry is re-measured, never fatal
    measured = measure_step_times(pair, sampling, trees, graphs=graphs)
    costs = fit_step_costs(measured["samples"], measured["ar_ms"], monotone(target_ms), monotone(draft_ms),
                           measured.get("ar_target_ms"))
    share = measured.get("waiting_share")
    trusted = curves_trusted and (share is None or share <= CONTENDED_SHARE)
    if trusted:
        save_cached("sequoia-step-costs", key, {
            "key": key, "costs": costs.to_dict(), "trees": trees, "target_ms": _rounded(target_ms),
            "draft_ms": _rounded(draft_ms), "steps": len(measured["samples"]), "waiting_share": share})
    return costs, trusted


# Prompts `auto` races the DP tree and the adaptive tree on: open ones of several kinds, none a bench prompt.
# One of each kind the bench suites hold (chat, code, math, rewrite) besides the calibration prompts: the
# trees' acceptance differs by kind, and the race decides for all of them.
RACE_PROMPTS = CALIBRATION_PROMPTS + (
    "Write a Python function that counts the vowels in a string.",
    "What are some easy ways to save energy at home?",
    "A recipe needs 3 eggs for every 12 cookies. How many eggs are needed for 30 cookies? Show your working.",
    "Rewrite this note so that it sounds friendly and clear: \"Meeting moved. Tuesday 3pm now, not Monday. "
    "Bring the reports. Don't be late again.\"")
RACE_TOKENS = 64
# The adaptive tree must race this much faster to be chosen: within noise, Sequoia's own DP tree stays.
ADAPTIVE_MARGIN = 1.03
# Sampled text differs from run to run, and the trees' acceptance with it: one round of six prompts of 64
# sampled tokens scatters by about 6%, too much to resolve a 5-11% difference against the margin. So a sampled
# race runs the prompts again, with new seeds, until the interval of its per-prompt ratios clears the margin
# (at least two rounds, so the interval rests on twelve runs), or for four rounds at most and then decides on
# its estimate. A greedy race decodes the same text every round: one round, as only the clock would vary.
RACE_ROUNDS_SAMPLED = (2, 4)
# How many standard errors the interval spans (about 95%).
RACE_Z = 2.0


def race_interval(ratios: list[float]) -> tuple[float, float] | None:
    """The interval, `RACE_Z` standard errors wide each side, of the geometric mean of per-prompt rate ratios;
    None below two ratios. A ratio of rates is multiplicative, so its mean and spread are taken in logs."""
    logs = np.log(np.asarray([r for r in ratios if r > 0], dtype=float))
    if logs.size < 2:
        return None
    half = RACE_Z * logs.std(ddof=1) / np.sqrt(logs.size)
    return float(np.exp(logs.mean() - half)), float(np.exp(logs.mean() + half))


def race_settled(ratios: list[float], rounds_done: int, sampling: SamplingConfig) -> bool:
    """Whether a race may stop after `rounds_done` rounds: greedy after one; sampled once the interval lies
    wholly above or below the margin (not before the least rounds), and at the most rounds whatever it shows."""
    if sampling.greedy:
        return True
    least, most = RACE_ROUNDS_SAMPLED
    if rounds_done >= most:
        return True
    interval = race_interval(ratios)
    return rounds_done >= least and interval is not None and not interval[0] <= ADAPTIVE_MARGIN <= interval[1]


def race_trees(pair, sampling: SamplingConfig, parents: list[int], graphs: bool = False) -> dict:
    """Tokens per second of the DP tree `parents` and of the adaptive tree, decoding the same prompts here.

    The DP tree is optimal for the *average* acceptance; the adaptive tree follows the draft's
    confidence each step, which pays where acceptance swings (chat) and costs a little where it
    does not. Which wins depends on the draft and on this machine, so it is measured, not assumed:
    one step of each decoder per round (a slow spell of a shared machine falls on both), wall time
    around `step()`, the prefill left out. A sampled race goes on for rounds of new seeds until it is
    settled (`race_settled`).
    """
    ids = {p: encode_prompt(pair.tokenizer, p) for p in RACE_PROMPTS}
    choices = {"tree": tree_choice(pair, sampling, tree_parents=parents, graphs=graphs),
               "adaptive": tree_choice(pair, sampling, tree="adaptive", graphs=graphs)}
    mode = decoder_graphs(graphs)

    def makers(seeded: SamplingConfig) -> dict:
        # The trees raced as the draft grows them (copies would join either alike).
        return {k: (lambda p, c=c: SequoiaDecoder(pair, p, ids[p], seeded, RACE_TOKENS, c, graphs=mode, copies=0))
                for k, c in choices.items()}

    def run_prompt(prompt: str, seeded: SamplingConfig) -> dict:
        decoders = {k: make(prompt) for k, make in makers(seeded).items()}
        done = {k: [0, 0.0] for k in decoders}   # tokens, ms
        try:
            for decoder in decoders.values():
                decoder.step()   # the prefill: the same for both
            while any(not d.done for d in decoders.values()):
                for k, decoder in decoders.items():
                    if not decoder.done:
                        record, ms = _timed_step(decoder)
                        done[k][1] += ms
                        done[k][0] += len(record.new_token_ids)
                        measuring.tick(len(record.new_token_ids))
        finally:
            for decoder in decoders.values():
                decoder.close()
        return done

    def race() -> tuple[dict, list[float], int]:
        if graphs:   # capture each decoder's shapes before the clock runs: capture is a one-off, not a step cost
            _capture_shapes(makers(sampling).values(), RACE_PROMPTS[0])
        total = {"tree": [0, 0.0], "adaptive": [0, 0.0]}
        ratios, rounds = [], 0
        while not rounds or not race_settled(ratios, rounds, sampling):
            # Fixed seeds per round: the race is repeatable, whatever seed the run it sizes was given.
            seeded = sampling if sampling.greedy else replace(sampling, seed=rounds)
            rounds += 1
            measuring.phase(f"Sequoia's DP tree against its adaptive tree (round {rounds})",
                            2 * RACE_TOKENS * len(RACE_PROMPTS))
            for prompt in RACE_PROMPTS:
                done = run_prompt(prompt, seeded)
                for k, (n, ms) in done.items():
                    total[k][0] += n
                    total[k][1] += ms
                if all(n and ms > 0 for n, ms in done.values()):
                    ratios.append((done["adaptive"][0] / done["adaptive"][1]) / (done["tree"][0] / done["tree"][1]))
        return total, ratios, rounds

    (done, ratios, rounds), share = with_contention(race, pair.device)
    rate = {k: 1000 * n / max(ms, 1e-9) for k, (n, ms) in done.items()}
    budget = adaptive_plan(pair, graphs=graphs)[0]
    interval = race_interval(ratios)
    return {"prompts": len(RACE_PROMPTS), "rounds": rounds, "tokens": {k: n for k, (n, _) in done.items()},
            "adaptive_budget": budget["max_nodes"], "adaptive_budget_from": budget["tree_budget_from"],
            "tree_tokens_per_s": round(rate["tree"], 2), "adaptive_tokens_per_s": round(rate["adaptive"], 2),
            "adaptive_over_tree": round(rate["adaptive"] / max(rate["tree"], 1e-9), 4),
            "interval": None if interval is None else [round(v, 4) for v in interval],
            "margin": ADAPTIVE_MARGIN, "adaptive_rule": ADAPTIVE_RULE, "waiting_share": share}


def _capture_shapes(makers, prompt: str, steps: int = 4) -> None:
    """A few untimed steps of each decoder, so a graphed decoder's shapes are captured (and kept on the
    model for the timed decoders, `engine.static.checkout`) before anything is timed."""
    for make in makers:
        decoder = make(prompt)
        try:
            for _ in range(steps):
                if decoder.done:
                    break
                decoder.step()
        finally:
            decoder.close()


def _acceptance_fields(acc: dict) -> dict:
    """An acceptance vector and its rows (`acceptance_for`) as a plan and a manual tree's settings record
    them (`plan_from_curves`)."""
    return {"acceptance": list(acc["acceptance"]), "acceptance_by_depth": acc.get("by_depth"),
            "acceptance_under_lower_ranks": acc.get("under_lower_ranks")}


def _acceptance_id(acc: dict) -> str:
    """A short name for an acceptance vector and its rows (`acceptance_for`), for a plan's key."""
    rows = [acc["acceptance"], acc.get("by_depth"), acc.get("under_lower_ranks")]
    return hashlib.sha1(json.dumps(rows).encode()).hexdigest()[:10]


def _plan_key(pair, sampling: SamplingConfig, max_budget, max_depth, graphs: bool,
              acc: dict) -> tuple[int, int, str]:
    # Keyed by what changes a plan, never by the floats a visitor types (each new key once queued a
    # measurement and left a file): the pair and its forwards (whose curves it reads), the step costs'
    # mode (`_sized_key`), the acceptance vector it is sized on, the limits and graphs. Temperature, top-p
    # and top-k reach a plan only through that vector, and `acceptance_for` picks it from a bounded set
    # (shipped or measured by `profile-acceptance`, at the nearest temperature; visitors add none): a plan
    # measured at one temperature is the plan for every temperature that reads the same vector, its race
    # (run at the first one's) deciding for them all.
    default_n, default_d = (128, 12) if pair.device.type == "cpu" else (256, 16)
    max_budget, max_depth = int(max_budget or default_n), int(max_depth or default_d)
    key = _sized_key(pair, sampling, graphs, f"acc-{_acceptance_id(acc)}", f"N{max_budget}", f"D{max_depth}")
    return max_budget, max_depth, key


def cached_plan(pair, sampling: SamplingConfig | None = None, max_budget: int | None = None,
                max_depth: int | None = None, graphs: bool = False, acc: dict | None = None) -> dict | None:
    """`plan_tree`'s plan when this machine has it cached and it still holds (same acceptance, cost
    model, step costs and adaptive rule), else None. Measures nothing."""
    sampling = (sampling or SamplingConfig()).validated()
    acc = acc or acceptance_for(pair, sampling)
    max_budget, max_depth, key = _plan_key(pair, sampling, max_budget, max_depth, graphs, acc)
    cached = load_cached("sequoia-plan", key)
    costs_entry = load_cached("sequoia-step-costs", _costs_key(pair, sampling, graphs)) or {}
    if not cached or any(cached.get(k) != v for k, v in _acceptance_fields(acc).items()):
        return None
    if cached.get("cost_model") != COST_MODEL or cached.get("step_costs") != costs_entry.get("costs"):
        return None
    race = cached.get("race")
    return cached if race is not None and race.get("adaptive_rule") == ADAPTIVE_RULE else None


def plan_tree(pair, sampling: SamplingConfig | None = None, max_budget: int | None = None,
              max_depth: int | None = None, refresh: bool = False, graphs: bool = False) -> dict:
    """Everything `--tree auto` decides, as plain data: curves, step costs, table, choice (cached).

    The step costs are fitted from the real decoder's steps, and the choice raced against the
    adaptive tree (`race_trees`): this builds decoders, so it runs before the one it sizes is built.
    """
    sampling = (sampling or SamplingConfig()).validated()
    acc = acceptance_for(pair, sampling)
    max_budget, max_depth, key = _plan_key(pair, sampling, max_budget, max_depth, graphs, acc)
    cached = None if refresh else cached_plan(pair, sampling, max_budget, max_depth, graphs, acc)
    if cached is not None:
        return cached
    target_ms, draft_ms, curves_trusted = measured_curves(pair, refresh=refresh, graphs=graphs)
    costs, trusted = step_costs_for(pair, sampling, acc, target_ms, draft_ms, curves_trusted, refresh=refresh,
                                    graphs=graphs)
    plan = plan_from_curves(acc["acceptance"], target_ms, draft_ms, max_budget, max_depth, acc.get("by_depth"),
                            costs=costs, under_lower_ranks=acc.get("under_lower_ranks"))
    plan.update(key=pair.key, device=str(pair.device), dtype=dtype_name(pair.dtype),
                acceptance_source=acc["source"], temperature=sampling.temperature, top_p=sampling.top_p,
                graphs=bool(graphs))
    race = plan["race"] = race_trees(pair, sampling, plan["choice"]["parents"], graphs=graphs)
    plan["chosen"] = "adaptive" if race["adaptive_over_tree"] >= ADAPTIVE_MARGIN else "dp"
    share = race["waiting_share"]
    trusted = trusted and (share is None or share <= CONTENDED_SHARE)
    if trusted:   # a plan from busy cores is used for this run only, like its curves
        save_cached("sequoia-plan", key, plan)
    return plan


def resolve_tree(pair, sampling, tree_budget, tree_depth, tree_parents,
                 graphs: bool = False) -> tuple[list[int] | None, dict]:
    """The tree to use (a breadth-first parent list) and settings that say where it came from."""
    if tree_parents is not None:
        parents = check_parents(tree_parents)
        if len(parents) > MAX_TREE_BUDGET:
            raise InvalidInput(f"a tree of {len(parents)} nodes is too large (at most {MAX_TREE_BUDGET})")
        return parents, {"tree": "explicit"}
    if tree_budget is None and tree_depth is None:
        plan = plan_tree(pair, sampling, graphs=graphs)
        choice = plan["choice"]
        if plan.get("chosen") == "adaptive":   # None: the decoder grows an adaptive tree each step
            return None, {"tree_sizing": "auto", "acceptance": plan["acceptance"],
                          "acceptance_source": plan["acceptance_source"], "plan": plan}
        return choice["parents"], {
            "tree": "auto", "acceptance": plan["acceptance"], "acceptance_source": plan["acceptance_source"],
            "predicted_tokens_per_step": choice["value"], "predicted_speedup": choice["predicted_speedup"],
            "plan": plan}  # the app's hardware panel shows it
    if tree_budget is None or tree_depth is None:
        raise InvalidInput("give both a tree budget and a tree depth, or neither (auto)")
    budget = Range("tree budget (nodes including the root)", 1, MAX_TREE_BUDGET).check_whole(tree_budget)
    depth = Range("tree depth", 0, math.inf).check_whole(tree_depth)
    depth = min(depth, budget - 1)
    acc = acceptance_for(pair, sampling)
    tables = build_tables(acc["acceptance"], budget, depth, by_depth=acc.get("by_depth"),
                          under_lower_ranks=acc.get("under_lower_ranks"))
    if not np.isfinite(tables.best[depth, budget]):
        optimal_tree(acc["acceptance"], budget, depth)   # raises the explanatory error
    parents, value = tables.parents(budget, depth), float(tables.best[depth, budget])
    return parents, {"tree": "manual", **_acceptance_fields(acc), "acceptance_source": acc["source"],
                     "predicted_tokens_per_step": value}


@dataclass(frozen=True)
class TreeChoice:
    """A Sequoia decoder's tree, resolved before the decoder is built (`tree_choice`)."""

    parents: list[int] | None           # a fixed tree's breadth-first parents; None: an adaptive tree
    settings: dict                      # what the run's trace records about the tree and where it came from
    adaptive_plan: dict | None = None   # an adaptive tree's limits and threshold (`adaptive_plan`)
    adaptive_costs: dict | None = None  # and the costs it weighs its draft levels against


def tree_choice(pair, sampling: SamplingConfig | None = None, tree_budget=None, tree_depth=None, tree_parents=None,
                tree=None, tree_threshold=None, graphs="auto") -> TreeChoice:
    """The tree a Sequoia decoder runs, from its options: `tree="adaptive"`, an explicit parent list,
    budget + depth, or neither (`auto`: `plan_tree`, which may choose the adaptive tree). `graphs`: the
    decoder's graphs mode (or whether it runs graphs): `auto` sizes for what that path pays."""
    sampling = (sampling or SamplingConfig()).validated()
    graphs = graphs_decided(pair, graphs)
    parents, settings = (None, {}) if tree == "adaptive" else resolve_tree(
        pair, sampling, tree_budget, tree_depth, tree_parents, graphs)
    if parents is not None:
        shape = TreeShape.from_parents(parents)
        return TreeChoice(parents, {"tree_budget": shape.size, "tree_depth": shape.depth, "tree_parents": parents,
                                    **settings})
    # By default an adaptive tree holds only the nodes the target reads for free (`adaptive_plan`).
    plan, costs = adaptive_plan(pair, tree_budget, tree_depth, tree_parents, tree_threshold, graphs=graphs)
    return TreeChoice(None, {**settings, "tree": "adaptive", "tree_budget": plan["max_nodes"],
                             "tree_depth": plan["max_depth"], "level_cost": round(costs["draft"][1], 4),
                             "level_cost_from": costs["from"], **plan}, plan, costs)


def _asks_auto(options: dict) -> bool:
    """Whether a decoder's options leave its tree to `auto` (`resolve_tree`'s plan)."""
    return options.get("tree") != "adaptive" and all(
        options.get(k) is None for k in ("tree_parents", "tree_budget", "tree_depth"))


def auto_pending(pair, sampling: SamplingConfig | None = None, graphs="auto", **options) -> bool:
    """Whether these options ask `auto` for a tree this machine has not measured yet (measures nothing)."""
    return _asks_auto(options) and cached_plan(pair, sampling, graphs=graphs_decided(pair, graphs)) is None


def first_sizes(pair, sampling: SamplingConfig | None = None, graphs="auto", **options) -> tuple[dict, str]:
    """Options to start a race with at once while `auto`'s measurement is pending, and what to tell the
    reader: the adaptive tree, which measures nothing (its costs come from whatever forward curve is
    cached already, else from the bytes each forward reads)."""
    costs = adaptive_costs(pair, ADAPTIVE_MAX_NODES, graphs_decided(pair, graphs))["from"]
    basis = "the forward times measured so far" if costs == "measured" else "the weights each forward reads"
    return ({**options, "tree": "adaptive", "tree_budget": None, "tree_depth": None},
            f"Sequoia grows its adaptive tree, sized from {basis}")


def decoder_options(pair, sampling: SamplingConfig | None = None, graphs="auto", copies=None, **options) -> dict:
    """`engine.methods.make_decoder`'s question to this room: the decoder's options, its tree resolved
    for the path the decoder will run (`graphs`, which make_decoder passes to the decoder itself);
    `copies` (the copied chain's length) goes to the decoder as given."""
    found = {"tree_choice": tree_choice(pair, sampling, graphs=graphs, **options)}
    return found if copies is None else {**found, "copies": copies}


# What the app's worker runs between races for options whose `auto` tree is pending: what building the decoder
# would (`plan_tree`, measured and cached), so the race after it finds the plan cached.
measure_auto = decoder_options


# An adaptive tree (`adaptive.py`): the draft's confidence shapes each step's tree within these limits.
ADAPTIVE_MAX_NODES = 24
ADAPTIVE_MAX_DEPTH = 8
ADAPTIVE_MAX_CHILDREN = 4
ADAPTIVE_THRESHOLD = 0.05
# Below four nodes a budget from the target's curve would forbid even the nodes the draft is sure of.
ADAPTIVE_MIN_NODES = 4
# What the adaptive tree does by default: its `auto` race against the DP tree is rerun when this changes.
ADAPTIVE_RULE = 4   # 4: a sampled race runs until settled (`race_settled`)


def adaptive_settings(tree_budget=None, tree_depth=None, tree_parents=None, threshold=None) -> dict:
    """Limits and threshold of an adaptive tree; budget and depth, when given, cap its size."""
    if tree_parents is not None:
        raise InvalidInput("an adaptive tree is grown each step: it cannot be combined with a fixed tree")
    budget, depth = ADAPTIVE_MAX_NODES, ADAPTIVE_MAX_DEPTH
    if tree_budget is not None:
        budget = Range("tree budget", 2, MAX_TREE_BUDGET).check_whole(tree_budget)
    if tree_depth is not None:
        depth = Range("tree depth", 1, math.inf).check_whole(tree_depth)
    tau = ADAPTIVE_THRESHOLD if threshold is None else threshold
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not 0 < tau <= 1:
        raise InvalidInput(f"the adaptive tree's threshold must be a probability in (0, 1], got {tau!r}")
    return {"max_nodes": budget, "max_depth": min(depth, budget - 1), "max_children": ADAPTIVE_MAX_CHILDREN,
            "threshold": float(tau)}


def adaptive_plan(pair, tree_budget=None, tree_depth=None, tree_parents=None, threshold=None,
                  graphs: bool = False) -> tuple[dict, dict]:
    """An adaptive tree's limits, and the costs it weighs its draft levels against (`adaptive_costs`).

    Without a budget given, a tree holds as many nodes as the target reads at about the price of one
    (`adaptive.free_rows`). A node adds its score s to the E tokens a step brings, and its row's cost c
    to the step's C forwards, so it pays only if s / E > c / C: with E = 2-4 and C about 1.2, a node
    at the threshold tau pays for a row under tau / 4 to tau / 2 of a forward. The lower end is taken,
    since nodes past the free rows also pull in the draft levels that drew them. On the 2-core CPU the
    rows up to 8 cost 0.003 each and every row past them 0.027-0.04 (tau / 4 = 0.0125); held to 8
    nodes instead of 24, greedy trees ran 1.02-1.035x faster and T=0.6 trees 1.02-1.15x (README,
    *The race*).
    """
    plan = adaptive_settings(tree_budget, tree_depth, tree_parents, threshold)
    costs = adaptive_costs(pair, plan["max_nodes"], graphs)
    if tree_budget is not None:
        plan["tree_budget_from"] = "given"
        return plan, costs
    budget = free_rows(costs["target"], plan["threshold"] / 4, ADAPTIVE_MIN_NODES, plan["max_nodes"])
    plan.update(max_nodes=budget, max_depth=min(plan["max_depth"], budget - 1),
                tree_budget_from=(BUDGET_FROM_FREE_ROWS if costs["from"] == "measured"
                                  else "default (no measured curve)"))
    return plan, costs


def forward_weight_bytes(model) -> int:
    """Bytes of weights one forward reads: its decoder layers and its output head's rows (a vocabulary
    subset's when it has one). A CPU forward of a small model is bound by them."""
    layers = model.model.layers if hasattr(model, "model") else model   # a feature draft: its own layer
    body = sum(p.numel() * p.element_size() for p in layers.parameters())
    rows = getattr(getattr(model, "lm_head", None), "vocab_ids", None)
    n_rows = int(rows.numel()) if rows is not None else int(model.config.vocab_size)
    return body + n_rows * int(model.config.hidden_size) * next(model.parameters()).element_size()


def adaptive_costs(pair, max_nodes: int, graphs: bool = False) -> dict:
    """What an adaptive tree weighs a draft level against (`adaptive.level_pays`).

    {"target": [cost of a target forward over n nodes], "draft": [cost of a draft level over n
    nodes]} for n = 0 .. max_nodes, in units of a one-token target forward, and "from": this
    machine's cached forward curves ("measured", what `--tree auto` measures once), else the weights
    each forward reads ("weights"). Never measured here, so a run starts at once and a seeded
    run's trees do not depend on a timing.
    """
    target = cached_forward_curve(pair.target, curve_key(pair, "target"), graphs=graphs)
    draft = target if pair.draft_is_target else cached_forward_curve(
        pair.draft, curve_key(pair, "draft"), sizes=SMALL_SIZES, graphs=graphs)
    if target and draft:
        target, draft, source = monotone(target), monotone(draft), "measured"
    else:
        ratio = forward_weight_bytes(pair.draft) / forward_weight_bytes(pair.target)
        target, draft, source = {1: 1.0}, {1: ratio}, "weights"
    unit = target[min(target)]
    sizes = range(max_nodes + 1)
    return {"target": [interpolate(target, max(n, 1)) / unit for n in sizes],
            "draft": [interpolate(draft, max(n, 1)) / unit for n in sizes], "from": source}


AUTO_WHAT = "Sequoia's tree"   # what `auto_size_words` names (`runtime.auto_notes`)


def auto_size_words(settings: dict) -> str | None:
    """The tree `auto` ran (also a first size), in words; None where the tree was asked for."""
    if "auto" not in (settings.get("tree"), settings.get("tree_sizing")) and settings.get("sizing") != "first":
        return None
    if settings.get("tree") == "adaptive":
        return f"the adaptive tree of up to {settings.get('tree_budget')} nodes"
    depth = settings.get("tree_depth")
    return f"{settings.get('tree_budget')} nodes x {depth} level{'s' * (depth != 1)}"


def why_small(pair, graphs: bool, settings: dict) -> str:
    """Why the tree `auto` ran has one level (`one_level_words`, from the run's own plan); "" otherwise."""
    if settings.get("tree") == "auto" and isinstance(settings.get("plan"), dict):
        return one_level_words(settings["plan"])
    return ""
