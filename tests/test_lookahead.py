"""Lookahead decoding: layout, verification rules, greedy equality with AR, exact sampling, edge cases."""

import pytest
import torch
from helpers import ar_token_ids, chi_square_pvalue, tiny_pair
from lookahead_reference import greedy_verify, sampling_verify

from specviz.engine.methods import make_decoder
from specviz.engine.sampling import SamplingConfig
from specviz.errors import InvalidInput
from specviz.lookahead.sizing import COPY_ROWS, choose, expected_tokens, interpolate, settings_table, step_ms
from specviz.lookahead.window import build_layout
from specviz.trace import ORIGIN_COPY, SOURCE_AR, SOURCE_BONUS, SOURCE_COPY, SOURCE_NGRAM, RunTrace


def _rows(text: str) -> torch.Tensor:
    return torch.tensor([[c == "1" for c in row.split()[0]] for row in text.strip().splitlines()])


# -- layout ------------------------------------------------------------------------------


def test_layout_w3_n3_g2_by_hand():
    lay = build_layout(window=3, ngram=3, guesses=2)
    # Input order: t0, level 0 (W-1 = 2), level 1 (W = 3), two candidates of N-1 = 2 tokens.
    expected = _rows("""
        1000000000  t0
        1100000000  l0c0
        1110000000  l0c1
        1001000000  l1c0  pos 1: t0, itself
        1100100000  l1c1  pos 2: t0, l0c0, itself
        1110010000  l1c2  pos 3: t0, l0c0, l0c1, itself
        1000001000  cand0 tok0
        1000001100  cand0 tok1
        1000000010  cand1 tok0
        1000000011  cand1 tok1
    """)
    assert torch.equal(lay.allowed, expected)
    assert lay.offsets.tolist() == [0, 1, 2, 1, 2, 3, 1, 2, 1, 2]
    assert lay.n_max == (3 - 1) * (3 + 2)
    # Kept logits: the last level (the window's new level), then t0, then the candidates.
    assert lay.logits_index.tolist() == [3, 4, 5, 0, 6, 7, 8, 9]
    assert (lay.new_level_rows, lay.t0_row, lay.n_kept_fixed, lay.candidate_start) == (3, 3, 4, 6)
    # Fewer candidates: the leading rows and columns of the same block.
    assert lay.n_tokens(1) == 8 and lay.n_kept(1) == 6 and lay.n_tokens(0) == 6


def test_layout_w2_n4_g1_chains_along_columns():
    lay = build_layout(window=2, ngram=4, guesses=1)
    # t0, l0c0, l1c0, l1c1, l2c0, l2c1, cand (3 tokens)
    expected = _rows("""
        100000000  t0
        110000000  l0c0
        101000000  l1c0 pos 1
        110100000  l1c1 pos 2
        101010000  l2c0 pos 2: t0, l1c0, itself
        110101000  l2c1 pos 3: t0, l0c0, l1c1, itself
        100000100
        100000110
        100000111
    """)
    assert torch.equal(lay.allowed, expected)
    assert lay.offsets.tolist() == [0, 1, 1, 2, 2, 3, 1, 2, 3]
    assert lay.logits_index.tolist() == [4, 5, 0, 6, 7, 8]


def test_layout_warmup_and_n2_g0():
    # Warm-up for N = 4: level 0 starts W+N-3 wide; one level more per step, each one column narrower.
    assert build_layout(5, 4, 2, fill=0).level_lengths == [6]
    assert build_layout(5, 4, 2, fill=1).level_lengths == [5, 6]
    assert build_layout(5, 4, 2).level_lengths == [4, 5, 5]
    # N = 2: the window is level 0 only; its predictions (and t0's) are the new level.
    lay = build_layout(4, 2, 0)
    assert lay.steady and lay.level_lengths == [3] and lay.n_max == 4
    assert torch.equal(lay.allowed, torch.tril(torch.ones(4, 4, dtype=torch.bool)))
    assert lay.logits_index.tolist() == [0, 1, 2, 3] and lay.t0_row == 0 and lay.new_level_rows == 4
    fill0 = build_layout(3, 3, 1, fill=0)
    assert fill0.logits_index.tolist() == [0, 1, 2, 3, 4, 5] and fill0.new_level_rows == 4


# -- verification rules ---------------------------------------------------------------------


def test_greedy_verify_longest_match_first_on_ties():
    cands = [(5, 6), (5, 7), (8, 9), (5, 6)]
    preds = [[6, 1], [9, 2], [0, 0], [6, 3]]
    v = greedy_verify(cands, 5, preds)
    assert v.match_lengths == [2, 1, 0, 2]
    assert v.best == 0 and v.tokens == [5, 6, 1] and v.n_accepted == 2   # full match: N tokens
    v = greedy_verify([(1, 2)], 5, [[0, 0]])
    assert v.best is None and v.tokens == [5] and v.n_accepted == 0
    assert greedy_verify([], 4, []).tokens == [4]


