"""The app over real HTTP: launched on 127.0.0.1, driven with gradio_client.

A greedy race of all three methods on the offline default (fp32, small explicit
tree and window so no profiling runs) must give three identical texts and a
downloadable trace carrying tree and lookahead payloads; that trace must replay
with no model; bad input must come back as a clear error.
"""

from __future__ import annotations

import html
import json
import re

import pytest

# Required dependencies: a missing one fails collection loudly instead of skipping the app's tests.
import gradio as gr  # noqa: E402,F401   module level: Gradio resolves handlers' `gr.Request` annotations here
import gradio_client  # noqa: E402
from specviz.methods import method_ids  # noqa: E402

RUN_METHODS = ["ar", "sequoia", "lookahead"]
PROMPT = "Write a Python function that reverses a string."


from helpers import served  # noqa: E402


@pytest.fixture(scope="module")
def client():
    from specviz.ui import build_demo

    with served(build_demo()) as url:
        yield gradio_client.Client(url, verbose=False)


def run_args(prompt=PROMPT, methods=None, max_new=24, temperature=0.0, seed=0, dtype="fp32"):
    from specviz.ui.layout import DEFAULT_PRESET, METHOD_NAMES

    return dict(prompt=prompt, methods=[METHOD_NAMES[m] for m in (RUN_METHODS if methods is None else methods)], model=DEFAULT_PRESET, custom_target="", custom_draft="",
                dtype=dtype, max_new_tokens=max_new, temperature=temperature, top_p=1.0, seed=seed,
                tree="manual", tree_budget=8, tree_depth=3, lookahead="manual", window=3, ngram=3,
                guesses=3, pool_from_prompt=True, graphs="auto")


def visible_text(fragment: str) -> str:
    """The text a token column shows, tags stripped (newlines are drawn as ⏎)."""
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).replace("⏎", "\n")


def _outputs(result):
    # Output order of the run event (the gr.State is not part of the API).
    names = [*(f"stats_{m}" for m in method_ids()), *(f"text_{m}" for m in method_ids()), "tree",
             "window", "pool", "pool_size", "latency", "cumulative", "summary", "slider", "caption", "file",
             "hw_html", "hw_plot", "status"]
    assert len(result) == len(names), result
    return dict(zip(names, result))


@pytest.fixture(scope="module")
def greedy_run(client):
    return _outputs(client.predict(**run_args(), api_name="/race_stream"))


def test_greedy_race_gives_identical_texts_and_full_trace(greedy_run):
    out = greedy_run
    trace = json.loads(open(out["file"], encoding="utf-8").read())
    runs = trace["runs"]
    assert set(runs) == {"ar", "sequoia", "lookahead"}
    assert all(runs[m]["error"] is None for m in runs), {m: runs[m]["error"] for m in runs}
    ar_ids = runs["ar"]["token_ids"]
    assert len(ar_ids) > 0
    assert runs["sequoia"]["token_ids"] == ar_ids
    assert runs["lookahead"]["token_ids"] == ar_ids
    kinds = {m: {(s["payload"] or {}).get("kind") for s in runs[m]["steps"]} for m in runs}
    assert "tree" in kinds["sequoia"]
    assert "lookahead" in kinds["lookahead"]
    # The page says so, prominently.
    assert out["summary"].count("identical to autoregressive") == 2
    # Speculation needs fewer target forwards than tokens... at least not more.
    assert runs["sequoia"]["target_forwards"] <= runs["ar"]["target_forwards"]


def test_greedy_race_streams_columns_and_figures(greedy_run):
    out = greedy_run
    trace = json.loads(open(out["file"], encoding="utf-8").read())
    assert "sv-tok" in out["text_ar"]
    for m in RUN_METHODS:
        assert visible_text(out[f"text_{m}"]) == trace["runs"][m]["text"]
    assert out["slider"]["value"] == len(trace["order"])
    if "sequoia" in RUN_METHODS:
        # The last Sequoia step's tree, drawn as inline SVG: one node group per tree node.
        last_tree = [s for s in trace["runs"]["sequoia"]["steps"] if s.get("payload")][-1]["payload"]
        assert out["tree"].count('<g class="sv-node') == len(last_tree["nodes"])


