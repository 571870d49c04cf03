"""Hosting limits from the environment: tight on a Space, open locally, always explicit when set."""

import pytest

from specviz.errors import InvalidInput
from specviz.hosting import HostingLimits
from specviz.request import RaceRequest


def test_local_defaults_allow_any_model():
    limits = HostingLimits.from_env({})
    assert not limits.hosted and limits.allow_custom_models
    limits.check_model("someone/any-model")


def test_space_defaults_restrict_models_and_caps():
    limits = HostingLimits.from_env({"SPACE_ID": "org/specviz"})
    assert limits.hosted and not limits.allow_custom_models
    limits.check_model("default")
    limits.check_model("Qwen/Qwen2.5-0.5B-Instruct")
    with pytest.raises(InvalidInput, match="not available here"):
        limits.check_model("evil/remote-code-model")
    # The cap is the race request's (`RaceRequest.validated`), as every race is checked.
    with pytest.raises(InvalidInput, match="256"):
        RaceRequest(prompt="Hello", max_new_tokens=1000).validated(limits)
    assert RaceRequest(prompt="Hello", max_new_tokens=256).validated(limits).max_new_tokens == 256


def test_explicit_settings_win():
    limits = HostingLimits.from_env({"SPECVIZ_HOSTED": "1", "SPECVIZ_ALLOWED_MODELS": "default, my/model",
                                     "SPECVIZ_MAX_NEW_TOKENS": "64", "SPECVIZ_QUEUE_SIZE": "3"})
    assert limits.allowed_models == ("default", "my/model")
    assert limits.max_new_tokens == 64 and limits.queue_size == 3
    limits.check_model("my/model")
    with pytest.raises(InvalidInput):
        limits.check_model("HuggingFaceTB/SmolLM2-1.7B-Instruct")


def test_bad_environment_value_is_named():
    with pytest.raises(InvalidInput, match="SPECVIZ_MAX_NEW_TOKENS"):
        HostingLimits.from_env({"SPECVIZ_MAX_NEW_TOKENS": "lots"})


def test_zerogpu_call_outlasts_the_race_it_runs():
    # ZeroGPU's own default (60 s) would cut a hosted race (120 s) mid-way without its tokens.
    from specviz.hosting import ZEROGPU_SETUP_S, zerogpu_duration

    assert zerogpu_duration({}) == 120
    assert zerogpu_duration({"SPECVIZ_ZEROGPU_DURATION": "90"}) == 90
    with pytest.raises(InvalidInput, match="SPECVIZ_ZEROGPU_DURATION"):
        zerogpu_duration({"SPECVIZ_ZEROGPU_DURATION": "a while"})
    hosted = HostingLimits.from_env({"SPACE_ID": "org/specviz"})
    assert hosted.within_gpu_call(120).max_run_seconds == 120 - ZEROGPU_SETUP_S
    assert hosted.within_gpu_call(600).max_run_seconds == hosted.max_run_seconds   # never loosens
    assert hosted.within_gpu_call(30).max_run_seconds == 30 - ZEROGPU_SETUP_S
    assert hosted.within_gpu_call(12).max_run_seconds == 6                         # half, never <= 0


class StandInSpaces:
    """The `spaces` package as app.py meets it on a Space: `spaces.GPU(duration=...)` a decorator.
    It records what it is asked and runs the function here (on the CPU), each call in the caller's
    thread as ZeroGPU runs each in a GPU worker of its own, counting the calls in flight (`calls`,
    `peak`). `refusal`, when set, is raised instead of running a call, as ZeroGPU raises a spent quota."""

    def __init__(self):
        import threading

        self.durations, self.wrapped = [], []
        self.lock = threading.Lock()
        self.calls = self.in_flight = self.peak = 0
        self.refusal: Exception | None = None

    def GPU(self, fn=None, *, duration=60):
        self.durations.append(duration)

        def decorate(generator_function):
            self.wrapped.append(generator_function)

            def call(*args, **kwargs):
                if self.refusal is not None:
                    raise self.refusal
                with self.lock:
                    self.calls += 1
                    self.in_flight += 1
                    self.peak = max(self.peak, self.in_flight)
                try:
                    yield from generator_function(*args, **kwargs)
                finally:
                    with self.lock:
                        self.in_flight -= 1
            return call
        return decorate