def test_sampling_verify_certain_cases():
    gen = torch.Generator().manual_seed(0)
    one_hot = torch.tensor([0.0, 1.0, 0.0])
    after = torch.tensor([[[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]])
    v = sampling_verify([(1, 2)], one_hot, after, gen)
    assert v.tokens == [1, 2, 0] and v.best == 0 and v.n_accepted == 2
    v = sampling_verify([(0, 2)], one_hot, after, gen)         # P(0) = 0: rejected, sample from residual
    assert v.tokens == [1] and v.best is None and v.match_lengths == [0]


def test_sampling_verify_is_exact_on_two_positions():
    """Outcome (first, second) token must follow P0 then P1, whatever the candidates offer."""
    p0 = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.1, 0.6, 0.3])        # P after token 0 (shared prefix: same for both candidates)
    after = torch.stack([torch.stack([q, torch.tensor([0.2, 0.2, 0.6])])] * 3)
    cands = [(0, 1), (0, 2), (2, 2)]
    gen = torch.Generator().manual_seed(1)
    samples = []
    for _ in range(6000):
        v = sampling_verify(cands, p0, after, gen)
        samples.append(tuple(v.tokens[:2]) if v.tokens[0] == 0 else (v.tokens[0],))
    exact = {(0, y): 0.5 * float(q[y]) for y in range(3)}
    exact.update({(1,): 0.3, (2,): 0.2})
    assert chi_square_pvalue(samples, exact) > 1e-3


# -- greedy equality with autoregressive on the real model (fp32) -----------------------------

PROMPTS = {
    "code": "Write a Python function `is_prime(n)` that returns True when n is prime.",
    "repeat": "Repeat this line three times: the quick brown fox jumps over the lazy dog.",
    "chat": "What are three tips for staying focused while studying?",
}
SETTINGS = [(5, 3, 5), (7, 5, 7), (4, 2, 4), (5, 4, 0)]
N_NEW = 64


@pytest.fixture(scope="module")
def ar_outputs(pair_fp32):
    return ar_token_ids(pair_fp32, PROMPTS, N_NEW)


@pytest.mark.parametrize("name", list(PROMPTS))
def test_greedy_equals_autoregressive(pair_fp32, ar_outputs, name):
    """Every setting with the prompt pool and copied candidates (the default), without either, and with the
    pool alone."""
    accepted = {}
    # Without pool and copies, two settings per prompt, rotating: each setting still meets a prompt.
    k = list(PROMPTS).index(name)
    bare = [SETTINGS[(2 * k) % len(SETTINGS)], SETTINGS[(2 * k + 1) % len(SETTINGS)]]
    variants = [(w, n, g, True, COPY_ROWS) for w, n, g in SETTINGS] + [(w, n, g, False, 0) for w, n, g in bare]
    for window, ngram, guesses, pool, copies in variants + [(5, 3, 5, True, 0)]:
        trace = make_decoder("lookahead", pair_fp32, PROMPTS[name], max_new_tokens=N_NEW, window=window,
                             ngram=ngram, guesses=guesses, pool_from_prompt=pool, copies=copies).run()
        assert trace.token_ids == ar_outputs[name], (name, window, ngram, guesses, pool, copies)
        sources = [s for step in trace.steps for s in step.token_sources]
        accepted[(window, ngram, guesses, pool, copies)] = (sources.count(SOURCE_NGRAM), sources.count(SOURCE_COPY))
        if guesses == 0:
            assert SOURCE_NGRAM not in sources
        if copies == 0:
            assert SOURCE_COPY not in sources
    # The equality above means something only if candidates were actually accepted.
    assert sum(n + c for n, c in accepted.values()) > 0, accepted
    if name in ("code", "repeat"):
        assert accepted[(5, 3, 5, True, 0)][0] > 0, accepted   # the pool's own n-grams
        assert sum(c for _, c in accepted.values()) > 0, accepted   # and copies


