"""The app decodes in a worker process (issue 12): used, cleaned up, replaced, and optional.

Real parts throughout: the app launched on 127.0.0.1 and driven by gradio_client,
the offline SmolLM2 in a real worker process. Checks that the race runs in a
child process and gives the same greedy text, that Stop and a closed tab end the
worker's race (it goes idle and serves the next one), that a killed worker is
reported clearly and replaced, that the app still works when the worker cannot
start, that the worker never outlives the app, and that no shared memory leaks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Required dependencies: a missing one fails collection loudly instead of skipping.
import gradio as gr  # noqa: E402,F401
import gradio_client  # noqa: E402
from specviz.methods import method_ids  # noqa: E402

from helpers import served  # noqa: E402

PROMPT = "Write a Python function that reverses a string."


def run_args(max_new=16, methods=("Autoregressive", "Sequoia", "Lookahead")):
    from specviz.ui.layout import DEFAULT_PRESET

    return dict(prompt=PROMPT, methods=list(methods), model=DEFAULT_PRESET, custom_target="", custom_draft="",
                dtype="fp32", max_new_tokens=max_new, temperature=0.0, top_p=1.0, seed=0, tree="manual",
                tree_budget=6, tree_depth=3, lookahead="manual", window=3, ngram=3, guesses=3,
                pool_from_prompt=True)


def texts(result) -> list[str]:
    import html
    import re

    start = len(method_ids())   # after the columns' headers, their texts: AR's, Sequoia's, Lookahead's
    return [html.unescape(re.sub(r"<[^>]+>", "", frag)) for frag in result[start:start + 3]]


def race_token_ids(result) -> dict[str, list[int]]:
    """Each method's token ids, read from the race's downloadable trace (the columns show only text)."""
    from specviz.trace import RaceTrace

    files = [r for r in result if isinstance(r, str) and r.endswith(".json") and os.path.isfile(r)]
    assert len(files) == 1, f"no single trace file among the race's outputs: {files}"
    trace = RaceTrace.from_json(Path(files[0]).read_text())
    return {method: run.token_ids for method, run in trace.runs.items()}


def assert_identical_greedy(result) -> None:
    """Greedy fp32: Sequoia and Lookahead wrote autoregressive's tokens, id for id (and so its text)."""
    ids = race_token_ids(result)
    assert ids["ar"] and ids["ar"] == ids["sequoia"] == ids["lookahead"], ids
    ar, sequoia, lookahead = texts(result)
    assert ar and ar == sequoia == lookahead


