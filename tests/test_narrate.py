"""Workshop mode (issue 14): narrated captions from traces alone, the what-if predictions, sizing modes.

Hand-built traces pin exact wording (accepted tokens, the rejected token with its q and P,
the residual at T > 0, matched n-gram lengths); recorded races on the real offline model
(fp32) check the captions agree with what the decoders did, and that the autoregressive
step records the target's top alternatives while old traces still load.
"""

from __future__ import annotations

import html as htmllib
import json
import re

import pytest

from specviz.lookahead import whatif as lookahead_whatif
from specviz.request import ILLUSTRATIVE_LOOKAHEAD, ILLUSTRATIVE_TREE
from specviz.sequoia import views as sequoia_views
from specviz.sequoia import whatif as sequoia_whatif
from specviz.trace import LookaheadPayload, NgramCandidate, RaceTrace, RunTrace, StepRecord, TreeNode, TreePayload
from specviz.ui import narrate, whatif
from specviz.ui.figures import rejected_before


def plain(fragment: str) -> str:
    """Caption HTML as the reader sees it (tags dropped, entities decoded)."""
    return htmllib.unescape(re.sub(r"<[^>]+>", "", fragment))


def tree() -> TreePayload:
    # root "The" -> " cat" (accepted) -> " sat" (rejected), " lay" (not reached); root -> " dog" (not reached)
    nodes = [TreeNode(0, -1, 0, 10, "The", 1.0, 1.0, "root"),
             TreeNode(1, 0, 1, 11, " cat", 0.6, 0.7, "accepted"),
             TreeNode(2, 0, 1, 12, " dog", 0.3, 0.1, "not_reached"),
             TreeNode(3, 1, 2, 13, " sat", 0.5, 0.2, "rejected"),
             TreeNode(4, 1, 2, 14, " lay", 0.2, 0.05, "not_reached")]
    return TreePayload(nodes=nodes, accepted_path=[1], bonus_token_id=15, bonus_text=" ran", budget=5, depth=2,
                       draft_ms=1.0, verify_ms=1.0)


def look(warmup=False) -> LookaheadPayload:
    return LookaheadPayload(
        window=[[21, 22], [23, 24, 25]], window_text=[[" a", " b"], [" c", " d", " e"]],
        harvested=[[15, 23, 26]], pool_size=9, key_token_id=15,
        candidates=[NgramCandidate([30, 31], [" x", " y"], 0), NgramCandidate([16, 17], [" on", " the"], 2)],
        accepted_candidate=None if warmup else 1, pool_entry=[[30, 31], [16, 17]], step_ms=1.0, warmup=warmup,
        window_size=3, ngram_size=3, guesses=2)


def rec(i, ids, texts, sources, payload=None, tokens_in=1, alternatives=None, finished=False):
    return StepRecord(step=i, new_token_ids=ids, new_token_texts=texts, token_sources=sources,
                      tokens_processed=tokens_in, cumulative_tokens=0, time_ms={"target": 10.0}, payload=payload,
                      finished=finished, finish_reason="length" if finished else None, alternatives=alternatives)


def race(temperature=0.0) -> RaceTrace:
    alts = [{"id": 11, "text": " cat", "p": 0.52}, {"id": 12, "text": " dog", "p": 0.31},
            {"id": 19, "text": " owl", "p": 0.05}]
    runs = {
        "ar": RunTrace("ar", "p", [1, 2], {}, steps=[rec(0, [11], [" cat"], ["ar"], tokens_in=2, alternatives=alts)]),
        "sequoia": RunTrace("sequoia", "p", [1, 2], {"acceptance": [0.6, 0.2]}, steps=[
            rec(0, [10], ["The"], ["ar"], tokens_in=2),
            rec(1, [11, 15], [" cat", " ran"], ["draft", "bonus"], tree(), tokens_in=5)]),
        "lookahead": RunTrace("lookahead", "p", [1, 2], {}, steps=[
            rec(0, [15], [" ran"], ["ar"], look(True), tokens_in=2),
            rec(1, [16, 17, 18], [" on", " the", " mat"], ["ngram", "ngram", "bonus"], look(), tokens_in=10)]),
    }
    order = [["ar", 0], ["sequoia", 0], ["sequoia", 1], ["lookahead", 0], ["lookahead", 1]]
    return RaceTrace(prompt="p", prompt_token_ids=[1, 2], methods=list(runs), runs=runs, order=order,
                     sampling={"temperature": temperature}, vocab_size=100)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_sequoia_caption_names_the_levels_the_accepted_path_and_the_rejection(temperature):
    text = plain(narrate.caption_html(race(temperature), 3))
    assert "Step 3 of 5" in text and "Sequoia ran its step 1" in text
    assert "level 1: ·cat q 0.600, ·dog q 0.300" in text and "level 2: ·sat q 0.500, ·lay q 0.200" in text
    assert "Accepted 1: ·cat (q 0.600, P 0.700)" in text
    assert "Rejected: ·sat after ·cat, with draft probability q = 0.500 and target probability P = 0.200" in text
    assert "Bonus token ·ran" in text
    if temperature == 0.0:
        assert "target's top choice there was a different token (·ran)" in text
        assert "residual" not in text
    else:
        assert "min(1, P/q) = 0.400" in text
        assert "residual left after its tested child at ·cat was rejected" in text
        assert "normalise(max(P − q, 0))" in text