def test_trace_payload_and_round_trip(pair_fp32):
    dec = make_decoder("lookahead", pair_fp32, PROMPTS["repeat"], max_new_tokens=24, window=4, ngram=3,
                       guesses=3)
    trace = dec.run()
    steady = [s for s in trace.steps[1:] if not s.payload.warmup]
    assert steady and trace.steps[0].payload.warmup and trace.steps[1].payload.warmup
    for step in steady:
        p = step.payload
        assert [len(level) for level in p.window] == [3, 4]
        assert len(p.harvested) == 4 and all(len(g) == 3 for g in p.harvested)
        assert len(p.candidates) <= 3 + p.copies and p.pool_size > 0 and p.step_ms > 0
        assert step.tokens_processed == 2 * (4 + len(p.candidates))
        if p.accepted_candidate is not None:
            best = p.candidates[p.accepted_candidate]
            n, source = best.match_length, SOURCE_COPY if best.origin == ORIGIN_COPY else SOURCE_NGRAM
            assert step.token_sources == [source] * n + [SOURCE_BONUS][:len(step.token_sources) - n]
        else:
            assert step.token_sources == [SOURCE_AR]
        assert all(len(g) == 2 for g in p.pool_entry) and len(p.pool_entry) <= 3
        assert [[pair_fp32.tokenizer.decode([t]) for t in level] for level in p.window] == p.window_text
    again = RunTrace.from_dict(trace.to_dict())
    assert again.token_ids == trace.token_ids and again.steps[-1].payload == trace.steps[-1].payload


def test_eos_stops_like_autoregressive(pair_fp32):
    prompt = "Reply with exactly one word: yes."
    ar = make_decoder("ar", pair_fp32, prompt, max_new_tokens=40).run()
    assert ar.finish_reason == "eos"
    la = make_decoder("lookahead", pair_fp32, prompt, max_new_tokens=40, window=4, ngram=3, guesses=4).run()
    assert la.token_ids == ar.token_ids and la.finish_reason == "eos"
    assert la.token_ids[-1] in pair_fp32.eos_token_ids


# -- tiny models: sampling exactness and edge cases ------------------------------------------

TINY_PROMPT = [1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2]


def test_same_seed_same_output(one_thread):
    pair = tiny_pair(draft_seed=None)
    sampling = SamplingConfig(temperature=1.0, seed=7)
    runs = [make_decoder("lookahead", pair, "", sampling=sampling, max_new_tokens=20, prompt_ids=TINY_PROMPT,
                         window=3, ngram=3, guesses=2).run().token_ids for _ in range(2)]
    assert runs[0] == runs[1]


def _tiny_ar(pair, prompt_ids, n):
    return make_decoder("ar", pair, "", max_new_tokens=n, prompt_ids=prompt_ids).run().token_ids


@pytest.mark.parametrize("prompt_ids", [[3], [4, 1], TINY_PROMPT], ids=["one-token", "two-tokens", "repetitive"])
def test_short_prompts_and_max_new_tokens(prompt_ids, one_thread):
    pair = tiny_pair(draft_seed=None)
    reference = _tiny_ar(pair, prompt_ids, 30)
    for window, ngram, guesses in [(7, 5, 3), (4, 2, 4), (5, 4, 0), (2, 2, 0)]:
        for n in (1, 2, 3, 5, 30):
            dec = make_decoder("lookahead", pair, "", max_new_tokens=n, prompt_ids=prompt_ids, window=window,
                               ngram=ngram, guesses=guesses)
            while not dec.done:
                dec.step()
                assert len(dec.generated) <= n
                if not dec.done:  # the cache holds the prompt and every generated token but the last
                    assert dec.cache_len == len(prompt_ids) + len(dec.generated) - 1
            assert dec.generated == reference[:n], (window, ngram, guesses, n)
            assert dec.trace.finish_reason == "length"


def test_eos_on_tiny_model_and_window_never_holds_eos(one_thread):
    pair = tiny_pair(draft_seed=None)
    reference = _tiny_ar(pair, TINY_PROMPT, 40)
    eos = reference[5]  # a token greedy decoding produces: make it the end of sequence
    pair.target.generation_config.eos_token_id = eos
    ar = make_decoder("ar", pair, "", max_new_tokens=40, prompt_ids=TINY_PROMPT).run()
    la = make_decoder("lookahead", pair, "", max_new_tokens=40, prompt_ids=TINY_PROMPT, window=5, ngram=3,
                      guesses=3).run()
    assert la.token_ids == ar.token_ids and la.finish_reason == "eos" and la.token_ids[-1] == eos
    # Guesses of EOS in the new level are replaced by prompt tokens (the prompt has no EOS).
    if eos not in TINY_PROMPT:
        for step in la.steps[2:]:
            assert all(eos not in level for level in step.payload.window)


def test_transformers_forward_runs_the_same_step(one_thread, monkeypatch):
    """A target the lean forward does not cover runs the same step over transformers' forward: greedy equals
    `ar`, with the same rows per step as the lean forward."""
    from specviz.engine import static

    pair = tiny_pair(draft_seed=None)
    reference = _tiny_ar(pair, TINY_PROMPT, 24)
    for window, ngram, guesses in [(4, 3, 3), (5, 4, 0)]:
        options = dict(window=window, ngram=ngram, guesses=guesses)
        lean = make_decoder("lookahead", pair, "", max_new_tokens=24, prompt_ids=TINY_PROMPT, **options).run()
        with monkeypatch.context() as patch:   # as for an architecture the lean forward does not cover
            patch.setattr(static, "lean_llama_supported", lambda model: False)
            slow = make_decoder("lookahead", pair, "", max_new_tokens=24, prompt_ids=TINY_PROMPT, **options).run()
        assert slow.token_ids == lean.token_ids == reference, options
        assert [s.tokens_processed for s in slow.steps] == [s.tokens_processed for s in lean.steps]


