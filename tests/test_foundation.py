"""The foundation: the offline model, the autoregressive baseline, traces, the CLI's errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import empty_profile_cache, tiny_model, tiny_tokenizer

from specviz.engine.methods import make_decoder
from specviz.engine.models import check_same_tokenizer, load_pair
from specviz.engine.sampling import SamplingConfig
from specviz.engine.text import Detokenizer, encode_prompt
from specviz.errors import InvalidInput, ModelLoadError
from specviz.trace import RunTrace

PROMPTS = ["Write a haiku about trees", "Write a Python function that reverses a string."]
SUITES_DIR = Path(__file__).resolve().parents[1] / "assets" / "suites"
GENERATE_TOKENS = 64


def suite_prompts() -> list:
    """The first and last prompt of every bench suite on disk (a new suite file is covered too)."""
    cases = []
    for path in sorted(SUITES_DIR.glob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        picks = sorted({0, len(rows) - 1})
        cases += [pytest.param(rows[i]["prompt"], id=rows[i].get("id", f"{path.stem}-{i}")) for i in picks]
    return cases


def test_every_suite_is_covered_by_the_generate_reference():
    assert {p.id.rsplit("-", 1)[0] for p in suite_prompts()} >= {"chat", "code", "math", "rewrite"}


@pytest.mark.parametrize("prompt", suite_prompts())
def test_ar_greedy_equals_generate(pair_fp32, prompt):
    """Our autoregressive decoder, which the speculative decoders' greedy tests compare with, is itself
    transformers' `generate`, token id for token id, in fp32 on every bench suite."""
    decoder = make_decoder("ar", pair_fp32, prompt, max_new_tokens=GENERATE_TOKENS)
    trace = decoder.run()
    ids = torch.tensor([decoder.prompt_ids])
    expected = pair_fp32.target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=GENERATE_TOKENS,
                                         do_sample=False)[0, ids.shape[1]:].tolist()
    assert trace.token_ids == expected
    assert trace.target_forwards == len(trace.token_ids)
    assert trace.text == pair_fp32.tokenizer.decode(expected, skip_special_tokens=True)


def test_ar_sampling_is_seeded_and_reproducible(pair_fp32):
    cfg = SamplingConfig(temperature=0.9, top_p=0.95, top_k=50, seed=1234)
    runs = [make_decoder("ar", pair_fp32, PROMPTS[0], sampling=cfg, max_new_tokens=24).run().token_ids
            for _ in range(2)]
    other = make_decoder("ar", pair_fp32, PROMPTS[0], sampling=SamplingConfig(0.9, 0.95, 50, 99),
                         max_new_tokens=24).run().token_ids
    assert runs[0] == runs[1]
    assert other != runs[0]


def test_ar_stops_at_max_new_tokens_and_records_steps(pair_fp32):
    trace = make_decoder("ar", pair_fp32, PROMPTS[1], max_new_tokens=5).run()
    assert len(trace.token_ids) == 5 and trace.finish_reason == "length"
    assert [s.cumulative_tokens for s in trace.steps] == [1, 2, 3, 4, 5]
    assert trace.steps[0].tokens_processed == len(trace.prompt_token_ids)
    assert all(s.tokens_processed == 1 for s in trace.steps[1:])
    assert all(set(s.time_ms) == {"target", "verify"} for s in trace.steps)


def test_trace_round_trips_through_json(pair_fp32):
    trace = make_decoder("ar", pair_fp32, PROMPTS[0], max_new_tokens=6).run()
    again = RunTrace.from_dict(json.loads(trace.to_json()))
    assert again.token_ids == trace.token_ids and again.text == trace.text
    assert again.to_dict() == trace.to_dict()


def test_detokenizer_pieces_join_to_full_decode(pair_fp32):
    tok = pair_fp32.tokenizer
    text = "Ünïcødé — emoji 🌳🌲 and code: def f(x):\n    return x[::-1]"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    pieces = Detokenizer(tok).push_many(ids)
    assert "".join(pieces) == tok.decode(ids)
    assert len(pieces) == len(ids)


def test_chat_template_applied(pair_fp32):
    ids = encode_prompt(pair_fp32.tokenizer, "Hello")
    text = pair_fp32.tokenizer.decode(ids)
    assert "<|im_start|>user" in text and text.rstrip().endswith("assistant")


