"""What visitors type cannot grow this machine's caches or its queue of background work (issue #66, item 5).

Sequoia's plans and step costs are keyed by the sampling mode and the acceptance vector, not by the floats of
temperature, top-p and top-k; the worker's measurements are queued once per measurement and a few at most;
captured graphs and loaded model pairs are held least recently used first, within a size limit. None of it
runs a real race: the sizing's measurements, the measurement itself and the captures are stubbed.
"""

from __future__ import annotations

import threading

import pytest
import torch
from helpers import tiny_pair

from specviz.engine import graphs, models
from specviz.runtime import race, worker
from specviz.engine.profiler import save_cached
from specviz.engine.sampling import SamplingConfig
from specviz.request import CUSTOM, RaceRequest
from specviz.sequoia import sizing as sq

FLAT = {n: 10.0 for n in (1, 2, 4, 8, 16, 32, 64, 128, 256)}
DRAFT = {n: 1.0 for n in sq.SMALL_SIZES}
N_VISITORS = 50


def visitor_settings(n: int = N_VISITORS) -> list[SamplingConfig]:
    """n distinct sampled settings, as visitors type them: temperature, top-p and top-k all vary."""
    return [SamplingConfig(0.05 + 0.037 * i, 1.0 if i % 3 else 0.5 + i / 200, 0 if i % 2 else 5 + i) for i in range(n)]


@pytest.fixture
def stubbed_sizing(tmp_path, monkeypatch):
    """`plan_tree` with its measurements stubbed (curves, step costs, the race), so a plan costs nothing and
    is saved as a trusted one; returns the list of measurements made and the profiles folder."""
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    measured = []

    def step_costs_for(pair, sampling, acc, target_ms, draft_ms, trusted, refresh=False, graphs=False):
        costs = sq.StepCosts(per_step=1.0)
        save_cached("sequoia-step-costs", sq._costs_key(pair, sampling, graphs), {"costs": costs.to_dict()})
        return costs, True

    def race_trees(pair, sampling, parents, graphs=False):
        measured.append(sampling)
        return {"adaptive_over_tree": 1.0, "waiting_share": None, "adaptive_rule": sq.ADAPTIVE_RULE}

    monkeypatch.setattr(sq, "measured_curves", lambda pair, refresh=False, graphs=False: (FLAT, DRAFT, True))
    monkeypatch.setattr(sq, "step_costs_for", step_costs_for)
    monkeypatch.setattr(sq, "race_trees", race_trees)
    return measured, tmp_path / "profiles"


def serve_visitors(pair, settings: list[SamplingConfig]) -> None:
    """What the app's worker does for each race on `auto`: measure the plan when it is not cached."""
    for sampling in settings:
        if sq.auto_pending(pair, sampling):
            sq.measure_auto(pair, sampling)


def test_fifty_visitors_temperatures_leave_a_plan_per_sampling_mode(stubbed_sizing, one_thread):
    measured, profiles = stubbed_sizing
    pair = tiny_pair()
    serve_visitors(pair, [SamplingConfig()] + visitor_settings() + [SamplingConfig(1e-39)])
    # Greedy, sampled and filtered (top-p / top-k): each measured once, one plan file each.
    assert sorted(s.mode for s in measured) == ["filtered", "greedy", "sampled"]
    assert len(list(profiles.glob("sequoia-plan-*.json"))) == 3
    assert len(list(profiles.glob("sequoia-step-costs-*.json"))) == 3
    # And every later visitor is served from them: nothing is pending, whatever the floats.
    assert not any(sq.auto_pending(pair, s) for s in visitor_settings(2 * N_VISITORS))


def test_a_temperature_that_reads_another_acceptance_vector_has_its_own_plan_measured_once(
        stubbed_sizing, monkeypatch, one_thread):
    # As with the shipped vectors (T=0 and T=0.6, the nearest one chosen): two vectors for sampled runs.
    measured, profiles = stubbed_sizing
    low, high = [0.8, 0.1, 0.05], [0.5, 0.2, 0.1]
    monkeypatch.setattr(sq, "acceptance_for", lambda pair, sampling: {
        "acceptance": low if sampling.temperature < 0.3 else high, "source": "test"})
    pair = tiny_pair()
    alternating = [SamplingConfig(0.1 + 0.001 * i if i % 2 else 0.7 + 0.001 * i) for i in range(N_VISITORS)]
    serve_visitors(pair, alternating)
    assert len(measured) == 2   # not re-measured each time the visitors alternate
    assert len(list(profiles.glob("sequoia-plan-*.json"))) == 2


class _Held:
    """`race.measure_sizes` held until released: the first measurement stays under way."""

    def __init__(self):
        self.started, self.release, self.calls = threading.Event(), threading.Event(), []

    def __call__(self, pairs, request):
        self.calls.append(request)
        self.started.set()
        self.release.wait(30)
        return []