def siblings_tree() -> TreePayload:
    """root "The" -> " cat" (rejected first), " dog" (rejected after it, so against the residual), bonus " ran"."""
    nodes = [TreeNode(0, -1, 0, 10, "The", 1.0, 1.0, "root"),
             TreeNode(1, 0, 1, 11, " cat", 0.6, 0.3, "rejected", accept_prob=0.5, uniform=0.8,
                      tested_p=0.3, tested_q=0.6),
             TreeNode(2, 0, 1, 12, " dog", 0.3, 0.4, "rejected", accept_prob=0.25, uniform=0.7,
                      tested_p=0.1, tested_q=0.4)]
    return TreePayload(nodes=nodes, accepted_path=[], bonus_token_id=15, bonus_text=" ran", budget=3, depth=1,
                       draft_ms=1.0, verify_ms=1.0)


def test_a_later_siblings_caption_and_hover_use_the_residual_it_was_tested_against():
    """The second sibling was tested with min(1, P'/q') = 0.25 under the residual, not min(1, P/q) = 1 of its
    own P = 0.4 and q = 0.3: the caption, the table and both hovers say the recorded numbers."""
    from specviz.ui import svg

    trace = race(0.8)
    trace.runs["sequoia"].steps[1].payload = siblings_tree()
    text = plain(narrate.caption_html(trace, 3))
    assert "Rejected: ·cat after The" in text and "min(1, P/q) = 0.500, and its draw u = 0.800 was not below it" in text
    assert ("Then ·dog (q = 0.300, P = 0.400): it was tested after 1 rejected sibling, against the residual "
            "P′ = normalise(max(P − q, 0)) they left and the renormalised q′: P′ = 0.100, q′ = 0.400, so "
            "min(1, P′/q′) = 0.250, and its draw u = 0.700 was not below it") in text
    assert "min(1, P/q) = 1.000" not in text
    assert "residual left after all 2 of its tested children at The were rejected" in text
    table = sequoia_views.tests_table(siblings_tree(), greedy=False)
    assert plain(table).count("residual P′, q′") == 1 and "width:25.0%" in table and "left:70.0%" in table
    hover = htmllib.unescape(svg.tree_svg(siblings_tree()))
    assert "against the residual: P' = 0.100, q' = 0.400, min(1, P'/q') = 0.250" in hover
    assert "draw u = 0.700 ≥ 0.250, so rejected" in hover


