"""`bench` smoke test: two short prompts through every method that exists, with a report.

Benchmarks themselves are too slow and noisy for CI; this keeps the command, its
JSON, the Markdown table and the figures working. The target drafts for itself
here (hf-assisted then accepts every drafted token, which the test checks).
"""

import json

import pytest
import torch
from helpers import tiny_pair

from specviz.benchmark import runner as bench
from specviz.cli import main
from specviz.engine import prompts as prompt_files
from specviz.engine.lean import lean_llama_supported
from specviz.engine.methods import make_decoder
from specviz.engine.sampling import SamplingConfig
from specviz.errors import InvalidInput
from specviz.methodspec import parse_spec


def test_bench_two_prompts_with_report(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "a", "suite": "chat", "prompt": "Write a haiku about trees."}) + "\n"
                       + json.dumps({"id": "b", "suite": "rewrite", "prompt":
                                     'Rewrite more formally: "the meeting got moved to Thursday"'}) + "\n")
    methods = ["ar", "sequoia", "lookahead", "hf-generate", "hf-static", "hf-assisted", "hf-prompt-lookup"]
    out_json, report = tmp_path / "out.json", tmp_path / "report"
    rc = main(["bench", "--prompts", str(prompts), "--methods", ",".join(methods), "--max-new-tokens", "8",
               "--warmup-tokens", "4", "--draft", "self", "--dtype", "fp32", "--assistant-tokens", "3",
               "--prompt-lookup-tokens", "3", "--tree-budget", "4", "--tree-depth", "3", "--window", "3",
               "--ngram", "3", "--guesses", "2", "--json", str(out_json), "--report", str(report)])
    assert rc == 0
    run = json.loads(out_json.read_text())
    assert run["methods"] == methods and run["dtype"] == "fp32" and run["torch"] == torch.__version__
    assert run["peer_settings"]["hf-assisted"]["num_assistant_tokens"] == 3
    assert run["peer_settings"]["hf-prompt-lookup"]["prompt_lookup_num_tokens"] == 3
    records = run["records"]
    assert len(records) == 2 * len(methods)
    for rec in records:
        assert 1 <= rec["new_tokens"] <= 8 and rec["tokens_per_second"] > 0 and rec["target_forwards"] >= 1
        # Greedy in fp32: every method, ours and transformers' peers, writes ar's tokens exactly.
        assert rec["same_as_ar"] is True, (rec["method"], rec["same_as_ar"])
    # Every record names the draft it ran: the target itself here (--draft self), none where nothing drafts.
    assert {r["method"]: r["draft_kind"] for r in records if r["draft_kind"]} == {
        m: "self" for m in methods if m in ("sequoia", "hf-assisted")}
    static = [r for r in records if r["method"] == "hf-static"]
    # transformers compiles a static cache's forward only on CUDA; on this CPU it runs as it is.
    assert all(r["settings"]["cache_implementation"] == "static" and r["settings"]["compiled"] is False
               and r["target_forwards"] == r["new_tokens"] for r in static)
    assisted = [r for r in records if r["method"] == "hf-assisted"]
    # A self-draft is always right: 3 drafted + 1 bonus per verification forward, counted on the
    # target only (the draft's forwards run on a separate module).
    assert all(r["target_forwards"] < r["new_tokens"] for r in assisted if r["new_tokens"] == 8)
    rows = {(r["suite"], r["method"]): r for r in run["summary"]}
    assert rows[("all", "ar")]["speedup_vs_ar"] == pytest.approx(1.0)
    assert {s for s, _ in rows} == {"chat", "rewrite", "all"}

    table = (report / "report.md").read_text()
    for method in methods:
        assert f"| {method} |" in table
    assert "num_assistant_tokens=3" in table and "prompt_lookup_num_tokens=3" in table
    assert "uncompiled (transformers compiles only on CUDA)" in table
    # The columns in the glossary's words, defined in the line under the table.
    assert "| tokens per forward | accepted length | identical to ar |" in table and "target's own token" in table
    for name in ("speedup", "tokens_per_second_vs_size"):
        html = (report / f"{name}.html").read_text()
        assert "plotly" in html.lower() and len(html) > 1000
        png = report / f"{name}.png"
        # PNG needs kaleido + a Chromium; without them the report says so instead.
        assert png.exists() or "PNG export unavailable" in table


