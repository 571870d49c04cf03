"""What `auto` chooses, as a property of the choice, on forward-cost curves the test controls.

A machine's measured t(n) decides Lookahead's (W, N, G) and Sequoia's tree, so no test may assume
what a given machine chooses (an Intel Xeon's steep fp32 curve rightly chose W=2, N=2, G=0, no
candidates, where a test expected accepted n-grams). What holds on every machine: the chosen size is
the one with the best predicted speed among the candidates the sizing weighed, for the curve it read;
a flat curve buys bigger windows and trees than a steep one; and the decoder runs exactly whatever
was chosen, no candidates at all included. Two curves stand for the machines:

- FLAT: a GPU, or a memory-bound CPU, where a forward over up to 64 rows costs about what one row does;
- STEEP: the 2-thread fp32 Intel Xeon of issue 49 (t(1) 36 ms, t(4) 55 ms, t(16) 75 ms, then about
  linear).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from helpers import tiny_pair

from specviz.engine.methods import make_decoder
from specviz.engine.profiler import curve_key, default_sizes
from specviz.lookahead import sizing as la
from specviz.sequoia import sizing as sq
from specviz.sequoia.tree import TreeShape
from specviz.sequoia.tree_dp import build_tables, tree_value
from specviz.trace import ORIGIN_COPY, SOURCE_NGRAM

FLAT = {1: 10.0, 2: 10.0, 4: 10.1, 8: 10.2, 16: 10.5, 32: 11.0, 64: 12.0, 128: 14.0, 256: 18.0}
STEEP = {1: 36.0, 2: 42.0, 4: 55.0, 8: 63.0, 16: 75.0, 32: 110.0, 64: 180.0, 128: 320.0, 256: 600.0}
CURVES = {"flat": FLAT, "steep": STEEP}
# A draft forward: an eighth of the target's on the same machine (a few layers of the same width).
DRAFTS = {name: {n: ms / 8 for n, ms in curve.items() if n <= 64} for name, curve in CURVES.items()}
ACCEPTANCE = [0.6, 0.15, 0.08, 0.04]
TINY_PROMPT = [1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2]


def _interp(curve: dict, n: float) -> float:
    """t(n) read off the curve, written apart from the sizing modules' own interpolation."""
    xs = sorted(curve)
    return float(np.interp(n, xs, [curve[x] for x in xs]))


def _extrapolated(curve: dict, n: float) -> float:
    """t(n), and past the last measured size the last segment's line."""
    xs = sorted(curve)
    if n <= xs[-1]:
        return _interp(curve, n)
    lo, hi = xs[-2], xs[-1]
    return curve[hi] + (curve[hi] - curve[lo]) * (n - hi) / (hi - lo)


# -- Lookahead: settings_table / choose ------------------------------------------------------------


def lookahead_candidates(curve: dict) -> set[tuple[int, int, int]]:
    """Every (W, N, G) the sizing may weigh: its grids, one step's forward within the measured sizes."""
    return {(w, n, g) for n, w, g in itertools.product(la.NGRAMS, la.WINDOWS, la.GUESSES)
            if (n - 1) * (w + g) <= max(curve)}


def lookahead_speedup(curve: dict, window: int, ngram: int, guesses: int) -> float:
    """The predicted speedup of one setting from its definition: E(W, N, G) * t(1) / t(n)."""
    useful = min(guesses, window)
    a, m, c = la.ACCEPT_RATE, la.COPY_MATCH, la.COPY_ACCEPT   # the pool's rate; the copy's share and rate
    expected = 1.0 + sum(1.0 - (1.0 - a ** k) ** useful * (1.0 - m * c ** k) for k in range(1, ngram))
    n = (ngram - 1) * (window + guesses)
    # The copy's N-1 rows run only in the share m of steps that found one; past the last measured size the
    # curve goes on as its last segment does (a forward over more rows never costs less).
    ms = (1 - m) * _interp(curve, n) + m * _extrapolated(curve, n + ngram - 1)
    return expected * curve[min(curve)] / ms


@pytest.mark.parametrize("name", list(CURVES))
def test_lookahead_table_weighs_every_candidate_and_puts_the_fastest_first(name):
    curve = {n: ms for n, ms in CURVES[name].items() if n <= max(la.CURVE_SIZES)}
    table = la.settings_table(curve)
    weighed = [(r["window"], r["ngram"], r["guesses"]) for r in table]
    assert len(weighed) == len(set(weighed)) and set(weighed) == lookahead_candidates(curve)
    for row in table:
        assert row["step_tokens"] == (row["ngram"] - 1) * (row["window"] + row["guesses"])
        assert row["predicted_speedup"] == pytest.approx(
            lookahead_speedup(curve, row["window"], row["ngram"], row["guesses"]), abs=1e-3)
    best = max(lookahead_speedup(curve, *setting) for setting in weighed)
    assert table[0]["predicted_speedup"] == pytest.approx(best, abs=1e-3)
    assert table[0]["predicted_speedup"] == max(r["predicted_speedup"] for r in table)


