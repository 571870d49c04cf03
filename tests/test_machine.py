"""Measured costs belong to the machine, thread count and torch they were measured under (issue 49)."""

import json

import pytest
import torch

from specviz.engine import machine, profiler


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    return tmp_path / "profiles"


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


KEY = "SmolLM2-135M-Instruct|cpu|bf16:target-lean-packed-ctx200"


def test_one_and_two_thread_curves_lie_side_by_side(cache, threads):
    threads(1)
    profiler.save_cached("forward", KEY, {"key": KEY, "ms": {"1": 41.0}})
    assert profiler.load_cached("forward", KEY)["ms"] == {"1": 41.0}
    threads(2)
    assert profiler.load_cached("forward", KEY) is None           # a 1-thread curve never sizes a 2-thread run
    profiler.save_cached("forward", KEY, {"key": KEY, "ms": {"1": 30.0}})
    assert profiler.load_cached("forward", KEY)["ms"] == {"1": 30.0}
    names = sorted(p.name for p in cache.glob("forward-*.json"))
    assert len(names) == 2 and any("@1t-" in n for n in names) and any("@2t-" in n for n in names)
    threads(1)
    assert profiler.load_cached("forward", KEY)["ms"] == {"1": 41.0}


def test_entries_carry_their_machine_and_read_back_as_saved(cache):
    data = {"key": KEY, "ms": {"1": 30.0, "2": 31.0}}
    path = profiler.save_cached("sequoia-plan", KEY, data)
    stored = json.loads(path.read_text())
    assert stored["machine"] == machine.fingerprint() and stored["machine"]["threads"] == torch.get_num_threads()
    assert stored["machine"]["torch"] == torch.__version__ and stored["machine"]["cpu"] == machine.cpu_model()
    assert profiler.load_cached("sequoia-plan", KEY) == data        # the fingerprint is the cache's, not the caller's


def test_old_and_foreign_entries_are_ignored_not_misread(cache):
    cache.mkdir(parents=True)
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in KEY)
    (cache / f"forward-{safe}.json").write_text(json.dumps({"key": KEY, "ms": {"1": 99.0}}))   # before fingerprints
    assert profiler.load_cached("forward", KEY) is None
    path = profiler.save_cached("forward", KEY, {"key": KEY, "ms": {"1": 99.0}})   # this machine's file, overwritten
    foreign = {**machine.fingerprint(), "cpu": "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"}
    path.write_text(json.dumps({"key": KEY, "ms": {"1": 99.0}, "machine": foreign}))   # copied from elsewhere
    assert profiler.load_cached("forward", KEY) is None
    path.write_text(json.dumps({"key": KEY, "ms": {"1": 99.0}, "machine": {**machine.fingerprint(), "torch": "2.0"}}))
    assert profiler.load_cached("forward", KEY) is None


def test_the_fingerprint_tag_changes_with_what_costs_depend_on():
    base = machine.fingerprint()
    tags = {machine.fingerprint_tag(p) for p in (base, {**base, "threads": 1 + base["threads"]},
                                                  {**base, "cpu": "another CPU"}, {**base, "torch": "0.0"},
                                                  {**base, "flags": []}, {**base, "gpu": "NVIDIA H200"})}
    assert len(tags) == 6 and machine.fingerprint_tag(dict(base)) in tags


def test_acceptance_is_shared_across_thread_counts(cache, threads):
    """Acceptance rates are the models' business, not the machine's: one file whatever the threads."""
    threads(1)
    profiler.save_cached("acceptance", "a|b|T0", {"acceptance": [0.5]})
    threads(2)
    assert profiler.load_cached("acceptance", "a|b|T0") == {"acceptance": [0.5]}
    assert len(list(cache.glob("acceptance-*.json"))) == 1


def test_cpu_words_name_the_cpu_its_flags_and_threads():
    words = machine.cpu_words(2)
    assert words.startswith(machine.cpu_model()) and words.endswith(", 2 threads")
    assert machine.cpu_words(1).endswith(", 1 thread")
    assert set(machine.cpu_flags()) <= set(machine.FLAGS_OF_NOTE)
