"""The graph runner, the static-buffer forward and AR's step, all on a CPU.

A CPU cannot capture CUDA graphs, so here the runner runs each shape's eager form (attention over the
filled slots) over the very buffers a GPU replays: the same fixed shapes, the same one-read-per-step
walk. What these tests prove is what capture needs (no graph breaks in the captured form, attention over
the whole capacity) and that the captured and eager forms compute the same thing (fp32 logits equal).
"""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_model

from specviz.engine.graphs import GraphRunner, capture_wanted, check_graphs
from specviz.engine.lean import LeanLlama
from specviz.engine.methods import make_decoder
from specviz.engine.static import GraphSession, cache_capacity, checkout, release
from specviz.errors import InvalidInput

PROMPTS = ["Write a haiku about tea.", "def add(a, b):"]


def test_the_graphs_setting_is_checked():
    assert [check_graphs(m) for m in ("auto", "on", "off", True, False)] == ["auto", "on", "off", "on", "off"]
    with pytest.raises(InvalidInput, match="graphs must be one of auto, on, off"):
        check_graphs("fast")
    # capture: CUDA only, and never when off
    assert [capture_wanted(m, torch.device("cuda")) for m in ("auto", "on", "off")] == [True, True, False]
    assert not any(capture_wanted(m, torch.device("cpu")) for m in ("auto", "on", "off"))


def test_the_runner_falls_back_to_eager_on_a_cpu():
    runner = GraphRunner(torch.device("cpu"), capture=True)
    calls = []
    assert runner.run("k", lambda: calls.append(1) or len(calls)) == 1
    assert runner.run("k", lambda: calls.append(1) or len(calls)) == 2   # called again: nothing was captured
    assert not runner.capture and "k" not in runner._graphs
    stats = runner.stats.to_dict()
    assert stats["eager_calls"] == 2 and stats["replays"] == 0 and stats["capturing"] is False


def test_capacities_are_few():
    assert [cache_capacity(n) for n in (1, 256, 257, 700, 2048)] == [256, 256, 512, 1024, 2048]


def test_the_static_mask_sees_the_prefix_then_the_block():
    model = tiny_model()
    session = GraphSession(torch.device("cpu"), capture=False, capacity=16)
    forward = session.forward("target", model)
    block = torch.tensor([[True, False], [True, True]])
    shape = forward.shape("pair", write_offsets=[0, 1], position_offsets=[0, 1], block=block, rows=[0, 1])
    shape.origin.fill_(5)
    allowed = shape.mask()[0, 0] == 0
    expected = torch.zeros(2, 16, dtype=torch.bool)
    expected[:, :5] = True
    expected[0, 5] = expected[1, 5] = expected[1, 6] = True
    assert torch.equal(allowed, expected)


