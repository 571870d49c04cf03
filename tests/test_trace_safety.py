"""Uploaded traces and profiles are data, never markup or a crash (issue 66, items 1 and 2).

No app, no model: hand-built traces go through `RaceTrace.from_json` and every view. Each hostile
file (deep nesting, a 5,000-digit number, NaN, Infinity, a node id that is a list, markup in an
enumeration, a count given as a string...) is refused with SpecViz's own message; a trace with
markup planted in every free-text field loads, round-trips, and renders with no tag or handler of
the upload's in the HTML. The negative control renders the same trace with escaping turned off and
finds the planted handler, so the check has the power to fail.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

from specviz import safejson
from specviz.errors import InvalidInput
from specviz.trace import (LookaheadPayload, NgramCandidate, RaceTrace, RunTrace, StepRecord, TreeNode,
                           TreePayload)

# An <img> handler for element content, and an attribute breakout for class="sv-{...}" in the SVG.
IMG = '<img src=x onerror="window.__pwned=(window.__pwned||0)+1">'
BREAKOUT = '"><image href="x" onerror="window.__pwned=(window.__pwned||0)+1"/><g class="'
MARK = IMG + BREAKOUT


def _rec(i, ids, texts, sources, payload=None, tokens_in=1, alternatives=None, finished=False):
    return StepRecord(step=i, new_token_ids=ids, new_token_texts=texts, token_sources=sources,
                      tokens_processed=tokens_in, cumulative_tokens=sum(1 for _ in ids),
                      time_ms={"draft": 1.0, "target": 10.0, "verify": 0.5}, payload=payload, finished=finished,
                      finish_reason="length" if finished else None, alternatives=alternatives)


def sample_race(text: str = "") -> RaceTrace:
    """A small race of all three methods with a tree, a Lookahead window and pool, and alternatives; `text`
    is added to every free-text string (token texts, names, the prompt, the error, settings' words)."""
    t = lambda s: s + text   # noqa: E731
    nodes = [TreeNode(0, -1, 0, 10, t("The"), 1.0, 1.0, "root"),
             TreeNode(1, 0, 1, 11, t(" cat"), 0.6, 0.7, "accepted", draft_input=t("target state")),
             TreeNode(2, 0, 1, 12, t(" dog"), 0.3, 0.1, "not_reached"),
             TreeNode(3, 1, 2, 13, t(" sat"), 0.5, 0.2, "rejected")]
    tree = TreePayload(nodes=nodes, accepted_path=[1], bonus_token_id=15, bonus_text=t(" ran"), budget=4, depth=2,
                       draft_ms=1.0, verify_ms=1.0)

    def look(warmup):
        return LookaheadPayload(
            window=[[21, 22], [23, 24, 25]], window_text=[[t(" a"), t(" b")], [t(" c"), t(" d"), t(" e")]],
            harvested=[[15, 23, 26]], pool_size=9, key_token_id=15,
            candidates=[NgramCandidate([30, 31], [t(" x"), t(" y")], 0),
                        NgramCandidate([16, 17], [t(" on"), t(" the")], 2)],
            accepted_candidate=None if warmup else 1, pool_entry=[[30, 31], [16, 17]], step_ms=1.0, warmup=warmup,
            window_size=3, ngram_size=3, guesses=2)

    alts = [{"id": 11, "text": t(" cat"), "p": 0.52}, {"id": 12, "text": t(" dog"), "p": 0.31}]
    settings = {"sizing": "first", "sizing_reason": t("first sizes") + ": why", "graphs_reason": t("off")}
    runs = {
        "ar": RunTrace("ar", t("p"), [1, 2], dict(settings), error=t("an error"), steps=[
            _rec(0, [11], [t(" cat")], ["ar"], tokens_in=2, alternatives=alts, finished=True)],
            finish_reason="length", target_name=t("target")),
        "sequoia": RunTrace("sequoia", t("p"), [1, 2], {**settings, "tree": "adaptive", "threshold": 0.1,
                                                        "tree_budget": 4, "tree_budget_from": t("rows")}, steps=[
            _rec(0, [10], [t("The")], ["ar"], tokens_in=2),
            _rec(1, [11, 15], [t(" cat"), t(" ran")], ["draft", "bonus"], tree, tokens_in=4, finished=True)]),
        "lookahead": RunTrace("lookahead", t("p"), [1, 2], {"window": 3, "ngram": 3, "guesses": 2}, steps=[
            _rec(0, [15], [t(" ran")], ["ar"], look(True), tokens_in=2),
            _rec(1, [16, 17, 18], [t(" on"), t(" the"), t(" mat")], ["ngram", "ngram", "bonus"], look(False),
                 tokens_in=10, finished=True)]),
    }
    order = [["ar", 0], ["sequoia", 0], ["sequoia", 1], ["lookahead", 0], ["lookahead", 1]]
    return RaceTrace(prompt=t("p"), prompt_token_ids=[1, 2], methods=list(runs), runs=runs, order=order,
                     sampling={"temperature": 0.0, "top_p": 1.0, "top_k": 0, "seed": 0}, vocab_size=100,
                     target_name=t("target"), draft_name=t("draft"), device=t("cpu"), dtype=t("fp32"),
                     machine=t("machine"), precision_choice=t("why fp32"), request={"prompt": t("p")},
                     options={"sequoia": {"note": t("x")}})


def _mutated(change) -> str:
    data = sample_race().to_dict()
    change(data)
    return json.dumps(data)


def _seq(d):
    return d["runs"]["sequoia"]["steps"][1]


def _look(d):
    return d["runs"]["lookahead"]["steps"][1]


# -- the parser ------------------------------------------------------------------------------------------------


def test_a_valid_trace_loads_and_round_trips():
    text = sample_race(MARK).to_json()
    back = RaceTrace.from_json(text)
    assert back.to_dict() == json.loads(text)
    assert RaceTrace.from_json(back.to_json().encode()).to_dict() == back.to_dict()
    assert back.runs["sequoia"].steps[1].payload.nodes[1].text == " cat" + MARK   # kept as text, not cleaned


RAW_CASES = {
    "nested 200,000 deep": ("[" * 200_000 + "]" * 200_000, "more than 64 deep"),
    "nested 200,000 deep, unclosed": ('{"a": ' * 200_000, "more than 64 deep"),
    "a 5000-digit number": ('{"kind": "specviz-race", "schema_version": ' + "9" * 5000 + "}", "5000 digits"),
    "NaN": ('{"a": NaN}', "holds NaN"),
    "Infinity": ('{"a": Infinity}', "holds Infinity"),
    "-Infinity": ('{"a": -Infinity}', "holds -Infinity"),
    "1e309": ('{"a": 1e309}', "1e309, too large"),
    "an array": ("[1, 2]", "is an array, not a SpecViz race trace"),
    "a string": ('"specviz-race"', "is a string, not a SpecViz race trace"),
    "null": ("null", "is null, not a SpecViz race trace"),
    "not JSON": ("{nope", "not valid JSON"),
    "not UTF-8": (b"\xff\xfe{}", "not UTF-8"),
}


@pytest.mark.parametrize("case", list(RAW_CASES))
def test_hostile_json_is_one_clear_message(case):
    text, fragment = RAW_CASES[case]
    with pytest.raises(InvalidInput, match=fragment):
        RaceTrace.from_json(text)


def _node(key, value):
    return lambda d: _seq(d)["payload"]["nodes"][1].update({key: value})


FIELD_CASES = {
    "node id as a list": (_node("id", [1]),
                          "sequoia step 1 has a tree node whose 'id' should be int, got list"),
    "node status with markup": (_node("status", BREAKOUT),
                                "sequoia step 1 has a tree node whose 'status' is .*expected one of root, accepted, "
                                "rejected, not_reached"),
    "node text as a number": (_node("text", 5), "'text' should be str"),
    "node probability as a bool": (_node("draft_prob", True), "'draft_prob' should be float, got bool"),
    "node field unknown": (_node("onclick", "x"), "unknown field 'onclick'"),
    "node missing its parent": (lambda d: _seq(d)["payload"]["nodes"][1].pop("parent"), "missing field 'parent'"),
    "pool_size as a string": (lambda d: _look(d)["payload"].update(pool_size="9"),
                              "lookahead step 1 payload field 'pool_size' should be int, got str"),
    "match_length as a string": (lambda d: _look(d)["payload"]["candidates"][0].update(match_length="0"),
                                 "n-gram candidate whose 'match_length' should be int, got str"),
    "match_length past its tokens": (lambda d: _look(d)["payload"]["candidates"][0].update(match_length=9),
                                     "matched 9 of its 2 tokens"),
    "accepted candidate out of range": (lambda d: _look(d)["payload"].update(accepted_candidate=5),
                                        "accepts n-gram candidate 5"),
    "window size huge": (lambda d: _look(d)["payload"].update(window_size=10 ** 9), "out of range"),
    "window as a string": (lambda d: _look(d)["payload"].update(window="[[1]]"), "'window' should be list"),
    "window row of strings": (lambda d: _look(d)["payload"].update(window=[["1"]]), "'window' item 0 should be int"),
    "payload kind unknown": (lambda d: _seq(d)["payload"].update(kind="<b>"), "payload whose 'kind' is '<b>'"),
    "payload a list": (lambda d: _seq(d).update(payload=[1]), "'payload' should be an object, got array"),
    "timing as a string": (lambda d: _seq(d)["time_ms"].update(target="1"), "'time_ms' entry 'target' should be"),
    "timing negative": (lambda d: _seq(d)["time_ms"].update(target=-1.0), "negative time"),
    "token source unknown": (lambda d: _seq(d).update(token_sources=["draft", IMG]), "unknown token source"),
    "finish reason unknown": (lambda d: _seq(d).update(finish_reason=IMG), "unknown finish reason"),
    "token id as a bool": (lambda d: _seq(d).update(new_token_ids=[True, 15]), "should be int, got bool"),
    "step as a string": (lambda d: _seq(d).update(step="1"), "'step' should be int"),
    "alternative p as a string": (lambda d: d["runs"]["ar"]["steps"][0]["alternatives"][0].update(p="x"),
                                  "alternative whose 'p' should be float"),
    "run not an object": (lambda d: d["runs"].update(ar="x"), "the trace's ar run should be an object"),
    "run settings tree_budget markup": (lambda d: d["runs"]["sequoia"]["settings"].update(tree_budget=IMG),
                                        "'settings.tree_budget' should be int"),
    "run finish reason unknown": (lambda d: d["runs"]["ar"].update(finish_reason="x"), "unknown finish reason"),
    "steps not a list": (lambda d: d["runs"]["ar"].update(steps={}), "'steps' should be list"),
    "sampling temperature a string": (lambda d: d["sampling"].update(temperature="hot"),
                                      "'sampling.temperature' should be float"),
    "prompt a number": (lambda d: d.update(prompt=5), "'prompt' should be str"),
    "cancelled a number": (lambda d: d.update(cancelled=1), "'cancelled' should be bool"),
    "order entry a bool": (lambda d: d["order"][0].__setitem__(1, False), "step order"),
    "unknown method": (lambda d: d["runs"].update(medusa=d["runs"]["ar"]), "unknown method 'medusa'"),
    "node test probability above 1": (_node("accept_prob", 1.5), "a tree node's test outside \\[0, 1\\]"),
    "node draw without its probability": (_node("uniform", 0.5), "tree node whose test is incomplete"),
    "node P' without q'": (lambda d: _seq(d)["payload"]["nodes"][1].update(accept_prob=0.5, tested_p=0.2),
                           "tree node whose test is incomplete"),
    "candidate draws without probabilities": (
        lambda d: _look(d)["payload"]["candidates"][0].update(accept_probs=[0.5], uniforms=[]),
        "n-gram candidate whose tries do not match"),
}


@pytest.mark.parametrize("case", list(FIELD_CASES))
def test_every_field_is_type_checked_at_load(case):
    change, fragment = FIELD_CASES[case]
    with pytest.raises(InvalidInput, match=fragment):
        RaceTrace.from_json(_mutated(change))


def test_a_timing_of_1e309_is_refused_in_json_and_as_a_python_inf():
    text = sample_race().to_json()
    assert '"target": 10.0' in text
    with pytest.raises(InvalidInput, match="1e309, too large"):
        RaceTrace.from_json(text.replace('"target": 10.0', '"target": 1e309', 1))
    data = sample_race().to_dict()
    _seq(data)["time_ms"]["target"] = float("inf")   # from_dict called without the JSON parser
    with pytest.raises(InvalidInput, match="'time_ms' entry 'target' should be float, got inf"):
        RaceTrace.from_dict(data)


def test_nesting_depth_ignores_brackets_inside_strings():
    assert safejson.nesting_depth('{"a": "[[[[{{{{", "b": [[1]]}') == 3
    assert safejson.nesting_depth('["\\"[[[", []]') == 2
    assert safejson.loads('["' + "[" * 100 + '"]') == ["[" * 100]


# -- the what-if profile ---------------------------------------------------------------------------------------


PROFILE_CASES = {
    "nested 200,000 deep": ("[" * 200_000, "more than 64 deep"),
    "a 5000-digit number": ('{"ms": {"1": ' + "9" * 5000 + "}}", "5000 digits"),
    "NaN": ('{"ms": {"1": NaN, "2": 3.0}}', "holds NaN"),
    "Infinity": ('{"ms": {"1": Infinity, "2": 3.0}}', "holds Infinity"),
    "not an object": ("[1, 2]", "holds a JSON array"),
    "no curve": ('{"ms": "fast"}', "no t\\(n\\) curve"),
    "not JSON": ("{nope", "not valid JSON"),
}


@pytest.mark.parametrize("case", list(PROFILE_CASES))
def test_hostile_profiles_are_one_clear_message(case, tmp_path):
    from specviz.ui import whatif

    text, fragment = PROFILE_CASES[case]
    path = tmp_path / "profile.json"
    path.write_text(text)
    with pytest.raises(InvalidInput, match=fragment):
        whatif.load_profile(str(path))


def test_a_profile_over_the_size_limit_is_refused_unread(tmp_path):
    from specviz.ui import whatif

    path = tmp_path / "big.json"
    with open(path, "w") as f:   # sparse: 2 MB on paper
        f.seek(2 * 1024 * 1024)
        f.write(" ")
    with pytest.raises(InvalidInput, match="the profile is 2.0 MB; the limit is 1 MB"):
        whatif.load_profile(str(path))


def test_a_valid_profile_loads_and_its_name_is_escaped_where_shown(tmp_path):
    import gradio as gr

    from specviz.ui.handlers import PageHandlers

    path = tmp_path / "forward.json"
    path.write_text(json.dumps({"key": IMG, "ms": {"1": 10.0, "8": 12.5, "16": "bad"}}))
    profile, note = PageHandlers.load_profile(str(path))
    assert profile["target_ms"] == {1: 10.0, 8: 12.5} and "<img" not in note
    path.write_text("[" * 100_000)
    with pytest.raises(gr.Error, match="more than 64 deep"):
        PageHandlers.load_profile(str(path))


# -- the views: every string is data ---------------------------------------------------------------------------


class _Tags(HTMLParser):
    """Every start tag and every event-handler attribute in a piece of HTML, as a browser would parse it."""

    def __init__(self):
        super().__init__()
        self.tags, self.handlers = set(), []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.handlers += [(tag, name) for name, _ in attrs if name.startswith("on")]

    handle_startendtag = handle_starttag


def rendered_views(race: RaceTrace) -> str:
    """Every view of the page at every step of `race`, concatenated: texts, stats, tree, window, pool, latency,
    captions, summary, what-if and hardware panels."""
    from specviz.ui import hardware, html, narrate, views, whatif

    sizes = dict(tree_budget=8, tree_depth=3, window=3, ngram=3, guesses=2)
    parts = [html.summary_html(race), whatif.panel_html(race, sizes), hardware.panel(race)[1]]
    for upto in range(len(race.order) + 1):
        parts += [*views.text_views(race, upto).values(), *views.plot_views(race, upto).values(),
                  narrate.caption_html(race, upto)]
    return "".join(parts)


def planted_findings(markup: str) -> dict:
    parser = _Tags()
    parser.feed(markup)
    return {"tags": parser.tags & {"img", "image", "script", "iframe"}, "handlers": parser.handlers}


def unescaped(monkeypatch) -> None:
    """Escaping turned off in every view module (each imported `esc` by name), for the negative control."""
    from specviz.ui import hardware, html, narrate, svg, whatif

    identity = lambda text, quote=True: str(text)   # noqa: E731
    for module in (html, svg, narrate, whatif, hardware):
        monkeypatch.setattr(module, "esc", identity)


def test_views_of_a_planted_trace_hold_no_markup_of_the_upload():
    race = RaceTrace.from_json(sample_race(MARK).to_json())
    markup = rendered_views(race)
    assert planted_findings(markup) == {"tags": set(), "handlers": []}
    assert "&lt;img src=x onerror=" in markup   # the token texts are there, as text


def test_negative_control_without_escaping_the_planted_handlers_appear(monkeypatch):
    race = RaceTrace.from_json(sample_race(MARK).to_json())
    unescaped(monkeypatch)
    found = planted_findings(rendered_views(race))
    assert {"img", "image"} <= found["tags"] and ("img", "onerror") in found["handlers"]


def test_a_status_the_loader_never_sees_is_escaped_in_the_tree():
    """Live traces skip the loader: the tree's class attribute is escaped all the same."""
    from specviz.ui import svg

    payload = sample_race().runs["sequoia"].steps[1].payload
    payload.nodes[2].status = BREAKOUT
    assert planted_findings(svg.tree_svg(payload, 1)) == {"tags": set(), "handlers": []}