def test_the_measurer_queues_a_measurement_once_and_a_few_at_most(monkeypatch):
    held = _Held()
    monkeypatch.setattr(race, "measure_sizes", held)
    measurer = worker.Measurer(None, lambda message: None)
    try:
        assert measurer.add(RaceRequest(temperature=0.5).validated())
        assert held.started.wait(10)
        # Fifty races at other temperatures and seeds ask for the measurement under way: none is queued.
        for i in range(N_VISITORS):
            measurer.add(RaceRequest(temperature=0.3 + 0.02 * i, seed=i).validated())
        assert measurer.jobs.qsize() == 0
        # Fifty with top-p too: another sampling mode (filtered), queued once.
        for i in range(N_VISITORS):
            measurer.add(RaceRequest(temperature=0.3 + 0.02 * i, top_p=0.5 + i / 100, seed=i).validated())
        assert measurer.jobs.qsize() == 1
        # Fifty other model pairs, each asked twice: queued once each, a few at most, the rest dropped.
        for i in range(N_VISITORS):
            for temperature in (0.2, 0.9):
                measurer.add(RaceRequest(model=CUSTOM, custom_target=f"org/model-{i}",
                                         temperature=temperature).validated())
        assert measurer.jobs.qsize() < worker.MAX_MEASUREMENTS   # with the one under way, MAX at most
        queued = [job[0] for job in list(measurer.jobs.queue)]
        assert len(queued) == len(set(queued))
        held.release.set()
        assert measurer.idle.wait(10)
        assert len(held.calls) <= worker.MAX_MEASUREMENTS
        # Done, a measurement may be asked for again (a race on first sizes after a failed one).
        held.started.clear()
        assert measurer.add(RaceRequest(temperature=0.5).validated())
        assert held.started.wait(10)
    finally:
        held.release.set()
        measurer.close()
        measurer.thread.join(10)


def test_the_pair_cache_drops_the_least_recently_used_pair(monkeypatch):
    loads = []
    monkeypatch.setattr(models, "load_pair", lambda target, draft, dtype, device: loads.append(target) or object())
    pairs = race.PairCache(max_pairs=2, device="cpu")
    first = pairs.get("a", None, "fp32")
    pairs.get("b", None, "fp32")
    assert pairs.get("a", None, "fp32") is first   # raced again: now the most recently used
    pairs.get("c", None, "fp32")
    assert pairs.loaded("a", None, "fp32") is first and pairs.loaded("b", None, "fp32") is None
    assert loads == ["a", "b", "c"] and len(pairs.pairs) == 2


class _Graph:
    def replay(self):
        pass


class _Event:
    def __init__(self, **_):
        pass

    def record(self):
        pass


def test_the_graph_runner_keeps_a_bounded_number_of_shapes_least_recently_used(monkeypatch):
    # The CUDA parts (capture, events) faked; the runner's bookkeeping is what runs.
    monkeypatch.setattr(graphs.torch.cuda, "Event", _Event)
    monkeypatch.setattr(graphs, "MAX_SHAPES", 3)
    runner = graphs.GraphRunner(torch.device("cpu"))
    runner.capture = True
    monkeypatch.setattr(runner, "_record", lambda fn: graphs._Captured(_Graph(), fn()))
    for key in ("a", "b", "c", "a", "d"):   # "a" replayed again, so "b" is the least recently used
        assert runner.run(key, lambda: key) == key
    assert [k in runner._graphs for k in "abcd"] == [True, False, True, True]
    for i in range(N_VISITORS):
        runner.run(("tree", i), lambda: i)
    assert len(runner._graphs) == 3 and runner.stats.shapes_captured == 4 + N_VISITORS


def test_the_hardware_panel_opens_only_its_pairs_plan_files(tmp_path, monkeypatch):
    from specviz.engine.profiler import cached_paths
    from specviz.ui import hardware

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    for i in range(N_VISITORS):   # other pairs' plans, as a busy server leaves them
        save_cached("sequoia-plan", f"org/other-{i}|self|cpu|bf16|lean|sampled|acc-0|N16|D4", {"key": "x"})
    ours = "org/ours|self|cpu|bf16"
    save_cached("sequoia-plan", f"{ours}|lean|greedy|acc-0|N16|D4", {"key": ours})
    assert [p.name.startswith("sequoia-plan-org_ours_self") for p in cached_paths("sequoia-plan", ours)] == [True]
    opened = []
    real = type(tmp_path).read_text
    monkeypatch.setattr(type(tmp_path), "read_text", lambda self, *a, **k: opened.append(self) or real(self, *a, **k))
    hardware._cached_plans("sequoia-plan", ours)
    assert len(opened) == 1
