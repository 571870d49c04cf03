"""The pure views: figures and HTML from hand-built payloads and traces (no model, no gradio)."""

from __future__ import annotations

import html as htmllib
import re


from specviz.trace import LookaheadPayload, NgramCandidate, RaceTrace, RunTrace, StepRecord, TreeNode, TreePayload
from specviz.ui import figures, hardware, html, narrate, svg, views


def tree_payload() -> TreePayload:
    # root -> a (accepted) -> c (accepted) ; root -> b (rejected) ; a -> d (not reached)
    nodes = [
        TreeNode(0, -1, 0, 10, "The", 1.0, 1.0, "root"),
        TreeNode(1, 0, 1, 11, " cat", 0.6, 0.7, "accepted"),
        TreeNode(2, 0, 1, 12, " dog", 0.3, 0.1, "rejected"),
        TreeNode(3, 1, 2, 13, " sat", 0.5, 0.9, "accepted"),
        TreeNode(4, 1, 2, 14, "\n", 0.2, 0.05, "not_reached"),
    ]
    return TreePayload(nodes=nodes, accepted_path=[1, 3], bonus_token_id=15, bonus_text=" on", budget=5, depth=2,
                       draft_ms=3.0, verify_ms=1.0)


def look_payload(warmup=False) -> LookaheadPayload:
    return LookaheadPayload(
        window=[[1, 2], [3, 4, 5]], window_text=[["a", "b"], ["c", "d", "e"]], harvested=[[7, 1, 3]],
        pool_size=9, key_token_id=7,
        candidates=[NgramCandidate([1, 2], ["x", "y"], 1), NgramCandidate([3, 4], ["p", "q"], 2)],
        accepted_candidate=1, pool_entry=[[1, 2], [3, 4]], step_ms=5.0, warmup=warmup, window_size=3,
        ngram_size=3, guesses=2)


def step(i, ids, texts, sources, payload=None, ms=(0.0, 10.0, 1.0), finished=False, cumulative=None):
    return StepRecord(step=i, new_token_ids=ids, new_token_texts=texts, token_sources=sources,
                      tokens_processed=len(ids), cumulative_tokens=cumulative if cumulative is not None else len(ids),
                      time_ms={"draft": ms[0], "target": ms[1], "verify": ms[2]}, payload=payload,
                      finished=finished, finish_reason="length" if finished else None)


def race_trace(dtype="fp32", temperature=0.0, differ=False) -> RaceTrace:
    ar_run = RunTrace("ar", "p", [1, 2], {}, steps=[
        step(0, [11], [" cat"], ["ar"], cumulative=1),
        step(1, [13], [" sat"], ["ar"], cumulative=2),
        step(2, [15], [" on"], ["ar"], finished=True, cumulative=3)], finish_reason="length")
    last = 16 if differ else 15
    sq_run = RunTrace("sequoia", "p", [1, 2], {}, steps=[
        step(0, [11], [" cat"], ["ar"], cumulative=1),
        step(1, [13, last], [" sat", " in" if differ else " on"], ["draft", "bonus"], tree_payload(),
             ms=(3.0, 12.0, 1.0), finished=True, cumulative=3)], finish_reason="length")
    la_run = RunTrace("lookahead", "p", [1, 2], {}, steps=[
        step(0, [11], [" cat"], ["ar"], look_payload(True), cumulative=1),
        step(1, [13, 15], [" sat", " on"], ["ngram", "bonus"], look_payload(), finished=True, cumulative=3)],
        finish_reason="length")
    runs = {"ar": ar_run, "sequoia": sq_run, "lookahead": la_run}
    order = [["ar", 0], ["sequoia", 0], ["lookahead", 0], ["ar", 1], ["sequoia", 1], ["lookahead", 1], ["ar", 2]]
    return RaceTrace(prompt="p", prompt_token_ids=[1, 2], methods=list(runs), runs=runs, order=order,
                     sampling={"temperature": temperature}, target_name="t", draft_name="d", device="cpu",
                     dtype=dtype, vocab_size=100)


def test_tree_layout_places_depths_left_to_right():
    pos = figures.tree_positions(tree_payload())
    assert [pos[i][0] for i in range(5)] == [0, 1, 1, 2, 2]
    assert pos[1][1] != pos[2][1]