def test_sequoia_caption_says_when_the_draft_read_the_targets_hidden_states():
    trace = race()
    assert "hidden state" not in plain(narrate.caption_html(trace, 3))
    for node in trace.runs["sequoia"].steps[1].payload.nodes[1:]:
        node.draft_input = "target's hidden state at the root"
    assert "level 1 came from the target's state at the root" in plain(narrate.caption_html(trace, 3))
    for node in trace.runs["sequoia"].steps[1].payload.nodes[1:]:   # a draft that taps earlier layers
        if node.depth == 1:
            node.draft_input = "target's hidden states at the root (last layer, and layers 4, 14, 24)"
    text = plain(narrate.caption_html(trace, 3))
    assert "level 1 came from the target's states at the root (its last layer's, and earlier layers'" in text


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_lookahead_caption_names_candidates_match_lengths_window_and_pool(temperature):
    trace = race(temperature)
    warm = plain(narrate.caption_html(trace, 4))
    assert "Warm-up" in warm and "no n-gram is verified yet" in warm
    text = plain(narrate.caption_html(trace, 5))
    assert "2 n-gram candidates after ·ran" in text
    assert "·x·y matched 0" in text and "·on·the matched 2" in text
    assert "Accepted candidate 1: its first 2 tokens (·on, ·the)" in text
    assert "level 0: ·a, ·b" in text and "level 1: ·c, ·d, ·e" in text
    assert "·ran → ·c #26" in text and "it now holds 9" in text
    assert "3 tokens (·on, ·the, ·mat)" in text
    assert ("is accepted with probability P′(x), the target probability P renormalised" in text) == (temperature > 0)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_autoregressive_caption_lists_the_targets_top_alternatives(temperature):
    text = plain(narrate.caption_html(race(temperature), 1))
    assert "prefill" in text and "produced ·cat" in text
    assert "·cat p = 0.520 ✔, ·dog p = 0.310, ·owl p = 0.050" in text
    assert ("greedy decoding takes the most likely one" in text) == (temperature == 0.0)


def test_a_trace_without_alternatives_loads_and_says_so():
    data = race().to_dict()
    for run in data["runs"].values():
        for step in run["steps"]:
            step.pop("alternatives")   # as an older trace was written
    old = RaceTrace.from_json(json.dumps(data))
    assert old.runs["ar"].steps[0].alternatives is None
    assert "does not record the target's alternatives" in plain(narrate.caption_html(old, 1))


def test_an_adaptive_trees_caption_and_what_if_say_its_shape_was_its_own():
    trace = race()
    assert "adaptive" not in plain(narrate.caption_html(trace, 3))
    trace.runs["sequoia"].settings.update(tree="adaptive", threshold=0.05, tree_budget=24)
    text = plain(narrate.caption_html(trace, 3))
    assert "This tree's shape is this step's own (adaptive)" in text and "stayed at least 0.05" in text
    # What if: the run is marked at its average tree (5 nodes), not at its cap of 24.
    page = plain(whatif.panel_html(trace, dict(tree_budget=16, tree_depth=4, window=3, ngram=3, guesses=2), None))
    assert "last run (adaptive, 5.0 nodes on average)" in page and "24 nodes" not in page
    assert "It held at most" not in text   # a budget given, or the default: not the machine's free rows
    trace.runs["sequoia"].settings.update(tree_budget=8, tree_budget_from="target's free rows")
    assert "It held at most 8 nodes: this machine's target reads that many" in plain(narrate.caption_html(trace, 3))


def test_caption_shortens_long_tokens_with_the_full_text_on_hover():
    shown = narrate.tok("supercalifragilisticexpialidocious")
    assert 'title="supercalifragilisticexpialidocious"' in shown and "…" in shown


def method_options(tree_mode, budget, depth, look_mode, window, ngram, guesses, pool_from_prompt) -> dict:
    """Sequoia's and Lookahead's decoder options from the page's sizing controls, checked as the request checks
    them (raises on sizes the app would refuse)."""
    from specviz.request import RaceRequest

    return RaceRequest(methods=("sequoia", "lookahead"), tree=tree_mode, tree_budget=budget, tree_depth=depth,
                       lookahead=look_mode, window=window, ngram=ngram, guesses=guesses,
                       pool_from_prompt=pool_from_prompt).validated().method_options()


def test_illustrative_sizes_map_onto_the_api_values():
    opts = method_options("illustrative", 0, 0, "illustrative", 0, 0, 0, True)
    assert opts["sequoia"] == ILLUSTRATIVE_TREE
    assert {k: opts["lookahead"][k] for k in ("window", "ngram", "guesses")} == ILLUSTRATIVE_LOOKAHEAD
    assert ILLUSTRATIVE_TREE["tree_depth"] >= 3 and ILLUSTRATIVE_LOOKAHEAD["ngram"] >= 4
    auto = method_options("auto", 8, 3, "auto", 3, 3, 3, True)
    assert auto["sequoia"] == {"tree_budget": None, "tree_depth": None} and auto["lookahead"]["window"] is None
    # The tree radio alone also offers the adaptive tree (its own limits; the manual fields do not apply).
    from specviz.ui.layout import SIZING_CHOICES, TREE_CHOICES

    assert [v for _, v in TREE_CHOICES] == [v for _, v in SIZING_CHOICES] + ["adaptive"]
    adaptive = method_options("adaptive", 8, 3, "auto", 3, 3, 3, True)["sequoia"]
    assert adaptive == {"tree": "adaptive", "tree_budget": None, "tree_depth": None}