def test_step_through_the_session_trace(client, greedy_run):
    # The session's trace lives in gr.State on the server; the client's session carries it.
    out = _outputs(client.predict(3, api_name="/show_step"))
    assert "Step 3 of" in out["caption"]
    assert out["slider"]["value"] == 3
    prev = _outputs(client.predict(3, api_name="/prev"))
    assert "Step 2 of" in prev["caption"]
    nxt = _outputs(client.predict(2, api_name="/next"))
    assert "Step 3 of" in nxt["caption"]
    # Two global steps in, the columns show only what had been generated then.
    total = sum(len(visible_text(out[f"text_{m}"])) for m in RUN_METHODS)
    assert total < sum(len(visible_text(greedy_run[f"text_{m}"])) for m in RUN_METHODS)


def test_replay_of_saved_trace_needs_no_model(client, greedy_run, tmp_path):
    from specviz.ui import build_demo

    # A second app that never loads a model: uploading the trace renders every view.
    saved = tmp_path / "trace.json"
    saved.write_text(open(greedy_run["file"], encoding="utf-8").read())
    with served(build_demo()) as url:
        other = gradio_client.Client(url, verbose=False)
        out = _outputs(other.predict(gradio_client.handle_file(str(saved)), api_name="/load_trace"))
    assert "Replaying an uploaded trace" in out["status"]
    trace = json.loads(saved.read_text())
    assert visible_text(out["text_ar"]) == trace["runs"]["ar"]["text"]
    assert out["slider"]["value"] == len(trace["order"])
    assert "identical" in out["summary"] or len(RUN_METHODS) == 1


def test_bad_input_gives_clear_error(client):
    with pytest.raises(Exception, match="prompt is empty"):
        client.predict(**run_args(prompt="   "), api_name="/race_stream")
    with pytest.raises(Exception, match="choose at least one method"):
        client.predict(**run_args(methods=[]), api_name="/race_stream")
    with pytest.raises(Exception, match="greater than maximum|max new tokens"):
        client.predict(**run_args(max_new=10 ** 6), api_name="/race_stream")
    with pytest.raises(Exception, match="tree depth must be smaller"):
        client.predict(**{**run_args(), "tree_budget": 3, "tree_depth": 5}, api_name="/race_stream")
    with pytest.raises(Exception, match="less than minimum"):
        client.predict(**run_args(temperature=-1), api_name="/race_stream")
    with pytest.raises(Exception, match="seed must be between"):
        client.predict(**run_args(seed=-5), api_name="/race_stream")
    with pytest.raises(Exception, match="W \\(window\\) must be between"):
        client.predict(**{**run_args(), "window": 0}, api_name="/race_stream")


def test_bad_trace_upload_gives_clear_error(client, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(Exception, match="not valid JSON"):
        client.predict(gradio_client.handle_file(str(bad)), api_name="/load_trace")
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"hello": 1}))
    with pytest.raises(Exception, match="not a SpecViz race trace"):
        client.predict(gradio_client.handle_file(str(wrong)), api_name="/load_trace")


def test_zerogpu_wrapper_is_applied_to_the_compute_generator():
    import inspect

    from specviz.ui import build_demo

    wrapped = []

    def fake_gpu(fn):   # the shape of `spaces.GPU`: takes the function, returns a callable
        wrapped.append(fn)
        return fn

    build_demo(gpu=fake_gpu)
    assert len(wrapped) == 1 and inspect.isgeneratorfunction(wrapped[0])


def test_session_state_stays_bounded_across_streamed_runs():
    # Gradio files a new copy of a skipped output under a fresh id whenever a real value
    # follows a gr.skip(); the app prunes those per session, or a tab's state grows each run.
    import gradio as gr

    from specviz.ui.layout import prune_session_config

    with gr.Blocks() as demo:
        html_out, plot_out, number = gr.HTML("x"), gr.Plot(), gr.Number()

        def run(request: gr.Request = None):
            prune_session_config(demo, request.session_hash)
            for i in range(4):
                yield gr.skip(), gr.skip(), i
            yield "<b>done</b>", None, 4

        gr.Button().click(run, None, [html_out, plot_out, number], api_name="run")
    demo.queue()
    with served(demo) as url:
        visitor = gradio_client.Client(url, verbose=False)
        sizes = []
        for _ in range(4):
            assert visitor.predict(api_name="/run")[0] == "<b>done</b>"
            sessions = list(demo.state_holder.session_data.values())
            sizes.append(sum(len(s.config_values) + len(s.blocks_config.blocks) for s in sessions))
        assert sizes[1] == sizes[2] == sizes[3], sizes


