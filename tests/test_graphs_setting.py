"""The graphs setting wherever a user or the sizing touches it: the command line, `make_decoder`, the race
request and the race, the profiler's graphed t(n), the bench's records, and ZeroGPU's policy.

No GPU here: graphs "on" on a CPU runs the static-buffer step eagerly (what the runner falls back to), so
these tests check that the setting arrives and is recorded; the GPU run is `gpu_check.sh --only graphs`.
"""

import json

import pytest
from helpers import tiny_pair

from specviz.cli import build_parser, main
from specviz.cliargs import graphs_from_args
from specviz.engine import graphs as graph_modes
from specviz.engine.graphs import GRAPH_MODES
from specviz.engine.methods import make_decoder
from specviz.runtime.race import graphs_reason, graphs_words, race_events, start_race
from specviz.errors import InvalidInput
from specviz.hosting import (
    GRAPH_SHAPES,
    GraphsDecision,
    graphs_captured,
    zerogpu_graphs,
    zerogpu_race_seconds,
)
from specviz.request import GRAPHS_MODES, RaceRequest

# -- the command line -----------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["generate", "--prompt", "hi"], ["bench", "--suite", "chat"],
                                     ["optimize-tree"], ["optimize-lookahead"]])
def test_graphs_flag_parses_on_the_commands_that_build_or_size_decoders(command):
    parser = build_parser()
    assert graphs_from_args(parser.parse_args(command)) == "auto"
    assert graphs_from_args(parser.parse_args([*command, "--graphs", "off"])) == "off"


@pytest.mark.parametrize("command", [["generate", "--prompt", "hi"], ["bench", "--suite", "chat"]])
def test_a_bad_graphs_value_is_one_clear_line_before_any_model_loads(command, capsys):
    assert main([*command, "--graphs", "sometimes"]) == 2
    err = capsys.readouterr().err
    assert "graphs must be one of auto, on, off, got 'sometimes'" in err and "Traceback" not in err


# -- make_decoder ----------------------------------------------------------------------------------


def test_make_decoder_passes_graphs_to_every_method_and_rejects_bad_values():
    pair = tiny_pair(draft_seed=None)
    options = {"ar": {}, "sequoia": {"tree_parents": [-1, 0, 0, 1]},
               "lookahead": {"window": 2, "ngram": 2, "guesses": 1}}
    for method, opts in options.items():
        for mode in GRAPH_MODES:
            decoder = make_decoder(method, pair, "", prompt_ids=[1, 2, 3], max_new_tokens=3, graphs=mode, **opts)
            assert decoder.trace.settings["graphs"] == mode, (method, mode)
            decoder.close()
    with pytest.raises(InvalidInput, match="graphs must be one of auto, on, off"):
        make_decoder("ar", pair, "", prompt_ids=[1, 2], max_new_tokens=2, graphs="yes")


def test_ar_runs_its_one_static_step_on_a_cpu_whatever_the_graphs_setting():
    pair = tiny_pair(draft_seed=None)
    traces = {mode: make_decoder("ar", pair, "", prompt_ids=[1, 2, 3], max_new_tokens=5, graphs=mode).run()
              for mode in ("on", "off", "auto")}
    # One step whatever the setting: on a CPU it always runs over the static buffers, never captured.
    for trace in traces.values():
        assert trace.graphs["enabled"] and not trace.graphs["capturing"]
        assert trace.graphs["eager_calls"] > 0 and trace.graphs["replays"] == 0
    assert traces["on"].token_ids == traces["off"].token_ids == traces["auto"].token_ids


# -- the race request and the race -------------------------------------------------------------------