def test_empty_views_do_not_fail():
    assert "appears here" in html.pool_entry_html(None)
    assert "not run" in html.tokens_html(None)
    v = views.plot_views(None)
    assert set(v) == {"tree", "window", "pool", "pool_size", "latency", "cumulative"}


def test_window_grid_is_levels_by_w():
    payload = look_payload()
    grid, levels, width = figures.window_grid(payload)
    assert (levels, width) == (2, 3)
    assert grid[0] == ["", "a", "b"]   # level 0 has W-1 tokens


def test_pool_entry_highlights_match_lengths():
    text = html.pool_entry_html(look_payload(), key_text=" cat")
    rows = text.split("<tr")[2:]
    assert len(rows) == 2
    assert rows[0].count("#bbf7d0") == 1 and rows[1].count("#bbf7d0") == 2   # matched prefix cells
    assert "accepted" in rows[1] and "accepted" not in rows[0]
    assert "·" not in text and "cat" in text and "pool holds 9" in text


def strip(fragment):
    return htmllib.unescape(re.sub(r"<[^>]+>", "", fragment))


def test_tokens_html_colours_by_source_with_legend():
    run = race_trace().runs["sequoia"]
    text = html.tokens_html(run)
    assert strip(text) == " cat sat on"
    assert 'sv-draft" style="background:#bfdbfe' in text and 'sv-bonus" style="background:#fde68a' in text
    legend = html.legend_html()
    for color, label in html.SOURCE_STYLE.values():
        assert color in legend and htmllib.escape(label) in legend
    # Text is escaped, newlines drawn.
    r = RunTrace("ar", "p", [1], {}, steps=[step(0, [1, 2], ["<b>", "\n"], ["ar", "ar"])])
    out = html.tokens_html(r)
    assert "&lt;b&gt;" in out and "⏎<br>" in out
    errored = RunTrace("lookahead", "p", [1], {}, error="method 'lookahead' is not implemented yet")
    assert "not implemented yet" in html.tokens_html(errored)


def test_replay_views_at_a_step():
    trace = race_trace()
    tv = views.text_views(trace, upto=4)
    assert strip(tv["text_ar"]) == " cat sat"
    assert strip(tv["text_sequoia"]) == " cat"
    pv = views.plot_views(trace, upto=4)
    assert "tree appears here" in pv["tree"]   # Sequoia's tree step not reached yet
    pv = views.plot_views(trace, upto=5)
    assert pv["tree"].count('<g class="sv-node') == 5
    caption = narrate.caption_html(trace, 5)
    assert "Step 5 of 7" in caption and "Sequoia ran its step 1" in caption


def test_summary_says_identical_under_greedy():
    text = html.summary_html(race_trace())
    assert text.count("identical to autoregressive, 3 tokens") == 2
    assert "✓" in text and "speedup" in text and "accepted length" in text
    st = html.run_stats(race_trace().runs["sequoia"])
    # 3 tokens in 2 steps; after the prompt's forward (1 token) one step wrote 2: its accepted token + the target's.
    assert st["tokens_per_forward"] == 1.5 and st["accepted_length"] == 2.0 and st["speculated_share"] == 1 / 3


def test_summary_shows_first_difference_with_near_tie_note():
    text = html.summary_html(race_trace(dtype="bf16", differ=True))
    assert "differs from autoregressive at token 2" in text
    assert htmllib.escape("' on'") in text and htmllib.escape("' in'") in text
    assert "near-tie" in text
    fp32 = html.summary_html(race_trace(dtype="fp32", differ=True))
    assert "should not happen in fp32" in fp32


def test_summary_under_sampling_says_same_distribution():
    race = race_trace(temperature=0.8, differ=True)
    text = html.summary_html(race)
    assert "differ by design" in text and "distribution" in text and "differs from" not in text
    sampled = [m for m in race.methods if m != "ar"]
    if len(sampled) > 1:   # one note for both speculative methods, naming them
        assert text.count("differ by design") == 1 and " and ".join(html.METHOD_LABELS[m] for m in sampled) in text