def test_illustrative_sizes_over_the_api(client):
    """`tree` / `lookahead` = "illustrative" (workshop mode): several tree levels and window levels."""
    from specviz.request import ILLUSTRATIVE_LOOKAHEAD, ILLUSTRATIVE_TREE

    args = run_args(max_new=6)
    args.update(tree="illustrative", lookahead="illustrative")
    out = _outputs(client.predict(**args, api_name="/race_stream"))
    with open(out["file"], encoding="utf-8") as fh:
        runs = json.load(fh)["runs"]
    if "sequoia" in runs:
        settings = runs["sequoia"]["settings"]
        assert settings["tree"] == "manual" and 3 <= settings["tree_depth"] <= ILLUSTRATIVE_TREE["tree_depth"]
        assert settings["tree_budget"] == ILLUSTRATIVE_TREE["tree_budget"]
    if "lookahead" in runs:
        settings = runs["lookahead"]["settings"]
        assert {k: settings[k] for k in ILLUSTRATIVE_LOOKAHEAD} == ILLUSTRATIVE_LOOKAHEAD
    ar_steps = runs["ar"]["steps"]
    assert ar_steps and all(len(s["alternatives"]) == 3 for s in ar_steps)   # the narrated AR step's data
    assert "Step" in out["caption"] and "ran its step" in out["caption"]   # the narrated caption


def test_feature_draft_preset_races_exactly_and_its_tree_says_what_the_draft_saw(client):
    """The offline default with its feature draft: greedy fp32 Sequoia equals autoregressive, and
    every tree node records what the draft read (the tree hover shows it)."""
    from specviz.ui.layout import FEATURE_PRESET

    args = run_args(methods=("ar", "sequoia"), max_new=16)
    args.update(model=FEATURE_PRESET)
    out = _outputs(client.predict(**args, api_name="/race_stream"))
    with open(out["file"], encoding="utf-8") as fh:
        trace = json.load(fh)
    runs = trace["runs"]
    assert "feature draft" in trace["draft_name"]
    assert runs["sequoia"]["token_ids"] == runs["ar"]["token_ids"]
    nodes = [n for s in runs["sequoia"]["steps"] if s.get("payload") for n in s["payload"]["nodes"]
             if n["parent"] >= 0]
    assert nodes and all(n["draft_input"] for n in nodes)
    # Stepped to a Sequoia step with a tree (the last ones may be cut to the root near the end).
    steps = runs["sequoia"]["steps"]
    upto = next(i + 1 for i, (method, k) in enumerate(trace["order"])
                if method == "sequoia" and len((steps[k].get("payload") or {}).get("nodes") or []) > 1)
    view = _outputs(client.predict(upto, api_name="/show_step"))
    assert "draft saw:" in html.unescape(view["tree"])


def test_adaptive_tree_over_the_api(client):
    """`tree` = "adaptive": each step's tree is grown from the draft's confidence; greedy fp32 Sequoia still
    equals autoregressive, the shapes vary, and the caption says the shape was the step's own."""
    args = run_args(methods=("ar", "sequoia"), max_new=24)
    args.update(tree="adaptive")
    out = _outputs(client.predict(**args, api_name="/race_stream"))
    with open(out["file"], encoding="utf-8") as fh:
        trace = json.load(fh)
    runs = trace["runs"]
    assert runs["sequoia"]["token_ids"] == runs["ar"]["token_ids"]
    assert runs["sequoia"]["settings"]["tree"] == "adaptive"
    steps = runs["sequoia"]["steps"]
    shapes = {tuple(n["parent"] for n in s["payload"]["nodes"]) for s in steps if s.get("payload")}
    assert len(shapes) >= 2
    upto = next(i + 1 for i, (method, k) in enumerate(trace["order"])
                if method == "sequoia" and len((steps[k].get("payload") or {}).get("nodes") or []) > 1)
    view = _outputs(client.predict(upto, api_name="/show_step"))
    assert "shape is this step's own (adaptive)" in html.unescape(view["caption"])