@pytest.fixture
def curve_on_this_machine(tmp_path, monkeypatch):
    """`choose` reads the curve it is given here instead of measuring one; returns the calls it made."""
    from specviz.engine import profiler

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    asked, given = [], {}

    def forward_curve(model, key, sizes=None, context_len=200, refresh=False, graphs=False):
        sizes = sizes or profiler.default_sizes(next(model.parameters()).device)
        asked.append({"key": key, "sizes": list(sizes), "graphs": graphs})
        return {n: given["curve"][n] for n in sizes}

    monkeypatch.setattr(profiler, "forward_curve", forward_curve)

    def use(curve: dict) -> list:
        given["curve"] = curve
        return asked

    return use


@pytest.mark.parametrize("name", list(CURVES))
def test_lookahead_choose_takes_the_best_predicted_setting_for_the_curve_it_read(name, curve_on_this_machine):
    asked = curve_on_this_machine(CURVES[name])
    pair = tiny_pair(draft_seed=None)
    result = la.choose(pair)
    # The target's whole curve (Sequoia's sizes too, under the key Sequoia reads: one measurement for both)...
    assert asked == [{"key": curve_key(pair, "target"), "sizes": default_sizes(pair.device), "graphs": False}]
    # ... of which the choice reads the small sizes.
    read = {int(n): ms for n, ms in result["curve"].items()}
    assert read == {n: CURVES[name][n] for n in la.CURVE_SIZES}   # (both curves already rise: monotone as read)
    choice = result["choice"]
    weighed = [(r["window"], r["ngram"], r["guesses"]) for r in result["table"]]
    assert set(weighed) == lookahead_candidates(read)
    speedups = {s: lookahead_speedup(read, *s) for s in weighed}
    chosen = (choice["window"], choice["ngram"], choice["guesses"])
    assert speedups[chosen] == pytest.approx(max(speedups.values()), abs=1e-3)
    assert choice["predicted_speedup"] == pytest.approx(speedups[chosen], abs=1e-3)
    assert choice["step_tokens"] == (choice["ngram"] - 1) * (choice["window"] + choice["guesses"])


def test_lookahead_choice_grows_with_a_flat_curve(curve_on_this_machine):
    """Flat: rows are nearly free, so a wide window with many guesses; steep (issue 49's Xeon): none pay."""
    choices = {}
    for name, curve in CURVES.items():
        curve_on_this_machine(curve)
        choices[name] = la.choose(tiny_pair(draft_seed=None), refresh=True)["choice"]
    flat, steep = choices["flat"], choices["steep"]
    assert flat["window"] > steep["window"] and flat["guesses"] > steep["guesses"]
    assert flat["step_tokens"] > steep["step_tokens"] and flat["predicted_speedup"] > 1.0
    # On the steep curve no pool candidate pays for its rows: G = 0 (only the copy), which must run (below).
    assert steep["guesses"] == 0 and steep["expected_tokens"] == pytest.approx(
        la.expected_tokens(steep["window"], steep["ngram"], 0), abs=1e-3)


@pytest.mark.parametrize("name", list(CURVES))
def test_the_decoder_runs_auto_exactly_whatever_it_chose(name, curve_on_this_machine, one_thread):
    """`auto` end to end on a tiny model: the trace records what the sizing chose, and greedy output is
    autoregressive's whether the choice has candidates (flat) or none at all (steep: G = 0)."""
    curve_on_this_machine(CURVES[name])
    pair = tiny_pair(draft_seed=None)
    choice = la.choose(pair)["choice"]
    ar = make_decoder("ar", pair, "", prompt_ids=TINY_PROMPT, max_new_tokens=24).run().token_ids
    for graphs in ("off", "on"):
        trace = make_decoder("lookahead", pair, "", prompt_ids=TINY_PROMPT, max_new_tokens=24, graphs=graphs).run()
        settings = trace.settings
        assert settings["auto"] is True
        assert (settings["window"], settings["ngram"], settings["guesses"]) == (
            choice["window"], choice["ngram"], choice["guesses"])
        assert trace.token_ids == ar, (name, graphs)
        sources = [s for step in trace.steps for s in step.token_sources]
        if choice["guesses"] == 0:   # only copies are verified
            assert SOURCE_NGRAM not in sources
            assert all(c.origin == ORIGIN_COPY for step in trace.steps[1:] for c in step.payload.candidates)