def test_what_if_predicts_from_the_acceptance_vector_and_curve_and_marks_the_run(tmp_path):
    trace = race()
    inp = whatif.inputs(trace)
    assert inp["acceptance"] == [0.6, 0.2]
    flat = {**inp, "target_ms": {1: 10.0, 64: 10.0}, "draft_ms": {}}
    star = sequoia_whatif.point(flat, 3, 1)   # root + 2 children: 1 + 0.6 + 0.2 tokens, free forwards
    assert star["tokens_per_step"] == pytest.approx(1.8) and star["speedup"] == pytest.approx(1.8)
    chain = sequoia_whatif.point(flat, 3, 2)  # root -> a -> b: 1 + 0.6 + 0.36
    assert chain["tokens_per_step"] == pytest.approx(1.96)
    # A curve that grows with n makes a big tree cost more than it gains.
    steep = {**flat, "target_ms": {1: 10.0, 8: 20.0, 64: 160.0}}
    assert sequoia_whatif.point(steep, 64, 6)["speedup"] < sequoia_whatif.point(steep, 4, 2)["speedup"]
    la = lookahead_whatif.point({**flat, "copies": 0}, 3, 3, 0)   # no pool candidates and no copies: one token
    assert la["tokens_per_step"] == 1.0 and la["step_tokens"] == 6
    from specviz.lookahead.sizing import COPY_ACCEPT, COPY_MATCH
    # A race without copies on record: the sizing's prior for them (half a copy a step, 0.42 a token), a copy
    # reaching k tokens with COPY_ACCEPT^k, independent of the pool's candidates.
    copied = lookahead_whatif.point(flat, 3, 3, 0)
    assert copied["tokens_per_step"] == pytest.approx(
        1 + sum(1 - (1 - COPY_ACCEPT ** k) ** COPY_MATCH for k in (1, 2)))
    # A saved profile (the profiler's format) replaces the curve.
    path = tmp_path / "forward-gpu.json"
    path.write_text(json.dumps({"key": "A100", "ms": {"1": 8.0, "64": 8.5, "256": 11.0}}))
    prof = whatif.load_profile(str(path))
    assert prof["target_ms"] == {1: 8.0, 64: 8.5, 256: 11.0}
    page = whatif.panel_html(trace, dict(tree_budget=16, tree_depth=4, window=3, ngram=3, guesses=2), prof)
    assert "uploaded profile (A100)" in page and "Sequoia" in page and "Lookahead" in page
    assert "last run" in page   # what the run reached is marked


def test_what_if_predicts_a_run_from_its_own_parts_and_shows_them_beside_the_measured_ones():
    from specviz.ui import measured

    trace = race()
    trace.runs["ar"].steps.append(rec(1, [12], [" sat"], ["ar"]))   # a decoding step: the run's step time
    sq = trace.runs["sequoia"]
    # Counted on the run's one tree: the root's first child was the accepted one; below it, neither.
    acc = measured.tree_acceptance(sq)
    assert acc["by_depth"][0] == [1.0, 0.0] and acc["by_depth"][1][0] < 1e-5
    got = measured.run_prediction(trace, "sequoia")
    pred, meas = got["predicted"], got["measured"]
    assert pred.tokens_per_step == pytest.approx(2.0) and meas.tokens_per_step == 2.0
    assert (pred.target_ms, pred.draft_ms, pred.other_ms, pred.prefill_ms) == (10.0, 0.0, 0.0, 10.0)
    # As the summary measures it: 3 tokens in 10 + 10 ms against autoregressive's 2 in 10 + 10 ms.
    assert got["predicted_speedup"] == pytest.approx(1.5) and got["measured_speedup"] == pytest.approx(1.5)
    page = whatif.panel_html(trace, dict(tree_budget=5, tree_depth=2, window=3, ngram=3, guesses=2), None)
    assert 'class="sv-parts-sequoia"' in page and 'class="sv-parts-lookahead"' in page
    text = plain(page)
    assert "part by part" in text and "prompt's forward" in text and "+0%" in text
    # The sliders' predictions take the same parts: the run's t(n) and acceptance, its prompt forward.
    inp = whatif.inputs(trace)
    assert inp["target_ms"][5] == 10.0 and inp["by_depth"][0] == [1.0, 0.0]
    assert "this run's own step times" in inp["curve_source"]