# -- the HTTP API's /race: one race as one JSON result --------------------------------------------------

# The app's defaults (the page's initial values and the API's alike), pinned small: 'auto' would profile first.
SMALL = {"max_new_tokens": 12, "dtype": "fp32", "tree": "manual", "tree_budget": 8, "tree_depth": 3,
         "lookahead": "manual", "window": 3, "ngram": 3, "guesses": 3}
METHOD_FIELDS = {"text", "token_ids", "tokens", "tokens_per_second", "tokens_per_forward", "accepted_length",
                 "speedup", "identical_to_ar"}


@pytest.fixture(scope="module")
def api_result():
    """A race asked for with the prompt alone, on an app whose defaults are small."""
    from specviz.ui import build_demo

    with served(build_demo(defaults=SMALL)) as url:
        client = gradio_client.Client(url, verbose=False)
        params = client.view_api(print_info=False, return_format="dict")["named_endpoints"]["/race"]["parameters"]
        yield client.predict("Write a haiku about trees", api_name="/race"), params


def test_api_race_needs_only_the_prompt_and_defaults_the_rest(api_result):
    from specviz.request import RaceRequest

    result, params = api_result
    assert [p["parameter_name"] for p in params] == RaceRequest.names()
    assert [p["parameter_name"] for p in params if not p["parameter_has_default"]] == ["prompt"]
    defaults = {p["parameter_name"]: p["parameter_default"] for p in params}
    assert {k: defaults[k] for k in SMALL} == SMALL
    asked = result["request"]   # the validated request, as the trace records it
    assert asked["prompt"] == "Write a haiku about trees" and asked["methods"] == ["ar", "sequoia", "lookahead"]
    assert {k: asked[k] for k in SMALL} == SMALL and asked["temperature"] == 0.0


def test_api_race_result_names_each_methods_text_speed_and_verdict(api_result):
    result, _ = api_result
    methods = result["methods"]
    assert set(methods) == {"ar", "sequoia", "lookahead"}
    for name, method in methods.items():
        assert METHOD_FIELDS <= set(method), name
        assert method["error"] is None, method["error"]
        assert method["tokens"] == len(method["token_ids"]) > 0
        assert method["tokens_per_second"] > 0 and method["tokens_per_forward"] >= 1
        assert method["speedup"] > 0
    ar = methods["ar"]
    assert ar["identical_to_ar"] is True and ar["speedup"] == 1.0 and ar["tokens_per_forward"] == 1.0
    # Accepted length counts the target's own token: autoregressive's is 1, a speculative method's at least that.
    assert ar["accepted_length"] == 1.0 and all(m["accepted_length"] >= 1.0 for m in methods.values())
    # Greedy fp32: token for token what autoregressive wrote, and said so.
    for name in ("sequoia", "lookahead"):
        assert methods[name]["token_ids"] == ar["token_ids"], name
        assert methods[name]["text"] == ar["text"], name
        assert methods[name]["identical_to_ar"] is True, methods[name]["verdict"]
    assert result["dtype"] == "fp32" and result["cancelled"] is False


def test_api_races_a_method_outside_the_default_race_when_named():
    """Prompt lookup is registered but not raced by default: named, it races, by its page name or its id."""
    from specviz.ui import build_demo

    with served(build_demo(defaults=SMALL)) as url:
        client = gradio_client.Client(url, verbose=False)
        result = client.predict("Repeat twice: one two three four.", methods=["Autoregressive", "Prompt lookup"],
                                max_new_tokens=16, api_name="/race")
        by_id = client.predict("Repeat twice: one two three four.", methods=["ar", "prompt-lookup"],
                               max_new_tokens=16, api_name="/race")
    methods = result["methods"]
    assert list(methods) == ["ar", "prompt-lookup"] == list(by_id["methods"])
    assert methods["prompt-lookup"]["token_ids"] == methods["ar"]["token_ids"]
    assert methods["prompt-lookup"]["identical_to_ar"] is True and methods["prompt-lookup"]["error"] is None
    assert methods["prompt-lookup"]["tokens_per_forward"] >= 1