# -- Sequoia: plan_from_curves -------------------------------------------------------------------------


def sequoia_candidates(plan: dict, max_budget: int, max_depth: int):
    """Every (budget, depth) tree the plan weighs, with its expected tokens and predicted ms per step,
    recomputed from the curves the plan read: the DP's best tree of that size, priced by its forwards."""
    target = {int(n): ms for n, ms in plan["target_ms"].items()}
    draft = {int(n): ms for n, ms in plan["draft_ms"].items()}
    top = int(min(max_budget, max(target)))
    grid = sorted(set(range(2, min(16, top) + 1)) | set(range(16, top + 1, 8)) | {n for n in target if 2 <= n <= top})
    tables = build_tables(ACCEPTANCE, top, max_depth)
    for depth in range(1, max_depth + 1):
        for budget in grid:
            if not math.isfinite(tables.best[depth, budget]):
                continue
            parents = tables.parents(budget, depth)
            shape = TreeShape.from_parents(parents)
            draft_ms = sum(_interp(draft, 1 if level == 0 else end - start)
                           for level, (start, end) in enumerate(shape.level_ranges[:shape.depth]))
            yield budget, depth, tree_value(parents, ACCEPTANCE), draft_ms + _interp(target, shape.size)


@pytest.mark.parametrize("name", list(CURVES))
def test_sequoia_plan_takes_the_tree_with_the_least_predicted_time_per_token(name):
    plan = sq.plan_from_curves(ACCEPTANCE, CURVES[name], DRAFTS[name], 128, 12)
    assert {int(n): ms for n, ms in plan["target_ms"].items()} == CURVES[name]   # the curve it read (rising)
    weighed = list(sequoia_candidates(plan, 128, 12))
    assert len(weighed) > 50
    best = min(ms / value for _, _, value, ms in weighed)
    choice = plan["choice"]
    assert choice["ms_per_token"] == pytest.approx(best, rel=1e-3)
    assert choice["ms_per_token"] == pytest.approx(choice["ms_per_step"] / choice["value"], rel=1e-3)
    assert choice["value"] == pytest.approx(tree_value(choice["parents"], ACCEPTANCE), abs=1e-3)
    assert len(choice["parents"]) == choice["budget"] and choice["tree_depth"] <= choice["depth"]
    # The table (the measured sizes) holds no row faster than the choice.
    assert all(row["ms_per_token"] >= choice["ms_per_token"] - 1e-3 for row in plan["table"])
    ar_ms = CURVES[name][1]
    assert choice["predicted_speedup"] == pytest.approx(choice["value"] * ar_ms / choice["ms_per_step"], rel=1e-3)


def test_sequoia_tree_grows_with_a_flat_curve():
    plans = {name: sq.plan_from_curves(ACCEPTANCE, CURVES[name], DRAFTS[name], 128, 12) for name in CURVES}
    flat, steep = plans["flat"]["choice"], plans["steep"]["choice"]
    assert flat["budget"] > steep["budget"] and flat["tree_depth"] >= steep["tree_depth"]
    assert flat["value"] > steep["value"] and flat["predicted_speedup"] > steep["predicted_speedup"]
    # Even the steep machine's best tree is a tree (two nodes at least): the decoder runs any of them.
    assert steep["budget"] >= 2 and len(steep["parents"]) == steep["budget"]


def test_sequoias_adaptive_budget_grows_with_a_flat_curve(tmp_path, monkeypatch):
    """The adaptive tree's budget is the target's free rows on the cached curve: many on the flat one, the
    floor on the steep one."""
    from specviz.engine.profiler import SMALL_SIZES, _curve_key, save_cached

    pair = tiny_pair()
    budgets = {}
    for name, curve in CURVES.items():
        monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / name))
        for model, key, sizes, ms in ((pair.target, curve_key(pair, "target"), default_sizes(pair.device),
                                       curve), (pair.draft, curve_key(pair, "draft"), SMALL_SIZES,
                                                DRAFTS[name])):
            save_cached("forward", _curve_key(model, key, 200), {"key": key, "ms": {str(n): ms[n] for n in sizes}})
        plan, costs = sq.adaptive_plan(pair)
        assert costs["from"] == "measured"
        budgets[name] = plan["max_nodes"]
    assert budgets["flat"] > budgets["steep"] == sq.ADAPTIVE_MIN_NODES