# ----------------------------------------------------------------------------- recorded races, real model


@pytest.fixture(scope="module")
def recorded():
    """Greedy and sampled races with the shipped draft (not the target drafting for itself, whose q = P
    would never reject at T > 0), replayed from their JSON as an upload would be."""
    from specviz.engine.models import load_pair
    from specviz.runtime.race import start_race

    pair = load_pair("default", dtype="fp32")
    from specviz.engine.sampling import SamplingConfig

    options = {"sequoia": {"tree_budget": 10, "tree_depth": 3},
               "lookahead": {"window": 4, "ngram": 3, "guesses": 4, "pool_from_prompt": True}}
    out = {}
    # The sampled race needs a step whose last level is all rejected (the residual caption): an open prompt at
    # T=1.0 has them, where the repeated one is drafted too well (the step-18334 draft had none in 20 tokens).
    for name, temperature, prompt in (("greedy", 0.0, "Repeat exactly: one two three four, one two three four,"),
                                      ("sampled", 1.0, "Tell me a short story about a fox.")):
        race_ = start_race(pair, prompt, ["ar", "sequoia", "lookahead"],
                           sampling=SamplingConfig(temperature=temperature, seed=1), max_new_tokens=24,
                           options=options)
        trace = race_.run()
        out[name] = RaceTrace.from_json(trace.to_json())   # replayed from JSON, as an upload would be
    return out


def probability(x: float) -> str:
    """How a caption writes a probability: three decimals, or two significant digits below 0.001."""
    return f"{x:.3f}" if x >= 0.001 or x == 0 else f"{x:.1e}"


def expected_walk(payload: TreePayload):
    """From the recorded tree alone (not narrate's own reading of it): the accepted path, the rejection a
    caption names (the first rejected child of the node where the walk stopped, else the first rejected
    child along the path) and whether that rejection ended the walk."""
    by_id = {n.id: n for n in payload.nodes}
    path = [by_id[i] for i in payload.accepted_path]
    walk_ids = [0] + list(payload.accepted_path)

    def rejected_children(node_id):
        return sorted((n for n in payload.nodes if n.parent == node_id and n.status == "rejected"),
                      key=lambda n: n.id)

    at_end = rejected_children(walk_ids[-1])
    if at_end:
        return path, at_end[0], True
    along = [kids[0] for kids in map(rejected_children, walk_ids) if kids]
    return path, (along[0] if along else None), False


def test_recorded_captions_say_what_each_step_did(recorded):
    seen = set()
    for name, trace in recorded.items():
        _check_captions(name, trace, seen)
    # Both traces together show every kind of step (one run may end early at EOS).
    assert {"ar", "sequoia", "lookahead", "rejection", "residual", "lookahead tries"} <= seen, seen


