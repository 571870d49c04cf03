"""The race engine: least-compute scheduling, error isolation, cancellation, RaceTrace JSON.

All on the real offline default (fp32), with few tokens per run.
"""

from __future__ import annotations

import itertools
import json

import pytest

from specviz.autoregressive.decoder import AutoregressiveDecoder
from specviz.runtime.race import TURN_MS, Race, compute_ms, start_race
from specviz.engine.sampling import SamplingConfig
from specviz.engine.text import encode_prompt
from specviz.errors import InvalidInput
from specviz.trace import RaceTrace

PROMPT = "Name three colours."
ALL_METHODS = ["ar", "sequoia", "lookahead"]
SMALL = {"sequoia": {"tree_budget": 6, "tree_depth": 3}, "lookahead": {"window": 3, "ngram": 3, "guesses": 3}}


def ar(pair, max_new=6):
    return AutoregressiveDecoder(pair, PROMPT, encode_prompt(pair.tokenizer, PROMPT), SamplingConfig(), max_new)


class FailingDecoder(AutoregressiveDecoder):
    """A real AR decoder with a fault injected at its third step."""

    def _step(self):
        if len(self.trace.steps) == 2:
            raise RuntimeError("injected fault")
        return super()._step()


def check_least_compute_order(trace: RaceTrace, turn_ms: float = TURN_MS) -> None:
    """Replaying the order: every step went to a live method with the least compute so far, or carried on the turn
    of the method just stepped while it was less than `turn_ms` ahead."""
    total = {m: len(trace.runs[m].steps) for m in trace.runs}
    done = {m: 0 for m in trace.runs}
    spent = {m: 0.0 for m in trace.runs}
    last = None
    for method, index in trace.order:
        assert index == done[method]
        live = [m for m in trace.runs if done[m] < total[m]]
        least = min(spent[m] for m in live)
        assert spent[method] <= least + 1e-9 or (method == last and spent[method] < least + turn_ms), (method, spent)
        spent[method] += trace.runs[method].steps[index].total_ms
        done[method] += 1
        last = method
    assert done == total


def test_a_turn_keeps_a_decoder_stepping_until_it_is_a_turn_ahead(pair_fp32):
    """Steps shorter than a turn run several in a row (the draft's weights and the caches stay warm between them),
    each a live decoder's least-compute pick or its turn carried on; a turn of 0 is least compute first alone."""
    for turn_ms in (1e9, 0.0):
        first, second = ar(pair_fp32, 12), ar(pair_fp32, 12)
        trace = Race({"ar": first, "lookahead": second}, PROMPT, first.prompt_ids, turn_ms=turn_ms).run()
        check_least_compute_order(trace, turn_ms)
        methods = [m for m, _ in trace.order]
        runs = [len(list(run)) for _, run in itertools.groupby(methods)]
        if turn_ms:   # a turn longer than any run: each ran its 12 steps (prompt and 11 more) in one go
            assert runs == [12, 12], methods
        else:
            assert len(runs) > 2, methods


def test_least_compute_first_lets_the_behind_decoder_catch_up(pair_fp32):
    ahead, behind = ar(pair_fp32, 8), ar(pair_fp32, 8)
    for _ in range(3):
        ahead.step()
    head_start = compute_ms(ahead.trace)
    race = Race({"ar": ahead, "lookahead": behind}, PROMPT, ahead.prompt_ids)
    first = []
    while compute_ms(behind.trace) < head_start and not behind.done:
        first.append(race.step()[0])
    # Until it has caught up, only the decoder that is behind is stepped.
    assert first and set(first) == {"lookahead"}
    trace = race.run()
    assert ahead.done and behind.done
    assert trace.runs["ar"].token_ids == trace.runs["lookahead"].token_ids
    # The pre-race steps of "ar" are not in the race's order; check the rest from the race's view.
    assert [m for m, _ in trace.order].count("ar") == len(trace.runs["ar"].steps) - 3


def test_race_of_all_methods_is_scheduled_by_least_compute(pair_fp32):
    methods = ALL_METHODS
    race = start_race(pair_fp32, PROMPT, methods, max_new_tokens=8, options=SMALL)
    trace = race.run()
    check_least_compute_order(trace)
    assert trace.methods == methods
    for m in methods:
        assert trace.runs[m].error is None
        assert trace.runs[m].token_ids == trace.runs["ar"].token_ids   # fp32 greedy: lossless


def test_one_decoder_failing_leaves_the_others_running(pair_fp32):
    prompt_ids = encode_prompt(pair_fp32.tokenizer, PROMPT)
    failing = FailingDecoder(pair_fp32, PROMPT, prompt_ids, SamplingConfig(), 6)
    race = Race({"ar": ar(pair_fp32, 6), "sequoia": failing,
                 "lookahead": InvalidInput("method 'lookahead' is not implemented yet")}, PROMPT, prompt_ids)
    trace = race.run()
    assert trace.runs["ar"].finish_reason in ("length", "eos") and trace.runs["ar"].error is None
    assert len(trace.runs["ar"].token_ids) > 0
    assert trace.runs["sequoia"].finish_reason == "error"
    assert "injected fault" in trace.runs["sequoia"].error
    assert len(trace.runs["sequoia"].steps) == 2
    assert failing.forward is None   # its cache was freed
    assert trace.runs["lookahead"].error == "method 'lookahead' is not implemented yet"
    assert trace.runs["lookahead"].steps == []


