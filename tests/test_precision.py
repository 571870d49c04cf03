"""`auto` precision on a CPU (`engine.precision`): measured once per machine and thread count, then loaded.

Which precision wins depends on the CPU (fp32 or q4 on an AVX2 EPYC, bf16 where AMX runs it), so no
test asserts what this machine chose: the choosing rule is tested on given times, the measurement for
its shape, and the loading on choices written into the cache as a measurement writes them.
"""

from __future__ import annotations

import html
import json

import pytest
import torch

from helpers import empty_profile_cache
from specviz.engine import precision
from specviz.engine.models import (DEFAULT_DISPLAY_NAME, auto_candidates, auto_precision, choose_dtype,
                                   load_pair, measure_precisions, precisions_pending)
from specviz.engine.profiler import dtype_name, save_cached
from specviz.engine.quant import q4_kernel_available

CPU = torch.device("cpu")
NAMES = auto_candidates("default", CPU)
RULE = dtype_name(choose_dtype(CPU, "auto"))   # what `auto` ran before it measured: bf16 kernels or not


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(empty_profile_cache(tmp_path / "cache")))
    return tmp_path / "cache"


@pytest.fixture
def measured_rule(monkeypatch):
    """`auto` as it chooses where SpecViz's own q4 kernel is not used: the rule, then the fastest measured (where
    the kernel runs, `auto` is q4 from the first race: tests/test_auto_explained.py)."""
    from specviz.engine import models

    monkeypatch.setattr(models, "own_q4_kernel", lambda: None)


def measured(chosen: str, **ms) -> None:
    """A measurement as `precision.measure` caches it, choosing `chosen`."""
    times = {name: {"1": ms.get(name, 50.0), "16": 3 * ms.get(name, 50.0)} for name in NAMES}
    save_cached(precision.KIND, precision._key(DEFAULT_DISPLAY_NAME),
                {"ms": times, "chosen": chosen, "rows": list(precision.ROWS), "waiting_share": 0.0})


def test_the_fastest_is_the_smallest_geometric_mean_of_one_row_and_a_verification():
    assert precision.fastest({"fp32": {"1": 30, "16": 60}, "q4": {"1": 20, "16": 50}}) == "q4"
    # Faster for one token but far slower over a tree: the speculative step weighs as much as `ar`'s.
    assert precision.fastest({"fp32": {"1": 30, "16": 60}, "q4": {"1": 25, "16": 150}}) == "fp32"
    assert precision.fastest({"fp32": {"1": 30, "16": 60}, "bf16": {"1": 30, "16": 60}}) == "fp32"   # ties: first


def test_candidates_are_a_cpus_and_q4_only_for_the_offline_default():
    assert NAMES[:2] == ["fp32", "bf16"]
    assert ("q4" in NAMES) == q4_kernel_available()
    assert "q4" not in auto_candidates("HuggingFaceTB/SmolLM2-360M-Instruct", CPU)
    assert auto_candidates("default", torch.device("meta")) == []   # off a CPU the rule decides
    assert auto_precision("default", torch.device("meta")) == (None, "")


def test_until_measured_auto_runs_the_rule_and_says_so(cache, measured_rule):
    assert precisions_pending("default", CPU)
    chosen, words = auto_precision("default", CPU)
    assert chosen is None and words.startswith(precision.NOT_MEASURED)
    pair = load_pair("default", "self", device="cpu", dtype="auto")
    assert pair.precision == RULE and pair.precision_choice == words
    assert load_pair("default", "self", device="cpu", dtype="fp32").precision_choice == ""   # asked for: no reason


@pytest.mark.parametrize("chosen", ["fp32", "bf16"] + (["q4"] if q4_kernel_available() else []))
def test_auto_loads_the_precision_this_machine_measured_fastest(cache, measured_rule, chosen):
    measured(chosen, **{chosen: 10.0})
    assert not precisions_pending("default", CPU)
    pair = load_pair("default", "self", device="cpu", dtype="auto")
    assert pair.precision == chosen
    assert pair.precision_choice.startswith(f"auto: {chosen}, the fastest measured on this CPU")
    assert f"{chosen} 10.0 ms" in pair.precision_choice


def test_a_measurement_at_another_thread_count_is_not_read(cache):
    threads = torch.get_num_threads()
    measured("fp32")
    try:
        torch.set_num_threads(threads + 1)
        assert precisions_pending("default", CPU)   # another count: its own measurement
    finally:
        torch.set_num_threads(threads)
    assert not precisions_pending("default", CPU)


def test_a_measurement_missing_a_candidate_is_measured_again(cache):
    save_cached(precision.KIND, precision._key(DEFAULT_DISPLAY_NAME),
                {"ms": {"fp32": {"1": 1.0, "16": 2.0}}, "chosen": "fp32", "rows": [1, 16], "waiting_share": 0.0})
    assert precisions_pending("default", CPU)


def test_the_measurement_times_every_candidate_and_caches_its_choice(cache):
    found = measure_precisions("default", CPU)
    assert list(found["ms"]) == NAMES and found["chosen"] in NAMES
    for name in NAMES:
        assert set(found["ms"][name]) == {"1", "16"} and all(t > 0 for t in found["ms"][name].values())
    assert found["chosen"] == precision.fastest(found["ms"])
    assert auto_precision("default", CPU)[0] == found["chosen"] and not precisions_pending("default", CPU)
    saved = json.loads(next((cache / "profiles").glob("precision-*.json")).read_text())
    assert saved["machine"]["threads"] == torch.get_num_threads()


def test_the_pair_cache_loads_the_measured_precision_for_the_next_race(cache, measured_rule):
    from specviz.runtime.race import PairCache

    pairs = PairCache()
    first = pairs.get("default", "self", "auto")
    assert first.precision == RULE
    other = "fp32" if RULE == "bf16" else "bf16"
    measured(other, **{other: 1.0})   # as the worker's background measurement leaves it
    assert pairs.loaded("default", "self", "auto") is None
    assert pairs.get("default", "self", "auto").precision == other


def test_the_race_trace_and_its_summary_line_say_why_this_precision(cache, measured_rule):
    from specviz.runtime.race import Race, ran_first_sizes
    from specviz.engine.methods import make_decoder
    from specviz.engine.sampling import SamplingConfig
    from specviz.trace import RaceTrace
    from specviz.ui.html import summary_html

    pair = load_pair("default", "self", device="cpu", dtype="auto")
    prompt = "Say hi"
    ids = pair.tokenizer(prompt)["input_ids"]
    race = Race({"ar": make_decoder("ar", pair, prompt, max_new_tokens=2, sampling=SamplingConfig())},
                prompt, ids, pair=pair)
    trace = race.run()
    assert ran_first_sizes(trace)   # the worker measures the precisions after this race
    back = RaceTrace.from_json(trace.to_json())
    assert back.precision_choice == pair.precision_choice
    assert precision.NOT_MEASURED in html.unescape(summary_html(back))