def worker_children() -> list[int]:
    """Live processes running the decoding worker whose parent is this test process."""
    me, found = os.getpid(), []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
            if int(stat[1]) == me and stat[0] != "Z" and b"specviz.runtime.worker" in (d / "cmdline").read_bytes():
                found.append(int(d.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def wait_for(predicate, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def shm_entries() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


@pytest.fixture(scope="module")
def app():
    from specviz.ui import build_demo

    shm_before = shm_entries()
    demo = build_demo(worker=True)
    with served(demo) as url:
        yield gradio_client.Client(url, verbose=False), demo
    assert not worker_children(), "the worker outlived the app"
    assert shm_entries() <= shm_before, "shared memory left behind"


def test_race_runs_in_the_worker_and_gives_identical_greedy_texts(app):
    client, demo = app
    out = client.predict(**run_args(), api_name="/race_stream")
    assert_identical_greedy(out)
    slot = demo.specviz_worker_slot
    assert slot is not None and slot.worker is not None and slot.worker.alive
    assert worker_children() == [slot.worker.pid]
    assert slot.worker.info["threads"] >= 1
    # Its own session (own scheduler autogroup), apart from the server's.
    assert os.getsid(slot.worker.pid) == slot.worker.pid != os.getsid(os.getpid())


def _start_long_race(client, demo):
    job = client.submit(**run_args(max_new=400, methods=("Autoregressive",)), api_name="/race_stream")
    wait_for(lambda: demo.specviz_worker_slot.worker is not None and demo.specviz_worker_slot.worker.busy,
             timeout=120, what="the worker to start racing")
    time.sleep(1.0)   # some steps under way
    return job


def test_stop_ends_the_workers_race_and_it_serves_the_next(app):
    client, demo = app
    job = _start_long_race(client, demo)
    worker = demo.specviz_worker_slot.worker
    stopped = client.predict(api_name="/stop")
    assert "Stopped" in stopped[-1]   # the status, the last output (the gr.State is not part of the API)
    wait_for(lambda: not worker.busy, timeout=30, what="the worker's race to end after Stop")
    job.cancel()
    assert worker_children() == [worker.pid]   # the same worker, idle, no second process
    assert_identical_greedy(client.predict(**run_args(), api_name="/race_stream"))


def test_closed_tab_ends_the_workers_race(app):
    client, demo = app
    job = _start_long_race(client, demo)
    worker = demo.specviz_worker_slot.worker
    job.cancel()   # what a closed tab does: the event's generator is closed
    wait_for(lambda: not worker.busy, timeout=30, what="the worker's race to end after the tab closed")
    assert worker.alive and worker_children() == [worker.pid]


def test_killed_worker_is_reported_and_replaced(app):
    client, demo = app
    job = _start_long_race(client, demo)
    old = demo.specviz_worker_slot.worker.pid
    os.kill(old, signal.SIGKILL)
    with pytest.raises(Exception, match="worker stopped unexpectedly") as info:
        job.result(timeout=60)
    assert "Traceback" not in str(info.value)
    assert_identical_greedy(client.predict(**run_args(), api_name="/race_stream"))
    new = demo.specviz_worker_slot.worker.pid
    assert new != old and worker_children() == [new]


def test_app_decodes_in_process_when_the_worker_cannot_start(monkeypatch):
    from specviz.ui import build_demo

    monkeypatch.setenv("SPECVIZ_WORKER_PYTHON", "/nonexistent/python")   # a broken environment
    others = set(worker_children())   # the module's app keeps its own worker
    demo = build_demo(worker=True)
    with served(demo) as url:
        client = gradio_client.Client(url, verbose=False)
        assert_identical_greedy(client.predict(**run_args(), api_name="/race_stream"))
        slot = demo.specviz_worker_slot
        assert slot.failed and "could not start" in slot.failed and slot.worker is None
    assert set(worker_children()) == others


def test_worker_exits_when_the_app_dies(tmp_path):
    """No orphans even when the app is killed outright (SIGKILL runs no cleanup)."""
    pid_file = tmp_path / "worker.pid"
    code = ("import sys, time\nsys.path.insert(0, %r)\nfrom specviz.runtime.worker import RaceWorker\n"
            "w = RaceWorker()\nopen(%r, 'w').write(str(w.pid))\ntime.sleep(600)\n"
            % (str(Path(__file__).resolve().parents[1]), str(pid_file)))
    app = subprocess.Popen([sys.executable, "-c", code])
    try:
        wait_for(pid_file.exists, timeout=120, what="the worker to start")
        worker_pid = int(pid_file.read_text())
        app.kill()
        app.wait()

        def gone():
            try:
                state = Path(f"/proc/{worker_pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                return state == "Z"
            except OSError:
                return True
        wait_for(gone, timeout=30, what="the orphaned worker to exit")
    finally:
        if app.poll() is None:
            app.kill()


def test_thread_policy_leaves_a_core_locally_and_uses_all_when_hosted(tmp_path, monkeypatch):
    from specviz.runtime.worker import thread_policy, worker_env

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))   # whatever this machine measured plays no part
    assert thread_policy({}, cores=2).threads == 1
    assert thread_policy({}, cores=8).threads == 7
    assert thread_policy({}, cores=1).threads == 1
    assert thread_policy({"SPACE_ID": "me/specviz"}, cores=8).threads == 8
    assert thread_policy({"SPECVIZ_HOSTED": "1"}, cores=2).threads == 2
    assert thread_policy({"SPECVIZ_THREADS": "3", "SPACE_ID": "x"}, cores=8).threads == 3
    env = worker_env(thread_policy({}, cores=4), base={"PYTHONPATH": "/elsewhere"})
    assert env["OMP_NUM_THREADS"] == "3" and env["SPECVIZ_WORKER_CPUS"] == "1,2,3"
    # Locally the worker is pinned to the last CPUs it decodes on, the server keeping the others; hosted, or
    # where several races may run at once (each in a worker of its own), nothing is pinned.
    assert thread_policy({}, cores=2).cpus == (1,) and thread_policy({}, cores=8).cpus == tuple(range(1, 8))
    assert thread_policy({}, cpus=[0, 2, 5]).cpus == (2, 5)   # a container's or taskset's CPUs, by their ids
    assert thread_policy({}, cores=1).cpus == () and thread_policy({"SPACE_ID": "me/specviz"}, cores=8).cpus == ()
    assert thread_policy({"SPECVIZ_CONCURRENCY": "2"}, cores=4).cpus == ()
    assert thread_policy({"SPECVIZ_THREADS": "1"}, cores=2).cpus == ()   # a count set by hand: the CPUs are left as they are
    assert "SPECVIZ_WORKER_CPUS" not in worker_env(thread_policy({"SPACE_ID": "x"}, cores=4), base={})
    # The worker imports this very package: the first entry is the folder that holds it, the caller's follow.
    first, *rest = env["PYTHONPATH"].split(os.pathsep)
    import specviz

    assert (Path(first) / "specviz" / "__init__.py").resolve() == Path(specviz.__file__).resolve()
    assert rest == ["/elsewhere"]


def test_contention_is_detected_from_profiled_forward_times():
    from specviz.runtime.race import forward_slowdown
    from specviz.trace import RunTrace, StepRecord

    curve = {"1": 30.0, "8": 40.0, "16": 60.0}

    def run(target_ms, n=1):
        steps = [StepRecord(step=i, new_token_ids=[1], new_token_texts=["a"], token_sources=["ar"],
                            tokens_processed=n if i else 50, cumulative_tokens=i + 1, time_ms={"target": target_ms})
                 for i in range(12)]
        return RunTrace(method="ar", prompt="p", prompt_token_ids=[1], settings={}, steps=steps)

    assert forward_slowdown([run(31.0)], curve) == pytest.approx(31 / 30)
    assert forward_slowdown([run(150.0, n=8)], curve) == pytest.approx(150 / 40)
    # A stale profile taken on a busy machine: the race's own fast steps set the bar.
    calm_then_busy = run(30.0)
    for rec in calm_then_busy.steps[6:]:
        rec.time_ms = {"target": 120.0}
    assert forward_slowdown([calm_then_busy], {"1": 80.0}) >= 2.0
    assert forward_slowdown([run(31.0)], {}) == pytest.approx(1.0)
    assert forward_slowdown([run(31.0)], None) == pytest.approx(1.0)


def test_api_race_runs_in_the_worker_and_stop_ends_it(app):
    """The HTTP API's /race goes the page's way: into the worker, and /stop in its session ends it."""
    client, demo = app
    settings = {k: v for k, v in run_args().items() if k != "prompt"}
    result = client.predict(PROMPT, **settings, api_name="/race")
    methods = result["methods"]
    assert methods["ar"]["text"] and all(m["identical_to_ar"] is True for m in methods.values())
    worker = demo.specviz_worker_slot.worker
    assert worker.alive and worker_children() == [worker.pid]

    job = client.submit(PROMPT, **{**settings, "methods": ["Autoregressive"], "max_new_tokens": 400},
                        api_name="/race")
    wait_for(lambda: worker.busy, timeout=120, what="the worker to start the API's race")
    time.sleep(1.0)
    client.predict(api_name="/stop")
    stopped = job.result(timeout=60)
    assert stopped["cancelled"] is True and 0 < stopped["methods"]["ar"]["tokens"] < 400
    assert stopped["methods"]["ar"]["finish_reason"] == "cancelled"
    wait_for(lambda: not worker.busy, timeout=30, what="the worker to go idle")


def test_thread_policy_follows_what_was_measured_beside_the_page(tmp_path, monkeypatch):
    """`scripts/app_speed.py --threads 1,2` caches the count that ran fastest in Chromium on this machine;
    locally the worker then runs it (for this core count only), hosted or explicit settings still win."""
    from specviz.runtime.worker import measured_threads, save_measured_threads, thread_policy

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    assert measured_threads(2) is None and thread_policy({}, cores=2).threads == 1
    path = save_measured_threads(2, {1: 26.7, 2: 31.5})
    assert path.exists() and "2cores" in path.name
    policy = thread_policy({}, cores=2)
    assert policy.threads == 2 and "measured beside the page" in policy.reason and "31.5" in policy.reason
    assert thread_policy({}, cores=4).threads == 3                 # measured on 2 cores: not this machine
    assert thread_policy({"SPECVIZ_THREADS": "1"}, cores=2).threads == 1
    assert thread_policy({"SPACE_ID": "me/specviz"}, cores=2).threads == 2
    save_measured_threads(2, {1: 30.0, 2: 30.0})                  # a tie goes to the core left free
    assert thread_policy({}, cores=2).threads == 1
    path.write_text("{not json")                                   # damaged: the default, no error
    assert thread_policy({}, cores=2).threads == 1


PINNED = """
import json, os, sys
from specviz.runtime.worker import WorkerSlot, keep_server_off
slot = WorkerSlot()
keep_server_off(slot)   # as `python app.py` does before it serves
first = slot.get()
server = {int(task): sorted(os.sched_getaffinity(int(task))) for task in os.listdir("/proc/self/task")}
first.proc.kill(); first.proc.wait()
second = slot.get()   # a replacement, started from the pinned server
print(json.dumps({"policy": list(first.policy.cpus), "first": first.info["cpus"], "second": second.info["cpus"],
                  "threads": second.info["threads"], "server": sorted({c for cpus in server.values() for c in cpus})}))
second.close()
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="one CPU")
def test_the_worker_and_the_server_keep_to_their_own_cpus(tmp_path):
    """Locally the worker decodes on its own CPUs and every thread of the server keeps off them, also after the
    worker was replaced (its replacement is pinned as the first was, not sized from the server's CPUs).
    In a process of its own: pinning the server would pin this test run (an app the tests build stays unpinned)."""
    import json

    cpus = sorted(os.sched_getaffinity(0))
    env = dict(os.environ, SPECVIZ_CACHE=str(tmp_path), PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    env.pop("SPECVIZ_THREADS", None)
    out = subprocess.run([sys.executable, "-c", PINNED], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["first"] == got["second"] == got["policy"] == cpus[1:] and got["threads"] == len(cpus) - 1
    assert got["server"] == cpus[:1]
