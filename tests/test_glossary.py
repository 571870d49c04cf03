"""One word per idea (issue 51): every measurement and size the page, `bench`, the HTTP API and the docs name is
defined in `specviz.glossary`, and each check here fails on a word the glossary does not define (the negative
controls plant one). No model, no server: the page's components are built, not served."""

from __future__ import annotations

import html as htmllib
import re
from pathlib import Path

import pytest

from specviz import glossary
from test_ui import race_trace

ROOT = Path(__file__).resolve().parent.parent
# Words retired for the glossary's: a page, a table or a doc that says them says an idea in a second word.
RETIRED = {"tok/fwd": "tokens per forward", "tokens/forward": "tokens per forward", "acc.len": "accepted length",
           "accepted speculation": "accepted length, speculated share", "tokens per step": "accepted length",
           "mean accepted length": "accepted length", "speedup vs ar": "speedup", "tok/s": "tokens/s",
           "compression ratio": "tokens per forward"}
# What users read today; docs/history.md is the record of past runs in the words of their day.
CURRENT_TEXTS = ["README.md", *(p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "docs").glob("*.md"))
                                if p.name != "history.md")]
# The page's words: the UI's, bench's, and each method's own page parts (its folder's views.py and whatif.py).
CURRENT_CODE = sorted({str(p.relative_to(ROOT)) for pattern in ("specviz/ui/*.py", "specviz/benchmark/*.py",
                                                                 "specviz/*/views.py", "specviz/*/whatif.py")
                       for p in ROOT.glob(pattern)})


def _header_texts(fragment: str, tag_class: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(tag_class, fragment, flags=re.S)]


def page_labels(summary_columns=None) -> dict[str, list[str]]:
    """The measurement words the page shows: the summary's columns, the columns' numbers, the size controls."""
    from specviz.ui import html

    trace = race_trace()
    labels = {"summary": list(summary_columns or html.SUMMARY_COLUMNS),
              "stats": _header_texts(html.stats_html("sequoia", trace.runs["sequoia"]),
                                     r'class="sv-stat-label"[^>]*>(.*?)</div>')}
    labels["summary rendered"] = _header_texts(html.summary_html(trace), r"<th[^>]*>(.*?)</th>")
    return labels


def test_every_term_is_defined_once_and_spelled_one_way():
    names = [t.name for t in glossary.TERMS]
    assert len(names) == len(set(names))
    spellings = {}
    for t in glossary.TERMS:
        assert t.definition.strip().endswith("."), t.name
        for spelling in {t.name, t.field, *t.aliases} - {""}:
            assert spellings.setdefault(spelling.lower(), t.name) == t.name, (spelling, t.name)
    # The pair the trackers ask about, said apart.
    assert "target's own token" in glossary.BY_NAME["accepted length"].definition
    assert "per speculated token" in glossary.BY_NAME["acceptance rate"].definition.lower()
    for word in ("tokens per forward", "accepted length", "acceptance rate", "speedup", "step", "tree budget",
                 "tree depth", "W", "N", "G", "t(n)"):   # the list
        assert glossary.find(word) is not None, word
    assert (glossary.find("n").name, glossary.find("N").name, glossary.find("N (n-gram)").name) == (
        "tree budget", "n-gram", "n-gram")


def test_the_pages_labels_are_glossary_terms_with_their_definition_on_hover():
    from specviz.ui import html

    labels = page_labels()
    assert labels["summary rendered"] == list(html.SUMMARY_COLUMNS)
    assert labels["stats"] == ["tokens/s", "tokens per forward", "steps", "tokens", "time"]
    for where, words in labels.items():
        assert not glossary.undefined(words), (where, glossary.undefined(words))
    summary = html.summary_html(race_trace())
    for column in html.SUMMARY_TERMS:
        assert f'title="{htmllib.escape(glossary.title(column), quote=True)}"' in summary, column


def test_the_pages_size_controls_are_glossary_terms():
    """Every slider and number box of the page (sizes, the step, the sampling settings) names a glossary term or
    a setting that is not a measurement; Gradio's own labels get the definitions on hover from the page script."""
    import gradio as gr

    from specviz.ui import build_demo
    from specviz.ui.content import page_files

    PAGE_JS = page_files()["js"]

    demo = build_demo(worker=False)
    labels = [b.label for b in demo.blocks.values() if isinstance(b, (gr.Slider, gr.Number)) and b.label]
    assert {"Tree budget n (nodes incl. root)", "Tree depth d", "W (window)", "N (n-gram)", "G (guesses)"} <= set(labels)
    assert not glossary.undefined(labels), glossary.undefined(labels)
    assert '"tree budget n": "tree budget (n): The nodes' in PAGE_JS   # the hover the page script gives