def run_app(monkeypatch, env: dict) -> tuple:
    """app.py run as a Space runs it, with a stand-in `spaces` importable and `env` set."""
    import runpy
    import sys
    import types
    from pathlib import Path

    spaces = StandInSpaces()
    monkeypatch.setitem(sys.modules, "spaces", types.SimpleNamespace(GPU=spaces.GPU))
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    app = Path(__file__).resolve().parent.parent / "app.py"
    return runpy.run_path(str(app), run_name="app_on_a_space")["demo"], spaces


def test_a_space_without_zerogpu_keeps_the_ordinary_path(monkeypatch):
    # Every Gradio Space can import `spaces` (a T4, a CPU Space): only SPACES_ZERO_GPU switches it on.
    demo, spaces = run_app(monkeypatch, {"SPACE_ID": "org/specviz"})
    try:
        assert spaces.durations == [] and spaces.wrapped == []
        assert demo.specviz_worker_slot is not None   # the decoding worker process, as locally
        assert demo.specviz_pairs.pairs == {}         # nothing loaded before a race asks
    finally:
        demo.close()


def test_zerogpu_preloads_the_pairs_and_asks_per_race(monkeypatch):
    from gradio_client import Client

    from helpers import served
    from specviz.hosting import ZEROGPU_SETUP_S, HostingLimits
    from specviz.request import RaceRequest

    served_models = "default,feature,independent"
    # The race's clock counts from the call (preparing the decoders included, as ZeroGPU's duration does): on
    # this CPU standing in for the GPU, a step costs a CPU's forward, so the seconds asked for must say so.
    monkeypatch.setattr("specviz.hosting.GPU_FORWARD_MS", 150.0)
    demo, spaces = run_app(monkeypatch, {"SPACE_ID": "org/specviz", "SPACES_ZERO_GPU": "true",
                                         "SPECVIZ_ALLOWED_MODELS": served_models, "SPECVIZ_ZEROGPU_DURATION": "110"})
    try:
        assert len(spaces.wrapped) == 1 and demo.specviz_worker_slot is None   # no worker under ZeroGPU
        # Every preset pair this Space serves is loaded before the first visitor, onto the GPU where there is one.
        assert {(t, d) for t, d, _ in demo.specviz_pairs.pairs} == {
            ("default", None), ("default", "feature"), ("default", "independent")}
        # ZeroGPU calls the duration with the generator's arguments: each race asks for its own seconds.
        duration = spaces.durations[0]
        limits = HostingLimits.from_env()
        small = duration(None, RaceRequest(prompt="Hi", methods=("ar",), max_new_tokens=16).validated(limits))
        large = duration(None, RaceRequest(prompt="Hi", max_new_tokens=256).validated(limits))
        assert ZEROGPU_SETUP_S < small < large <= 110
        with served(demo) as url:   # a race through /race uses the preloaded pair and loads nothing more
            result = Client(url, verbose=False).predict(
                "Write a haiku about trees", max_new_tokens=8, tree="manual", tree_budget=6, tree_depth=3,
                lookahead="manual", window=3, ngram=3, guesses=3, api_name="/race")
        assert all(run["tokens"] == 8 and run["error"] is None for run in result["methods"].values()), {m: (r["tokens"], r["error"], r["finish_reason"]) for m, r in result["methods"].items()}
        assert len(demo.specviz_pairs.pairs) == 3
        # Graphs: ZeroGPU's policy decides only on a GPU; on this CPU `auto` captures nothing.
        assert result["graphs"] == "graphs: off" and result["request"]["graphs"] == "auto"
        assert all(not run["graphs"]["capturing"] and run["graphs"]["replays"] == 0
                   for run in result["methods"].values())
    finally:
        demo.close()