def test_close_cancels_and_frees(pair_fp32):
    first, second = ar(pair_fp32, 50), ar(pair_fp32, 50)
    race = Race({"ar": first, "sequoia": second}, PROMPT, first.prompt_ids)
    for _ in range(3):
        race.step()
    race.close()
    race.close()   # idempotent
    assert race.done and race.step() is None
    assert first.forward is None and second.forward is None
    assert race.trace.cancelled
    assert {r.finish_reason for r in race.trace.runs.values()} == {"cancelled"}
    check_least_compute_order(race.trace)


def test_start_race_rejects_bad_shared_input(pair_fp32):
    with pytest.raises(InvalidInput, match="prompt is empty"):
        start_race(pair_fp32, "  ", ["ar"])
    with pytest.raises(InvalidInput, match="at least one method"):
        start_race(pair_fp32, PROMPT, [])
    with pytest.raises(InvalidInput, match="unknown method"):
        start_race(pair_fp32, PROMPT, ["ar", "medusa"])
    with pytest.raises(InvalidInput, match="max new tokens"):
        start_race(pair_fp32, PROMPT, ["ar"], max_new_tokens=0)


def test_bad_method_option_is_shown_in_that_column_only(pair_fp32):
    race = start_race(pair_fp32, PROMPT, ["ar", "lookahead"], max_new_tokens=3,
                      options={"lookahead": {"window": 0, "ngram": 3, "guesses": 3}})
    trace = race.run()
    assert trace.runs["lookahead"].error and "window" in trace.runs["lookahead"].error
    assert len(trace.runs["ar"].token_ids) == 3


@pytest.fixture(scope="module")
def saved_race(pair_fp32):
    methods = ALL_METHODS
    return start_race(pair_fp32, PROMPT, methods, max_new_tokens=6, options=SMALL).run()


def test_race_trace_json_round_trip(saved_race, pair_fp32):
    text = saved_race.to_json()
    back = RaceTrace.from_json(text, vocab_size=pair_fp32.vocab_size)
    assert back.to_dict() == json.loads(text)
    assert back.runs["ar"].text == saved_race.runs["ar"].text
    assert back.steps_done(len(back.order)) == {m: len(r.steps) for m, r in back.runs.items()}
    assert any(s.payload is not None and hasattr(s.payload, "nodes") for s in back.runs["sequoia"].steps)
    # Loads with no model at all (vocabulary taken from the trace itself).
    assert RaceTrace.from_json(text.encode()).vocab_size == pair_fp32.vocab_size
    # Where its speeds were measured (CPU, flags, this process's threads) travels with it and is shown.
    from specviz.engine.machine import cpu_words
    from specviz.ui.html import summary_html

    assert back.machine == saved_race.machine == cpu_words() and back.machine in summary_html(back)
    old = json.loads(text)
    del old["machine"]   # a trace from before the machine was kept
    assert RaceTrace.from_dict(old).machine == "" and "machine" not in RaceTrace.from_dict(old).to_dict()


def _mutated(race: RaceTrace, change) -> str:
    data = race.to_dict()
    change(data)
    return json.dumps(data)


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(kind="something-else"), "not a SpecViz race trace"),
    (lambda d: d.update(schema_version=99), "unsupported trace schema version"),
    (lambda d: d.pop("runs"), "missing field"),
    (lambda d: d.update(prompt=5), "'prompt' should be str"),
    (lambda d: d.update(machine=5), "'machine' should be str"),
    (lambda d: d["runs"]["ar"]["steps"][0].update(new_token_ids=[10 ** 7]), "outside the vocabulary"),
    (lambda d: d["runs"]["ar"]["steps"][0].update(new_token_ids=[-1]), "outside the vocabulary"),
    (lambda d: d["runs"]["ar"]["steps"][0].update(token_sources=["magic"]), "unknown token source"),
    (lambda d: d["order"].pop(), "step order"),
    (lambda d: d["runs"].update(medusa=d["runs"]["ar"]), "unknown method"),
    (lambda d: d["runs"]["ar"]["steps"][0].update(bogus=1), "expected structure"),
])
def test_bad_traces_are_rejected_clearly(saved_race, change, message):
    with pytest.raises(InvalidInput, match=message):
        RaceTrace.from_json(_mutated(saved_race, change))


def test_unreadable_and_huge_traces_are_rejected(saved_race):
    with pytest.raises(InvalidInput, match="not valid JSON"):
        RaceTrace.from_json("{oops")
    with pytest.raises(InvalidInput, match="not a SpecViz race trace"):
        RaceTrace.from_json("[1, 2, 3]")
    with pytest.raises(InvalidInput, match="limit is"):
        RaceTrace.from_json(saved_race.to_json(), max_bytes=1000)
    with pytest.raises(InvalidInput, match="loaded model has"):
        RaceTrace.from_json(saved_race.to_json(), vocab_size=100)


