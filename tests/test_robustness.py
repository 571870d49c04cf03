"""Issue 8: bad input, faults and cancellation, through the CLI and the app over real HTTP.

Every bad input must give one clear line (CLI: `error: ...`, non-zero exit, no
traceback; app: a gr.Error message) and leave the app answering. Faults are
injected into the real in-process server: a decoder that raises mid-run, a
simulated CUDA out-of-memory, a model that cannot be loaded, a cancelled run.
Runs use the offline default in fp32 with small explicit tree / window sizes.
"""

from __future__ import annotations

import html as htmllib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

# A required dependency: a missing one fails collection loudly instead of skipping.
import gradio_client  # noqa: E402

from specviz.autoregressive.decoder import AutoregressiveDecoder  # noqa: E402
from specviz.methods import method_ids  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "Write a Python function that reverses a string."


# ---------------------------------------------------------------------------
# CLI: one subprocess per bad input
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def other_tokenizer_dir(tmp_path_factory):
    """A tiny model directory whose tokenizer is not SmolLM2's (a draft that must be refused)."""
    from helpers import tiny_model, tiny_tokenizer

    path = tmp_path_factory.mktemp("other-tokenizer")
    tiny_model(vocab_size=6).save_pretrained(path)
    tiny_tokenizer(6).save_pretrained(path)
    return str(path)


CLI_CASES = {
    # name: (argv after `generate`, expected message fragment)
    "empty prompt": (["--prompt", ""], "prompt is empty"),
    "whitespace prompt": (["--prompt", "  \n\t "], "prompt is empty"),
    "prompt over the char cap": (["--prompt", "x" * 20_001], "limit is 20000"),
    "max new tokens zero": (["--prompt", PROMPT, "--max-new-tokens", "0"], "at least 1"),
    "max new tokens over context": (["--prompt", PROMPT, "--max-new-tokens", "100000"], "context"),
    "max new tokens wrong type": (["--prompt", PROMPT, "--max-new-tokens", "many"], "invalid int value"),
    "temperature negative": (["--prompt", PROMPT, "--temperature", "-1"], "temperature"),
    "temperature wrong type": (["--prompt", PROMPT, "--temperature", "hot"], "invalid float value"),
    "temperature nan": (["--prompt", PROMPT, "--temperature", "nan"], "temperature"),
    "top-p zero": (["--prompt", PROMPT, "--top-p", "0"], "top-p"),
    "top-p above one": (["--prompt", PROMPT, "--top-p", "1.5"], "top-p"),
    "top-k negative": (["--prompt", PROMPT, "--top-k", "-3"], "top-k"),
    "seed negative": (["--prompt", PROMPT, "--seed", "-1", "--temperature", "0.7"], "seed"),
    "unknown method": (["--prompt", PROMPT, "--method", "medusa"], "unknown method"),
    "tree budget without depth": (["--prompt", PROMPT, "--method", "sequoia", "--tree-budget", "8"],
                                  "both --tree-budget and --tree-depth"),
    "threshold without an adaptive tree": (["--prompt", PROMPT, "--method", "sequoia", "--tree-threshold", "0.1"],
                                           "belongs to --tree adaptive"),
    "adaptive tree threshold out of range": (["--prompt", PROMPT, "--method", "sequoia", "--tree", "adaptive",
                                              "--tree-threshold", "2"], "threshold"),
    "tree budget zero": (["--prompt", PROMPT, "--method", "sequoia", "--tree-budget", "0", "--tree-depth", "2"],
                         "budget"),
    "tree depth zero": (["--prompt", PROMPT, "--method", "sequoia", "--tree-budget", "8", "--tree-depth", "0"],
                        "depth"),
    "lookahead partial sizes": (["--prompt", PROMPT, "--method", "lookahead", "--window", "3"],
                                "all of --window, --ngram and --guesses"),
    "window zero": (["--prompt", PROMPT, "--method", "lookahead", "--window", "0", "--ngram", "3",
                     "--guesses", "3"], "window|W"),
    "ngram one": (["--prompt", PROMPT, "--method", "lookahead", "--window", "3", "--ngram", "1",
                   "--guesses", "3"], "n-gram|ngram|N"),
    "guesses negative": (["--prompt", PROMPT, "--method", "lookahead", "--window", "3", "--ngram", "3",
                          "--guesses", "-2"], "guesses|G"),
    "unknown dtype": (["--prompt", PROMPT, "--dtype", "fp8"], "unknown dtype"),
    "model that cannot load": (["--prompt", PROMPT, "--model", "no-such-org/no-such-model-xyz"],
                               "could not load model"),
    "model directory that cannot load": (["--prompt", PROMPT, "--model", str(ROOT / "tests")],
                                         "could not load model"),
}
# In this process a Hub id would first wait on the unreachable network; the subprocess sets HF_HUB_OFFLINE.
IN_PROCESS_CASES = [c for c in CLI_CASES if c != "model that cannot load"]


