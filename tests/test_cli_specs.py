"""One method spec, one draft: `bench`, `generate` and the app read methods through one parser, and a
spec's sizes never change the draft it runs (`sequoia@3x3` once ran the target drafting for itself while
plain `sequoia` in the same command ran the shipped draft). Real offline model, a few tokens."""

import argparse
import json

import pytest

from specviz.cli import main
from specviz.cliargs import command_draft
from specviz.errors import InvalidInput
from specviz.methodspec import parse_spec, parse_specs


def test_the_grammar():
    assert parse_spec("sequoia") == parse_spec("sequoia").__class__("sequoia", "sequoia", None, {})
    sized = parse_spec("sequoia@3x3")
    assert (sized.method, sized.draft, sized.sizes) == ("sequoia", None, {"tree_budget": 3, "tree_depth": 3})
    named = parse_spec("sequoia+feature@3x3")
    assert (named.method, named.draft, named.sizes) == ("sequoia", "feature", {"tree_budget": 3, "tree_depth": 3})
    assert parse_spec("sequoia+independent").draft == "independent" and parse_spec("sequoia+self").draft == "self"
    assert parse_spec("sequoia@adaptive=0.05").sizes == {"tree": "adaptive", "tree_threshold": 0.05}
    assert parse_spec("lookahead@5x4x3").sizes == {"window": 5, "ngram": 4, "guesses": 3}
    assert parse_spec("hf-static").method == "hf-static" and parse_spec("hf-assisted+self").draft == "self"
    for bad in ("ar+feature", "lookahead+self@3x3x3", "sequoia+big", "sequoia@", "sequoia@3", "lookahead@3x3",
                "hf-assisted+feature", "warp"):
        with pytest.raises(InvalidInput):
            parse_spec(bad)


def test_sizes_never_change_the_draft_a_command_loads():
    args = argparse.Namespace(draft=None)
    for methods in (["ar", "sequoia@3x3"], ["ar", "sequoia"], ["sequoia@adaptive"], ["sequoia", "sequoia@3x3"]):
        assert command_draft(args, parse_specs(methods)) is None, methods   # None: the target's default draft
    assert command_draft(args, parse_specs(["ar", "lookahead@3x3x3"])) == "self"   # no draft needed
    assert command_draft(args, parse_specs(["ar", "sequoia+independent@3x3"])) == "independent"
    assert command_draft(argparse.Namespace(draft="self"), parse_specs(["sequoia@3x3"])) == "self"


def _bench(tmp_path, methods: str, *extra: str) -> dict:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "a", "suite": "code", "prompt": "Write a Python function that adds two "
                                   "numbers."}) + "\n")
    out = tmp_path / f"{len(list(tmp_path.iterdir()))}.json"
    assert main(["bench", "--prompts", str(prompts), "--methods", methods, "--max-new-tokens", "4",
                 "--warmup-tokens", "2", "--dtype", "fp32", "--json", str(out), *extra]) == 0
    return json.loads(out.read_text())


def test_sized_and_plain_sequoia_run_the_same_draft_and_the_records_name_it(tmp_path, capsys):
    # Plain `sequoia` takes its sizes from the options (auto sizing would race trees for minutes): the
    # draft must not depend on where the sizes come from.
    run = _bench(tmp_path, "ar,sequoia@3x3,sequoia,sequoia+self@3x3", "--tree-budget", "4", "--tree-depth", "2")
    drafts = {r["method"]: (r["draft"], r["draft_kind"]) for r in run["records"]}
    assert drafts["ar"] == (None, None)
    assert drafts["sequoia@3x3"] == drafts["sequoia"]
    assert drafts["sequoia"][1] in ("feature", "independent")   # the offline default's shipped draft
    assert drafts["sequoia+self@3x3"][1] == "self"
    assert run["drafts"] == {m: d[0] for m, d in drafts.items() if d[0]}
    assert all(r["same_as_ar"] for r in run["records"])   # fp32 greedy: every draft is exact
    table = capsys.readouterr().out
    row = next(line for line in table.splitlines() if line.startswith("all") and " sequoia@3x3 " in line)
    assert drafts["sequoia"][1] in row

    # The command the issue reports: with no plain `sequoia` beside it, the sized spec runs the same draft.
    alone = _bench(tmp_path, "ar,sequoia@3x3")
    assert {r["method"]: r["draft"] for r in alone["records"]}["sequoia@3x3"] == drafts["sequoia"][0]


def test_generate_reads_a_spec_and_its_draft(capsys):
    assert main(["generate", "--method", "sequoia@3x3", "--prompt", "Say hi.", "--max-new-tokens", "3",
                 "--dtype", "fp32", "--json"]) == 0
    sized = json.loads(capsys.readouterr().out)
    assert main(["generate", "--method", "sequoia+self@3x3", "--prompt", "Say hi.", "--max-new-tokens", "3",
                 "--dtype", "fp32", "--json"]) == 0
    own = json.loads(capsys.readouterr().out)
    assert sized["settings"]["tree_budget"] == 3 and sized["token_ids"] == own["token_ids"]
    assert not sized["draft_name"].endswith("(self)") and own["draft_name"].endswith("(self)")
    # Two drafts named, or sizes given twice: an error before any model loads, never a silent choice.
    assert main(["generate", "--method", "sequoia+independent", "--draft", "self", "--prompt", "x"]) == 2
    assert "give one of them" in capsys.readouterr().err
    assert main(["generate", "--method", "sequoia@3x3", "--tree-budget", "4", "--tree-depth", "2",
                 "--prompt", "x"]) == 2
    assert "gives its sizes already" in capsys.readouterr().err