def test_race_request_carries_graphs_last_and_round_trips():
    assert RaceRequest.names()[-1] == "graphs" and len(RaceRequest.names()) == 19
    assert GRAPHS_MODES == GRAPH_MODES   # request.py spells them without importing torch
    assert RaceRequest().graphs == "auto"
    request = RaceRequest(graphs="on").validated()
    assert RaceRequest.from_dict(json.loads(json.dumps(request.to_dict()))).graphs == "on"
    assert RaceRequest.from_values(graphs="off").graphs == "off"
    assert RaceRequest(graphs="").validated().graphs == "auto"
    with pytest.raises(InvalidInput, match="unknown graphs 'fast'; choose from auto, on, off"):
        RaceRequest(graphs="fast").validated()
    # The sizes each method gets are untouched by graphs (the race passes graphs on its own).
    assert RaceRequest(graphs="on").method_options() == RaceRequest().method_options()


def test_start_race_gives_every_decoder_graphs_and_records_why():
    pair = tiny_pair(draft_seed=None)
    options = {"sequoia": {"tree_budget": 3, "tree_depth": 2}, "lookahead": {"window": 2, "ngram": 2, "guesses": 1}}
    with start_race(pair, "t1 t2 t3", ["ar", "sequoia", "lookahead"], max_new_tokens=3, options=options,
                    graphs="on") as race:
        trace = race.run()
    for method, run in trace.runs.items():
        assert run.error is None, run.error
        assert run.settings["graphs"] == "on"
        assert run.settings["graphs_reason"] == graphs_reason("on", "cpu")
    with pytest.raises(InvalidInput, match="graphs must be one of"):
        start_race(pair, "t1", ["ar"], graphs="maybe")


class _OnePair:
    """The pair cache a race asks for its models: one tiny pair whatever the request names."""

    def __init__(self, pair):
        self.pair = pair

    def get(self, target, draft, dtype):
        return self.pair


def test_a_graphs_policy_decides_for_the_race_and_the_summary_says_why():
    from specviz.ui import html

    request = RaceRequest(prompt="t1 t2 t3", methods=("ar",), max_new_tokens=3, graphs="auto").validated()
    asked = []

    def policy(pair, req):
        asked.append(req.graphs)
        return zerogpu_graphs(req.graphs, req.methods, req.max_new_tokens)

    events = list(race_events(_OnePair(tiny_pair(draft_seed=None)), request, graphs_policy=policy))
    trace = events[-1][1]
    run = trace.runs["ar"]
    assert asked == ["auto"]
    assert run.settings["graphs"] == "off" and "costs more than replays would save" in run.settings["graphs_reason"]
    words = html.race_graphs_words(trace)
    assert words.startswith("graphs: off (auto on ZeroGPU:")
    assert html.esc(words) in html.summary_html(trace)


def test_graphs_words_name_the_path_each_run_took():
    replayed = {"enabled": True, "capturing": True, "shapes_captured": 2, "capture_ms": 130.4, "replays": 40,
                "eager_calls": 0, "reused": 1, "failed": []}
    static = {"enabled": True, "capturing": False, "shapes_captured": 0, "capture_ms": 0.0, "replays": 0,
              "eager_calls": 9, "reused": 0, "failed": []}
    off = {"enabled": False, "capturing": False, "shapes_captured": 0, "capture_ms": 0.0, "replays": 0,
           "eager_calls": 0, "reused": 0, "failed": []}
    assert graphs_words([replayed, off]) == "graphs: replayed (3 shapes, capture 130 ms, 1 reused)"
    assert graphs_words([static]) == "graphs: off"   # the static step ran, nothing was captured
    failed = {**static, "capturing": True, "failed": ["('target', 'one'): RuntimeError"]}
    assert graphs_words([failed, off]) == "graphs: static, eager (capture failed)"
    assert graphs_words([off, None]) == "graphs: off"
    assert graphs_words([]) == "graphs: off"


# -- the profiler ------------------------------------------------------------------------------------