def test_bench_columns_and_the_api_fields_are_glossary_terms():
    from specviz.benchmark import report, runner
    from specviz.ui import api, html

    assert not glossary.undefined(report.TABLE_COLUMNS)
    assert not glossary.undefined(runner.TEXT_COLUMNS)
    header = runner.format_table([])
    assert all(column in header for column in runner.TEXT_COLUMNS)
    trace = race_trace()
    result = api.method_result(trace, "sequoia", html.run_stats(trace.runs["ar"])["tokens_per_second"])
    measured = [k for k, v in result.items() if isinstance(v, (int, float, bool))]
    assert {"tokens", "tokens_per_second", "tokens_per_forward", "accepted_length", "speedup",
            "target_forwards"} <= set(measured)
    assert not glossary.undefined(measured), glossary.undefined(measured)
    cli_summary = trace.runs["ar"].summary()   # `generate --json`'s
    assert not glossary.undefined([k for k, v in cli_summary.items() if isinstance(v, (int, float))])
    line = report.columns_line()
    assert "**accepted length**" in line and "target's own token" in line


def test_a_word_the_glossary_does_not_define_is_caught():
    """Negative controls: the old words, a planted column and an unknown API field all fail the checks above."""
    from specviz.ui import html

    assert glossary.undefined(["tok/fwd", "acc.len", "tokens per step", "tokens/forward"]) == [
        "tok/fwd", "acc.len", "tokens per step", "tokens/forward"]
    planted = page_labels(summary_columns=[*html.SUMMARY_COLUMNS, "compression ratio"])
    assert glossary.undefined(planted["summary"]) == ["compression ratio"]
    assert glossary.undefined(["tokens_per_forward", "draft_hit_ratio"]) == ["draft_hit_ratio"]
    with pytest.raises(KeyError, match="not defined in specviz/glossary.py"):
        glossary.term_html("acc.len")


def test_docs_glossary_is_written_from_the_package():
    assert (ROOT / "docs" / "glossary.md").read_text() == glossary.markdown(), (
        "docs/glossary.md is stale: python -m specviz.glossary > docs/glossary.md")
    for t in glossary.TERMS:
        assert f"| {t.name} |" in glossary.markdown()


def _without_the_fields_words(rel: str, text: str) -> str:
    """The glossary page names the field's words for each term (`Term.elsewhere`) so a reader can map them; there
    they are allowed, and only there."""
    if rel != "docs/glossary.md":
        return text
    for t in glossary.TERMS + glossary.CONCEPTS:
        text = text.replace(glossary._elsewhere(t).lower(), "")
    return text


def test_no_page_table_or_doc_says_a_retired_word():
    found = []
    for rel in CURRENT_TEXTS + CURRENT_CODE:
        text = _without_the_fields_words(rel, (ROOT / rel).read_text().lower())
        found += [(rel, word, RETIRED[word]) for word in RETIRED if word in text]
    assert not found, found


def test_the_retired_word_check_can_fail(tmp_path):
    """Negative control for the check above: a page that says the summary's old word is found."""
    page = tmp_path / "page.md"
    page.write_text("The summary shows accepted speculation and tok/fwd.")
    text = page.read_text().lower()
    assert [w for w in RETIRED if w in text] == ["tok/fwd", "accepted speculation"]


def test_the_fields_words_are_aliases_on_the_glossary_page_and_never_a_label():
    """A learner who read EAGLE, Leviathan or the Lookahead paper finds their words, each mapped to one of ours
    (τ, α, γ, compression ratio); a label that used one is still caught."""
    page = glossary.markdown()
    for word, ours in (("τ, mean accepted tokens", "accepted length"), ("α (Leviathan et al.)", "acceptance rate"),
                       ("γ, draft length", "tree depth"), ("compression ratio", "tokens per forward"),
                       ("c, cost coefficient", "draft-cost ratio")):
        row = next(line for line in page.splitlines() if line.startswith(f"| {ours} |"))
        assert word in row, (word, ours)
        assert glossary.find(word) is None and glossary.undefined([word]) == [word]


def test_a_learners_core_words_are_defined():
    names = {t.name for t in glossary.CONCEPTS}
    assert {"draft", "target", "bonus token", "residual", "tree attention", "prefill", "KV cache",
            "Jacobi iteration", "n-gram pool", "lossless", "memory-bound", "compute-bound"} <= names
    assert not names & {t.name for t in glossary.TERMS}
    assert all(t.definition.endswith(".") and f"| {t.name} | {t.definition}" in glossary.markdown()
               for t in glossary.CONCEPTS)


def test_acceptance_rate_has_one_definition_and_the_vector_is_its_marginal_by_rank():
    """One meaning: the share of tested speculated tokens accepted. The shipped vector is counts over nodes (its
    entries sum to at most 1), which its definition says, not a rate conditional on the better ones' rejection."""
    import json

    rate = glossary.BY_NAME["acceptance rate"].definition
    vector = glossary.BY_NAME["acceptance vector"].definition
    assert "tested" in rate and "proposed" not in rate
    assert "counts ÷ nodes" in vector and "once the better ones were rejected" not in vector
    shipped = sorted((ROOT / "assets" / "acceptance").glob("*.json"))
    assert shipped
    for path in shipped:
        data = json.loads(path.read_text())
        assert sum(data["acceptance"]) <= 1.0 + 1e-6, path.name
        if "counts" in data:   # the definition's counts ÷ nodes
            assert data["acceptance"] == pytest.approx([c / data["steps"] for c in data["counts"]], abs=1e-5)
