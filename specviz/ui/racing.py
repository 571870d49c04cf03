"""Running a race for the app: in the worker process, in this process, or under ZeroGPU.

`Racer` is what the page's handlers and the HTTP API share: it takes a validated `RaceRequest` and yields
("status", text) and ("trace", RaceTrace, done) events wherever the race runs, and turns what can go wrong into one
message for a visitor (`Racer.failure`). `RaceControl` lets Stop end a session's race; `TraceFiles` keeps the
downloadable traces; `prune_session_config` keeps a session's state bounded.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import time
import traceback
import weakref
from contextlib import suppress
from pathlib import Path

import gradio as gr

from ..runtime.race import free_accelerator_memory, is_out_of_memory, ran_first_sizes
from ..runtime.worker import WorkerUnavailable
from ..errors import InvalidInput, SpecVizError
from ..trace import RaceTrace
from . import hardware


class StopFlag:
    """A stop signal that crosses a process boundary: set, a file exists.

    ZeroGPU runs the race in a process of its own and pickles the race's arguments into it, so a
    `threading.Event` there would be a copy the Stop button never reaches (Stop did nothing on ZeroGPU).
    A file in a folder of its own is seen by both processes, which share the machine; checking it costs a
    `stat` between two target forwards."""

    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix="specviz-stop-")
        self.path = os.path.join(self.folder, "stop")

    def set(self) -> None:
        with suppress(OSError):   # released already: the race is over
            Path(self.path).touch()

    def is_set(self) -> bool:
        return os.path.exists(self.path)

    def release(self) -> None:
        """Remove the folder once the race is over (the owner's side only)."""
        shutil.rmtree(self.folder, ignore_errors=True)


class RaceControl:
    """Lets the Stop button, a closed tab or a lost client end this session's race at once (between two
    steps). It pickles (ZeroGPU's process boundary) as its stop flag alone."""

    def __init__(self):
        self.stop = StopFlag()
        self.race = None     # the in-process race, when the race runs here
        self.worker = None   # the worker running it, when it runs there

    def __getstate__(self):
        return {"stop": self.stop, "race": None, "worker": None}

    def close(self) -> None:
        self.stop.set()
        if self.worker is not None:
            self.worker.stop()
        if self.race is not None:
            self.race.close()

    def release(self) -> None:
        self.stop.release()


class Visitors:
    """The sessions with a race in flight: one race each, so that where races run in parallel (ZeroGPU) one
    visitor's second click or script cannot hold a second GPU while the room waits."""

    ONE_RACE = ("your previous race is still running (or finishing): wait for it, or press Stop, "
                "then start again")

    def __init__(self):
        self.lock = threading.Lock()
        self.racing: set[str] = set()

    def begin(self, session: str) -> bool:
        """Take the session's one place (False: it has a race in flight already)."""
        with self.lock:
            if session in self.racing:
                return False
            self.racing.add(session)
            return True

    def end(self, session: str) -> None:
        with self.lock:
            self.racing.discard(session)


# Titles of the `gradio.Error`s the `spaces` package raises when ZeroGPU refuses a call (spaces 0.51,
# `spaces/zero/client.py` `schedule`), and what the page says instead of its message alone.
ZEROGPU_QUOTA_TITLES = ("ZeroGPU quota exceeded", "ZeroGPU pending credits exceeded")
ZEROGPU_QUOTA_ADVICE = ("ZeroGPU's daily GPU quota for you is spent. Log in to Hugging Face for more (a visitor "
                        "has 2 minutes a day, a free account 5, PRO 40), or wait: used quota comes back over the "
                        "day, all of it by tomorrow.")


def zerogpu_refusal(exc: BaseException) -> str | None:
    """The line a visitor reads when ZeroGPU refused to run their race (quota spent, no GPU free, a duration
    over its maximum), else None. ZeroGPU's own words (what was asked, what is left, when to retry) follow."""
    title = getattr(exc, "title", None) or ""
    if not isinstance(exc, gr.Error) or not title.startswith("ZeroGPU"):
        return None
    said = re.sub(r"<[^>]+>", "", str(getattr(exc, "message", exc))).strip()
    if title in ZEROGPU_QUOTA_TITLES or "quota" in said.lower():
        return f"{ZEROGPU_QUOTA_ADVICE} (ZeroGPU: {said})" if said else ZEROGPU_QUOTA_ADVICE
    if title == "ZeroGPU illegal duration":
        return f"this race asks ZeroGPU for more seconds than it allows: try fewer new tokens ({said})"
    return f"ZeroGPU could not give this race a GPU now: try again in a minute ({said})"


class WorkerOutOfMemory(RuntimeError):
    """The worker ran out of memory loading or preparing models (it freed them)."""


class WorkerRunFailed(RuntimeError):
    """The worker's race failed with an unexpected error (its message says which)."""


def race_events(pairs, limits, control: RaceControl | None, request, graphs_policy=None):
    """The race run in this process, as ("status", str) and ("trace", RaceTrace, done) events.

    It is the function ZeroGPU runs on the GPU (and the fallback when the worker
    cannot start), so it takes and yields picklable values only. `request` is validated;
    `graphs_policy` is ZeroGPU's graphs decision (`serve.ZeroGpu.graphs_decision`), else None.
    """
    from ..runtime import race as runtime

    def attach(race):
        if control is not None:
            control.race = race

    should_stop = (lambda: control.stop.is_set()) if control is not None else (lambda: False)
    trace = None
    for event in runtime.race_events(pairs, request, should_stop, on_start=attach,
                                    max_run_seconds=limits.max_run_seconds, graphs_policy=graphs_policy):
        if event[0] == "status":
            yield event
        elif event[0] == "start":
            trace = event[1]   # the live trace: the race appends to it as it steps
            yield ("trace", trace, False)
        elif event[0] == "step":
            yield ("trace", trace, False)
        elif event[0] == "end":
            yield ("trace", event[1], True)


def worker_race_events(worker, limits, control: RaceControl | None, request, deadline: float | None = None):
    """The same events, from a race the worker process runs; the trace here is a mirror it streams.
    `deadline` (monotonic): when the race must have ended, counted from the click; the worker is given what
    is left of it, and is killed if it is still racing WORKER_GRACE_S past it."""
    if control is not None:
        control.worker = worker
    trace = None
    status, since = "", time.monotonic()
    left = limits.max_run_seconds if deadline is None else max(0.0, deadline - time.monotonic())
    for event in worker.race(request, left, grace_s=limits.worker_grace_s):
        kind = event[0]
        if kind == "waiting":   # a quiet second (a model loading, decoders being prepared): say how long
            if status and trace is None:
                yield ("status", f"{status} ({time.monotonic() - since:.0f} s)")
        elif kind == "status":
            status, since = event[1].rstrip(), time.monotonic()
            yield event
        elif kind == "start":
            trace = event[1]
            yield ("trace", trace, False)
        elif kind == "step":
            _, method, record, finish_reason, error = event
            run = trace.runs[method]
            if record is not None:
                run.steps.append(record)
                trace.order.append([method, record.step])
            run.finish_reason, run.error = finish_reason, error
            if not worker.pending():   # several steps waiting: show them as one update
                yield ("trace", trace, False)
        elif kind == "end":
            if ran_first_sizes(event[1]):
                worker.expect_measurement()   # the worker measures what this race lacked: the page polls it
            yield ("trace", event[1], True)
        elif kind == "error":
            _, what, message = event
            if what == "input":
                raise InvalidInput(message)
            if what == "oom":
                raise WorkerOutOfMemory(message)
            raise WorkerRunFailed(message)


def _waited(status: str, call, ready: bool):
    """call()'s result; when it may take a while (`ready` False), ("status", ...) events meanwhile, one a
    second with the seconds waited, so the page shows that something is happening."""
    if ready:
        return call()
    result: list = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    start = time.monotonic()
    thread.start()
    yield ("status", status)
    while thread.is_alive():
        thread.join(1.0)
        if thread.is_alive():
            yield ("status", f"{status} ({time.monotonic() - start:.0f} s)")
    return result[0] if result else None


class Racer:
    """The app's one way to run a race: in a worker when there is one, else in this process
    (`compute`, which ZeroGPU's `spaces.GPU` may wrap).

    A worker runs one race at a time. `slot` is the app's first worker (it measures the machine in the
    background); where the host lets several races run at once (`limits.race_concurrency` > 1 off ZeroGPU),
    each race in flight takes a worker of its own, started on first need, so no two races share one."""

    def __init__(self, pairs, limits, slot, compute):
        self.pairs, self.limits, self.slot, self.compute = pairs, limits, slot, compute
        self._workers_lock = threading.Lock()
        self._idle = [slot] if slot is not None else []   # worker slots with no race in flight
        self._slots = list(self._idle)                     # every slot this racer started, for close()

    def _take_slot(self):
        with self._workers_lock:
            if self._idle:
                return self._idle.pop(0)   # the first worker first: it has the measurements
            slot = type(self.slot)(self.slot.factory)
            self._slots.append(slot)
            return slot

    def _return_slot(self, slot) -> None:
        with self._workers_lock:
            self._idle.insert(0 if slot is self.slot else len(self._idle), slot)

    def close(self) -> None:
        """End every worker this racer started."""
        with self._workers_lock:
            slots = list(self._slots)
        for slot in slots:
            slot.close()

    def events(self, request, control: RaceControl | None):
        """("status", text) and ("trace", RaceTrace, done) events of one race of a validated request.

        The race's time limit counts from here (the click): starting a worker, loading the models and
        sizing the decoders come out of it, not only the decoding."""
        deadline = time.monotonic() + float(self.limits.max_run_seconds)
        if self.slot is None:
            yield from self._in_process(request, control)
            return
        slot = self._take_slot()
        try:
            runner = yield from _waited("Starting the decoding worker…", slot.get, slot.ready())
            if runner is None:
                yield from self._in_process(request, control, slot.failed)
                return
            try:
                yield from worker_race_events(runner, self.limits, control, request, deadline)
            except WorkerUnavailable:
                slot.discard()   # the next race on this slot starts a fresh worker
                raise
        finally:
            self._return_slot(slot)

    def _in_process(self, request, control: RaceControl | None, worker_failed: str | None = None):
        events = self.compute(control, request)
        try:
            if worker_failed:
                yield ("status", f"Decoding in the app's own process: the worker could not start "
                                 f"({worker_failed}). Speeds may be lower than standalone.")
            yield from events
        finally:
            events.close()   # runs the race's `finally` now (caches freed), not at garbage collection

    def measurement(self) -> dict | None:
        """The worker's measurement of this machine, as far as it has come (None: nothing measuring)."""
        return self.slot.measurement() if self.slot is not None else None

    def failure(self, exc: Exception) -> str:
        """The one line a visitor reads for a race that raised `exc`; frees what the failure left behind."""
        if isinstance(exc, SpecVizError):
            return str(exc)
        refused = zerogpu_refusal(exc)
        if refused is not None:   # the visitor's quota, not a fault of this server: no traceback in its log
            return refused
        if isinstance(exc, WorkerUnavailable):   # `events` discarded that worker: the next run starts a new one
            return f"the decoding worker stopped unexpectedly ({exc}); the next run starts a new one"
        if isinstance(exc, WorkerRunFailed):
            return f"the run failed: {exc}"
        if isinstance(exc, WorkerOutOfMemory) or is_out_of_memory(exc):   # e.g. while loading
            self.pairs.clear()   # drop loaded weights too: the next run reloads what it needs
            free_accelerator_memory()
            return ("out of memory while loading or preparing the models; the server freed "
                    "its memory: try a smaller model pair or fewer new tokens")
        traceback.print_exc()   # not a user's mistake: the server's log keeps where it happened
        return f"the run failed: {type(exc).__name__}: {exc}"


class TraceFiles:
    """Downloadable trace files in one folder of this app, the oldest removed beyond `keep`.

    Gradio copies each file into its own cache (purged by `delete_cache`) when it is
    sent, so only the last few need to stay here; a long-running Space's disk stays bounded.
    """

    def __init__(self, keep: int = 32):
        self.keep = keep
        self.folder = Path(tempfile.mkdtemp(prefix="specviz-traces-"))
        self.lock = threading.Lock()
        weakref.finalize(self, shutil.rmtree, self.folder, True)   # gone when the app is

    def write(self, trace: RaceTrace) -> str:
        with self.lock:
            folder = Path(tempfile.mkdtemp(dir=self.folder))   # one folder each: the download keeps its name
            path = folder / "specviz-trace.json"
            path.write_text(trace.to_json())
            for stale in sorted(self.folder.iterdir(), key=lambda p: p.stat().st_mtime)[:-self.keep]:
                shutil.rmtree(stale)
            return str(path)


def prune_session_config(demo: gr.Blocks, session_hash: str | None) -> int:
    """Drop the stale component copies Gradio leaves in one session's config; returns how many.

    Gradio 6 answers each `gr.skip()` for an output by building a new component (with a fresh id) as this session's
    copy of it; the next real value for that output then files that copy under its fresh id too, with the
    serialised value (a whole view) in `config_values`. Nothing removes those entries, and a streamed race
    skips the throttled figures on most steps, so one session's state grew by ~2 MB per run (issue #8's soak). Only
    the ids of the app's own components are ever looked up again, so every other entry is dropped: a session's
    state stays bounded however many races it runs.
    """
    try:
        session = demo.state_holder.session_data.get(session_hash)
        if session is None:
            return 0
        live = demo.blocks   # id -> every component and layout block of this app (no gr.render here)
        dropped = 0
        for table in (session.blocks_config.blocks, session.config_values):
            for key in list(table):   # a snapshot: Gradio may set entries from its event loop meanwhile
                if key not in live:
                    table.pop(key, None)
                    dropped += 1
        return dropped
    except AttributeError:   # another Gradio layout of the session state: leave it alone
        return 0


def switched_on(name: str) -> bool:
    """Whether SpecViz's environment switch `name` is on: unset, or anything but 0 / false / no / off.
    SPECVIZ_WORKER=0 decodes in the app's own process (see specviz.runtime.worker); SPECVIZ_WARMUP=0 (the test
    suite's default: its apps race explicit sizes) does not measure this machine for the initial race at start."""
    return os.environ.get(name, "1").strip().lower() not in ("0", "false", "no", "off")


def contention_note(trace: RaceTrace) -> str:
    """A warning when the race's forwards ran far slower than this machine's profiled t(n)."""
    from ..runtime.race import CONTENDED_RATIO, forward_slowdown

    curve = hardware.target_curve(hardware.plans_for(trace))
    slowdown = forward_slowdown(trace.runs.values(), curve)
    if slowdown is None or slowdown < CONTENDED_RATIO:
        return ""
    return (f" ⚠ The target's forwards ran {slowdown:.1f}x slower than this machine runs them undisturbed: "
            "something else was using the processor (another program, or a busy browser tab on the same "
            "machine), so the speeds above are lower than the decoders' own and their ratios may be off.")
