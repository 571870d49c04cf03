"""Lookahead's one step program: the device walks against the host reference (tests/lookahead_reference.py),
and the decoder with exactly the pool's candidates (a CPU: nothing captured) and padded to G (what a
captured CUDA graph replays, run here eagerly) against each other and `ar`."""

import dataclasses
import random

import pytest
import torch
from helpers import ar_token_ids, chi_square_pvalue, target_forward_rows, tiny_pair
from lookahead_reference import greedy_verify, sampling_verify
from mutants import BY_NAME, mutated

from specviz.engine.methods import make_decoder
from specviz.engine.sampling import SamplingConfig
from specviz.lookahead import verify
from specviz.lookahead.verify import greedy_verdict, greedy_verdict_on_host, unpack, verdict_width
from specviz.trace import ORIGIN_COPY, SOURCE_COPY, SOURCE_NGRAM

# -- device verification alone (no model) -------------------------------------------------------


def test_device_greedy_verdict_equals_the_host_rule():
    """Every small case of few tokens, padding candidates included: the same Verdict as greedy_verify."""
    rng = random.Random(0)
    seen_full, seen_none, seen_tie = 0, 0, 0
    for _ in range(1500):
        guesses, cand_len, vocab = rng.randint(0, 5), rng.randint(1, 4), 3
        n_real = rng.randint(0, guesses)
        cands = [tuple(rng.randrange(vocab) for _ in range(cand_len)) for _ in range(guesses)]
        preds = [[rng.randrange(vocab) for _ in range(cand_len)] for _ in range(guesses)]
        first = rng.randrange(vocab)
        host = greedy_verify(cands[:n_real], first, preds[:n_real])
        packed = greedy_verdict(torch.tensor(cands, dtype=torch.long).view(guesses, cand_len),
                                torch.arange(guesses) < n_real, torch.tensor(first),
                                torch.tensor(preds, dtype=torch.long).view(guesses, cand_len))
        assert packed.shape == (verdict_width(guesses, cand_len),)
        assert unpack(packed.tolist(), n_real, cand_len) == host, (cands, n_real, preds, first)
        # What a CPU runs instead (`greedy_verdict_on_host`): the same packed values, padding rows and all.
        assert greedy_verdict_on_host([list(c) for c in cands], n_real, first, preds, cand_len) == packed.tolist()
        seen_full += host.n_accepted == cand_len
        seen_none += host.best is None
        seen_tie += host.best is not None and host.match_lengths.count(host.n_accepted) > 1
    assert min(seen_full, seen_none, seen_tie) > 20, (seen_full, seen_none, seen_tie)


def _one_hot_rows(rng, shape, vocab):
    return torch.nn.functional.one_hot(torch.tensor([rng.randrange(vocab) for _ in range(shape)], dtype=torch.long), vocab).float()