def test_graphed_curve_runs_the_static_shapes_and_is_cached_apart(tmp_path, monkeypatch, one_thread):
    from specviz.engine.profiler import (
        _curve_key,
        cached_forward_curve,
        forward_curve,
        graphs_timing,
        load_cached,
        measure_forward_times,
        save_cached,
        static_forward_times,
    )

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    model = tiny_pair(draft_seed=None).target
    assert graphs_timing(model, True) and not graphs_timing(model, False)
    static = static_forward_times(model, [1, 2], context_len=8, repeats=1, warmup=1)
    assert set(static) == {1, 2} and all(ms > 0 for ms in static.values())
    assert set(measure_forward_times(model, [1, 2], context_len=8, repeats=1, warmup=1, graphs=True)) == {1, 2}
    graphed_key, eager_key = _curve_key(model, "tiny:target", 8, graphs=True), _curve_key(model, "tiny:target", 8)
    assert graphed_key == eager_key + "-static"   # a CPU's eager run of the static shapes; "-graphs" on CUDA
    save_cached("forward", graphed_key, {"ms": {"1": 1.5, "2": 1.75}})
    assert cached_forward_curve(model, "tiny:target", sizes=[1, 2], context_len=8, graphs=True) == {1: 1.5, 2: 1.75}
    # Negative control: the eager curve is another entry, never the graphed one.
    assert cached_forward_curve(model, "tiny:target", sizes=[1, 2], context_len=8) is None
    graphed = forward_curve(model, "tiny:target", sizes=[1, 2], context_len=8, graphs=True, refresh=True)
    assert set(graphed) == {1, 2}
    saved = load_cached("forward", graphed_key)   # what forward_curve wrote (less the machine it was measured on)
    assert saved.get("graphs") is True or saved["ms"] == {"1": 1.5, "2": 1.75}   # kept only from quiet cores


def test_a_draft_with_its_own_forward_keeps_the_eager_curve_under_graphs():
    from helpers import tiny_feature_pair

    from specviz.engine.profiler import _curve_key, graphs_timing

    draft = tiny_feature_pair().draft
    assert not graphs_timing(draft, True)
    assert _curve_key(draft, "k", 8, graphs=True) == _curve_key(draft, "k", 8)


def test_causal_shape_gives_the_eager_forwards_logits():
    """What the graphed t(n) times is a real forward: the static causal shape equals the lean forward."""
    import torch

    from specviz.engine.profiler import causal_shape_spec
    from specviz.engine.static import GraphSession

    model = tiny_pair(draft_seed=None).target
    context, new = torch.tensor([[1, 2, 3, 4]]), torch.tensor([[5, 1, 2]])
    with torch.inference_mode():
        session = GraphSession(torch.device("cpu"), capture=False, capacity=256)
        forward = session.forward("timing", model)
        forward.prefill(context)
        static = forward.shape(("causal", 3), **causal_shape_spec(3))(new, 4)
        static = (static[0] if isinstance(static, tuple) else static).reshape(3, -1)
        eager = model(torch.cat([context, new], 1)).logits[0, 4:]
    torch.testing.assert_close(static.float(), eager.float(), rtol=1e-4, atol=1e-4)


# -- the bench ---------------------------------------------------------------------------------------


def test_bench_records_graphs_and_keeps_capture_out_of_tokens_per_second():
    from specviz.benchmark import runner
    from specviz.engine.sampling import SamplingConfig

    pair = tiny_pair(draft_seed=None)
    prompts = [{"id": "a", "suite": "chat", "prompt": "t1 t2 t3"}]
    tables = {}
    for mode in ("on", "off"):
        records = runner.run_bench(pair, prompts, ["ar", "hf-static"], SamplingConfig(), 4, progress=lambda _: None,
                                   warmup_tokens=2, graphs=mode)
        ar = next(r for r in records if r.method == "ar")
        assert ar.graphs["enabled"] and not ar.graphs["capturing"] and ar.capture_ms == 0.0   # AR's one step
        assert ar.settings["graphs"] == mode and "warmup_capture_ms" in ar.settings
        assert next(r for r in records if r.method == "hf-static").graphs is None
        rows = {r["method"]: r for r in runner.summarise(records, ["ar", "hf-static"]) if r["suite"] == "all"}
        assert rows["ar"]["graphs"] == "static-eager"
        assert rows["ar"]["capture_ms"] == 0.0
        assert rows["hf-static"]["graphs"] == "-" and rows["hf-static"]["note"].startswith("uncompiled")
        tables[mode] = runner.format_table(list(rows.values()))
    assert "static-eager" in tables["on"] and "0 ms" in tables["on"] and "uncompiled" in tables["on"]
    assert "replayed" not in tables["on"] + tables["off"]   # a CPU captures nothing


