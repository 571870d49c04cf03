"""Sequoia's tree DP against exhaustive search, plus the tree-structure helpers."""

import json
import subprocess
import sys
from functools import lru_cache

import numpy as np
import pytest
import torch

from specviz.errors import InvalidInput
from specviz.sequoia.tree import TreeShape, TreeTensors, check_parents
from specviz.sequoia.tree_dp import build_tables, optimal_tree, tree_value


def chain_value(p1: float, depth: int) -> float:
    """A chain of `depth` speculated tokens: 1 + p1 + p1^2 + ... + p1^depth."""
    return float(sum(p1 ** k for k in range(depth + 1)))


@lru_cache(maxsize=None)
def ordered_trees(m: int, depth: int, width: int) -> tuple:
    """Every ordered tree with exactly m nodes, at most `depth` levels below the root and
    at most `width` children per node, as a tuple of child subtrees."""
    if m == 1:
        return ((),)
    if depth == 0:
        return ()
    return tuple(forests(m - 1, depth - 1, width, width))


def forests(m: int, depth: int, width: int, slots: int):
    """Sequences of at most `slots` trees with m nodes in all."""
    if m == 0:
        yield ()
        return
    if slots == 0:
        return
    for first in range(1, m + 1):
        for tree in ordered_trees(first, depth, width):
            for rest in forests(m - first, depth, width, slots - 1):
                yield (tree,) + rest


def nested_value(tree: tuple, p) -> float:
    return 1.0 + sum(p[k] * nested_value(child, p) for k, child in enumerate(tree))


def exhaustive_best(m: int, depth: int, p) -> float:
    trees = ordered_trees(m, depth, len(p))
    return max((nested_value(t, p) for t in trees), default=-np.inf)


@pytest.mark.parametrize("seed", range(4))
def test_dp_equals_exhaustive_search_up_to_nine_nodes(seed):
    rng = np.random.default_rng(seed)
    width = 2 + seed % 3
    p = rng.dirichlet(np.ones(width + 1))[:width]           # sums to < 1, like a measured vector
    tables = build_tables(p, 9, 5)
    for depth in range(0, 6):
        for m in range(1, 10):
            expected = exhaustive_best(m, depth, p)
            got = tables.best[depth, m]
            if np.isinf(expected):
                assert np.isinf(got)
            else:
                assert got == pytest.approx(expected, abs=1e-12), (m, depth)
                assert tree_value(tables.parents(m, depth), p) == pytest.approx(expected, abs=1e-12)


def test_number_of_ordered_trees_is_catalan():
    # Sanity of the exhaustive search itself: unrestricted ordered trees with 9 nodes = Catalan(8).
    assert len(ordered_trees(9, 8, 8)) == 1430


@pytest.mark.parametrize("p1,depth", [(0.8, 6), (0.5, 3), (0.95, 10)])
def test_chain_value(p1, depth):
    assert chain_value(p1, depth) == pytest.approx(sum(p1 ** k for k in range(depth + 1)))
    # With one rank only, the best tree of depth+1 nodes is the chain.
    result = optimal_tree([p1], depth + 1, depth)
    assert result.parents == [-1] + list(range(depth))
    assert result.value == pytest.approx(chain_value(p1, depth))


def test_parents_are_breadth_first_with_ranked_children():
    p = [0.5, 0.2, 0.1, 0.05, 0.03]
    result = optimal_tree(p, 40, 6)
    parents = result.parents
    assert len(parents) == 40
    check_parents(parents)  # raises unless BFS with contiguous levels
    shape = TreeShape.from_parents(parents)
    assert shape.depth <= 6
    for kids in shape.children:
        assert kids == list(range(kids[0], kids[0] + len(kids))) if kids else True
        assert len(kids) <= len(p)
    # Higher-ranked children never get bigger subtrees than lower-ranked ones (p decreases).
    sizes = [1] * len(parents)
    for i in range(len(parents) - 1, 0, -1):
        sizes[parents[i]] += sizes[i]
    for kids in shape.children:
        assert [sizes[k] for k in kids] == sorted((sizes[k] for k in kids), reverse=True)
    assert tree_value(parents, p) == pytest.approx(result.value)
    # The table is monotone: more nodes or more depth never hurts.
    for (n, d), v in result.table.items():
        if (n, d - 1) in result.table:
            assert v >= result.table[(n, d - 1)] - 1e-12
        if (n - 1, d) in result.table:
            assert v >= result.table[(n - 1, d)] - 1e-12


