"""Prompt lookup decoding: its pricing alone, then the decoder on the real model (fp32), greedy equal to `ar`.

Its sampled exactness is tested with the other decoders' (`test_sampling_exact.py`, family `prompt-lookup`)."""

from __future__ import annotations

import pytest
from helpers import ar_token_ids

from specviz.engine.curve import Curve
from specviz.engine.methods import make_decoder
from specviz.errors import InvalidInput
from specviz.methodspec import parse_spec
from specviz.prompt_lookup.match import FIRST_RIGHT, Copy, CopyRates
from specviz.prompt_lookup.match import best_length
from specviz.trace import ORIGIN_COPY, SOURCE_AR, SOURCE_BONUS, SOURCE_COPY, RunTrace, TreePayload

FLAT = {1: 1.0, 64: 1.0}   # rows cost nothing: every likely copied token is worth verifying


def test_the_length_follows_the_forward_curve():
    assert best_length(Curve(FLAT), [0.5, 0.4, 0.3], overhead=0.1) == 3
    assert best_length(Curve({1: 1.0, 2: 2.0}), [0.5], overhead=0.0) == 0          # a row that doubles the step
    assert best_length(Curve({1: 1.0, 2: 1.05, 4: 1.1}), [0.05], overhead=0.1) == 0   # a guess rarely right
    # A steeper curve past two rows stops a long copy at its likely head.
    assert best_length(Curve({1: 1.0, 2: 1.02, 3: 1.6, 64: 40.0}), [0.9, 0.8, 0.7], overhead=0.0) == 1


def test_the_run_learns_its_own_copy_rates():
    rates, copy = CopyRates(), Copy((5, 6, 7), matched=1, source=0)
    prior = rates.reaches(copy)
    assert prior[0] == pytest.approx(FIRST_RIGHT[1])
    for _ in range(30):   # two tokens verified, both refused
        rates.update(copy, verified=2, accepted=0)
    assert rates.reaches(copy)[0] < prior[0] / 3
    assert rates.next[1] == [0, 0]   # the second token was never tried: its first was refused
    for _ in range(60):   # now every verified token right
        rates.update(copy, verified=3, accepted=3)
    assert rates.reaches(copy)[0] > prior[0] and rates.next[1] == [120, 120]


def test_the_spec_and_its_size():
    assert parse_spec("prompt-lookup@6").sizes == {"tokens": 6}
    assert parse_spec("prompt-lookup").sizes == {}


# -- greedy equality with autoregressive on the real model (fp32) -----------------------------

PROMPTS = {
    "code": "Write a Python function `is_prime(n)` that returns True when n is prime, with three asserts.",
    "repeat": "Repeat this line three times: the quick brown fox jumps over the lazy dog.",
    "chat": "What are three tips for staying focused while studying?",
}
N_NEW = 64


@pytest.fixture(scope="module")
def ar_outputs(pair_fp32):
    return ar_token_ids(pair_fp32, PROMPTS, N_NEW)


@pytest.mark.parametrize("name", list(PROMPTS))
def test_greedy_equals_autoregressive(pair_fp32, ar_outputs, name):
    """With its own sizing, and with every copy verified whole (a flat curve): the same tokens either way."""
    copied, pays = {}, {}
    for options in ({}, {"tokens": 6, "curve": FLAT, "curve_source": "prior"}):
        decoder = make_decoder("prompt-lookup", pair_fp32, PROMPTS[name], max_new_tokens=N_NEW, **options)
        trace = decoder.run()
        assert trace.token_ids == ar_outputs[name], (name, options)
        copied[bool(options)] = sum(step.token_sources.count(SOURCE_COPY) for step in trace.steps)
        # Whether its curve prices a likely copy (a four-token match's first token) above a plain step.
        pays[bool(options)] = best_length(decoder.curve, [FIRST_RIGHT[4]], decoder.overhead) > 0
    if name != "chat":   # the equality means something only where copies were accepted
        assert copied[True] > 0, copied
        # With its own sizing, wherever its curve lets a copy pay: a curve measured while the suite's other worker
        # held the cores (used for that run only) can price every row above what a copy brings.
        assert copied[False] > 0 or not pays[False], (copied, pays)


def test_a_step_is_a_chain_the_tree_view_draws_and_it_round_trips(pair_fp32):
    trace = make_decoder("prompt-lookup", pair_fp32, PROMPTS["repeat"], max_new_tokens=40, tokens=6, curve=FLAT,
                         curve_source="prior").run()
    chains = [s for s in trace.steps[1:] if s.payload is not None]
    assert chains and any(len(s.payload.accepted_path) >= 2 for s in chains)
    for step in trace.steps[1:]:
        p = step.payload
        if p is None:   # no match: `ar`'s step
            assert step.token_sources == [SOURCE_AR] and step.tokens_processed == 1
            continue
        assert isinstance(p, TreePayload) and step.tokens_processed == len(p.nodes)
        assert [n.parent for n in p.nodes] == list(range(-1, len(p.nodes) - 1))   # a chain
        assert all(n.origin == ORIGIN_COPY for n in p.nodes)
        statuses = [n.status for n in p.nodes[1:]]
        k = len(p.accepted_path)
        assert statuses[:k] == ["accepted"] * k and p.accepted_path == list(range(1, k + 1))
        assert statuses[k:k + 1] in ([], ["rejected"]) and set(statuses[k + 1:]) <= {"not_reached"}
        # Greedy: an accepted node's test passed, the refused one's failed, nothing drawn.
        assert all(n.accept_prob == (1.0 if n.status == "accepted" else 0.0) and n.uniform is None
                   for n in p.nodes[1:] if n.status != "not_reached")
        n_kept = len(step.new_token_ids)
        assert step.token_sources == ([SOURCE_COPY] * k + [SOURCE_BONUS])[:n_kept]
        assert step.new_token_ids == ([n.token_id for n in p.nodes[1:k + 1]] + [p.bonus_token_id])[:n_kept]
    again = RunTrace.from_dict(trace.to_dict())
    assert again.token_ids == trace.token_ids and again.steps[-1].payload == trace.steps[-1].payload


def test_eos_and_max_new_tokens_stop_it_like_autoregressive(pair_fp32):
    prompt = "Reply with exactly one word: yes."
    ar = make_decoder("ar", pair_fp32, prompt, max_new_tokens=40).run()
    pl = make_decoder("prompt-lookup", pair_fp32, prompt, max_new_tokens=40, curve=FLAT, curve_source="prior").run()
    assert pl.token_ids == ar.token_ids and pl.finish_reason == ar.finish_reason == "eos"
    short = make_decoder("prompt-lookup", pair_fp32, PROMPTS["repeat"], max_new_tokens=5, curve=FLAT,
                         curve_source="prior").run()
    assert len(short.token_ids) == 5 and short.finish_reason == "length"


@pytest.mark.parametrize("tokens", [0, 17, 2.5, True])
def test_a_bad_size_is_a_clear_error(pair_fp32, tokens):
    with pytest.raises(InvalidInput, match="copied tokens"):
        make_decoder("prompt-lookup", pair_fp32, "Hi", max_new_tokens=4, tokens=tokens, curve=FLAT)