def test_api_race_trace_is_a_downloaded_file_that_replays(api_result):
    from specviz.trace import RaceTrace

    result, _ = api_result
    raw = open(result["trace"], encoding="utf-8").read()   # gradio_client downloaded the served file
    trace = RaceTrace.from_json(raw)
    assert trace.request == result["request"]
    for name, method in result["methods"].items():
        assert trace.runs[name].token_ids == method["token_ids"]
        assert trace.runs[name].text == method["text"]
    assert trace.options["sequoia"] == {"tree_budget": 8, "tree_depth": 3}


def test_api_and_page_take_the_same_ranges(client):
    """The page's sliders end where the request's ranges end, and the API refuses just past them."""
    from specviz.request import RANGES
    from specviz.ui import build_demo

    demo = build_demo(worker=False)
    sliders = {c.elem_id: c for c in demo.blocks.values() if isinstance(c, gr.Slider) and c.elem_id}
    assert (sliders["sv-temperature"].minimum, sliders["sv-temperature"].maximum) == (
        RANGES["temperature"].lo, RANGES["temperature"].hi)
    assert (sliders["sv-max-new"].minimum, sliders["sv-max-new"].maximum) == (
        RANGES["max_new_tokens"].lo, RANGES["max_new_tokens"].hi)
    top_p = next(c for c in demo.blocks.values() if isinstance(c, gr.Slider) and c.label == "Top-p")
    assert (top_p.minimum, top_p.maximum) == (RANGES["top_p"].lo, RANGES["top_p"].hi)
    manual = {"tree": "manual", "lookahead": "manual"}
    for name, r in RANGES.items():
        step = 1 if r.whole else 0.01
        for value in (r.lo - step, r.hi + step):
            with pytest.raises(Exception, match=re.escape(f"{r.label} must be between")) as info:
                client.predict(PROMPT, **{**manual, name: value}, api_name="/race")
            assert "Traceback" not in str(info.value)


def test_api_refuses_unknown_choices_with_the_choices(client):
    with pytest.raises(Exception, match="unknown tree 'huge'; choose from auto, illustrative, manual, adaptive"):
        client.predict(PROMPT, tree="huge", api_name="/race")
    with pytest.raises(Exception, match="unknown method 'Medusa'"):
        client.predict(PROMPT, methods=["Medusa"], api_name="/race")


def api_doc() -> str:
    from pathlib import Path

    return (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text(encoding="utf-8")


def test_api_doc_lists_every_parameter_with_its_default_and_range():
    from specviz.request import RANGES, RaceRequest

    section = api_doc().split("\n## Parameters\n", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| (.+?) \|", section, re.M))
    defaults = RaceRequest().to_dict()
    for name in RaceRequest.names():
        assert name in rows, f"docs/api.md does not list {name}"
        if name == "prompt":
            continue
        shown = json.dumps(defaults[name]) if not isinstance(defaults[name], float) else repr(defaults[name])
        assert rows[name] == f"`{shown}`", (name, rows[name], shown)
    for name, r in RANGES.items():
        lo, hi = (str(int(v)) if r.whole else f"{v:g}" for v in (r.lo, r.hi))
        line = next(line for line in section.splitlines() if line.startswith(f"| `{name}` |"))
        assert f"{lo} to {hi}" in line, (name, line)


def test_api_doc_example_runs_against_the_app():
    from specviz.ui import build_demo

    code = re.findall(r"```python\n(.*?)```", api_doc(), re.S)[0]
    with served(build_demo(defaults=SMALL)) as url:
        namespace: dict = {}
        exec(compile(code.replace("http://127.0.0.1:7860/", url), "docs/api.md", "exec"), namespace)
    result = namespace["result"]
    assert set(result["methods"]) == {"ar", "sequoia", "lookahead"}
    assert all(run["identical_to_ar"] is True for run in result["methods"].values())