@pytest.mark.parametrize("kwargs, message", [
    ({"max_new_tokens": 0}, "at least 1"),
    ({"max_new_tokens": 10_000}, "context"),
    ({"sampling": SamplingConfig(temperature=-1)}, "temperature"),
    ({"sampling": SamplingConfig(temperature=1, top_p=0)}, "top-p"),
    ({"sampling": SamplingConfig(temperature=1, top_p=1.5)}, "top-p"),
    ({"sampling": SamplingConfig(temperature=1, top_k=-3)}, "top-k"),
])
def test_bad_settings_are_refused(pair_fp32, kwargs, message):
    with pytest.raises(InvalidInput, match=message):
        make_decoder("ar", pair_fp32, "Hi", **kwargs)


def test_bad_prompt_and_method_are_refused(pair_fp32):
    with pytest.raises(InvalidInput, match="empty"):
        make_decoder("ar", pair_fp32, "   \n")
    with pytest.raises(InvalidInput, match="context"):
        make_decoder("ar", pair_fp32, "a " * 9000, max_new_tokens=1)
    with pytest.raises(InvalidInput, match="unknown method"):
        make_decoder("beam", pair_fp32, "Hi")


def test_tokenizer_mismatch_is_refused_naming_both(tmp_path):
    model = tiny_model(vocab_size=6)
    model.save_pretrained(tmp_path / "tiny")
    tiny_tokenizer(6).save_pretrained(tmp_path / "tiny")
    with pytest.raises(ModelLoadError) as err:
        load_pair("default", str(tmp_path / "tiny"), device="cpu", dtype="fp32")
    assert "SmolLM2-135M-Instruct" in str(err.value) and "tiny" in str(err.value)
    with pytest.raises(ModelLoadError, match="different tokenizers"):
        check_same_tokenizer(tiny_tokenizer(6), tiny_tokenizer(7), "a", "b")


def _cli(*args, timeout=600, env=None):
    return subprocess.run([sys.executable, "-m", "specviz", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_cli_generate_json_from_offline_default(tmp_path):
    # A fresh machine's cache (the model, no measurement): `auto` first times this CPU's precisions, in a
    # cache of this test's own, so no other test's `auto` depends on whether this one ran before it.
    env = {**os.environ, "SPECVIZ_CACHE": str(empty_profile_cache(tmp_path / "cache"))}
    result = _cli("generate", "--method", "ar", "--prompt", "Write a haiku about trees",
                  "--max-new-tokens", "32", "--json", env=env)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    for key in ("method", "token_ids", "text", "steps", "target_forwards", "tokens_per_second", "wall_seconds"):
        assert key in out
    assert out["method"] == "ar" and 0 < len(out["token_ids"]) <= 32 and out["text"].strip()
    assert "the target's forward in fp32, bf16" in result.stderr   # the measuring bar named what it timed
    assert list((tmp_path / "cache" / "profiles").glob("precision-*.json"))


@pytest.mark.parametrize("args, message", [
    (["--prompt", "   "], "empty"),
    (["--prompt", "hi", "--max-new-tokens", "0"], "at least 1"),
    (["--prompt", "hi", "--max-new-tokens", "100000"], "context"),
    (["--prompt", "hi", "--temperature", "-0.5"], "temperature"),
    (["--prompt", "hi", "--top-p", "0"], "top-p"),
    (["--prompt", "hi", "--method", "beam"], "unknown method"),
    (["--prompt", "a " * 9000], "context"),
    (["--prompt", "hi", "--model", "no-such-org/no-such-model"], "could not load model"),
])
def test_cli_bad_input_gives_one_line_error(args, message):
    result = _cli("generate", *args, "--dtype", "fp32")   # fp32: nothing to measure before the error
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert message in result.stderr


def test_cli_bench_smoke(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "Say hi", "id": "a"}\n{"prompt": "Count to three", "id": "b"}\n')
    out = tmp_path / "bench.json"
    # fp32: `auto` precision is bf16 where oneDNN has bf16 kernels (AVX-512, AMX) and fp32 elsewhere, and in
    # bf16 transformers' forward and ours (stacked, prepacked matrices) may round a near-tie apart.
    result = _cli("bench", "--prompts", str(prompts), "--methods", "ar,hf-generate", "--max-new-tokens", "8",
                  "--dtype", "fp32", "--json", str(out))
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    assert len(data["records"]) == 4 and data["dtype"] == "fp32"
    assert all(r["same_as_ar"] for r in data["records"])
    assert "hf-generate" in result.stdout