# -- one race request: checked once, run as it is, recorded in the trace ---------------------------------


class OnePair:
    """The session's fp32 pair for every (target, draft, dtype): no second load."""

    def __init__(self, pair):
        self.pair, self.asked = pair, []

    def get(self, target, draft, dtype):
        self.asked.append((target, draft, dtype))
        return self.pair


def test_race_events_run_the_request_and_the_trace_records_it(pair_fp32):
    from specviz.runtime.race import race_events
    from specviz.request import RaceRequest

    request = RaceRequest(prompt=PROMPT, methods=("Autoregressive", "lookahead"), dtype="fp32", max_new_tokens=5,
                          lookahead="manual", window=3, ngram=3, guesses=3, tree_budget=999).validated()
    assert request.methods == ("ar", "lookahead") and request.tree_budget is None   # unused sizes are not kept
    pairs = OnePair(pair_fp32)
    events = list(race_events(pairs, request))
    assert pairs.asked == [("default", None, "fp32")]
    trace = events[-1][1]
    assert events[-1][0] == "end" and trace.runs["ar"].token_ids == trace.runs["lookahead"].token_ids
    assert len(trace.runs["ar"].token_ids) == 5
    assert trace.options == request.method_options() == {
        "ar": {}, "lookahead": {"window": 3, "ngram": 3, "guesses": 3, "pool_from_prompt": True}}
    assert trace.request == request.to_dict()
    again = RaceTrace.from_json(trace.to_json())
    assert RaceRequest.from_dict(again.request) == request


def test_a_trace_without_a_request_loads_and_writes_as_before(pair_fp32):
    trace = start_race(pair_fp32, PROMPT, ["ar"], max_new_tokens=2).run()
    data = trace.to_dict()
    assert "request" not in data   # a race started without one writes the JSON it always wrote
    loaded = RaceTrace.from_json(json.dumps(data))
    assert loaded.request is None and loaded.to_dict() == data
    with pytest.raises(InvalidInput, match="'request' should be dict"):
        RaceTrace.from_json(json.dumps({**data, "request": [1, 2]}))


REQUEST_CASES = {
    # settings -> the one message the request gives (the page, the API and the worker all see this one)
    "tree budget below": (dict(tree="manual", tree_budget=1), "tree budget must be between 2 and 1024, got 1"),
    "tree budget above": (dict(tree="manual", tree_budget=1025), "tree budget must be between 2 and 1024"),
    "tree depth not below budget": (dict(tree="manual", tree_budget=4, tree_depth=4), "smaller than the tree budget"),
    "temperature above": (dict(temperature=2.5), "temperature must be between 0 and 2, got 2.5"),
    "temperature not a number": (dict(temperature="hot"), "temperature must be a number"),
    "top-p below": (dict(top_p=0.01), "top-p must be between 0.05 and 1"),
    "seed above": (dict(seed=2**31), "seed must be between 0 and 2147483647"),
    "window above": (dict(lookahead="manual", window=65), "W \\(window\\) must be between 1 and 64"),
    "max new tokens fraction": (dict(max_new_tokens=3.5), "max new tokens must be a whole number"),
    "unknown tree": (dict(tree="big"), "unknown tree 'big'"),
    "unknown dtype": (dict(dtype="fp8"), "unknown dtype 'fp8'"),
    "custom without a target": (dict(model="Custom model ids…"), "enter a target model id"),
}


@pytest.mark.parametrize("case", list(REQUEST_CASES))
def test_race_request_is_checked_in_one_place(case):
    from specviz.request import RaceRequest

    settings, message = REQUEST_CASES[case]
    with pytest.raises(InvalidInput, match=message):
        RaceRequest(prompt=PROMPT, **settings).validated()


def test_sizes_outside_manual_mode_are_not_checked_and_the_cli_shares_the_ranges():
    import argparse

    from specviz.cliargs import add_method_args, add_sampling_args, method_options, sampling_from_args
    from specviz.request import RaceRequest

    auto = RaceRequest(prompt=PROMPT, tree_budget=0, window=0).validated()   # 'auto' sizes: the numbers wait
    assert auto.method_options()["sequoia"] == {"tree_budget": None, "tree_depth": None}
    parser = argparse.ArgumentParser()
    add_sampling_args(parser)
    add_method_args(parser)
    with pytest.raises(InvalidInput, match="tree budget must be between 2 and 1024, got 1025"):
        method_options(parser.parse_args(["--tree-budget", "1025", "--tree-depth", "3"]), "sequoia")
    with pytest.raises(InvalidInput, match="temperature must be between 0 and 2, got 3"):
        sampling_from_args(parser.parse_args(["--temperature", "3"]))
    assert method_options(parser.parse_args(["--window", "64", "--ngram", "16", "--guesses", "64"]),
                          "lookahead")["window"] == 64