@pytest.mark.parametrize("capability, dtype", [((7, 5), "fp16"), ((8, 0), "bf16"), ((9, 0), "bf16"),
                                               ((12, 0), "bf16")])
def test_auto_precision_on_a_gpu_follows_its_compute_capability(capability, dtype):
    # A T4 (sm_75) reports bf16 as supported through emulation, which is slow: fp16 there.
    from specviz.engine.models import cuda_auto_dtype
    from specviz.engine.profiler import dtype_name

    assert dtype_name(cuda_auto_dtype(capability)) == dtype


def test_zerogpu_is_detected_by_its_own_switch_only():
    from specviz.hosting import on_zerogpu

    assert not on_zerogpu({}) and not on_zerogpu({"SPACE_ID": "org/specviz"})   # a T4 or CPU Space
    assert on_zerogpu({"SPACES_ZERO_GPU": "true"}) and on_zerogpu({"SPACES_ZERO_GPU": "1"})
    assert not on_zerogpu({"SPACES_ZERO_GPU": "false"})


def test_a_race_asks_zerogpu_for_what_it_needs():
    from specviz.hosting import ZEROGPU_SETUP_S, ZEROGPU_SIZING_S, zerogpu_race_seconds

    three = ["ar", "sequoia", "lookahead"]
    default_race = zerogpu_race_seconds(three, 96)
    first_auto_race = zerogpu_race_seconds(three, 96, sizing=True)
    assert default_race < 30 and first_auto_race == default_race + ZEROGPU_SIZING_S
    # More tokens, more methods or a slower GPU ask for more; the cap always holds.
    assert zerogpu_race_seconds(["ar"], 96) < default_race < zerogpu_race_seconds(three, 256)
    assert zerogpu_race_seconds(three, 96, forward_ms=40) > default_race
    assert zerogpu_race_seconds(three, 1024, forward_ms=100, cap=90) == 90
    assert zerogpu_race_seconds(["ar"], 1) > ZEROGPU_SETUP_S   # the setup and a margin, never less
    # A visitor who is not logged in (2 minutes a day) can run several default races.
    assert 120 // default_race >= 4


def test_races_run_in_parallel_only_where_each_gets_a_device():
    from specviz.hosting import ZEROGPU_CONCURRENCY

    for env in ({}, {"SPACE_ID": "org/specviz"}):   # locally, a T4 or a CPU Space: one device, one race
        assert HostingLimits.from_env(env).race_concurrency == 1
    zero = HostingLimits.from_env({"SPACE_ID": "org/specviz", "SPACES_ZERO_GPU": "true"})
    assert zero.race_concurrency == ZEROGPU_CONCURRENCY >= 4 and zero.queue_size >= 40
    assert zero.shared_device_note() == ""   # each race on a GPU of its own: speeds compare
    raised = HostingLimits.from_env({"SPECVIZ_CONCURRENCY": "3"})
    assert raised.race_concurrency == 3 and "speeds are shared" in raised.shared_device_note()
    with pytest.raises(InvalidInput, match="SPECVIZ_CONCURRENCY"):
        HostingLimits.from_env({"SPECVIZ_CONCURRENCY": "0"})


def test_zerogpu_refusals_read_as_advice():
    import gradio as gr

    from specviz.ui.racing import zerogpu_refusal

    # The errors `spaces` 0.51 raises (spaces/zero/client.py), title and message as it builds them.
    spent = zerogpu_refusal(gr.Error("You have exceeded your free ZeroGPU quota (18s requested vs. 4s left). "
                                     "Try again in 5:12:00. ", title="ZeroGPU quota exceeded"))
    assert "Log in to Hugging Face" in spent and "tomorrow" in spent and "Try again in 5:12:00" in spent
    busy = zerogpu_refusal(gr.Error('No GPU was available after 60s. <a href="/login">Sign in</a>',
                                    title="ZeroGPU queue timeout"))
    assert "try again" in busy and "<a" not in busy
    assert zerogpu_refusal(gr.Error("something else")) is None and zerogpu_refusal(RuntimeError("x")) is None