def test_the_static_forward_equals_the_lean_forward():
    """Writing K/V by index and attending over the whole cache under a mask gives the same logits."""
    model = tiny_model()
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    lean = LeanLlama(model, 16)
    with torch.inference_mode():
        expected = lean.forward(ids, 0, rows=5)
        session = GraphSession(torch.device("cpu"), capture=False, capacity=16)
        forward = session.forward("target", model)
        forward.prefill(ids[:, :3])
        causal = torch.ones(2, 2, dtype=torch.bool).tril()
        shape = forward.shape("two", write_offsets=[0, 1], position_offsets=[0, 1], block=causal, rows=[0, 1])
        got = shape(ids[:, 3:], 3)
    torch.testing.assert_close(got, expected[3:], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("block", [torch.tensor([[True, False, False], [True, True, False]]),
                                   torch.ones(2, 3, dtype=torch.bool)], ids=["masked", "sees-all"])
def test_the_eager_form_equals_the_captured_form(block):
    """Attention over the filled slots (eager, a view of the shape's one mask) and over the whole capacity
    (what a graph records) give the same logits in fp32, at several origins: rows write the last two
    slots of a three-slot block, as a draft level does."""
    model = tiny_model()
    session = GraphSession(torch.device("cpu"), capture=False, capacity=32)
    forward = session.forward("target", model)
    with torch.inference_mode():
        forward.prefill(torch.tensor([[5, 0, 1, 4, 3, 2, 1, 0]]))
        shape = forward.shape("level", write_offsets=[1, 2], position_offsets=[1, 2], block=block, rows=[0, 1])
        for origin, ids in ((3, [[1, 2]]), (6, [[3, 4]]), (20, [[5, 0]])):
            shape.ids.copy_(torch.tensor(ids))
            shape.origin.fill_(origin)
            shape._origin = origin
            eager, captured = shape.eager().clone(), shape.compute().clone()
            torch.testing.assert_close(eager, captured, rtol=1e-5, atol=1e-5)
            assert shape(None, origin) is not None and session.runner.stats.eager_calls > 0


@pytest.mark.parametrize("prompt", PROMPTS)
def test_ar_gives_the_same_tokens_whatever_the_graphs_setting_and_forward(pair_fp32, prompt, monkeypatch):
    """One step for every setting: graphs on and off run it (nothing captured on a CPU), and over
    transformers' own forward (as for an architecture the lean forward does not cover) it gives the lean
    forward's tokens and narration."""
    from specviz.engine import static

    off = make_decoder("ar", pair_fp32, prompt, max_new_tokens=24, graphs="off").run()
    on = make_decoder("ar", pair_fp32, prompt, max_new_tokens=24, graphs="on").run()
    monkeypatch.setattr(static, "lean_llama_supported", lambda model: False)
    model = make_decoder("ar", pair_fp32, prompt, max_new_tokens=24, graphs="on")
    assert not model.forward.capturable
    own = model.run()
    assert on.token_ids == off.token_ids == own.token_ids
    assert [[a["id"] for a in s.alternatives] for s in on.steps] == [[a["id"] for a in s.alternatives]
                                                                     for s in own.steps]
    assert [a["p"] for s in on.steps for a in s.alternatives] == pytest.approx(
        [a["p"] for s in own.steps for a in s.alternatives], abs=2e-5)
    for trace, mode in ((off, "off"), (on, "on")):
        assert trace.settings["graphs"] == mode
        assert trace.graphs["enabled"] is True and trace.graphs["capturing"] is False
        assert trace.graphs["eager_calls"] == len(trace.steps) - 1   # every step but the prefill: the runner


def test_auto_runs_the_static_step_uncaptured_on_a_cpu(pair_fp32):
    trace = make_decoder("ar", pair_fp32, PROMPTS[0], max_new_tokens=4).run()
    assert trace.settings["graphs"] == "auto" and trace.graphs["enabled"] is True
    assert trace.graphs["capturing"] is False and trace.graphs["replays"] == 0


def test_ar_sampled_static_steps_repeat_by_seed(pair_fp32):
    from specviz.engine.sampling import SamplingConfig

    runs = [make_decoder("ar", pair_fp32, PROMPTS[0], max_new_tokens=12, graphs="on",
                         sampling=SamplingConfig(0.9, seed=seed)).run().token_ids for seed in (7, 7, 8)]
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_a_finished_decoder_hands_its_session_to_the_next(pair_fp32):
    first = make_decoder("ar", pair_fp32, PROMPTS[0], max_new_tokens=3, graphs="on")
    session = first.session
    second = make_decoder("ar", pair_fp32, PROMPTS[0], max_new_tokens=3, graphs="on")
    assert second.session is not session   # the first still holds its buffers
    first.run()
    assert not session.in_use
    third = make_decoder("ar", pair_fp32, PROMPTS[1], max_new_tokens=3, graphs="on")
    assert third.session is session   # its graphs (on a GPU) are replayed, not captured again
    assert third.run().token_ids == make_decoder("ar", pair_fp32, PROMPTS[1], max_new_tokens=3,
                                                 graphs="off").run().token_ids
    second.run()
    release(second.session)


def test_checkout_keeps_sessions_apart_by_capacity():
    model = tiny_model()
    a = checkout(model, "ar", 256, capture=False)
    b = checkout(model, "ar", 512, capture=False)
    assert a is not b
    release(a)
    assert checkout(model, "ar", 256, capture=False) is a


def test_ar_step_has_no_graph_breaks(pair_fp32):
    """What the runner captures must trace as one graph: any break would make capture fail on a GPU."""
    decoder = make_decoder("ar", pair_fp32, PROMPTS[0], max_new_tokens=4, graphs="on")
    decoder.step()
    decoder.step()
    with torch.inference_mode():
        explained = torch._dynamo.explain(decoder.one_token.compute)()
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1
    decoder.run()


def test_prompt_lookup_chain_has_no_graph_breaks(pair_fp32):
    """Each copied length's chain shape, as a GPU would capture it."""
    decoder = make_decoder("prompt-lookup", pair_fp32, "Repeat: one two three, one two three, one two",
                           max_new_tokens=24, graphs="on", curve={1: 1.0, 64: 1.0}, curve_source="prior")
    decoder.step()
    decoder.step()
    for length in (0, 2):
        with torch.inference_mode():
            explained = torch._dynamo.explain(decoder._chain(length).compute)()
        assert explained.graph_break_count == 0, explained.break_reasons
        assert explained.graph_count == 1
    decoder.run()


def test_bench_reports_the_hosts_share_of_a_replayed_step():
    """Wall less capture less the replays' GPU time, per forward: the split the 0.5 ms target is about."""
    from specviz.benchmark.report import markdown_table
    from specviz.benchmark.runner import BenchRecord, graphs_summary

    def record(wall_s, replay_ms, replays=10):
        graphs = {"enabled": True, "capturing": True, "replays": replays, "replay_ms": replay_ms,
                  "shapes_captured": 1, "reused": 0}
        return BenchRecord("p", "chat", "ar", [1] * 10, "", 10, wall_s, 0.0, graphs=graphs, capture_ms=100.0)

    summary = graphs_summary([record(0.150, 45.0), record(0.160, 50.0), record(0.170, 40.0)])
    assert summary["graphs"] == "replayed"
    assert summary["host_ms_per_step"] == pytest.approx(1.0)   # the median of 0.5, 1 and 3 ((160 - 100 - 50) / 10)
    row = {"suite": "chat", "method": "ar", "tokens_per_second": 1.0, "tokens_per_second_q1": 1.0,
           "tokens_per_second_q3": 1.0, "speedup_vs_ar": None, "tokens_per_forward": 1.0, "accepted_length": 0.0,
           "same_as_ar": None, **summary}
    assert "replayed, host 1.00 ms/step" in markdown_table([row])
    eager = record(0.1, 0.0, replays=0)
    eager.graphs["capturing"] = False
    assert graphs_summary([eager])["host_ms_per_step"] is None


@torch.inference_mode()
def test_a_kept_session_drafts_through_the_forward_of_the_draft_it_is_given():
    """A session outlives its race, and names a draft's forward by the draft's id: a later draft given the
    same name (a freed model's id, or before this fix a freed weight's address, which made a full-suite run
    draft through another model's forward) gets a forward over its own weights, not the kept one."""
    first, second = tiny_model(6, 1, layers=1), tiny_model(6, 2, layers=1)
    ids = torch.tensor([[1, 2, 3, 4]])
    session = GraphSession(torch.device("cpu"), False, 32)
    kept = session.forward("draft:reused", first)
    assert session.forward("draft:reused", first) is kept   # the same draft: its forward is reused
    given = session.forward("draft:reused", second)
    logits = given.prefill(ids).reshape(-1)   # the last position's
    own = second(ids).logits[0, -1]
    assert torch.allclose(logits, own, atol=1e-5)
    # The control: the two drafts differ, so drafting through the kept forward would have shown.
    assert not torch.allclose(first(ids).logits[0, -1], own, atol=1e-3)