def test_infeasible_and_bad_inputs_raise_invalid_input():
    with pytest.raises(InvalidInput, match="no tree has"):
        optimal_tree([0.5, 0.2], 9, 2)        # at most 1 + 2 + 4 = 7 nodes fit
    with pytest.raises(InvalidInput):
        optimal_tree([0.7, 0.5], 4, 2)        # sums above 1
    with pytest.raises(InvalidInput):
        optimal_tree([], 4, 2)
    with pytest.raises(InvalidInput):
        optimal_tree([0.5], 0, 2)
    with pytest.raises(InvalidInput):
        check_parents([-1, 0, 2])


def test_tree_shape_helpers_and_mask():
    #        0
    #      1   2
    #     3 4   5
    parents = [-1, 0, 0, 1, 1, 2]
    shape = TreeShape.from_parents(parents)
    assert shape.depths == [0, 1, 1, 2, 2, 2]
    assert shape.ranks == [0, 1, 2, 1, 2, 1]
    assert shape.level_ranges == [(0, 1), (1, 3), (3, 6)]
    assert shape.truncated(1).parents == [-1, 0, 0]
    expected = torch.tensor([
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 0, 1, 0, 0, 0],
        [1, 1, 0, 1, 0, 0],
        [1, 1, 0, 0, 1, 0],
        [1, 0, 1, 0, 0, 1],
    ], dtype=torch.bool)
    assert torch.equal(shape.ancestor_matrix(), expected)
    tt = TreeTensors(shape, torch.device("cpu"))
    # Where each child's token comes from in its level's top-c draws.
    assert tt.draw_row[0].tolist() == [0, 0] and tt.draw_rank[0].tolist() == [0, 1]
    assert tt.draw_row[1].tolist() == [0, 0, 1] and tt.draw_rank[1].tolist() == [0, 1, 0]
    assert tt.level_width == [2, 2, 0]