def test_bench_report_shows_the_graphs_and_capture_columns():
    from specviz.benchmark.report import header, markdown_table

    row = {"suite": "all", "method": "ar", "tokens_per_second": 250.0, "tokens_per_second_q1": 240.0,
           "tokens_per_second_q3": 260.0, "speedup_vs_ar": 1.0, "speedup_q1": 1.0, "speedup_q3": 1.0,
           "tokens_per_forward": 1.0, "accepted_length": 1.0, "same_as_ar": "3/3", "graphs": "replayed",
           "capture_ms": 41.6}
    table = markdown_table([row])
    assert "| graphs | capture |" in table and "| replayed | 42 ms |" in table
    assert "capture is the capture column" in header({"graphs": "on"})


# -- ZeroGPU ------------------------------------------------------------------------------------------


def test_zerogpu_policy_captures_only_when_it_pays():
    short, long = zerogpu_graphs("auto", ["ar"], 4), zerogpu_graphs("auto", ["ar"], 96)
    # 1 shape x 3 forwards x 15 ms = 45 ms of capture; each token saves 15 - 4.2 ms.
    assert short.mode == "off" and short.capture_ms == 0.0 and "costs more" in short.reason
    assert long.mode == "on" and long.capture_ms == pytest.approx(45.0)
    assert long.saving_ms == pytest.approx(96 * 10.8)
    three = zerogpu_graphs("auto", ["ar", "sequoia", "lookahead"], 96)
    assert three.capture_ms == pytest.approx(sum(GRAPH_SHAPES[m] for m in ("ar", "sequoia", "lookahead")) * 45.0)
    assert three.mode == "on"
    assert zerogpu_graphs("auto", ["ar", "sequoia", "lookahead"], 12).mode == "off"
    assert zerogpu_graphs("auto", ["ar", "sequoia", "lookahead"], 13).mode == "on"


def test_zerogpu_policy_replays_what_a_reused_worker_captured_and_obeys_on_and_off():
    reused = zerogpu_graphs("auto", ["ar"], 1, captured=True)
    assert reused.mode == "on" and reused.capture_ms == 0.0 and "already captured" in reused.reason
    assert zerogpu_graphs("off", ["ar"], 500).mode == "off"
    forced = zerogpu_graphs("on", ["ar"], 1)
    assert forced.mode == "on" and forced.capture_ms > 0 and forced.reason == "graphs on: asked for"


def test_zerogpu_policy_uses_measured_costs():
    # A slow capture measured on this GPU (or replays hardly faster than eager) keeps a race eager.
    assert zerogpu_graphs("auto", ["ar"], 96, capture_ms_per_shape=5000).mode == "off"
    assert zerogpu_graphs("auto", ["ar"], 96, eager_ms=5.0, replay_ms=4.9).mode == "off"
    assert zerogpu_graphs("auto", ["ar"], 96, eager_ms=40.0, replay_ms=4.0).saving_ms == pytest.approx(96 * 36)


def test_zerogpu_seconds_count_the_capture_when_graphs_will_be_captured():
    methods = ["ar", "sequoia", "lookahead"]
    eager = zerogpu_race_seconds(methods, 96, graphs=GraphsDecision("off", "off"))
    assert eager == zerogpu_race_seconds(methods, 96)   # off: as before graphs
    slow_capture = GraphsDecision("on", "on", capture_ms=30_000.0, replay_ms=15.0)
    assert zerogpu_race_seconds(methods, 96, graphs=slow_capture) >= eager + 30
    replayed = GraphsDecision("on", "on", capture_ms=0.0, replay_ms=4.2)
    assert zerogpu_race_seconds(methods, 256, graphs=replayed) < zerogpu_race_seconds(methods, 256)


