"""A public server (issue 66): no client holds the room, every race ends, and public means public.

Tried as a hostile visitor would: rotating Gradio session hashes from one address, a client that joins
`/race` and disconnects, a step that hangs in the worker, Stop across ZeroGPU's process boundary.
"""

from __future__ import annotations

import contextlib
import pickle
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from helpers import served, slow_steps
from specviz.request import RaceRequest

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "Write a Python function that reverses a string."


def settings(max_new=200, **overrides) -> dict:
    """The race's 19 settings as the page's inputs send them: autoregressive only, fp32."""
    from specviz.ui.layout import METHOD_NAMES

    values = {**RaceRequest(prompt=PROMPT, dtype="fp32", max_new_tokens=max_new).to_dict(),
              "methods": [METHOD_NAMES["ar"]], **overrides}
    return {name: values[name] for name in RaceRequest.names()}


def wait_for(condition, seconds=30.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return condition()


def join(base: str, demo, api_name: str, session: str, headers=None) -> httpx.Response:
    fn_index = next(i for i, fn in demo.fns.items() if fn.api_name == api_name)
    return httpx.post(f"{base}/queue/join", headers=headers or {}, timeout=30, json={
        "data": list(settings().values()), "fn_index": fn_index, "session_hash": session,
        "event_data": None, "trigger_id": None})


def leave(base: str, session: str) -> None:
    """Open the session's event stream and drop it, as a closed tab does: Gradio lets go of its events."""
    with contextlib.suppress(httpx.HTTPError):
        with httpx.stream("GET", f"{base}/queue/data", params={"session_hash": session}, timeout=10) as stream:
            next(stream.iter_lines(), None)


@contextlib.contextmanager
def app(monkeypatch, **env):
    """The real app, decoding in this process (the tests slow its steps here), under `env`."""
    from specviz.ui import build_demo

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    demo = build_demo(worker=False)
    with served(demo) as url:
        yield f"{url}gradio_api", demo


# ----------------------------------------------------------------------------- places in the queue


def test_rotating_session_hashes_cannot_take_every_place(monkeypatch):
    """One address sending a new session hash with every join holds at most its places; a logged-out
    visitor's address is what counts, and the message is SpecViz's."""
    slow_steps(monkeypatch)
    sessions = [f"rotating-{i}" for i in range(5)]
    with app(monkeypatch, SPECVIZ_HOSTED="1", SPECVIZ_PLACES_PER_ADDRESS="2", SPECVIZ_QUEUE_SIZE="10") as (base, demo):
        try:
            answers = [join(base, demo, "race_stream", s) for s in sessions]
            codes = [a.status_code for a in answers]
            assert codes[:2] == [200, 200], [a.text for a in answers]
            assert codes[2:] == [503, 503, 503], codes
            assert "at most 2 queued or running races for your network address" in answers[2].text
            # /race shares the queue: the same address is full there too
            api = join(base, demo, "race", "rotating-api")
            assert api.status_code == 503 and "at most 2" in api.text
        finally:
            for s in sessions:
                leave(base, s)
        # the places come back once Gradio lets go of the events
        assert wait_for(lambda: join(base, demo, "race_stream", "after").status_code == 200, 30)
        leave(base, "after")


def test_without_the_guard_rotating_hashes_fill_the_queue(monkeypatch):
    """The negative control: a local server (no per-client places) admits every rotated hash."""
    slow_steps(monkeypatch)
    sessions = [f"local-{i}" for i in range(4)]
    with app(monkeypatch, SPECVIZ_HOSTED="0") as (base, demo):
        try:
            assert [join(base, demo, "race_stream", s).status_code for s in sessions] == [200] * 4
        finally:
            for s in sessions:
                leave(base, s)


def test_the_address_behind_a_trusted_proxy_is_the_one_it_saw():
    """X-Forwarded-For entries the client wrote itself (left of the proxy's) are not believed."""
    from specviz.ui.places import client_key

    class Peer:
        host = "10.0.0.9"   # the proxy

    spoofed = {"x-forwarded-for": "1.2.3.4, 203.0.113.7"}
    assert client_key(None, spoofed, Peer, trusted_proxies=1) == "addr:203.0.113.7"
    assert client_key(None, {"x-forwarded-for": "1.2.3.4, 5.6.7.8, 203.0.113.7"}, Peer, 1) == "addr:203.0.113.7"
    assert client_key(None, spoofed, Peer, trusted_proxies=0) == "addr:10.0.0.9"   # no proxy trusted: the peer
    assert client_key("alice", spoofed, Peer, trusted_proxies=1) == "user:alice"


def test_a_hosted_server_exempts_no_call_without_a_session():
    """Locally a script calling the handler itself is not counted; hosted, "local" is one visitor."""
    from specviz.hosting import HostingLimits
    from specviz.ui.handlers import PageHandlers

    class FakeRacer:
        pairs = None

        def __init__(self, hosted):
            self.limits = HostingLimits(hosted=hosted)

    local = PageHandlers(page=type("P", (), {"race_outputs": None})(), racer=FakeRacer(False), presets=[])
    assert local.begin_race("local") and local.begin_race("local")
    hosted = PageHandlers(page=type("P", (), {"race_outputs": None})(), racer=FakeRacer(True), presets=[])
    assert hosted.begin_race("local") and not hosted.begin_race("local")


# ----------------------------------------------------------------------------- every race ends


def test_a_disconnected_race_api_client_cancels_its_race(monkeypatch, closed_races):
    """`/race` is a plain function, which Gradio does not stop when its client leaves: the race asks."""
    slow_steps(monkeypatch)
    with app(monkeypatch) as (base, demo):
        assert join(base, demo, "race", "leaving-client").status_code == 200
        started = False
        with httpx.stream("GET", f"{base}/queue/data", params={"session_hash": "leaving-client"},
                          timeout=60) as stream:
            for line in stream.iter_lines():
                if '"process_starts"' in line:
                    started = True
                    break
        assert started
        assert wait_for(lambda: bool(closed_races), 30), "the race of a client that left was never closed"
        race = closed_races[-1]
        assert race.cancelled and len(race.trace.runs["ar"].token_ids) < 200


def test_the_deadline_counts_the_load_too(pair_fp32):
    """The run's clock starts before the models load: a load that takes the whole limit leaves no steps."""
    from specviz.runtime.race import race_events

    class SlowPairs:
        device = None

        def get(self, *args):
            time.sleep(1.5)
            return pair_fp32

        def loaded(self, *args):
            return pair_fp32

    request = RaceRequest(prompt=PROMPT, methods=("ar",), dtype="fp32", max_new_tokens=50).validated()
    events = list(race_events(SlowPairs(), request, max_run_seconds=1.0))
    assert any(e[0] == "status" and "time limit" in e[1] for e in events)
    assert events[-1][0] == "end" and events[-1][1].runs["ar"].token_ids == []


def test_a_worker_whose_step_hangs_is_killed_and_replaced(monkeypatch):
    """A step that never returns holds the real worker; the app ends the race at its deadline plus the
    grace, says why, kills that worker, and the next race gets a new one."""
    from specviz.runtime.worker import RaceWorker, WorkerSlot, WorkerUnavailable
    from specviz.hosting import HostingLimits
    from specviz.ui.racing import RaceControl, Racer

    monkeypatch.setenv("SPECVIZ_TEST_HANG_AFTER", "2")   # the worker inherits the app's environment

    def hanging_worker():
        return RaceWorker(command=[sys.executable, str(ROOT / "tests" / "hanging_worker.py")])

    slot = WorkerSlot(hanging_worker)
    limits = HostingLimits(max_run_seconds=12.0, worker_grace_s=3.0)
    racer = Racer(pairs=None, limits=limits, slot=slot, compute=None)
    request = RaceRequest(prompt=PROMPT, methods=("ar",), dtype="fp32", max_new_tokens=50).validated()
    try:
        first = slot.get()
        start = time.monotonic()
        seen = []
        with pytest.raises(WorkerUnavailable, match="did not end within its time limit"):
            for event in racer.events(request, RaceControl()):
                seen.append(event)
        took = time.monotonic() - start
        assert took < limits.max_run_seconds + limits.worker_grace_s + 10, took
        steps = [e for e in seen if e[0] == "trace"]
        assert steps and len(steps[-1][1].runs["ar"].steps) == 2   # the race so far reached the app
        assert first.proc.poll() is not None, "the hung worker is still running"
        second = slot.get()
        assert second is not None and second.pid != first.pid and second.alive
    finally:
        slot.close()


# ----------------------------------------------------------------------------- Stop on ZeroGPU


def test_stop_reaches_a_race_across_a_process_boundary():
    """ZeroGPU pickles the race's arguments into another process: the control's stop flag must cross it."""
    from specviz.ui.racing import RaceControl

    control = RaceControl()
    waiter = subprocess.Popen(
        [sys.executable, "-c", "import pickle, sys, time\n"
                               "control = pickle.loads(sys.stdin.buffer.read())\n"
                               "deadline = time.monotonic() + 20\n"
                               "while not control.stop.is_set() and time.monotonic() < deadline:\n"
                               "    time.sleep(0.05)\n"
                               "sys.exit(0 if control.stop.is_set() else 3)\n"],
        stdin=subprocess.PIPE, cwd=ROOT)
    waiter.stdin.write(pickle.dumps(control))
    waiter.stdin.close()
    time.sleep(0.5)
    assert waiter.poll() is None, "the other process saw a stop before Stop was pressed"
    control.close()
    assert waiter.wait(20) == 0
    control.release()


def test_stop_ends_a_race_run_behind_a_gpu_wrapper(monkeypatch, closed_races):
    """The page's Stop on an app whose race runs under a `gpu` wrapper that pickles its arguments, as
    `spaces.GPU` does: the race ends early."""
    import gradio_client

    from specviz.ui import build_demo

    def gpu(compute):
        def on_the_gpu(control, request):
            yield from compute(*pickle.loads(pickle.dumps((control, request))))
        return on_the_gpu

    slow_steps(monkeypatch)
    demo = build_demo(gpu=gpu)
    with served(demo) as url:
        client = gradio_client.Client(url, verbose=False)
        job = client.submit(**settings(), api_name="/race_stream")
        assert wait_for(lambda: len(job.outputs()) >= 3, 60), "the race never streamed"
        client.predict(None, api_name="/stop")
        assert wait_for(lambda: bool(closed_races), 30), "Stop never reached the race"
        assert closed_races[-1].cancelled and len(closed_races[-1].trace.runs["ar"].token_ids) < 200


# ----------------------------------------------------------------------------- public means public


@pytest.mark.parametrize("host, share, env, hosted", [
    ("127.0.0.1", False, {}, False),
    ("localhost", False, {}, False),
    ("0.0.0.0", False, {}, True),
    ("192.168.1.20", False, {}, True),
    ("127.0.0.1", True, {}, True),                           # a --share link is public
    ("0.0.0.0", False, {"SPECVIZ_HOSTED": "0"}, False),      # the operator opts out by name
    ("127.0.0.1", False, {"SPECVIZ_HOSTED": "1"}, True),
    ("127.0.0.1", False, {"SPACE_ID": "me/space"}, True),
])
def test_a_public_server_runs_the_hosted_limits(host, share, env, hosted):
    from specviz.hosting import HostingLimits
    from specviz.serve import choose_hosted

    env = dict(env)
    assert choose_hosted(host, share, None, env) is hosted
    limits = HostingLimits.from_env(env)
    assert limits.hosted is hosted
    assert (limits.places_per_address is not None) is hosted
    assert limits.max_run_seconds == (120.0 if hosted else 900.0)


def test_the_app_command_turns_the_limits_on_or_off_by_name():
    from specviz import cli
    from specviz.serve import choose_hosted

    parser = cli.build_parser()
    public = parser.parse_args(["app", "--host", "0.0.0.0"])
    opted_out = parser.parse_args(["app", "--host", "0.0.0.0", "--local-limits"])
    assert not public.local_limits and opted_out.local_limits
    assert choose_hosted(public.host, public.share, None, {}) is True
    on_a_space = {"SPACE_ID": "me/space"}   # an operator's explicit word wins even over a Space
    assert choose_hosted(opted_out.host, opted_out.share, False, on_a_space) is False
    assert on_a_space["SPECVIZ_HOSTED"] == "0"