def test_stats_header():
    run = race_trace().runs["ar"]
    text = html.stats_html("ar", run)
    assert "Autoregressive" in text and "tokens per forward" in text and "1.00" in text and "token limit" in text
    # Stepped back to an earlier step, the header does not yet say how the run ended.
    back = html.stats_html("ar", run, upto=1)
    assert "token limit" not in back and f"at step 1 of {len(run.steps)}" in back


def test_summary_speaks_plainly_and_waits_for_the_end_when_stepped_back():
    race = race_trace()
    final = html.summary_html(race)
    assert "token limit" in final and "greedy" in final and "{" not in final   # no Python dict
    early = html.summary_html(race, {m: 1 for m in race.methods})
    assert "token limit" not in early
    sampled = html.summary_html(race_trace(temperature=0.8))
    assert "temperature 0.8" in sampled and "seed" in sampled
    # An uploaded trace's odd sampling values are shown as they are, not raised as a server error.
    assert "sampling" in html.sampling_words({"temperature": 0.7, "top_k": "5.5x"})


def test_hardware_panel_from_recorded_plan():
    trace = race_trace()
    trace.runs["lookahead"].settings["plan"] = {
        "curve": {"1": 30.0, "2": 31.0, "8": 40.0},
        "table": [{"window": 3, "ngram": 3, "guesses": 2, "predicted_speedup": 1.3},
                  {"window": 5, "ngram": 4, "guesses": 5, "predicted_speedup": 1.1}],
        "choice": {"window": 3, "ngram": 3, "guesses": 2, "predicted_speedup": 1.3}}
    chart, text = hardware.panel(trace)
    assert "<polyline" in chart and all(f">{n}</text>" in chart for n in (1, 2, 8))   # log-n ticks
    assert "Lookahead chose" in text and "background:#dcfce7" in text
    assert "per draft level" not in text          # Lookahead has no step costs
    trace.runs["sequoia"].settings["plan"] = {
        "target_ms": {"1": 20.0, "8": 24.0}, "step_costs": {"per_level": 1.9, "per_step": 1.88, "per_node": 0.0},
        "table": [{"budget": 8, "depth": 1, "predicted_speedup": 1.3}],
        "choice": {"budget": 8, "depth": 1, "predicted_speedup": 1.3}}
    _, text = hardware.panel(trace)
    assert "Sequoia" in text and "<b>1.9 ms</b> per draft level" in text and "<b>1.9 ms</b> (verification" in text
    assert "Sequoia chose" in text and "Raced" not in text
    # `auto` raced its DP tree against the adaptive tree and runs the winner: the panel says which, and why.
    trace.runs["sequoia"].settings["plan"] |= {"chosen": "adaptive", "race": {
        "prompts": 4, "tree_tokens_per_s": 74.7, "adaptive_tokens_per_s": 80.6, "adaptive_over_tree": 1.079,
        "margin": 1.03}}
    _, text = hardware.panel(trace)
    assert "Sequoia planned (DP tree)" in text and "<b>74.7</b> tokens/s" in text and "<b>80.6</b> tokens/s" in text
    assert "auto runs the adaptive tree" in text and "nodes</b>" not in text   # a race without its budget
    assert "Raced on 4 prompts on this machine" in text
    trace.runs["sequoia"].settings["plan"]["race"]["rounds"] = 3   # a sampled race that took three rounds
    assert "Raced on 4 prompts x 3 rounds on this machine" in hardware.panel(trace)[1]
    trace.runs["sequoia"].settings["plan"]["race"] |= {"adaptive_budget": 8, "adaptive_budget_from": "target's free rows"}
    _, text = hardware.panel(trace)
    assert "within <b>8 nodes</b>: the target reads that many here for about the price of one" in text
    # Read by a learner: fields in words, a setting repeated under a second name once, a depth limit the
    # budget cannot use one row, a cost the fit found to be nothing left out.
    trace.runs["sequoia"].settings["plan"] |= {
        "choice": {"budget": 8, "depth": 4, "value": 2.67, "ms_per_step": 32.8, "predicted_speedup": 2.1,
                   "tree_budget": 8, "tree_depth": 4},
        "table": [{"budget": 8, "depth": d, "value": 2.81, "ms_per_step": 36.1, "predicted_speedup": 2.01}
                  for d in (6, 7, 8)] + [{"budget": 8, "depth": 4, "value": 2.67, "ms_per_step": 32.8,
                                           "predicted_speedup": 2.1}],
        "step_costs": {"per_level": 0.6, "per_step": 0.7, "per_parent": 0.0, "per_node": 0.04}}
    _, text = hardware.panel(trace)
    assert "tree budget 8, tree depth 4, accepted length (expected) 2.67" in text and "tree_depth" not in text
    assert ">step time (ms)</th>" in text and "ms_per_step" not in text
    assert text.count("<td style=\"padding:2px 10px\">2.81</td>") == 1
    assert "0.00 ms" not in text and "<b>0.04 ms</b> per node" in text
    assert "Inside a step" not in text   # no in-step ratios recorded: nothing said about them
    # The target's forward priced as the steps ran it: said where it differs from the curve, and an uploaded
    # trace's malformed field is left out rather than raised.
    costs = trace.runs["sequoia"].settings["plan"]["step_costs"]
    costs["in_step"] = {"1": 1.15, "4": 1.31, "12": 1.02}
    _, text = hardware.panel(trace)
    assert "<b>1.31x</b> at 4 rows" in text and "<b>1.02x</b> at 12 rows" in text and "at 1 rows" not in text
    for bad in ("1.3", ["4", 1.3], {"four": 1.3}, {"4": "x"}):
        costs["in_step"] = bad
        assert "Inside a step" not in hardware.panel(trace)[1]
    empty_fig, empty_text = hardware.panel(None)
    assert "No measured plan" in empty_text