def test_cli_tree_dp_json():
    out = subprocess.run([sys.executable, "-m", "specviz", "tree-dp", "--acceptance", "[0.63, 0.11, 0.06]",
                          "--budget", "8", "--depth", "4", "--json"], capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    assert set(data) >= {"value", "parents", "table"}
    assert len(data["parents"]) == 8
    assert data["value"] == pytest.approx(optimal_tree([0.63, 0.11, 0.06], 8, 4).value)
    assert data["table"]["8,4"] == pytest.approx(data["value"])
    bad = subprocess.run([sys.executable, "-m", "specviz", "tree-dp", "--acceptance", "[0.6, 0.7]",
                          "--budget", "8", "--depth", "4"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error:") and "Traceback" not in bad.stderr


# -- the optimiser and the acceptance profiler -------------------------------------------


def test_plan_prefers_big_trees_when_verification_is_free_and_small_when_not():
    from specviz.sequoia.sizing import plan_from_curves

    p = [0.6, 0.15, 0.08, 0.04]
    sizes = [1, 2, 4, 8, 16, 32, 64, 128]
    flat = {n: 30.0 for n in sizes}                       # a GPU-like curve: n tokens cost as much as 1
    steep = {n: 30.0 * n for n in sizes}                  # every extra token costs a full forward
    cheap_draft = {n: 1.0 for n in sizes}
    gpu = plan_from_curves(p, flat, cheap_draft, 128, 10)
    cpu = plan_from_curves(p, steep, cheap_draft, 128, 10)
    assert gpu["choice"]["budget"] > 32 and gpu["choice"]["predicted_speedup"] > 2
    assert cpu["choice"]["budget"] <= 4
    row = gpu["choice"]
    assert row["predicted_speedup"] == pytest.approx(row["value"] * 30.0 / row["ms_per_step"], rel=1e-3)
    assert len(row["parents"]) == row["budget"]
    assert all(r["budget"] in sizes for r in gpu["table"])
    json.dumps(gpu)                                        # plain data for the app and the CLI


def test_monotone_pools_a_curve_that_dips():
    # A measured t(2) below t(1) made two-node trees look free; more tokens never cost less.
    from specviz.sequoia.sizing import monotone

    dipping = {1: 20.2, 2: 18.9, 4: 25.0, 8: 24.0, 16: 30.0}
    assert monotone(dipping) == pytest.approx({1: 19.55, 2: 19.55, 4: 24.5, 8: 24.5, 16: 30.0})
    rising = {1: 1.0, 2: 2.0, 4: 2.0}
    assert monotone(rising) == rising


CPU_TARGET = {n: 20.0 + 0.25 * n for n in (1, 2, 4, 8, 16, 32, 64, 128)}
CPU_DRAFT = {n: 1.3 + 0.03 * n for n in (1, 2, 4, 8, 16, 32, 64)}
FEATURE_P = [0.41, 0.135, 0.07, 0.04, 0.05, 0.02, 0.01, 0.016]


def test_step_costs_are_fitted_from_real_steps_through_noise():
    from specviz.sequoia.sizing import StepCosts, calibration_trees, draft_forwards_ms, fit_step_costs
    from specviz.sequoia.tree import TreeShape

    true = StepCosts(per_level=1.5, per_step=2.0, per_node=0.1)
    rng = np.random.default_rng(0)
    samples = []
    trees = calibration_trees(FEATURE_P, None)
    assert len(trees) == 3 and len({TreeShape.from_parents(t).depth for t in trees}) == 3
    for parents in trees:
        shape = TreeShape.from_parents(parents)
        for i in range(20):
            slow = 30.0 if i % 5 == 0 else 0.0     # a shared CPU's odd slow step: medians ignore it
            draft = draft_forwards_ms(shape, CPU_DRAFT) + true.per_level * shape.depth + rng.normal(0, 0.05)
            rest = (np.interp(shape.size, list(CPU_TARGET), list(CPU_TARGET.values())) + true.per_step
                    + true.per_node * shape.size + slow + rng.normal(0, 0.05))
            samples.append({"parents": parents, "draft_ms": draft, "rest_ms": rest})
    fitted = fit_step_costs(samples, [21.0] * 5, CPU_TARGET, CPU_DRAFT)
    assert fitted.per_level == pytest.approx(1.5, abs=0.1)
    assert fitted.per_step == pytest.approx(2.0, abs=0.2)
    assert fitted.per_node == pytest.approx(0.1, abs=0.02)
    assert fitted.ar_per_step == pytest.approx(21.0 - CPU_TARGET[1])
    # Steps faster than their profiled forwards (noise) must not make trees look cheaper than free.
    fast = [{**s, "draft_ms": 0.0, "rest_ms": 0.0} for s in samples]
    assert fit_step_costs(fast, [], CPU_TARGET, CPU_DRAFT) == StepCosts()
    # Sampled steps also pay per node drawn from (a softmax and Gumbel keys per row): told apart from levels.
    drawn = [{**s, "draft_ms": s["draft_ms"] + 0.3 * sum(1 for c in TreeShape.from_parents(s["parents"]).children if c)}
             for s in samples]
    both = fit_step_costs(drawn, [21.0] * 5, CPU_TARGET, CPU_DRAFT)
    assert both.per_level == pytest.approx(1.5, abs=0.1) and both.per_parent == pytest.approx(0.3, abs=0.03)
    assert fitted.per_parent == pytest.approx(0.0, abs=0.03)
    # Steps on a machine 20% slower than when the curve was measured: against the curve the rest
    # reads as more than 5 ms of work, against each step's own timed target forward it is exact.
    slower = []
    for s in samples:
        target = 1.2 * np.interp(len(s["parents"]), list(CPU_TARGET), list(CPU_TARGET.values()))
        slower.append({**s, "rest_ms": s["rest_ms"] - target / 1.2 + target, "target_ms": target})
    drifted = fit_step_costs(slower, [1.2 * CPU_TARGET[1] + 0.4] * 5, CPU_TARGET, CPU_DRAFT,
                             ar_target_ms=[1.2 * CPU_TARGET[1]] * 5)
    assert drifted.per_step == pytest.approx(2.0, abs=0.2) and drifted.per_node == pytest.approx(0.1, abs=0.02)
    assert drifted.ar_per_step == pytest.approx(0.4)
    # ... and the forwards the steps timed say what the plan prices the target at: 1.2x the curve here.
    assert set(drifted.in_step) == {"1"} | {str(len(t)) for t in trees}
    assert all(r == pytest.approx(1.2, abs=0.01) for r in drifted.in_step.values())
    assert drifted.target_ratio(2) == pytest.approx(1.2, abs=0.01) and fitted.target_ratio(8) == 1.0
    untimed = [{k: v for k, v in s.items() if k != "target_ms"} for s in slower]
    assert fit_step_costs(untimed, [], CPU_TARGET, CPU_DRAFT).per_step > 5
    # A one-rank vector can only make chains: the calibration still has trees, of every depth.
    chains = calibration_trees([0.63], None)
    assert [len(t) for t in chains] == [2, 4, 6] and fit_step_costs([], [22.0], CPU_TARGET, CPU_DRAFT).ar_per_step > 0


def test_step_costs_move_the_choice_the_way_they_should():
    from specviz.sequoia.sizing import StepCosts, plan_from_curves, tree_cost_ms

    bare = plan_from_curves(FEATURE_P, CPU_TARGET, CPU_DRAFT, 128, 12)
    # A cost every step pays is shared by more tokens in a bigger tree.
    per_step = plan_from_curves(FEATURE_P, CPU_TARGET, CPU_DRAFT, 128, 12, costs=StepCosts(per_step=6.0))
    assert per_step["choice"]["value"] > bare["choice"]["value"]
    # A cost per draft level makes deep trees dear.
    per_level = plan_from_curves(FEATURE_P, CPU_TARGET, CPU_DRAFT, 128, 12, costs=StepCosts(per_level=8.0))
    assert per_level["choice"]["tree_depth"] < bare["choice"]["tree_depth"]
    row = per_level["choice"]
    assert row["ms_per_step"] == pytest.approx(
        tree_cost_ms(row["parents"], CPU_TARGET, CPU_DRAFT, costs=StepCosts(per_level=8.0)), abs=1e-3)
    assert per_level["step_costs"]["per_level"] == 8.0 and json.dumps(per_level)


def test_the_target_is_priced_as_the_steps_ran_it():
    """A tree's forward right after the draft's runs slower than the curve's back-to-back one: priced so, the
    plan's speedups fall and bigger trees lose their edge; `ar`'s forward keeps its own ratio."""
    from specviz.sequoia.sizing import StepCosts, plan_from_curves, tree_cost_ms

    evicted = StepCosts(in_step={"1": 1.0, "4": 1.3, "32": 1.3})
    assert evicted.target_ratio(1) == 1.0 and evicted.target_ratio(2) == pytest.approx(1.15)
    assert evicted.target_ratio(8) == evicted.target_ratio(512) == pytest.approx(1.3)
    assert json.loads(json.dumps(evicted.to_dict()))["in_step"] == {"1": 1.0, "4": 1.3, "32": 1.3}
    assert StepCosts(**evicted.to_dict()) == evicted   # what the cache reads back
    bare = plan_from_curves(FEATURE_P, CPU_TARGET, CPU_DRAFT, 128, 12)
    priced = plan_from_curves(FEATURE_P, CPU_TARGET, CPU_DRAFT, 128, 12, costs=evicted)
    assert priced["ar_ms_per_token"] == bare["ar_ms_per_token"]
    assert priced["choice"]["predicted_speedup"] < bare["choice"]["predicted_speedup"]
    parents = priced["choice"]["parents"]
    assert tree_cost_ms(parents, CPU_TARGET, CPU_DRAFT, costs=evicted) == pytest.approx(
        tree_cost_ms(parents, CPU_TARGET, CPU_DRAFT) + 0.3 * np.interp(len(parents), list(CPU_TARGET),
                                                                       list(CPU_TARGET.values())), rel=1e-6)
    slow_ar = plan_from_curves(FEATURE_P, CPU_TARGET, CPU_DRAFT, 128, 12, costs=StepCosts(in_step={"1": 1.3}))
    assert slow_ar["ar_ms_per_token"] == pytest.approx(1.3 * bare["ar_ms_per_token"])


def test_profile_acceptance_and_lookup(tmp_path, monkeypatch):
    from helpers import tiny_pair

    from specviz.engine.sampling import SamplingConfig
    from specviz.sequoia import acceptance, measure

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pair = tiny_pair()
        cfg = SamplingConfig(1.0, seed=0)
        before = acceptance.acceptance_for(pair, cfg)
        assert before["source"].startswith("default")
        result = measure.profile_acceptance_by_depth(pair, ["t1 t2 t3", "t4 t5"], 3, 1, cfg, steps=60,
                                                     max_new_tokens=20, show_progress=False)
        assert result["steps"] == 60 and sum(result["counts"]) + result["rejected_all"] == 60
        assert 0 < sum(result["acceptance"]) <= 1
        after = acceptance.acceptance_for(pair, cfg)
        assert after["acceptance"] == result["acceptance"] and after["source"].startswith("measured")
        # A target drafting for itself at temperature 1 accepts the first child every time.
        self_pair = tiny_pair(draft_seed=None)
        exact = measure.profile_acceptance_by_depth(self_pair, ["t1 t2"], 2, 1, cfg, steps=20, max_new_tokens=20,
                                                    show_progress=False, save=False)
        assert exact["acceptance"] == [1.0, 0.0]
    finally:
        torch.set_num_threads(threads)


def test_zero_entries_in_the_acceptance_vector():
    # A measured vector may hold zeros: 0 * (an infeasible -inf) must not poison the DP with NaN.
    p = [0.9, 0.0, 0.05]
    tables = build_tables(p, 8, 3)
    for depth in range(4):
        for m in range(1, 9):
            expected = exhaustive_best(m, depth, p)
            assert tables.best[depth, m] == pytest.approx(expected) if np.isfinite(expected) \
                else np.isinf(tables.best[depth, m])


def test_a_forward_curve_measured_on_busy_cores_is_used_but_not_cached(tmp_path, monkeypatch, capsys):
    """A t(n) curve taken while other programs held the cores once made `auto` pick a 32-node tree for
    good; now such a curve serves its own run only. The waiting share comes from Linux's schedstat."""
    from helpers import tiny_pair

    from specviz.engine import profiler

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    model = tiny_pair().target
    waited = iter([10.0, 10.0 + 1e6])   # a million seconds of waiting: far past any share
    monkeypatch.setattr(profiler, "runqueue_wait_seconds", lambda: next(waited))
    busy = profiler.forward_curve(model, "tiny-busy", sizes=[1, 2], context_len=8)
    assert set(busy) == {1, 2} and all(v > 0 for v in busy.values())
    assert "not cached" in capsys.readouterr().err
    assert profiler.load_cached("forward", f"tiny-busy-{profiler.forward_kind(model)}-ctx8-down") is None

    monkeypatch.setattr(profiler, "runqueue_wait_seconds", lambda: 5.0)   # no waiting at all
    profiler.forward_curve(model, "tiny-busy", sizes=[1, 2], context_len=8)
    cached = profiler.load_cached("forward", f"tiny-busy-{profiler.forward_kind(model)}-ctx8-down")
    assert cached is not None and cached["waiting_share"] == 0.0
    real = profiler.runqueue_wait_seconds()   # Linux: a number of seconds; elsewhere None
    assert real is None or real >= 0


def test_adaptive_allocation_serves_confident_nodes_first_within_the_budget():
    from specviz.sequoia.adaptive import allocate_children

    # Node 1 is the more confident: served first, it takes ranked children while score * p >= tau.
    ranked = [[0.5, 0.3, 0.1, 0.05], [0.9, 0.05, 0.03, 0.01]]
    assert allocate_children([0.5, 0.9], ranked, tau=0.04, max_children=4, budget=10) == [3, 2]
    assert allocate_children([0.5, 0.9], ranked, tau=0.04, max_children=4, budget=3) == [1, 2]
    assert allocate_children([0.5, 0.9], ranked, tau=0.04, max_children=1, budget=10) == [1, 1]
    assert allocate_children([0.05, 0.03], ranked, tau=0.04, max_children=4, budget=10) == [0, 0]
    # Ties go to the node given first.
    assert allocate_children([0.5, 0.5], [[0.9], [0.9]], tau=0.1, max_children=4, budget=1) == [1, 0]


def test_an_adaptive_level_sees_the_root_its_read_ancestors_and_itself():
    from specviz.sequoia.adaptive import read_block

    #   0 -> 1 (read at offset 1), 2 (not read); 1 -> 3, 4 (read at offsets 2, 3); 3 -> 5, 4 -> 6
    parents = [-1, 0, 0, 1, 1, 3, 4]
    offsets = {0: 0, 1: 1, 3: 2, 4: 3}
    rows = read_block([5, 6], parents, {**offsets, 5: 4, 6: 5}, first=4)
    assert [[c for c, seen in enumerate(row) if seen] for row in rows] == [[0, 1, 2, 4], [0, 1, 3, 5]]
    # a level right after the root's: the root and itself
    assert read_block([1, 2], parents, {0: 0, 1: 1, 2: 2}, first=1) == [[True, True, False], [True, False, True]]


def test_a_padded_adaptive_levels_rows_bound_every_tree_it_can_grow():
    from specviz.sequoia.adaptive import allocate_children, padded_block, padded_levels

    rows, first = padded_levels(max_nodes=24, max_depth=5, max_children=4, tau=0.05)
    # depth 1: 4 children of the root; 2: 16; then the budget (23 nodes past the root) and 1 / tau (20)
    assert rows == [0, 4, 16, 20, 20] and first == [0, 1, 5, 21, 41]
    assert padded_levels(8, 1, 4, 0.05) == ([0], [0])   # one level deep: only the root's read
    # The bound 1 / tau holds for any allocation: every made node's score reaches tau, and a depth's sum <= 1.
    rng = np.random.default_rng(0)
    for _ in range(200):
        scores = [1.0]
        for depth in range(1, 5):
            ranked = [sorted(rng.dirichlet(np.ones(6) * 0.3), reverse=True) for _ in scores]
            counts = allocate_children(scores, ranked, 0.05, 4, 10_000)
            scores = [s * p[k] for s, p, c in zip(scores, ranked, counts) for k in range(c)]
            assert len(scores) <= padded_levels(10_000, 5, 4, 0.05)[0][depth], (depth, len(scores))
    # A padding row sees the root and its own slot; real rows keep their block, widened.
    block = padded_block([[True, True, False, True]], first=3, width=3)
    assert [[c for c, seen in enumerate(row) if seen] for row in block] == [[0, 1, 3], [0, 4], [0, 5]]


def test_an_adaptive_level_is_read_only_where_it_can_pay_for_itself():
    from specviz.sequoia.adaptive import level_pays

    # E = 2 expected tokens, a step costing 1.2 target forwards; the frontier's children add about 0.1 x 0.8.
    assert level_pays([0.1], 0.8, 2.0, level_cost=0.03, step_cost=1.2)        # a feature draft's cheap level
    assert not level_pays([0.1], 0.8, 2.0, level_cost=0.18, step_cost=1.2)    # a 4-layer draft's level
    assert level_pays([0.5, 0.3], 0.8, 2.0, level_cost=0.18, step_cost=1.2)   # unless the frontier is likely
    assert not level_pays([0.5, 0.3], 0.2, 2.0, level_cost=0.18, step_cost=1.2)   # and the draft was sure
    assert not level_pays([], 1.0, 2.0, level_cost=0.0001, step_cost=1.2)


def test_adaptive_costs_come_from_cached_curves_else_from_the_weights_read(tmp_path, monkeypatch):
    from helpers import tiny_pair

    from specviz.engine.profiler import SMALL_SIZES, _curve_key, curve_key, default_sizes, save_cached
    from specviz.sequoia.sizing import adaptive_costs, forward_weight_bytes

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    pair = tiny_pair()
    costs = adaptive_costs(pair, 8)
    assert costs["from"] == "weights" and len(costs["draft"]) == len(costs["target"]) == 9
    ratio = forward_weight_bytes(pair.draft) / forward_weight_bytes(pair.target)
    assert costs["draft"] == pytest.approx([ratio] * 9) and costs["target"] == [1.0] * 9
    # Curves in the cache (as `--tree auto` leaves them): costs relative to t(1), made monotone.
    for model, key, ms in ((pair.target, curve_key(pair, "target"), {1: 10.0, 2: 9.0, 8: 12.0, 256: 40.0}),
                           (pair.draft, curve_key(pair, "draft"), {1: 2.0, 64: 4.0})):
        sizes = SMALL_SIZES if model is pair.draft else default_sizes(torch.device("cpu"))
        curve = {str(n): float(np.interp(n, list(ms), list(ms.values()))) for n in sizes}
        save_cached("forward", _curve_key(model, key, 200), {"key": key, "ms": curve})
    measured = adaptive_costs(pair, 8)
    assert measured["from"] == "measured" and measured["target"][1] == measured["target"][2] == 1.0   # pooled
    assert measured["draft"][1] == pytest.approx(2.0 / 9.5) and measured["target"][8] == pytest.approx(12.0 / 9.5)
    assert all(b >= a for a, b in zip(measured["target"][1:], measured["target"][2:]))


def test_free_rows_end_where_the_target_starts_charging_for_rows():
    from specviz.sequoia.adaptive import free_rows

    # The 2-core CPU's shape: flat to 8 rows (0.3% a row), then about 4% a row.
    curve = [1.0] + [1.0 + 0.003 * (n - 1) for n in range(1, 9)] + [1.021 + 0.04 * k for k in range(1, 17)]
    assert free_rows(curve, 0.025, 4, 24) == 8
    assert free_rows(curve, 0.05, 4, 24) == 24          # a dearer threshold's nodes pay for dearer rows
    assert free_rows([1.0] * 25, 0.025, 4, 24) == 24    # flat (a GPU, or no measured curve): the cap binds
    steep = [1.0] + [1.0 + 0.1 * (n - 1) for n in range(1, 25)]
    assert free_rows(steep, 0.025, 4, 24) == 4          # never below the floor
    # fp32 on a Zen 4 EPYC (pooled by `monotone`): a jump from one row to two, then flat to 8. The floor's
    # rows are paid anyway, so the count grows past it while rows stay free (counted from 1: stuck at 4).
    jump = [1.0, 1.0] + [1.48] * 7 + [1.48 + 0.014 * k for k in range(1, 17)]
    assert free_rows(jump, 0.0125, 4, 24) == 8
    assert free_rows(jump, 0.0125, 4, 6) == 6          # the cap still binds


def test_adaptive_budget_is_the_targets_free_rows_unless_given(tmp_path, monkeypatch):
    from helpers import tiny_pair

    from specviz.engine.profiler import SMALL_SIZES, _curve_key, curve_key, default_sizes, save_cached
    from specviz.sequoia.sizing import ADAPTIVE_MAX_NODES, adaptive_plan

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    pair = tiny_pair()
    plan, costs = adaptive_plan(pair)
    assert costs["from"] == "weights" and plan["max_nodes"] == ADAPTIVE_MAX_NODES
    assert plan["tree_budget_from"] == "default (no measured curve)"
    for model, key, ms in ((pair.target, curve_key(pair, "target"), {1: 30.0, 8: 30.6, 16: 40.0, 64: 100.0}),
                           (pair.draft, curve_key(pair, "draft"), {1: 2.0, 64: 4.0})):
        sizes = SMALL_SIZES if model is pair.draft else default_sizes(torch.device("cpu"))
        curve = {str(n): float(np.interp(n, list(ms), list(ms.values()))) for n in sizes}
        save_cached("forward", _curve_key(model, key, 200), {"key": key, "ms": curve})
    plan, costs = adaptive_plan(pair)
    assert costs["from"] == "measured" and plan["tree_budget_from"] == "target's free rows"
    assert plan["max_nodes"] == 8 and plan["max_depth"] == 7
    assert len(costs["target"]) == ADAPTIVE_MAX_NODES + 1   # the costs still span any tree asked for
    given, _ = adaptive_plan(pair, tree_budget=16, tree_depth=3)
    assert (given["max_nodes"], given["max_depth"], given["tree_budget_from"]) == (16, 3, "given")
    assert adaptive_plan(pair, tree_depth=3)[0]["max_depth"] == 3


def test_a_sampled_race_goes_on_until_its_interval_clears_the_margin():
    """One round of sampled text scatters too much to decide a few percent against the margin: a sampled race
    takes its least rounds, then stops only once the interval of its per-prompt ratios lies on one side of the
    margin, or at its most rounds. A greedy race decodes the same text each round, so one round decides."""
    from specviz.engine.sampling import SamplingConfig
    from specviz.sequoia.sizing import ADAPTIVE_MARGIN, RACE_ROUNDS_SAMPLED, race_interval, race_settled

    least, most = RACE_ROUNDS_SAMPLED
    sampled, greedy = SamplingConfig(0.6), SamplingConfig()
    clear_win = [1.10, 1.12, 1.09, 1.11, 1.13, 1.10] * least         # tight, well above the margin
    clear_loss = [0.90, 0.93, 0.91, 0.92, 0.90, 0.94] * least
    straddling = [0.75, 1.26, 0.95, 1.04, 1.01, 0.92] * least        # the race's own scatter, at a mean near 1
    low, high = race_interval(clear_win)
    assert ADAPTIVE_MARGIN < low < 1.11 < high < 1.12
    assert race_interval([1.1]) is None and race_interval([]) is None
    # The geometric mean: a ratio and its inverse average to 1.
    low, high = race_interval([2.0, 0.5])
    assert low < 1.0 < high and low * high == pytest.approx(1.0)
    assert race_settled(clear_win, least, sampled) and race_settled(clear_loss, least, sampled)
    assert not race_settled(clear_win[:6], least - 1, sampled)       # never before the least rounds
    assert not race_settled(straddling, least, sampled)              # unsettled: another round
    assert race_settled(straddling, most, sampled)                   # the most rounds end it anyway
    assert race_settled(straddling[:6], 1, greedy)