def run_cli(argv: list[str]) -> subprocess.CompletedProcess:
    env_argv = [sys.executable, "-m", "specviz", "generate", *argv]
    if "--dtype" not in argv:
        env_argv += ["--dtype", "fp32"]
    if "--max-new-tokens" not in argv:
        env_argv += ["--max-new-tokens", "8"]
    return subprocess.run(env_argv, cwd=ROOT, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})


def assert_one_line_error(proc: subprocess.CompletedProcess, fragment: str) -> None:
    assert proc.returncode != 0, proc.stdout[-500:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines, "no error message at all"
    error_lines = [line for line in lines if "error:" in line]
    assert len(error_lines) == 1, proc.stderr
    assert re.search(fragment, error_lines[0], re.IGNORECASE), error_lines[0]


# A few cases run as real subprocesses (interpreter start, argparse, exit status); all cases also
# run through `specviz.cli.main` in this process with the model loaded once, to keep the file short.
SUBPROCESS_CASES = ["empty prompt", "max new tokens wrong type", "max new tokens over context", "window zero",
                    "model that cannot load"]


@pytest.mark.parametrize("case", SUBPROCESS_CASES)
def test_cli_bad_input_is_one_line(case):
    argv, fragment = CLI_CASES[case]
    assert_one_line_error(run_cli(argv), fragment)


@pytest.fixture(scope="module")
def cached_loads():
    """`load_pair` memoised for the in-process CLI calls: the real model, loaded once."""
    import specviz.engine.models as models

    original, cache = models.load_pair, {}

    def load_once(target="default", draft=None, **kwargs):
        key = (target, draft, repr(sorted(kwargs.items())))
        if key not in cache:
            cache[key] = original(target, draft, **kwargs)
        return cache[key]

    mp = pytest.MonkeyPatch()
    mp.setattr(models, "load_pair", load_once)
    yield
    mp.undo()


@pytest.mark.parametrize("case", IN_PROCESS_CASES)
def test_cli_main_bad_input_is_one_line(case, cached_loads, capsys):
    from specviz.cli import main

    argv, fragment = CLI_CASES[case]
    argv = ["generate", *argv] + ([] if "--dtype" in argv else ["--dtype", "fp32"]) + (
        [] if "--max-new-tokens" in argv else ["--max-new-tokens", "8"])
    try:
        code = main(argv)
    except SystemExit as exc:   # argparse's own usage errors
        code = exc.code
    captured = capsys.readouterr()
    assert_one_line_error(subprocess.CompletedProcess(argv, code, captured.out, captured.err), fragment)


def test_cli_draft_with_another_tokenizer_is_refused(other_tokenizer_dir):
    proc = run_cli(["--prompt", PROMPT, "--method", "sequoia", "--draft", other_tokenizer_dir,
                    "--tree-budget", "4", "--tree-depth", "2"])
    assert_one_line_error(proc, "different tokenizers")


# ---------------------------------------------------------------------------
# Python API: the same checks without a CLI around them
# ---------------------------------------------------------------------------


API_CASES = {
    "whitespace prompt": (dict(prompt="  \n"), "prompt is empty"),
    "max new tokens zero": (dict(max_new_tokens=0), "at least 1"),
    "max new tokens over context": (dict(max_new_tokens=10**6), "context"),
    "max new tokens wrong type": (dict(max_new_tokens="8"), "whole number"),
    "temperature wrong type": (dict(sampling=dict(temperature="hot")), "temperature"),
    "top-k negative": (dict(sampling=dict(top_k=-1)), "top-k"),
    "tree budget zero": (dict(method="sequoia", tree_budget=0, tree_depth=2), "budget"),
    "tree depth wrong type": (dict(method="sequoia", tree_budget=8, tree_depth="deep"), "depth"),
    "window zero": (dict(method="lookahead", window=0, ngram=3, guesses=3), "window|W"),
    "guesses wrong type": (dict(method="lookahead", window=3, ngram=3, guesses=2.5), "guesses|G"),
}


@pytest.mark.parametrize("case", list(API_CASES))
def test_python_api_bad_input_is_invalid_input(pair_fp32, case):
    from specviz.engine.methods import make_decoder
    from specviz.engine.sampling import SamplingConfig
    from specviz.errors import InvalidInput

    kwargs, fragment = API_CASES[case]
    kwargs = dict(kwargs)
    method, prompt = kwargs.pop("method", "ar"), kwargs.pop("prompt", PROMPT)
    sampling = kwargs.pop("sampling", {})
    max_new = kwargs.pop("max_new_tokens", 8)
    with pytest.raises(InvalidInput, match=re.compile(fragment, re.IGNORECASE)):
        make_decoder(method, pair_fp32, prompt, sampling=SamplingConfig(**sampling).validated(),
                     max_new_tokens=max_new, **kwargs)


def test_api_rejects_bad_trace_uploads(tmp_path):
    from specviz.errors import InvalidInput
    from specviz.trace import RaceTrace

    with pytest.raises(InvalidInput, match="not valid JSON"):
        RaceTrace.from_json("{nope")
    with pytest.raises(InvalidInput, match="not a SpecViz race trace"):
        RaceTrace.from_json(json.dumps({"kind": "something else"}))
    with pytest.raises(InvalidInput, match="limit is"):
        RaceTrace.from_json(" " * 2_000_001, max_bytes=1_000_000)
    with pytest.raises(InvalidInput, match="expected structure|should be"):
        RaceTrace.from_json(json.dumps({"kind": "specviz-race", "schema_version": 1, "runs": {}, "prompt": 3}))


# ---------------------------------------------------------------------------
# The app over HTTP
# ---------------------------------------------------------------------------


from helpers import served, slow_steps  # noqa: E402


@pytest.fixture(scope="module")
def app_client():
    from specviz.ui import build_demo

    # In-process decoding: these tests slow the decoders' steps and watch Race.close by
    # patching this process (the worker's behaviour has its own tests in test_worker.py).
    demo = build_demo(worker=False)
    with served(demo) as url:
        yield gradio_client.Client(url, verbose=False), url, demo


@pytest.fixture()
def client(app_client):
    return app_client[0]


def run_args(prompt=PROMPT, methods=("ar", "sequoia", "lookahead"), max_new=8, **overrides):
    from specviz.ui.layout import DEFAULT_PRESET, METHOD_NAMES

    args = dict(prompt=prompt, methods=[METHOD_NAMES[m] for m in methods], model=DEFAULT_PRESET, custom_target="", custom_draft="", dtype="fp32",
                max_new_tokens=max_new, temperature=0.0, top_p=1.0, seed=0, tree="manual", tree_budget=6,
                tree_depth=3, lookahead="manual", window=3, ngram=3, guesses=3, pool_from_prompt=True, graphs="auto")
    args.update(overrides)
    return args


NAMES = [*(f"stats_{m}" for m in method_ids()), *(f"text_{m}" for m in method_ids()), "tree",
         "window", "pool", "pool_size", "latency", "cumulative", "summary", "slider", "caption", "file",
         "hw_html", "hw_plot", "status"]


def outputs(result) -> dict:
    assert len(result) == len(NAMES), result
    return dict(zip(NAMES, result))


def visible(fragment) -> str:
    return htmllib.unescape(re.sub(r"<[^>]+>", "", fragment or "")).replace("⏎", "\n")


def assert_answers_normally(client) -> dict:
    out = outputs(client.predict(**run_args(methods=("ar",)), api_name="/race_stream"))
    assert visible(out["text_ar"]).strip(), out["text_ar"]
    return out


APP_CASES = {
    "empty prompt": (dict(prompt=""), "prompt is empty"),
    "whitespace prompt": (dict(prompt="   \n "), "prompt is empty"),
    "prompt over the char cap": (dict(prompt="y" * 20_001), "limit is 20000"),
    "no methods": (dict(methods=[]), "at least one method"),
    "max new tokens zero": (dict(max_new_tokens=0), "max new tokens|less than minimum"),
    "max new tokens over cap": (dict(max_new_tokens=10**6), "max new tokens|greater than maximum"),
    "max new tokens fractional": (dict(max_new_tokens=2.5), "whole number"),
    "temperature negative": (dict(temperature=-1.0), "temperature|less than minimum"),
    "temperature over range": (dict(temperature=50.0), "temperature|greater than maximum"),
    "top-p zero": (dict(top_p=0.0), "top-p|less than minimum"),
    "seed negative": (dict(seed=-5), "seed must be between"),
    "tree budget zero": (dict(tree_budget=0), "tree budget must be between"),
    "tree depth zero": (dict(tree_depth=0), "tree depth must be between"),
    "tree depth over budget": (dict(tree_budget=4, tree_depth=9), "tree depth must be smaller"),
    "tree budget huge": (dict(tree_budget=10**6), "tree budget must be between"),
    "window zero": (dict(window=0), "W \\(window\\) must be between"),
    "ngram one": (dict(ngram=1), "N \\(n-gram size\\) must be between"),
    "guesses negative": (dict(guesses=-1), "G \\(guesses\\) must be between"),
    "unknown preset": (dict(model="no such preset"), "preset|not in the list|choices"),
    "unknown dtype": (dict(dtype="fp8"), "dtype|not in the list|choices"),
}


@pytest.mark.parametrize("endpoint", ["/race", "/race_stream"])   # the HTTP API's race and the page's
@pytest.mark.parametrize("case", list(APP_CASES))
def test_app_bad_input_is_a_clear_error(client, case, endpoint):
    overrides, fragment = APP_CASES[case]
    with pytest.raises(Exception, match=re.compile(fragment, re.IGNORECASE)) as info:
        client.predict(**run_args(**overrides), api_name=endpoint)
    assert "Traceback" not in str(info.value)


def test_app_model_allow_list_when_hosted():
    """Hosted (SPACE_ID set): no custom ids; an explicit allow-list binds presets and custom ids alike."""
    from specviz.hosting import HostingLimits
    from specviz.request import RaceRequest
    from specviz.ui.layout import CUSTOM, allowed_presets

    def run(limits, **overrides):   # the request's one check, before anything loads
        RaceRequest(**run_args(**overrides)).validated(limits)

    hosted = HostingLimits.from_env({"SPACE_ID": "org/specviz"})
    with pytest.raises(Exception, match="custom model ids are switched off"):
        run(hosted, model=CUSTOM, custom_target="evil/remote-code-model")
    only_default = HostingLimits.from_env({"SPACE_ID": "org/specviz", "SPECVIZ_ALLOWED_MODELS": "default"})
    assert allowed_presets(only_default) == ["SmolLM2-135M-Instruct (offline default)"]
    with pytest.raises(Exception, match="not available here"):
        run(only_default, model=CUSTOM, custom_target="evil/remote-code-model")
    with pytest.raises(Exception, match="not available on this server"):
        run(only_default, model="Llama-2-7b-chat + JackFram/llama-68m")
    local = HostingLimits.from_env({})
    assert local.allow_custom_models
    local.check_model("anyone/any-model")
    listed = HostingLimits.from_env({"SPECVIZ_ALLOWED_MODELS": "default,my/model"})   # local, but listed
    listed.check_model("my/model")
    with pytest.raises(Exception, match="not available here"):
        listed.check_model("anyone/any-model")


def test_one_visitors_run_is_invisible_to_another(app_client):
    """A second visitor (another session) sees none of the first one's trace, and cannot stop its run."""
    client, url, demo = app_client
    secret = "The secret word is pineapple. Say it back."
    mine = outputs(client.predict(**run_args(prompt=secret, methods=("ar",)), api_name="/race_stream"))
    assert "pineapple" in mine["caption"] + mine["summary"] + Path(mine["file"]).read_text()
    other = gradio_client.Client(url, verbose=False)
    for api in ("/next", "/prev", "/stop"):
        seen = json.dumps(other.predict(api_name=api), default=str)
        assert "pineapple" not in seen, (api, seen[:500])
    seen = json.dumps(other.predict(1, api_name="/show_step"), default=str)
    assert "pineapple" not in seen


def test_trust_remote_code_is_never_enabled():
    sources = [p for p in (ROOT / "specviz").rglob("*.py")] + [ROOT / "app.py"]
    for path in sources:
        for line in path.read_text().splitlines():
            if "trust_remote_code" in line:
                assert "trust_remote_code=False" in line, f"{path}: {line.strip()}"


def test_app_bad_trace_uploads(client, tmp_path):
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json")
    wrong_schema = tmp_path / "schema.json"
    wrong_schema.write_text(json.dumps({"kind": "specviz-race", "schema_version": 1, "prompt": "x"}))
    outside_vocab = tmp_path / "vocab.json"
    outside_vocab.write_text(json.dumps({
        "kind": "specviz-race", "schema_version": 1, "prompt": "x", "prompt_token_ids": [1, 10**9],
        "methods": ["ar"], "runs": {"ar": {"method": "ar", "prompt": "x", "prompt_token_ids": [1], "settings": {}, "steps": []}},
        "order": [], "vocab_size": 49152}))
    huge = tmp_path / "huge.json"
    with open(huge, "w") as f:   # over the 64 MB local limit, but sparse on disk
        f.seek(65 * 1024 * 1024)
        f.write(" ")
    for path, fragment in ((bad_json, "not valid JSON"), (wrong_schema, "expected structure|should be"),
                           (outside_vocab, "outside the vocabulary"), (huge, "limit is")):
        with pytest.raises(Exception, match=fragment):
            client.predict(gradio_client.handle_file(str(path)), api_name="/load_trace")
    assert_answers_normally(client)


def _planted(change) -> str:
    from test_trace_safety import sample_race

    data = sample_race().to_dict()
    change(data)
    return json.dumps(data)


def _tree_node(data) -> dict:
    return data["runs"]["sequoia"]["steps"][1]["payload"]["nodes"][1]


def _candidate(data) -> dict:
    return data["runs"]["lookahead"]["steps"][1]["payload"]["candidates"][0]


# Issue 66: each hostile upload gets SpecViz's own words, never Gradio's "The upstream Gradio app has raised an
# exception". Text, or a function of a valid trace's dict (hand-built: no model), or the size of a sparse file.
HOSTILE_TRACES = {
    "nested 200,000 deep": ("[" * 200_000 + "]" * 200_000, "more than 64 deep"),
    "a 5000-digit number": ('{"kind": "specviz-race", "schema_version": ' + "9" * 5000 + "}", "5000 digits"),
    "NaN": ('{"kind": "specviz-race", "x": NaN}', "holds NaN"),
    "Infinity": ('{"kind": "specviz-race", "x": Infinity}', "holds Infinity"),
    "a timing of 1e309": (lambda d: d["runs"]["ar"]["steps"][0]["time_ms"].update(target="__1e309__"), "1e309"),
    "an array": ("[1, 2, 3]", "is an array, not a SpecViz race trace"),
    "a number": ("42", "is a number, not a SpecViz race trace"),
    "node id a list": (lambda d: _tree_node(d).update(id=[1]), "tree node whose 'id' should be int, got list"),
    "node status markup": (lambda d: _tree_node(d).update(status='"><image href=x onerror=alert(1)>'),
                           "expected one of root, accepted, rejected, not_reached"),
    "pool_size a string": (lambda d: d["runs"]["lookahead"]["steps"][1]["payload"].update(pool_size="9"),
                           "'pool_size' should be int, got str"),
    "match_length a string": (lambda d: _candidate(d).update(match_length="2"), "'match_length' should be int"),
    "a step a string": (lambda d: d["runs"]["ar"]["steps"].__setitem__(0, "step"), "ar step 0 should be an object"),
    "runs a list": (lambda d: d.update(runs=[]), "'runs' should be dict"),
    "settings a list": (lambda d: d["runs"]["ar"].update(settings=[]), "'settings' should be dict"),
    "alternatives not a list": (lambda d: d["runs"]["ar"]["steps"][0].update(alternatives="x"),
                                "'alternatives' should be list"),
    "token source unknown": (lambda d: d["runs"]["ar"]["steps"][0].update(token_sources=["x"]),
                             "unknown token source"),
    "over the size limit": (65 * 1024 * 1024, "limit is"),
}


@pytest.mark.parametrize("case", list(HOSTILE_TRACES))
def test_app_hostile_trace_uploads_get_specvizs_message(client, tmp_path, case):
    source, fragment = HOSTILE_TRACES[case]
    path = tmp_path / "hostile.json"
    if isinstance(source, int):
        with open(path, "w") as f:   # sparse: over the 64 MB local limit on paper only
            f.seek(source)
            f.write(" ")
    else:
        path.write_text(source if isinstance(source, str) else _planted(source).replace('"__1e309__"', "1e309"))
    with pytest.raises(Exception, match=fragment) as info:
        client.predict(gradio_client.handle_file(str(path)), api_name="/load_trace")
    assert "upstream Gradio app" not in str(info.value) and "Traceback" not in str(info.value)


def test_app_replays_a_trace_with_markup_in_every_string(client, tmp_path):
    from test_trace_safety import IMG, sample_race

    path = tmp_path / "planted.json"
    path.write_text(sample_race(IMG).to_json())
    out = outputs(client.predict(gradio_client.handle_file(str(path)), api_name="/load_trace"))
    assert "Replaying an uploaded trace" in out["status"]
    for name in NAMES:
        if isinstance(out[name], str):
            assert "<img" not in out[name], name
    assert IMG in visible(out["text_ar"])   # shown as literal text


def test_app_model_load_failure_leaves_app_working(client, tmp_path):
    from specviz.ui.layout import CUSTOM

    # A directory with no model in it fails at once (a Hub id would first wait on the unreachable network).
    (tmp_path / "config.json").write_text("{not a config")
    with pytest.raises(Exception, match="could not load model"):
        client.predict(**run_args(model=CUSTOM, custom_target=str(tmp_path), methods=("ar",)), api_name="/race_stream")
    assert_answers_normally(client)


def test_app_draft_with_another_tokenizer_is_refused(client, other_tokenizer_dir):
    from specviz.ui.layout import CUSTOM

    with pytest.raises(Exception, match="different tokenizers"):
        client.predict(**run_args(model=CUSTOM, custom_target="default", custom_draft=other_tokenizer_dir), api_name="/race_stream")


def _fail_on_step(monkeypatch, exc_factory, fail_at=2):
    """Make the autoregressive decoder raise on its `fail_at`-th step (the real server is in-process)."""
    original = AutoregressiveDecoder._step

    def failing_step(self):
        if len(self.trace.steps) >= fail_at:
            raise exc_factory()
        return original(self)

    monkeypatch.setattr(AutoregressiveDecoder, "_step", failing_step)


def test_decoder_raising_mid_run_shows_error_in_its_column_only(client, monkeypatch):
    _fail_on_step(monkeypatch, lambda: RuntimeError("injected fault in the AR decoder"))
    out = outputs(client.predict(**run_args(), api_name="/race_stream"))
    assert "injected fault" in out["stats_ar"] or "injected fault" in out["text_ar"]
    trace = json.loads(Path(out["file"]).read_text())
    assert trace["runs"]["ar"]["finish_reason"] == "error"
    for method in ("sequoia", "lookahead"):
        run = trace["runs"][method]
        assert run["finish_reason"] in ("length", "eos"), run.get("error")
        assert sum(len(s["new_token_ids"]) for s in run["steps"]) >= 1
    monkeypatch.undo()
    assert_answers_normally(client)


def test_simulated_cuda_oom_is_reported_and_recovered(client, monkeypatch):
    oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    _fail_on_step(monkeypatch, lambda: oom("CUDA out of memory. Tried to allocate 2.00 GiB"), fail_at=1)
    out = outputs(client.predict(**run_args(), api_name="/race_stream"))
    shown = visible(out["stats_ar"]) + visible(out["text_ar"])
    assert "out of memory" in shown.lower(), shown
    monkeypatch.undo()
    assert_answers_normally(client)


def test_simulated_oom_while_loading_is_reported(client, monkeypatch):
    from specviz.ui.layout import CUSTOM

    def oom_load(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory while loading")

    monkeypatch.setattr("specviz.engine.models.load_pair", oom_load)
    with pytest.raises(Exception, match="out of memory"):
        client.predict(**run_args(model=CUSTOM, custom_target="some-org/other-model", methods=("ar",)), api_name="/race_stream")
    monkeypatch.undo()
    assert_answers_normally(client)


def _streaming_slow_run(client, monkeypatch):
    """A slowed 200-token AR run, once it has streamed a few updates."""
    slow_steps(monkeypatch)
    job = client.submit(**run_args(methods=("ar",), max_new=200), api_name="/race_stream")
    deadline = time.monotonic() + 60
    while len(job.outputs()) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    return job


def test_cancelled_run_closes_the_race_and_app_keeps_working(app_client, closed_races, monkeypatch):
    client = app_client[0]
    job = _streaming_slow_run(client, monkeypatch)
    assert len(job.outputs()) >= 3, "the run never started streaming"
    job.cancel()
    deadline = time.monotonic() + 15
    while not closed_races and time.monotonic() < deadline:
        time.sleep(0.1)
    assert closed_races, "the cancelled run's race was never closed"
    race = closed_races[-1]
    assert race.cancelled and race.trace.runs["ar"].finish_reason == "cancelled"
    assert len(race.trace.runs["ar"].token_ids) < 200
    monkeypatch.undo()
    assert_answers_normally(client)


def test_closed_browser_tab_ends_the_run(app_client, closed_races, monkeypatch):
    """A visitor who closes the tab drops the event stream: Gradio cancels the event, the race is closed."""
    import httpx

    client, url, demo = app_client
    slow_steps(monkeypatch)
    fn_index = next(i for i, fn in demo.fns.items() if fn.api_name == "race_stream")
    base = f"{url}gradio_api"
    session = "closed-tab-session"
    joined = httpx.post(f"{base}/queue/join", json={
        "data": list(run_args(methods=("ar",), max_new=200).values()), "fn_index": fn_index,
        "session_hash": session, "event_data": None, "trigger_id": None}, timeout=30)
    assert joined.status_code == 200, joined.text
    generating = 0
    with httpx.stream("GET", f"{base}/queue/data", params={"session_hash": session}, timeout=60) as stream:
        for line in stream.iter_lines():
            generating += '"process_generating"' in line
            if generating >= 3:
                break   # leaving the block closes the connection, as a closed tab does
    assert generating >= 3
    deadline = time.monotonic() + 30
    while not closed_races and time.monotonic() < deadline:
        time.sleep(0.1)
    assert closed_races, "the race of a closed tab was never closed"
    race = closed_races[-1]
    assert race.cancelled and len(race.trace.runs["ar"].token_ids) < 200
    monkeypatch.undo()
    assert_answers_normally(client)


def test_stop_button_ends_the_run(app_client, closed_races, monkeypatch):
    client = app_client[0]
    job = _streaming_slow_run(client, monkeypatch)
    stopped = outputs(client.predict(api_name="/stop"))
    assert "Stopped" in stopped["status"]
    deadline = time.monotonic() + 15
    while not closed_races and time.monotonic() < deadline:
        time.sleep(0.1)
    assert closed_races and closed_races[-1].cancelled
    monkeypatch.undo()
    job.cancel()
    assert_answers_normally(client)


def test_run_time_limit_stops_with_clear_message(pair_fp32, monkeypatch):
    """SPECVIZ_MAX_RUN_SECONDS: the race ends at the limit with a message, and is closed."""
    from specviz.hosting import HostingLimits
    from specviz.request import RaceRequest
    from specviz.ui.racing import race_events

    class OnePair:   # the session's fp32 pair, so no second load
        def get(self, *args):
            return pair_fp32

    slow_steps(monkeypatch, delay=0.1)
    limits = HostingLimits.from_env({"SPECVIZ_MAX_RUN_SECONDS": "0.5"})
    request = RaceRequest(**run_args(methods=("ar",), max_new=200)).validated(limits)
    events = list(race_events(OnePair(), limits, None, request))
    statuses = [e[1] for e in events if e[0] == "status"]
    assert any("time limit" in s for s in statuses), statuses
    final = events[-1]
    assert final[0] == "trace" and final[2] is True
    race = final[1]
    assert race.cancelled and len(race.runs["ar"].token_ids) < 200


def test_summary_shows_first_differing_token_of_a_mismatched_trace(client, tmp_path):
    """Losslessness watch: a greedy trace whose Sequoia text differs must say where, not hide it."""
    out = outputs(client.predict(**run_args(methods=("ar", "sequoia")), api_name="/race_stream"))
    trace = json.loads(Path(out["file"]).read_text())
    trace["dtype"] = "bf16"
    steps = [s for s in trace["runs"]["sequoia"]["steps"] if s["new_token_ids"]]
    ar_ids = [t for s in trace["runs"]["ar"]["steps"] for t in s["new_token_ids"]]
    last = steps[-1]
    index = sum(len(s["new_token_ids"]) for s in steps) - 1
    last["new_token_ids"][-1] = (ar_ids[index] + 1) % 49152
    last["new_token_texts"][-1] = " MISMATCH"
    path = tmp_path / "mismatch.json"
    path.write_text(json.dumps(trace))
    replay = outputs(client.predict(gradio_client.handle_file(str(path)), api_name="/load_trace"))
    summary = visible(replay["summary"])
    assert f"differs from autoregressive at token {index}" in summary, summary
    assert "MISMATCH" in summary and "near-tie" in summary.lower().replace("near tie", "near-tie"), summary


def test_a_hub_model_that_is_not_downloaded_fails_at_once_when_the_hub_is_unreachable(monkeypatch, tmp_path):
    """Offline, transformers retried the Hub for about 46 s before failing, while the app's visitors queued
    behind the load. One short metadata request decides it; the message names both ways to the offline
    default (the CLI's flag and the app's model pair)."""
    import huggingface_hub

    from specviz.engine import models
    from specviz.errors import ModelLoadError

    # Nothing listens on the discard port, so the Hub is unreachable here whatever this machine's network.
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))   # nothing downloaded
    with pytest.raises(ModelLoadError, match="cannot be reached") as err:
        models.load_tokenizer("some-org/not-downloaded-model")
    assert "--model default" in str(err.value) and models.DEFAULT_DISPLAY_NAME in str(err.value)