def test_tree_svg_draws_every_node_coloured_with_hover_and_the_accepted_path():
    payload = tree_payload()
    drawn = svg.tree_svg(payload, step=1)
    assert drawn.count('<g class="sv-node') == len(payload.nodes)
    for node in payload.nodes:
        assert f'sv-node sv-{node.status}"' in drawn
    assert drawn.count(f'fill="{figures.NODE_COLORS["accepted"]}"') == 2
    # Hover (SVG <title>) carries both probabilities; the accepted path's edges are drawn thick.
    assert "draft q = 0.600, target P = 0.700" in drawn
    assert drawn.count('stroke-width="5"') == len(payload.accepted_path)
    assert 'class="sv-bonus"' in drawn and "·on" in drawn
    assert "accepted + 1 bonus = 3 tokens" in drawn


def test_tree_bonus_label_stays_inside_and_a_root_only_step_is_explained():
    import re

    # Whichever child is accepted (the top one included), the bonus token's label stays inside the drawing.
    for accepted in (1, 2, 3):
        nodes = [TreeNode(0, -1, 0, 10, "The", 1.0, 1.0, "root")] + [
            TreeNode(i, 0, 1, 10 + i, f" w{i}", 0.3, 0.3, "accepted" if i == accepted else "rejected")
            for i in (1, 2, 3)]
        drawn = svg.tree_svg(TreePayload(nodes=nodes, accepted_path=[accepted], bonus_token_id=20,
                                         bonus_text=" uses", budget=4, depth=1, draft_ms=1.0, verify_ms=1.0))
        bonus = drawn[drawn.index('class="sv-bonus"'):]
        label_y = [float(y) for y in re.findall(r'<text x="[\d.-]+" y="([\d.-]+)"', bonus)][1]
        assert label_y >= 16, (accepted, label_y)
    # The last step of a run may draft nothing: one node, said in words, not "1 nodes".
    root_only = TreePayload(nodes=[TreeNode(0, -1, 0, 10, "The", 1.0, 1.0, "root")], accepted_path=[],
                            bonus_token_id=11, bonus_text=" end", budget=1, depth=0, draft_ms=0.0, verify_ms=1.0)
    drawn = svg.tree_svg(root_only)
    assert "Only the root" in drawn and "1 nodes" not in drawn and "max-width:" in drawn