def _check_captions(name, trace, seen):
    for upto, (method, step) in enumerate(trace.order, 1):
        rec_ = trace.runs[method].steps[step]
        text = plain(narrate.caption_html(trace, upto))
        assert f"Step {upto} of {len(trace.order)}" in text
        emitted = [narrate.plain_token(t) for t in rec_.new_token_texts]
        assert all(t in text for t in emitted), (text, emitted)
        if method == "ar":
            assert rec_.alternatives and len(rec_.alternatives) == 3
            assert abs(sum(a["p"] for a in rec_.alternatives)) <= 1.0 + 1e-6
            if name == "greedy":
                assert rec_.alternatives[0]["id"] == rec_.new_token_ids[0]
            assert "top alternatives" in text
            seen.add("ar")
        elif method == "sequoia" and isinstance(rec_.payload, TreePayload) and len(rec_.payload.nodes) > 1:
            path, bad, ended_walk = expected_walk(rec_.payload)
            for node in path:
                assert f"{narrate.plain_token(node.text)} (q {probability(node.draft_prob)}, P" in text
            if bad is not None:
                assert (f"Rejected: {narrate.plain_token(bad.text)}" in text
                        and f"q = {probability(bad.draft_prob)} and target probability P = "
                            f"{probability(bad.target_prob)}" in text)
                if name == "sampled" and ended_walk:
                    assert "residual" in text
                    seen.add("residual")
                if name == "sampled":   # the caption's numbers are the ones the walk recorded
                    assert bad.accept_prob is not None and f"draw u = {probability(bad.uniform)}" in text
                    assert f"= {probability(bad.accept_prob)}, and its draw" in text
                    if bad.tested_p is not None and rejected_before(rec_.payload).get(bad.id, 0):
                        assert f"P′ = {probability(bad.tested_p)}, q′ = {probability(bad.tested_q)}" in text
                        seen.add("later sibling")
                seen.add("rejection")
            if name == "sampled":
                for node in path:
                    assert f"probability {probability(node.accept_prob)}, draw {probability(node.uniform)}" in text
            seen.add("sequoia")
        elif method == "lookahead" and isinstance(rec_.payload, LookaheadPayload) and not rec_.payload.warmup:
            for cand in rec_.payload.candidates[:narrate.MAX_LIST]:
                assert f"matched {cand.match_length}" in text
            if name == "sampled" and rec_.payload.candidates:
                first = rec_.payload.candidates[0]   # the first candidate's first token is always tried
                assert f"P′ {probability(first.accept_probs[0])}, draw {probability(first.uniforms[0])}" in text
                seen.add("lookahead tries")
            seen.add("lookahead")


def test_long_tokens_are_shortened_on_the_tree_and_window_with_the_full_text_on_hover():
    from specviz.ui import svg

    payload = tree()
    payload.nodes[1].text = " extraordinarily_long_identifier"
    drawn = svg.tree_svg(payload, 1)
    assert "·extraord…<" in drawn and "·extraordinarily_long_identifier (id 11)" in drawn   # label, tooltip
    window = look()
    window.window_text[1][0] = " another_very_long_token"
    cells = svg.window_html(window, 1)
    assert "·another…<" in cells and 'title="level 1, column 0: ·another_very_long_token"' in cells


def test_pool_view_lists_the_most_used_ngrams():
    from specviz.ui import html, views

    trace = race()
    run = trace.runs["lookahead"]
    assert html.most_used_ngrams(run) == [(" on the", 1, 2)]
    pool = views.plot_views(trace)["pool"]
    assert "Most used n-grams so far" in pool and "accepted 1×, 2 tokens" in pool and "match" in pool


def test_workshop_presets_set_valid_controls_and_ask_one_question():
    from specviz.ui.layout import SIZING_CHOICES, WORKSHOP

    modes = {value for _, value in SIZING_CHOICES}
    assert {"auto", "illustrative", "manual"} == modes
    assert len(WORKSHOP) >= 4
    for name, preset in WORKSHOP.items():
        assert preset["prompt"].strip() and preset["question"].rstrip().endswith("?"), name
        assert preset["tree"] in modes | {"adaptive"} and preset["lookahead"] in modes
        # Pinned: what a preset races does not depend on what `auto` measured that day.
        assert preset["dtype"] in ("fp32", "bf16", "q4") and "auto" not in (preset["tree"], preset["lookahead"]), name
        method_options(preset["tree"], preset.get("tree_budget", 16), preset.get("tree_depth", 4), preset["lookahead"],
                       4, 3, 4, True)   # raises on sizes the app would refuse
    temps = {p["temperature"] for p in WORKSHOP.values()}
    assert 0.0 in temps and 1.0 in temps   # greedy against sampled
    assert any(p.get("tree_budget", 0) >= 64 for p in WORKSHOP.values())   # a tree too big for a CPU
    assert any(p["tree"] == "adaptive" for p in WORKSHOP.values())   # a tree shaped by the draft's confidence
    from specviz.ui.layout import FEATURE_PRESET, PRESETS

    assert all(p.get("model", FEATURE_PRESET) in PRESETS for p in WORKSHOP.values())
    assert any(p.get("model") == FEATURE_PRESET for p in WORKSHOP.values())   # the feature draft, hovered