def test_suites_and_method_specs():
    prompts = prompt_files.read_suites("chat,code,math,rewrite")
    for suite in prompt_files.SUITES:
        mine = [p for p in prompts if p["suite"] == suite]
        assert len(mine) >= 20 and len({p["id"] for p in mine}) == len(mine)
    assert all('"' in p["prompt"] for p in prompts if p["suite"] == "rewrite")  # quotes its input
    assert [p["suite"] for p in prompt_files.limit_per_suite(prompts, 1)] == list(prompt_files.SUITES)
    def parsed(spec):
        spec = parse_spec(spec)
        return spec.method, spec.sizes

    assert parsed("sequoia@32x6") == ("sequoia", {"tree_budget": 32, "tree_depth": 6})
    assert parsed("lookahead@5x4x5") == ("lookahead", {"window": 5, "ngram": 4, "guesses": 5})
    assert parsed("sequoia+feature@adaptive") == ("sequoia", {"tree": "adaptive"})
    assert parsed("sequoia@adaptive=0.08") == ("sequoia", {"tree": "adaptive", "tree_threshold": 0.08})
    for bad in ("sequoia@32", "nope", "lookahead@axbxc", "sequoia@adaptive=x"):
        with pytest.raises(InvalidInput):
            parse_spec(bad)
    with pytest.raises(InvalidInput, match="unknown suite"):
        prompt_files.read_suites("poetry")


def test_bench_cli_errors_are_one_line(capsys):
    assert main(["bench", "--methods", "ar"]) == 2
    assert "--suite" in capsys.readouterr().err
    assert main(["bench", "--suite", "chat", "--methods", "ar,warp-drive"]) == 2
    assert "unknown method 'warp-drive'" in capsys.readouterr().err


def test_lean_forward_equals_model_forward_on_tiny_llama(monkeypatch):
    """The fast AR path against transformers' own forward, token for token and logit for logit."""
    from specviz.engine import static

    pair = tiny_pair(draft_seed=None)
    assert lean_llama_supported(pair.target)
    for cfg in (SamplingConfig(), SamplingConfig(temperature=1.0, seed=3)):
        fast = make_decoder("ar", pair, "", prompt_ids=[1, 2, 3, 4], sampling=cfg, max_new_tokens=12).run()
        with monkeypatch.context() as patch:   # as for an architecture the lean forward does not cover
            patch.setattr(static, "lean_llama_supported", lambda model: False)
            slow = make_decoder("ar", pair, "", prompt_ids=[1, 2, 3, 4], sampling=cfg, max_new_tokens=12).run()
        assert fast.token_ids == slow.token_ids


def test_bench_repeats_interleave_the_methods_and_keep_the_median_run(tmp_path, monkeypatch, capsys):
    """`--repeats 3`: every (prompt, method) runs three times, round after round in a rotating order (a slow
    spell of the machine then lands on one run of several methods, not on all of one method's), and the
    record kept is the run of median speed, with all three speeds beside it."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "a", "suite": "chat", "prompt": "Write a haiku about trees."}) + "\n")
    calls = []
    real = bench.run_one

    def counted(method, *args, **kwargs):
        calls.append(method)
        rec = real(method, *args, **kwargs)
        if method == "sequoia" and calls.count("sequoia") == 3:   # one repeat of one method writes something else
            rec.token_ids = rec.token_ids[:-1] + [rec.token_ids[-1] + 1]
        return rec

    monkeypatch.setattr(bench, "run_one", counted)
    out_json = tmp_path / "out.json"
    rc = main(["bench", "--prompts", str(prompts), "--methods", "ar,sequoia", "--max-new-tokens", "6",
               "--warmup-tokens", "2", "--draft", "self", "--dtype", "fp32", "--tree-budget", "4",
               "--tree-depth", "2", "--repeats", "3", "--json", str(out_json)])
    assert rc == 0
    assert calls == ["ar", "sequoia"] + ["ar", "sequoia", "sequoia", "ar", "ar", "sequoia"]   # warm-up, then rounds
    run = json.loads(out_json.read_text())
    assert run["repeats"] == 3 and len(run["records"]) == 2
    for rec in run["records"]:
        speeds = rec["settings"]["repeat_tokens_per_second"]
        assert len(speeds) == 3
        assert rec["tokens_per_second"] == pytest.approx(sorted(speeds)[1], abs=0.006)
        assert len(rec["settings"]["repeat_stalled_reruns"]) == 3
    # fp32 greedy: ar's repeats agree; Sequoia is not "the same as ar" when one of its repeats differed.
    same = {rec["method"]: rec["same_as_ar"] for rec in run["records"]}
    assert same == {"ar": True, "sequoia": False}
    assert main(["bench", "--prompts", str(prompts), "--methods", "ar", "--repeats", "0"]) == 2
    assert "--repeats must be at least 1" in capsys.readouterr().err
