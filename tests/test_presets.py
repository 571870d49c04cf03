"""Every workshop preset, run as a learner runs it: its own settings, the real offline model, the app's race path.

Each preset asks one question; each test asserts what that question relies on in what the
preset's run shows (identical texts where it asks about identity, a pool hit in the
repetitive text, acceptance that falls with depth, a tree whose shape changes, a what-if
peak below the huge tree...). The what-if panel's prediction for each run is checked to
take the run's own costs and to show its parts beside the measured ones; how far it is
from the run (timings on a shared machine are noisy) goes to test-artifacts/presets/,
with the traces and, where Chromium is at hand, a screenshot of each preset's page.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specviz.request import DEFAULT_PRESET, RaceRequest, allowed_presets
from specviz.sequoia import whatif as sequoia_whatif
from specviz.ui import measured, whatif
from specviz.ui.content import WORKSHOP
from specviz.ui.handlers import preset_settings

pytestmark = pytest.mark.slow

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "presets"
NAMES = list(WORKSHOP)


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40]


def _request(name: str, limits) -> RaceRequest:
    """The race the page starts after a learner picks `name` (the preset's settings, the page's others)."""
    settings = preset_settings(name, DEFAULT_PRESET, allowed_presets(limits))
    settings.pop("question"), settings.pop("runs")
    return RaceRequest(**settings).validated(limits)


@pytest.fixture(scope="module")
def runs():
    """Every preset's finished trace, raced through `racing.race_events` (what the app's worker runs)."""
    from specviz.runtime.race import PairCache
    from specviz.hosting import HostingLimits
    from specviz.ui.racing import race_events

    limits = HostingLimits.from_env()
    pairs = PairCache()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    out = {}
    for name in NAMES:
        trace = None
        for event in race_events(pairs, limits, None, _request(name, limits)):
            if event[0] == "trace" and event[2]:
                trace = event[1]
        assert trace is not None and not trace.cancelled, name
        (ARTIFACTS / f"{_slug(name)}.json").write_text(trace.to_json())
        out[name] = trace
    pairs.clear()
    gaps = {name: _gaps(trace) for name, trace in out.items()}
    (ARTIFACTS / "predictions.json").write_text(json.dumps(gaps, indent=1))
    return out


def _gaps(trace) -> dict:
    """Each method's predicted and measured speedup and tokens per step for the run's own sizes."""
    out = {}
    for method in ("sequoia", "lookahead"):
        got = measured.run_prediction(trace, method)
        if got:
            out[method] = {"predicted_speedup": round(got["predicted_speedup"], 3),
                           "measured_speedup": round(got["measured_speedup"], 3),
                           "predicted_tokens_per_step": round(got["predicted"].tokens_per_step, 3),
                           "measured_tokens_per_step": round(got["measured"].tokens_per_step, 3),
                           "step_ms": round(got["measured"].step_ms, 1)}
    return out


def _named(fragment: str) -> str:
    return next(n for n in NAMES if fragment in n)


def _texts(trace) -> dict[str, str]:
    return {m: run.text for m, run in trace.runs.items()}


def _greedy_identical(trace):
    texts = _texts(trace)
    assert trace.dtype == "fp32" and trace.greedy
    assert len(set(texts.values())) == 1, texts


def test_a_preset_that_asks_about_identical_texts_runs_in_fp32_and_shows_them_identical(runs):
    asked = []
    for name, trace in runs.items():
        preset = WORKSHOP[name]
        if preset.get("dtype"):
            assert trace.dtype == preset["dtype"], name
        if "identical" in preset["question"] and preset["temperature"] == 0:
            assert preset.get("dtype") == "fp32", name
            _greedy_identical(trace)
            asked.append(name)
    assert asked == [_named("greedy")]


def test_repetitive_text_lookahead_writes_several_tokens_from_the_pool(runs):
    trace = runs[_named("Repetitive")]
    run = trace.runs["lookahead"]
    line = "row your boat"
    start = run.text.lower().find(line)
    assert start >= 0, run.text
    # After the chorus's first line, a step writes 3 or more tokens from a verified candidate: an n-gram of the
    # pool, or a copy of the text so far (prompt lookup).
    hits = [s for s in run.steps[1:] if s.payload is not None and s.payload.accepted_candidate is not None
            and s.token_sources.count("ngram") + s.token_sources.count("copy") >= 3]
    assert hits, "no Lookahead step took three or more tokens from a candidate"
    assert run.tokens_per_forward > trace.runs["sequoia"].tokens_per_forward * 0.5


def test_code_sequoia_gets_draft_tokens_accepted(runs):
    trace = runs[_named("Code")]
    accepted = [n.text for s in trace.runs["sequoia"].steps if s.payload is not None
                for n in s.payload.nodes if n.status == "accepted"]
    assert len(accepted) >= 10 and trace.runs["sequoia"].tokens_per_forward > 1.5


def test_greedy_chat_is_identical_and_the_sampled_one_differs_yet_shows_rejections(runs):
    greedy, sampled = runs[_named("greedy")], runs[_named("sampled")]
    _greedy_identical(greedy)
    assert sampled.dtype == "fp32"   # as the greedy one: their trees differ by temperature alone
    assert greedy.runs["sequoia"].tokens_per_forward > 1.5
    texts = _texts(sampled)
    assert texts["sequoia"] != texts["ar"] and texts["lookahead"] != texts["ar"]
    # A rejection to step to: a reached node's child rejected, the bonus token drawn in its place.
    rejections = [s for s in sampled.runs["sequoia"].steps[1:] if s.payload is not None
                  and any(n.status == "rejected" for n in s.payload.nodes) and s.payload.bonus_token_id is not None]
    assert rejections
    # The guide's question: a rejected token the target gives less than the draft did (P < q: accepted with
    # probability P / q, and this draw lost). How much a sampled tree accepts depends on the draws of one seed
    # (its text can be an easy one), so it is not compared with the greedy tree's here.
    assert any(n.status == "rejected" and 0 < n.target_prob < n.draft_prob for s in rejections for n in s.payload.nodes)


def test_feature_draft_reads_the_target_at_level_one_and_its_own_predictions_deeper(runs):
    trace = runs[_named("hidden states")]
    run = trace.runs["sequoia"]
    by_depth = {n.depth: n.draft_input for s in run.steps if s.payload is not None for n in s.payload.nodes}
    assert "target's hidden states" in by_depth[1] and "predicted" in by_depth[3]
    # Acceptance falls with depth: below level 2 the first-ranked child is accepted less often than at level 1.
    rows = measured.tree_acceptance(run)["by_depth"]
    deep = [row[0] for row in rows[2:]]
    assert deep and sum(deep) / len(deep) < rows[0][0], rows


def test_adaptive_tree_changes_its_shape_from_step_to_step(runs):
    trace = runs[_named("confidence")]
    shapes = set()
    for s in trace.runs["sequoia"].steps[1:]:
        nodes = s.payload.nodes if s.payload is not None else []
        if len(nodes) > 1:
            depth = max(n.depth for n in nodes)
            width = max(sum(1 for n in nodes if n.depth == d) for d in range(1, depth + 1))
            shapes.add((depth, width))
    assert len({d for d, _ in shapes}) >= 2 and len({w for _, w in shapes}) >= 2, shapes


def test_too_big_a_tree_writes_more_per_forward_but_what_if_peaks_below_it(runs):
    trace = runs[_named("too big")]
    big = trace.runs["sequoia"]
    illustrative = sequoia_whatif.point(whatif.inputs(trace), 20, 5)
    assert big.tokens_per_forward > illustrative["tokens_per_step"] * 0.9   # more per forward than 20 nodes
    # Where the what-if peaks is a property of the machine's t(n): on issue 49's steep CPU curve below the
    # huge tree, on a flat one (a GPU, or a memory-bound CPU, whose rows up to 64 cost about one) further out.
    # This run's own curve is whichever this machine has, so the peaks are read on curves given as uploaded
    # profiles with a draft an eighth of the target (the run's acceptance and other costs stay); that the run's
    # own costs are the default is test_what_if_predicts_each_run_from_its_own_costs_and_shows_the_parts's.
    steep = {1: 36.0, 2: 42.0, 4: 55.0, 8: 63.0, 16: 75.0, 32: 110.0, 64: 180.0, 128: 320.0}
    flat = {1: 10.0, 2: 10.0, 4: 10.1, 8: 10.2, 16: 10.5, 32: 11.0, 64: 12.0, 128: 14.0}
    peaks = {}
    for name, target in (("steep", steep), ("flat", flat)):
        draft = {n: ms / 8 for n, ms in target.items() if n <= 64}
        inp = whatif.inputs(trace, {"name": name, "target_ms": target, "draft_ms": draft})
        curve = {n: p["speedup"] for n in range(2, 129, 2) if (p := sequoia_whatif.point(inp, n, 8)) is not None}
        peaks[name] = max(curve, key=curve.get)
        if name == "steep":
            assert peaks[name] < 96 and curve[peaks[name]] > curve[96], (peaks[name], curve[peaks[name]], curve[96])
    assert peaks["flat"] > peaks["steep"], peaks
    assert "where would it peak on a GPU" in WORKSHOP[_named("too big")]["question"]


def test_the_slow_and_the_fast_target_race_one_tree_and_each_shows_its_own_draft_cost(runs):
    """The bf16 and q4 presets race the same prompt and tree: tokens per forward nearly equal, and each run's
    hardware panel shows its own c (a draft level over its own `ar` step), the number the pair's questions ask the
    room to compare. Which way c moves is the machine's answer, not a behaviour: the draft gains from 4 bits too,
    and CI once measured c 0.17 over bf16 and 0.12 over q4 where this machine reads the reverse."""
    from specviz.ui import hardware

    slow, fast = runs[_named("slow target")], runs[_named("fast target")]
    assert (slow.dtype, fast.dtype) == ("bf16", "q4")
    assert slow.prompt == fast.prompt and slow.options["sequoia"] == fast.options["sequoia"]
    paid = {}
    for name, trace in (("slow", slow), ("fast", fast)):
        paid[name] = measured.why_it_pays(trace)
        assert paid[name] is not None, name
        page = hardware.pays_html(trace)
        assert f"c = {paid[name]['c']:.3f}" in page and "Leviathan" in page, name
    assert fast.runs["sequoia"].tokens_per_forward == pytest.approx(slow.runs["sequoia"].tokens_per_forward, rel=0.15)
    # Each c is priced by its own run's `ar` step and draft levels, not one shared between the two presets.
    for name, trace in (("slow", slow), ("fast", fast)):
        assert paid[name]["ar_step_ms"] == measured.measured_parts(trace.runs["ar"]).step_ms, name


def test_what_if_predicts_each_run_from_its_own_costs_and_shows_the_parts(runs):
    for name, trace in runs.items():
        page = whatif.panel_html(trace, dict(tree_budget=20, tree_depth=5, window=5, ngram=4, guesses=4))
        for method in ("sequoia", "lookahead"):
            got = measured.run_prediction(trace, method)
            assert got is not None, (name, method)
            pred, meas = got["predicted"], got["measured"]
            # Every cost is the run's own; only accepted length is predicted, within 15% of what the run wrote
            # (a property of the acceptance model, not of the machine's load).
            assert (pred.target_ms, pred.draft_ms, pred.other_ms, pred.prefill_ms) == (
                meas.target_ms, meas.draft_ms, meas.other_ms, meas.prefill_ms)
            assert pred.tokens_per_step == pytest.approx(meas.tokens_per_step, rel=0.15), (name, method)
            assert f'class="sv-parts-{method}"' in page
            assert got["measured_speedup"] == pytest.approx(
                trace.runs[method].tokens_per_second / trace.runs["ar"].tokens_per_second)
        for part in ("accepted length", "target forward", "draft", "other", "prompt's forward", "predicted",
                     "measured"):
            assert part in page, (name, part)


def test_each_presets_page_is_saved_as_a_screenshot(runs):
    """What a learner sees after each preset's race (replayed from its trace), at 1280x720: the question
    and the columns, the tree and caption at a step with a tree, and the what-if panel."""
    save_screenshots({name: ARTIFACTS / f"{_slug(name)}.json" for name in runs})


def save_screenshots(traces: dict) -> None:
    """Three 1280x720 screenshots per preset {name: trace file} in test-artifacts/presets/."""
    from test_browser import CHROMIUM, FLAGS, _need_browser

    _need_browser()
    from playwright.sync_api import sync_playwright

    from helpers import free_port
    from specviz.ui import build_demo, launch_kwargs

    demo = build_demo(worker=False)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **launch_kwargs())
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
            try:
                for name, path in traces.items():
                    page = browser.new_page(viewport={"width": 1280, "height": 720})
                    _replay_with_preset(page, f"http://127.0.0.1:{port}/", name, Path(path))
                    _shoot(page, name)
                    page.close()
            finally:
                browser.close()
    finally:
        demo.close()


def _replay_with_preset(page, url: str, name: str, path: Path) -> None:
    from test_browser import _wait_caption

    page.goto(url, wait_until="load", timeout=60_000)
    page.wait_for_selector("#sv-run", timeout=60_000)
    page.locator("#sv-workshop input").click()
    page.get_by_role("option", name=name).click()
    page.wait_for_function("(document.querySelector('#sv-question') || {innerText: ''}).innerText"
                           ".includes('Question')", timeout=30_000)
    page.locator("#sv-replay").get_by_text("Replay:").first.click()
    page.locator("#sv-upload input[type=file]").set_input_files(str(path))
    total = len(json.loads(path.read_text())["order"])
    _wait_caption(page, f"Step {total} of {total}")


def _shoot(page, name: str) -> None:
    slug = _slug(name)
    page.locator("#sv-question").scroll_into_view_if_needed()
    page.evaluate("window.scrollTo(0, document.querySelector('#sv-question').getBoundingClientRect().top "
                  "+ window.scrollY - 8)")
    page.wait_for_timeout(300)
    page.screenshot(path=str(ARTIFACTS / f"{slug}-race.png"))
    # Back from the end to the latest Sequoia step whose tree has more than its root.
    page.locator("#sv-caption").click()
    for _ in range(40):
        caption = page.locator("#sv-caption").inner_text()
        if page.locator("#sv-tree svg circle").count() > 1 and "Sequoia ran" in caption:
            break
        page.keyboard.press("ArrowLeft")
        page.wait_for_timeout(250)
    page.evaluate("window.scrollTo(0, document.querySelector('#sv-stepper').getBoundingClientRect().top "
                  "+ window.scrollY - 4)")
    page.wait_for_timeout(400)
    page.screenshot(path=str(ARTIFACTS / f"{slug}-tree.png"))
    page.locator("#sv-whatif-box").get_by_text("What if").first.click()
    page.wait_for_function("(document.querySelector('#sv-whatif') || {innerText: ''}).innerText"
                           ".includes('part by part')", timeout=90_000)
    page.evaluate("window.scrollTo(0, document.querySelector('#sv-whatif').getBoundingClientRect().top "
                  "+ window.scrollY - 4)")
    page.wait_for_timeout(400)
    page.screenshot(path=str(ARTIFACTS / f"{slug}-whatif.png"))