def test_graphs_captured_is_false_without_captured_sessions():
    from specviz.engine.static import checkout, release

    model = tiny_pair(draft_seed=None).target
    assert not graphs_captured(model, ["ar"])
    session = checkout(model, "ar", 256, capture=False)   # a CPU session: nothing to replay later
    session.forward("target", model)
    release(session)
    assert not graphs_captured(model, ["ar"]) and not graphs_captured(model, [])


# -- sizing from the graphed curves ------------------------------------------------------------------


def _save_curve(model, key: str, sizes, ms_of, graphs: bool) -> None:
    from specviz.engine.profiler import _curve_key, save_cached

    save_cached("forward", _curve_key(model, key, 200, graphs), {"ms": {str(n): ms_of(n) for n in sizes}})


def test_sequoia_sizing_reads_the_graphed_curves_when_the_decoder_runs_graphs(tmp_path, monkeypatch):
    from specviz.engine.profiler import SMALL_SIZES, curve_key, default_sizes
    from specviz.engine.sampling import SamplingConfig
    from specviz.sequoia.sizing import _costs_key, decoder_options

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    pair = tiny_pair()
    # Only graphed curves are cached: an adaptive tree weighs its levels against them when graphs run, and
    # falls back to the weights' ratio when they do not (negative control).
    _save_curve(pair.target, curve_key(pair, "target"), default_sizes(pair.device), lambda n: 4.0 + n / 64, True)
    _save_curve(pair.draft, curve_key(pair, "draft"), SMALL_SIZES, lambda n: 1.0 + n / 64, True)
    # A CPU never captures, whatever the mode: it sizes from the plain curves.
    on_a_cpu = decoder_options(pair, SamplingConfig(), graphs="on", tree="adaptive")["tree_choice"]
    eager = decoder_options(pair, SamplingConfig(), graphs="off", tree="adaptive")["tree_choice"]
    monkeypatch.setattr(graph_modes, "capture_wanted", lambda mode, device: mode != "off")   # as on a GPU
    graphed = decoder_options(pair, SamplingConfig(), graphs="on", tree="adaptive")["tree_choice"]
    auto = decoder_options(pair, SamplingConfig(), graphs="off", tree="adaptive")["tree_choice"]
    assert graphed.adaptive_costs["from"] == "measured" and graphed.settings["level_cost"] == pytest.approx(
        (1.0 + 1 / 64) / (4.0 + 1 / 64), abs=1e-3)
    assert eager.adaptive_costs["from"] == "weights" and auto.adaptive_costs["from"] == "weights"
    assert on_a_cpu.adaptive_costs["from"] == "weights"
    assert _costs_key(pair, SamplingConfig(), True) == _costs_key(pair, SamplingConfig()) + "|graphs"


def test_lookahead_auto_chooses_from_the_graphed_curve_when_the_decoder_runs_graphs(tmp_path, monkeypatch):
    from specviz.engine.profiler import curve_key, default_sizes
    from specviz.lookahead.sizing import resolve_settings

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    pair = tiny_pair(draft_seed=None)
    key, sizes = curve_key(pair, "target"), default_sizes(pair.device)   # the target's curve, Sequoia's too
    _save_curve(pair.target, key, sizes, lambda n: 10.0 * n, False)   # eager: every row costs a forward
    _save_curve(pair.target, key, sizes, lambda n: 4.0, True)         # replays: rows are free up to 64
    eager = resolve_settings(pair, graphs="on")   # a CPU never captures: the eager curve
    monkeypatch.setattr(graph_modes, "capture_wanted", lambda mode, device: mode != "off")   # as on a GPU
    graphed = resolve_settings(pair, graphs="on")
    assert eager[3] and graphed[3]   # both chosen automatically, each on its own curve
    assert graphed[3][64] == 4.0 and eager[3][64] == 640.0
    w, n, g = graphed[:3]
    assert (n - 1) * (w + g) > 4 and eager[2] == 0   # flat replays buy a wide window; the steep curve none