def node_probs(first: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """`sampled_verdict`'s table from P after t0 (V,) and after each candidate token (G, L, V)."""
    return torch.cat([first.view(1, -1), after.reshape(-1, after.shape[-1])])


def test_device_sampled_verdict_equals_the_host_rule_where_it_is_certain():
    """Where every P is one-hot the sampled walks are certain: the device verdict equals sampling_verify's in
    every small case, padding candidates included (the draws then only ever pick the one token)."""
    rng = random.Random(1)
    seen_full, seen_none = 0, 0
    for _ in range(600):
        guesses, cand_len, vocab = rng.randint(0, 4), rng.randint(1, 3), 3
        n_real = rng.randint(0, guesses)
        cands = torch.tensor([[rng.randrange(vocab) for _ in range(cand_len)] for _ in range(guesses)],
                             dtype=torch.long).view(guesses, cand_len)
        first = _one_hot_rows(rng, 1, vocab)[0]
        after = _one_hot_rows(rng, guesses * cand_len, vocab).view(guesses, cand_len, vocab)
        gen = torch.Generator().manual_seed(rng.randrange(1000))
        host = sampling_verify([tuple(r) for r in cands[:n_real].tolist()], first, after[:n_real], gen)
        assert _sampled(cands, first, after, gen, n_real=n_real) == host, (cands, n_real, first, after)
        seen_full += host.n_accepted == cand_len
        seen_none += host.best is None
    assert min(seen_full, seen_none) > 20, (seen_full, seen_none)


def test_padding_candidates_change_no_draw():
    """One random-number discipline: with the acceptance draws taken at (L, G) either way, the walk over
    exactly the real candidates and the walk padded to G (what a captured step runs) give the same verdict."""
    rng = random.Random(2)
    for _ in range(200):
        guesses, cand_len, vocab = rng.randint(1, 4), rng.randint(1, 3), 4
        n_real = rng.randint(0, guesses)
        cands = torch.tensor([[rng.randrange(vocab) for _ in range(cand_len)] for _ in range(guesses)], dtype=torch.long)
        first = torch.rand(vocab, generator=torch.Generator().manual_seed(rng.randrange(1000)))
        after = torch.rand(guesses, cand_len, vocab)
        seed = rng.randrange(1000)
        verdicts = []
        for count in (guesses, n_real):
            gen = torch.Generator().manual_seed(seed)
            uniforms = torch.rand(cand_len, guesses, generator=gen, dtype=torch.float64)[:, :count]
            packed, _ = verify.sampled_verdict(cands[:count], torch.arange(count) < n_real,
                                                   node_probs(first, after[:count]), uniforms, gen)
            verdicts.append(unpack(packed.tolist(), n_real, cand_len))
        assert verdicts[0] == verdicts[1]


def _sampled(cands, first_probs, after, generator, n_real=None):
    """One device verdict (through the module attribute, so a planted mutant is what runs)."""
    guesses, cand_len = cands.shape
    valid = torch.arange(guesses) < (guesses if n_real is None else n_real)
    uniforms = torch.rand(cand_len, guesses, generator=generator, dtype=torch.float64)
    packed, _ = verify.sampled_verdict(cands, valid, node_probs(first_probs, after), uniforms, generator)
    return unpack(packed.tolist(), int(valid.sum()), cand_len)


def test_device_sampled_verdict_certain_cases():
    gen = torch.Generator().manual_seed(0)
    one_hot = torch.tensor([0.0, 1.0, 0.0])
    after = torch.tensor([[[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]])
    for device_run in (True, False):
        run = _sampled if device_run else (lambda c, p, a, g: sampling_verify([tuple(r) for r in c.tolist()], p, a, g))
        v = run(torch.tensor([[1, 2]]), one_hot, after, gen)
        assert (v.tokens, v.best, v.n_accepted, v.match_lengths) == ([1, 2, 0], 0, 2, [2])
        v = run(torch.tensor([[0, 2]]), one_hot, after, gen)           # P(0) = 0: rejected
        assert (v.tokens, v.best, v.n_accepted, v.match_lengths) == ([1], None, 0, [0])
    # A padding candidate is never tried, and no candidate at all (G = 0) samples P after t0.
    padded = torch.stack([after[0], torch.tensor([[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]])])
    v = _sampled(torch.tensor([[0, 2], [1, 1]]), one_hot, padded, gen, n_real=1)
    assert (v.tokens, v.best, v.match_lengths) == ([1], None, [0])
    v = _sampled(torch.zeros(0, 2, dtype=torch.long), one_hot, torch.zeros(0, 2, 3), gen)
    assert (v.tokens, v.best, v.match_lengths) == ([1], None, [])


# Two positions over three tokens: P0 after t0; the candidates (0, 1), (0, 2), (2, 2) share P1 after
# their 0; a padding candidate (1, 1) must change nothing.
P0 = torch.tensor([0.5, 0.3, 0.2])
P1 = torch.tensor([0.1, 0.6, 0.3])
EXACT = {(0, 0): 0.5 * 0.1, (0, 1): 0.5 * 0.6, (0, 2): 0.5 * 0.3, (1,): 0.3, (2,): 0.2}
N_DRAWS = 4000
FALLBACK_FROM_RAW_P = BY_NAME["lookahead-device-fallback-raw-p"]   # also planted by scripts/mutation_check.py


def _draw_outcomes(seed: int) -> list[tuple]:
    cands = torch.tensor([[0, 1], [0, 2], [2, 2], [1, 1]])
    after = torch.stack([torch.stack([P1, torch.tensor([0.2, 0.2, 0.6])])] * 3
                        + [torch.stack([torch.tensor([0.0, 0.0, 1.0])] * 2)])
    gen = torch.Generator().manual_seed(seed)
    outcomes = []
    for _ in range(N_DRAWS):
        v = _sampled(cands, P0, after, gen, n_real=3)
        outcomes.append(tuple(v.tokens[:2]) if v.tokens[0] == 0 else (v.tokens[0],))
    return outcomes


def test_device_sampled_verdict_is_exact_and_a_planted_bug_is_not(one_thread):
    assert chi_square_pvalue(_draw_outcomes(1), EXACT) > 1e-3
    # Negative control, same check and sample size: the fallback keeps the rejected tokens' mass.
    with mutated(FALLBACK_FROM_RAW_P.name):
        control = _draw_outcomes(1)
    assert chi_square_pvalue(control, EXACT, control=True) < 1e-3


# -- the decoder on the real model (fp32) -------------------------------------------------------

PROMPTS = {
    "code": "Write a Python function `is_prime(n)` that returns True when n is prime.",
    "repeat": "Repeat this line three times: the quick brown fox jumps over the lazy dog.",
}
N_NEW = 32


@pytest.fixture(scope="module")
def ar_tokens(pair_fp32):
    return ar_token_ids(pair_fp32, PROMPTS, N_NEW)


def _payloads(trace):
    """Each step's payload without its time and with which tries were tried in place of their probabilities:
    a forward padded to G rows computes the same rows' logits within fp32's rounding, not bit for bit
    (`_tried_probs` compares those)."""
    def tried(c):
        return dataclasses.replace(c, accept_probs=[a is not None for a in c.accept_probs])
    return [dataclasses.replace(step.payload, step_ms=0.0, candidates=[tried(c) for c in step.payload.candidates])
            if step.payload else step.payload for step in trace.steps]


def _tried_probs(trace) -> list[float]:
    return [a for step in trace.steps if step.payload for c in step.payload.candidates for a in c.accept_probs
            if a is not None]


def _run(pair, prompt, padded: bool, **options):
    """A run of the one step program; `padded`: every step's shape at all G candidates, as under capture."""
    dec = make_decoder("lookahead", pair, "" if "prompt_ids" in options else prompt, **options)
    dec.padded = padded
    return dec.run()


# `auto` reads a forward-cost curve this test gives it (what a machine measures is its own business: issue
# 49's Xeon rightly chose W=2, N=2, G=0, no candidates): rows nearly free up to 64 (a GPU), or issue 49's.
AUTO_CURVES = {"flat": {1: 10.0, 2: 10.0, 4: 10.1, 8: 10.2, 16: 10.5, 32: 11.0, 64: 12.0},
               "steep": {1: 36.0, 2: 42.0, 4: 55.0, 8: 63.0, 16: 75.0, 32: 110.0, 64: 180.0}}


@pytest.fixture
def auto_curve(request, tmp_path, monkeypatch):
    """For an `auto` case: `lookahead.sizing.choose` reads AUTO_CURVES[name] (cached in a private cache) and
    returns it; None for fixed sizes."""
    name = request.node.callspec.params["sizes"]
    if not isinstance(name, str):
        return None
    from specviz.engine import profiler
    from specviz.lookahead.sizing import CURVE_SIZES

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setattr(profiler, "forward_curve", lambda model, key, sizes=CURVE_SIZES, **_: {
        n: AUTO_CURVES[name][n] for n in sizes})
    return name


@pytest.mark.parametrize("name,sizes", [("code", "flat"), ("code", "steep"),
                                        ("code", {"window": 4, "ngram": 3, "guesses": 3}),
                                        ("repeat", {"window": 4, "ngram": 3, "guesses": 3})],
                         ids=["code-auto-flat", "code-auto-steep", "code-w4n3g3", "repeat-w4n3g3"])
def test_greedy_exact_and_padded_steps_equal_ar(pair_fp32, ar_tokens, auto_curve, name, sizes):
    from specviz.lookahead.sizing import choose

    prompt = PROMPTS[name]
    sizes = {} if auto_curve else sizes
    with target_forward_rows() as exact_rows:
        exact = _run(pair_fp32, prompt, False, max_new_tokens=N_NEW, **sizes)
    with target_forward_rows() as padded_rows:
        padded = _run(pair_fp32, prompt, True, max_new_tokens=N_NEW, **sizes)
    assert exact.token_ids == padded.token_ids == ar_tokens[name]
    # What the app shows (window, harvest, pool, candidates and their match lengths) is the same too.
    assert _payloads(exact) == _payloads(padded)
    assert [s.token_sources for s in exact.steps] == [s.token_sources for s in padded.steps]
    sources = [s for step in exact.steps for s in step.token_sources]
    guesses, ngram = exact.settings["guesses"], exact.settings["ngram"]
    if auto_curve:   # the trace runs what the sizing chose for the curve it read
        chosen = choose(pair_fp32)["choice"]
        assert exact.settings["auto"] and (exact.settings["window"], ngram, guesses) == (
            chosen["window"], chosen["ngram"], chosen["guesses"])
    if auto_curve == "steep":   # no candidate pays for its rows there: G = 0, nothing from the pool
        assert guesses == 0 and SOURCE_NGRAM not in sources
    else:   # candidates were accepted (fixed sizes, or the flat curve's wide window)
        assert guesses > 0 and sources.count(SOURCE_NGRAM) + sources.count(SOURCE_COPY) > 0
    assert any(not step.payload.warmup for step in exact.steps[1:])  # past the warm-up
    assert exact.graphs["enabled"] and not exact.graphs["capturing"]
    # The trace's forward sizes are what the target's forward ran: without capture the step's candidates
    # only (the copy's and the pool's), padded every step's full shape of G + copies candidates.
    assert [s.tokens_processed for s in exact.steps[1:]] == exact_rows
    assert [s.tokens_processed for s in padded.steps[1:]] == padded_rows
    window_rows = [1 + sum(len(level) for level in s.payload.window) for s in exact.steps[1:]]
    # Every candidate of a step is the step's length: N-1, or under `auto` a priced copy's, when longer.
    widths = [len(s.payload.candidates[0].tokens) if s.payload.candidates else ngram - 1 for s in exact.steps[1:]]
    assert all(len(c.tokens) == w for s, w in zip(exact.steps[1:], widths) for c in s.payload.candidates)
    assert exact_rows == [w + len(s.payload.candidates) * L for w, s, L in zip(window_rows, exact.steps[1:], widths)]
    # Padded, every step runs the G pool rows and the copies' rows.
    assert padded_rows == [w + (guesses + exact.settings["copies"]) * L for w, L in zip(window_rows, widths)]
    if auto_curve == "flat":   # rows nearly free: good copies verify past N-1, and are accepted past it
        assert max(widths) > ngram - 1
        assert any(c.origin == ORIGIN_COPY and c.match_length > ngram - 1
                   for s in exact.steps[1:] for c in s.payload.candidates)
    if guesses:
        assert exact_rows != padded_rows   # some step had fewer candidates than G


def test_sampled_run_is_the_same_padded_or_not(pair_fp32):
    """A seed gives the same tokens whether the step is padded to G (captured) or not."""
    sampling = SamplingConfig(temperature=0.8, seed=5).validated()
    runs = [_run(pair_fp32, PROMPTS["code"], padded, sampling=sampling, max_new_tokens=16, window=4, ngram=3,
                 guesses=3) for padded in (False, True)]
    assert runs[0].token_ids == runs[1].token_ids and len(runs[0].token_ids) == 16
    assert _payloads(runs[0]) == _payloads(runs[1])
    assert _tried_probs(runs[0]) == pytest.approx(_tried_probs(runs[1]), abs=1e-4)
    assert [s.tokens_processed for s in runs[0].steps] != [s.tokens_processed for s in runs[1].steps]


def test_static_shapes_have_no_graph_breaks(pair_fp32):
    """What a CUDA graph captures (each padded shape's compute) is one graph for dynamo: a warm-up and a steady shape."""
    dec = make_decoder("lookahead", pair_fp32, PROMPTS["code"], max_new_tokens=8, window=4, ngram=3, guesses=3)
    try:
        for layout in (dec.layout(0), dec.layout(dec.N - 2)):
            torch._dynamo.reset()
            with torch.inference_mode():
                explained = torch._dynamo.explain(dec._shape(layout, dec.G).compute)()
            assert explained.graph_break_count == 0, explained.break_reasons
    finally:
        dec.close()
        torch._dynamo.reset()


# -- tiny model: edge cases and end-to-end exact sampling with graphs on ---------------------------------

TINY_PROMPT = [1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2]


def test_tiny_edges_equal_ar(one_thread):
    """Padded to G: G = 0, N = 2, wide warm-ups, one-token prompts and a prompt near the context limit
    (clamped positions)."""
    pair = tiny_pair(draft_seed=None)
    for prompt in ([3], TINY_PROMPT, (TINY_PROMPT * 12)[:120]):
        n = 8 if len(prompt) > 100 else 24
        ar = make_decoder("ar", pair, "", max_new_tokens=n, prompt_ids=prompt, graphs="off").run().token_ids
        for window, ngram, guesses in [(7, 5, 3), (4, 2, 4), (5, 4, 0), (1, 3, 2)]:
            trace = _run(pair, "", True, max_new_tokens=n, prompt_ids=prompt, window=window, ngram=ngram,
                         guesses=guesses)
            assert trace.token_ids == ar, (prompt[:3], window, ngram, guesses)


def test_static_sampling_is_exact_end_to_end(one_thread):
    """The decoder padded to G (what a captured step runs) samples the tiny target's distribution (its first
    four tokens), with candidates accepted; test_sampling_exact holds the unpadded step (a CPU's) to the same
    test with its negative controls, and the device rule's control is above."""
    from helpers import exact_distribution

    sampling = SamplingConfig(1.0)
    pair = tiny_pair(draft_seed=None, logit_scale=14.0)
    exact = exact_distribution(pair.target, TINY_PROMPT, sampling, 4)
    samples, accepted = [], 0
    for seed in range(1500):
        cfg = SamplingConfig(1.0, seed=seed)
        trace = _run(pair, "", True, prompt_ids=TINY_PROMPT, max_new_tokens=6, sampling=cfg, window=3, ngram=3,
                     guesses=3)
        samples.append(tuple(trace.token_ids[:4]))
        accepted += any(s == SOURCE_NGRAM for st in trace.steps for s in st.token_sources)
    assert chi_square_pvalue(samples, exact) > 1e-3
    assert accepted > 150, accepted


def test_device_sampled_verdict_records_each_try_as_it_happened():
    """Each try's recorded probability is P'(x): P with the tokens tried before it at that position removed and
    renormalised (recomputed here from the full distributions along the emitted tokens), its draw is the
    candidate's uniform there, the first try with draw < probability is the one accepted, and a token not
    tried (repeated, left behind, past the accepted try or the walk's end) records nothing. Control: some
    later tries' probabilities differ from their raw P(x)."""
    rng = random.Random(9)
    vocab, renormalised = 4, 0
    for case in range(150):
        guesses, cand_len = rng.randint(1, 4), rng.randint(1, 3)
        cands = torch.tensor([[rng.randrange(vocab) for _ in range(cand_len)] for _ in range(guesses)])
        gen = torch.Generator().manual_seed(case)
        first = torch.softmax(torch.randn(vocab, generator=gen) * 2, -1)
        after = torch.softmax(torch.randn(guesses, cand_len, vocab, generator=gen) * 2, -1)
        uniforms = torch.rand(cand_len, guesses, generator=gen, dtype=torch.float64)
        packed, tries = verify.sampled_verdict(cands, torch.ones(guesses, dtype=torch.bool), node_probs(first, after),
                                               uniforms, gen)
        got = unpack(packed.tolist(), guesses, cand_len)
        want = torch.full((2, cand_len, guesses), verify.NOT_TRIED, dtype=torch.float64)
        survivors, probs = list(range(guesses)), first.double()
        for j in range(cand_len):
            current, offered, took = probs.clone(), set(), None
            for k in survivors:
                x = int(cands[k, j])
                if x in offered:
                    continue
                offered.add(x)
                chance = min(1.0, float(current[x] / current.sum()))
                want[:, j, k] = torch.tensor([chance, float(uniforms[j, k])], dtype=torch.float64)
                renormalised += len(offered) > 1 and abs(chance - float(probs[x])) > 1e-6
                if float(uniforms[j, k]) < chance:
                    took = x
                    break
                current[x] = 0.0
            if took is None:
                break
            assert got.tokens[j] == took, case
            survivors = [k for k in survivors if int(cands[k, j]) == took]
            probs = after[survivors[0], j].double()
        # The walk renormalises P in its own precision (float32 here), the reference in float64.
        torch.testing.assert_close(tries, want, atol=1e-6, rtol=0, msg=lambda m: f"case {case}: {m}")
    assert renormalised >= 10


# The tiny target's greedy continuation of [3, 1, 4, 1, 5] between two copies of it: after the prompt, the copy of
# what followed the first is the target's likeliest continuation, accepted past N-1 in a quarter of the runs.
QUOTING_PROMPT = [3, 1, 4, 1, 5, 1, 0, 3, 0, 3, 0, 3, 1, 4, 1, 5]
QUOTING = SamplingConfig(0.7)


def _priced_copy_samples(pair, exact_runs: int) -> tuple[list[tuple], int]:
    """First four tokens of `exact_runs` seeded runs whose copies are priced on a flat curve (rows free, so a copy
    verifies up to its whole length, past N-1 = 1), and how many runs accepted more than one copied token a step."""
    samples, long_accepts = [], 0
    for seed in range(exact_runs):
        sampling = SamplingConfig(QUOTING.temperature, seed=seed)
        trace = _run(pair, "", False, prompt_ids=QUOTING_PROMPT, max_new_tokens=6, sampling=sampling,
                     window=2, ngram=2, guesses=1, copy_curve={1: 1.0, 64: 1.0})
        samples.append(tuple(trace.token_ids[:4]))
        long_accepts += any(st.token_sources.count(SOURCE_COPY) > 1 for st in trace.steps)
    return samples, long_accepts


def test_priced_copies_longer_than_the_ngram_sample_exactly_and_a_planted_bug_does_not(one_thread):
    """A copy priced past N-1 (the step's candidates as long as it, the pool's n-gram padded) keeps sampling exact:
    the tiny target's first four tokens by chi-square, with copies accepted past N-1; the negative control, the
    rejection's fallback drawn from the raw P, is caught by the same check at the same size."""
    from helpers import exact_distribution

    pair = tiny_pair(draft_seed=None, logit_scale=14.0)
    exact = exact_distribution(pair.target, QUOTING_PROMPT, QUOTING, 4)
    samples, long_accepts = _priced_copy_samples(pair, 1200)
    assert chi_square_pvalue(samples, exact) > 1e-3
    assert long_accepts > 100, long_accepts
    with mutated(FALLBACK_FROM_RAW_P.name):
        control, _ = _priced_copy_samples(pair, 1200)
    assert chi_square_pvalue(control, exact, control=True) < 1e-3