def test_tree_hover_says_what_a_feature_draft_saw():
    # A feature draft reads (parent token, hidden state): the target's own at depth 1,
    # its own prediction deeper. An independent draft's nodes carry no such line.
    payload = tree_payload()
    assert "draft saw" not in svg.tree_svg(payload, step=1)
    for node in payload.nodes[1:]:
        node.draft_input = ("target's hidden state at the root" if node.depth == 1
                            else "draft's predicted hidden state (1 step from the target's)")
    drawn = htmllib.unescape(svg.tree_svg(payload, step=1))
    assert "draft saw: 'The' + target's hidden state at the root" in drawn
    assert "draft saw: '·cat' + draft's predicted hidden state (1 step from the target's)" in drawn


def test_svg_views_from_a_race_and_in_replay():
    trace = race_trace()
    pool = svg.pool_size_svg(trace.runs["lookahead"])
    assert "<polyline" in pool and "n-grams" in pool
    lat = svg.latency_svg(trace.runs)
    assert lat.count("<g><title>step") == 7   # one bar per step, 3 + 2 + 2
    assert "draft 3.0 ms" in lat
    live = svg.latency_svg(trace.runs, live=True)
    assert "the latest steps" in live
    cum = svg.cumulative_svg(trace.runs)
    assert cum.count("<polyline") == 3 and "Autoregressive: 3 at 0.033" in cum
    # Replay: only the steps done so far are drawn.
    assert "Autoregressive: 2 at" in svg.cumulative_svg(trace.runs, trace.steps_done(4))
    for empty in (svg.tree_svg(None), svg.window_html(None), svg.latency_svg({}), svg.cumulative_svg({}),
                  svg.pool_size_svg(None), svg.forward_curve_svg({})):
        assert "appear here" in empty or "appears here" in empty or "no forward-time profile" in empty


def test_window_html_is_levels_by_w():
    trace = race_trace()
    payload = next(s.payload for s in trace.runs["lookahead"].steps if s.payload)
    grid, levels, width = figures.window_grid(payload)
    drawn = svg.window_html(payload, step=0)
    assert drawn.count("<tr><th style") == levels and drawn.count("<td title=") == levels * width


def test_tree_svg_puts_the_bonus_star_clear_of_a_root_only_steps_label():
    """A root-only step (the race's last token): the star and its label sit past the root's label."""
    import re

    from specviz.trace import TreeNode, TreePayload
    from specviz.ui import svg

    root = TreeNode(0, -1, 0, 1, "\n Avoid", 1.0, 1.0, "root")
    payload = TreePayload(nodes=[root], accepted_path=[], bonus_token_id=5, bonus_text=" persuasive", budget=20,
                          depth=5, draft_ms=0.0, verify_ms=0.0)
    out = svg.tree_svg(payload)
    texts = re.findall(r'<text x="([\d.]+)" y="([\d.]+)"[^>]*>([^<]*)</text>', out)
    (lx, ly, label), = [t for t in texts if t[2].startswith("▶")]
    (sx, sy, _), = [t for t in texts if t[2] == "★"]
    assert float(sx) >= float(lx) + svg.text_width(label)   # the star starts where the label ends
    boxes = [svg._text_box(float(x), float(y), t, svg.STAR_PX if t == "★" else svg.LABEL_PX) for x, y, t in texts]
    assert not any(svg._overlaps(a, b, gap=0) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_each_column_says_what_ran():
    """The Sequoia column names its draft and its tree, Lookahead's its sizes, from the settings the run recorded."""
    from specviz.ui import html

    assert html.what_ran({"tree": "adaptive", "max_nodes": 24, "draft_kind": "feature"}) == (
        "EAGLE-style feature draft · adaptive tree, up to 24 nodes")
    assert html.what_ran({"tree": "auto", "tree_budget": 8, "tree_depth": 2}) == "independent draft · DP tree, 8 nodes, depth 2"
    assert html.what_ran({"window": 4, "ngram": 3, "guesses": 4}) == "W 4, N 3, G 4"
    assert html.what_ran({}) == ""
    trace = race_trace()
    trace.runs["sequoia"].settings.update(tree="adaptive", max_nodes=16, draft_kind="feature")
    assert "EAGLE-style feature draft · adaptive tree, up to 16 nodes" in html.stats_html("sequoia", trace.runs["sequoia"])