def test_long_prompt_near_the_context_limit(one_thread):
    pair = tiny_pair(draft_seed=None)  # max_position_embeddings = 128
    prompt = (TINY_PROMPT * 12)[:120]
    reference = _tiny_ar(pair, prompt, 8)
    la = make_decoder("lookahead", pair, "", max_new_tokens=8, prompt_ids=prompt, window=7, ngram=5, guesses=4)
    assert la.run().token_ids == reference


def test_bad_settings_are_invalid_input(one_thread):
    pair = tiny_pair(draft_seed=None)
    for bad in [dict(window=0, ngram=3, guesses=2), dict(window=3, ngram=1, guesses=2),
                dict(window=3, ngram=3, guesses=-1), dict(window=3, ngram=None, guesses=2),
                dict(window="3", ngram=3, guesses=2), dict(window=3, ngram=3, guesses=2, pool_from_prompt="yes")]:
        with pytest.raises(InvalidInput):
            make_decoder("lookahead", pair, "", max_new_tokens=4, prompt_ids=TINY_PROMPT, **bad)


# -- auto -------------------------------------------------------------------------------


def test_auto_model_and_choice(tmp_path, monkeypatch, one_thread):
    curve = {1: 30.0, 2: 30.0, 4: 31.0, 8: 35.0, 16: 45.0, 32: 60.0, 64: 100.0}
    assert interpolate(curve, 12) == pytest.approx(40.0)
    assert expected_tokens(5, 3, 0, copies=0) == 1.0             # no candidates, no gain
    assert expected_tokens(5, 4, 5) > expected_tokens(5, 3, 5) > expected_tokens(5, 2, 5) > 1.0
    # A copy alone (G = 0) brings tokens, and its rows are paid in the steps that find one.
    assert expected_tokens(5, 3, 0) > expected_tokens(5, 3, 0, copies=0)
    assert step_ms(curve, 1, 3, 0) == pytest.approx(0.5 * interpolate(curve, 2) + 0.5 * interpolate(curve, 4))
    table = settings_table(curve)
    assert table[0]["predicted_speedup"] >= table[-1]["predicted_speedup"]
    assert all(r["step_tokens"] <= 64 for r in table)
    # The real thing on a tiny model, cached in a private cache directory. Whether the cores were busy is
    # not under test (a loaded CI machine's curve is used but not cached): treat them as quiet.
    from specviz.engine import profiler

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setattr(profiler, "runqueue_wait_seconds", lambda: None)
    pair = tiny_pair(draft_seed=None)
    result = choose(pair)
    c = result["choice"]
    assert set(result) >= {"curve", "table", "choice"} and c == {k: result["table"][0][k] for k in c}
    measured = profiler.forward_curve
    monkeypatch.setattr(profiler, "forward_curve", lambda *a, **k: pytest.fail("measured again"))
    assert choose(pair) == result                                # second call: from the cache
    monkeypatch.setattr(profiler, "forward_curve", measured)
    trace = make_decoder("lookahead", pair, "", max_new_tokens=6, prompt_ids=TINY_PROMPT).run()
    assert trace.settings["auto"] and (trace.settings["window"], trace.settings["ngram"],
                                       trace.settings["guesses"]) == (c["window"], c["ngram"], c["guesses"])
    assert trace.token_ids == _tiny_ar(pair, TINY_PROMPT, 6)


def test_expected_tokens_count_a_copy_past_the_ngram_and_nothing_else_changes():
    """A priced copy may outrun N-1 (`decoder._priced_copies`): its later positions add what they are reached
    with, the pool's n-grams stop at N-1, and a copy no longer than N-1 gives the formula it always gave."""
    from specviz.ui.measured import lookahead_expected

    short = lookahead_expected(0.1, 3, 2, 0.5, 1)
    assert lookahead_expected(0.1, 3, 2, 0.5, 1, copy_len=2) == short
    assert short == pytest.approx(1 + (1 - 0.9 ** 2 * 0.5) + (1 - 0.99 ** 2 * 0.75))
    # Two positions more, reached only through the copy: 0.5^3 and 0.5^4.
    assert lookahead_expected(0.1, 3, 2, 0.5, 1, copy_len=4) == pytest.approx(short + 0.5 ** 3 + 0.5 ** 4)
    assert lookahead_expected(0.1, 3, 2, 0.5, 0, copy_len=4) == lookahead_expected(0.1, 3, 2, 0.5, 0)
