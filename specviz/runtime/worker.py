"""Decode races in a worker process, so the UI never competes with torch.

Measured on a 2-core machine (issue 12): with Gradio's server and a browser on
the same cores, a race run inside the server showed a tenth of the decoders'
speed. The server's serialisation held the GIL between steps, and torch's
OpenMP threads stall at every barrier while another process holds one of their
cores. Here the race runs in its own interpreter (no shared GIL) with a thread
count chosen for where the app is served (`thread_policy`), and streams its
events back over a socket pair: ("status", text), ("start", RaceTrace),
("step", method, record, finish_reason, error), ("end", RaceTrace) or
("error", kind, message). (OMP_WAIT_POLICY=PASSIVE was tried and dropped: it
halved the one-token forward's speed on an idle machine, 29 -> 18 tokens/s.)

`RaceWorker` is the app's end; `python -m specviz.runtime.worker --fd N` the
worker's. The worker exits when the app's end closes, so it can never outlive
the app (no orphans), and it holds no shared memory (records travel pickled).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Iterator

START_TIMEOUT_S = 120.0   # imports plus torch's start on a cold, busy laptop
POLL_S = 0.5              # how often a waiting app checks that the worker is alive
WAITING_TICK_S = 1.0      # a race quiet this long yields ("waiting",), so the page's status moves on
# How long a race waits for the background measurement to pause at its next tick (between two forwards)
# before it goes ahead anyway: a measurement that overlaps a race is then judged contended and not cached.
PAUSE_TIMEOUT_S = 30.0


class WorkerUnavailable(RuntimeError):
    """The worker could not start or died: the app falls back to decoding in-process."""


BY_HAND = "SPECVIZ_THREADS"   # a `ThreadPolicy`'s reason where the environment set the count


@dataclass(frozen=True)
class ThreadPolicy:
    threads: int
    reason: str
    # The CPUs the worker is pinned to, the server keeping the others (`pin_cpus`); () where nothing is pinned.
    cpus: tuple[int, ...] = ()


def thread_policy(env=None, cores: int | None = None, measured: dict | None = None,
                  cpus: list[int] | None = None) -> ThreadPolicy:
    """How many torch threads the worker uses.

    Hosted (SPECVIZ_HOSTED or a Space's SPACE_ID): the browser is on the visitor's
    machine, so every core decodes. Locally the browser and the server share the
    machine, and what runs fastest beside the page differs by CPU: the count
    `scripts/app_speed.py --threads 1,2` measured in Chromium on this machine
    (`measured_threads`), else one core left to the browser and the server. On 2 cores
    of an AMD EPYC, 2 threads beside the page ran at 0.41x standalone (OpenMP threads
    stall at every barrier whenever the renderer or the server takes one core), 1 thread
    at 0.98x of its own standalone speed. SPECVIZ_THREADS overrides either.

    Locally, a worker that leaves cores to the page is pinned to the last `threads` CPUs and the server to the
    others (`cpus`; `cores` alone stands for CPUs 0..cores-1). Unpinned, the renderer and the server preempted
    the worker's core ~100 times a second; a speculative step, whose draft and target forwards keep each other's
    data warm, lost more to that than `ar`'s: in Chromium (`scripts/app_speed.py`, 2-core Zen 4, three runs each)
    Sequoia ran at 0.77-0.83x its standalone speed unpinned and 0.88-1.02x pinned, `ar` at 0.88-1.12x and
    0.97-1.02x, the preemptions 94-123 a second against 32-42. Where several races may run at once
    (SPECVIZ_CONCURRENCY), each in a worker of its own, nothing is pinned: the workers would share the CPUs; nor
    where SPECVIZ_THREADS sets the count (the test suite's apps, several at once, each sets it).
    """
    env = os.environ if env is None else env
    if cpus is None:
        from ..engine.machine import usable_cpus

        cpus = usable_cpus() if cores is None else list(range(cores))
    cores = len(cpus)
    hosted = env.get("SPECVIZ_HOSTED", "").strip().lower() in ("1", "true", "yes") or bool(env.get("SPACE_ID"))
    policy = _threads(env, cores, hosted, measured)
    pinned = (not hosted and policy.reason != BY_HAND and policy.threads < cores
              and _one_race_at_a_time(env) and hasattr(os, "sched_setaffinity"))
    return replace(policy, cpus=tuple(cpus[-policy.threads:])) if pinned else policy


def _threads(env, cores: int, hosted: bool, measured: dict | None) -> ThreadPolicy:
    explicit = env.get("SPECVIZ_THREADS", "").strip()
    if explicit:
        with contextlib.suppress(ValueError):   # not a number: the count is chosen as if unset
            return ThreadPolicy(max(1, int(explicit)), BY_HAND)
    if hosted:
        return ThreadPolicy(max(1, cores), "hosted: the browser is elsewhere, every core decodes")
    measured = measured_threads(cores) if measured is None else measured
    if measured and measured.get("cores") == cores and 1 <= int(measured.get("threads", 0)) <= cores:
        rates = ", ".join(f"{t} thread{'s' * (t != '1')} {v:.1f} tok/s" for t, v in measured.get("tokens_per_s", {}).items())
        return ThreadPolicy(int(measured["threads"]), f"local: measured beside the page on this CPU ({rates})")
    return ThreadPolicy(max(1, cores - 1), "local: one core left to the browser and the server")


def _one_race_at_a_time(env) -> bool:
    try:
        return int(env.get("SPECVIZ_CONCURRENCY", "1") or 1) <= 1
    except ValueError:
        return True   # hosting refuses the value with its own message


def pin_cpus(pid: int, cpus) -> None:
    """Every thread of process `pid` onto `cpus` (the threads it starts later inherit it from theirs)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):   # a thread that ended meanwhile
            os.sched_setaffinity(int(task), set(cpus))


def keep_server_off(slot: "WorkerSlot | None") -> None:
    """This process (the app's server: every thread, and those they start) onto the CPUs its slot's worker does
    not decode on (`ThreadPolicy.cpus`). What `python app.py` and `specviz app` do before they serve; an app
    built and launched by other code (the tests') stays where its process runs."""
    cpus = slot.policy.cpus if slot is not None and slot.policy is not None else ()
    rest = set(os.sched_getaffinity(0)) - set(cpus) if cpus else set()
    if rest:
        pin_cpus(os.getpid(), rest)


def _threads_path(cores: int) -> Path:
    """Where the measured choice for this CPU model, core count and torch lives (one file per machine kind)."""
    import hashlib

    import torch

    from ..paths import cache_dir
    from ..engine.machine import cpu_model

    machine = f"{cpu_model()}|{cores}|{torch.__version__}"
    return cache_dir() / "profiles" / f"worker-threads-{cores}cores-{hashlib.sha1(machine.encode()).hexdigest()[:8]}.json"


def measured_threads(cores: int) -> dict | None:
    """The worker's thread count measured beside the page on this machine (`save_measured_threads`), else None."""
    from ..paths import read_json

    data = read_json(_threads_path(cores))   # None: never measured here, or a damaged file: the default stands
    return data if isinstance(data, dict) else None


def save_measured_threads(cores: int, tokens_per_s: dict[int, float], detail: dict | None = None) -> Path:
    """Cache the fastest thread count beside the page: {threads: the app's mean tokens/s over its races}."""
    import torch

    from ..engine.machine import cpu_flags, cpu_model
    from ..paths import write_json

    best = max(tokens_per_s, key=lambda t: (tokens_per_s[t], -t))   # a tie goes to fewer threads
    path = _threads_path(cores)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"threads": int(best), "cores": cores, "cpu": cpu_model(), "cpu_flags": cpu_flags(),
            "torch": torch.__version__, "tokens_per_s": {str(t): round(v, 2) for t, v in sorted(tokens_per_s.items())},
            **(detail or {})}
    write_json(path, data)
    return path


def worker_env(policy: ThreadPolicy, base=None) -> dict:
    env = dict(os.environ if base is None else base)
    env["OMP_NUM_THREADS"] = str(policy.threads)
    env["SPECVIZ_WORKER_THREADS"] = str(policy.threads)
    if policy.cpus:
        env["SPECVIZ_WORKER_CPUS"] = ",".join(map(str, policy.cpus))
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    # The worker imports this very package, wherever the app was started from.
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


class RaceWorker:
    """The app's handle on one worker process. One race at a time (the app queues races)."""

    def __init__(self, policy: ThreadPolicy | None = None, command: list[str] | None = None):
        self.policy = policy or thread_policy()
        ours, theirs = socket.socketpair()
        # SPECVIZ_WORKER_PYTHON: another interpreter for the worker (e.g. a venv with CUDA torch).
        python = os.environ.get("SPECVIZ_WORKER_PYTHON") or sys.executable
        cmd = command or [python, "-m", "specviz.runtime.worker"]
        try:
            # Its own session: Linux's scheduler (autogroup) then shares the CPU between the worker and
            # the app's server as two groups, so the server's serialisation bursts no longer come out of
            # the decoder's core, and Ctrl-C on the app's terminal reaches the app, which ends the worker.
            self.proc = subprocess.Popen(cmd + ["--fd", str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                                         env=worker_env(self.policy), stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        except OSError as exc:
            ours.close()
            raise WorkerUnavailable(f"could not start the decoding worker: {exc}") from exc
        finally:
            theirs.close()
        self.conn = Connection(ours.detach())
        self._send_lock = threading.Lock()
        self._recv_lock = threading.RLock()   # a race's reader and the page's poll of the measurement
        self.busy = False   # a race is under way (the app's end of it)
        # The worker's background measurement of this machine (`Measurer`): its latest progress report
        # (`measuring.Progress.to_dict()`), None when nothing is being measured; `measured`: what the last
        # finished job measured, or its error.
        self.measuring: dict | None = None
        self.measured: dict | None = None
        try:
            kind, *rest = self._recv(START_TIMEOUT_S)
            if kind != "ready":
                raise WorkerUnavailable(f"the decoding worker said {kind!r} instead of ready")
            self.info: dict = rest[0]   # the worker's threads and CPUs
        except WorkerUnavailable:
            self.close()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None and not self.conn.closed

    def _send(self, message) -> None:
        with self._send_lock:
            try:
                self.conn.send(message)
            except (OSError, ValueError) as exc:
                raise WorkerUnavailable(f"the decoding worker is gone: {exc}") from exc

    def _recv(self, timeout: float | None = None, quiet_after: float | None = None):
        """The next message, past the measurement's own reports (kept in `measuring`/`measured`).
        `quiet_after`: return None when nothing came for that long (a waiting race shows its seconds)."""
        start = time.monotonic()
        deadline = start + (math.inf if timeout is None else timeout)
        quiet = start + (math.inf if quiet_after is None else quiet_after)
        while True:
            wait = max(0.0, min(POLL_S, deadline - time.monotonic(), quiet - time.monotonic()))
            try:
                with self._recv_lock:
                    message = self.conn.recv() if self.conn.poll(wait) else None
            except (EOFError, OSError) as exc:
                raise WorkerUnavailable(f"the decoding worker exited (code {self.proc.poll()})") from exc
            if message is not None:
                if not self._measurement_report(message):
                    return message
                continue
            if self.proc.poll() is not None:
                raise WorkerUnavailable(f"the decoding worker exited (code {self.proc.returncode})")
            if time.monotonic() >= deadline:
                raise WorkerUnavailable("the decoding worker did not answer in time")
            if time.monotonic() >= quiet:
                return None

    def _measurement_report(self, message) -> bool:
        if message[0] == "measuring":
            self.measuring = message[1]
        elif message[0] == "measured":
            self.measuring, self.measured = None, message[1]
        else:
            return False
        return True

    def measure(self, request) -> None:
        """Ask the worker to measure what `auto` needs for `request` now, in the background (it pauses
        while a race runs). Progress arrives in `measuring`; `poll_measurement` reads it between races."""
        self.expect_measurement()
        self._send(("measure", request))

    def expect_measurement(self) -> None:
        """A measurement is about to start (asked for, or queued by the worker after a race on first sizes)."""
        self.measuring = self.measuring or {"what": "starting", "done": 0, "total": 1, "part": 0, "left_s": None}

    def poll_measurement(self) -> dict | None:
        """The latest measurement progress (reads what the worker sent; never blocks, never steals a
        race's events: while a race is read, its reader keeps the reports up to date)."""
        if not self.busy and self._recv_lock.acquire(blocking=False):
            try:
                while not self.busy and self.conn.poll(0):
                    message = self.conn.recv()
                    if not self._measurement_report(message):
                        break   # not ours to read (cannot happen between races): leave the rest
            except (EOFError, OSError):
                pass
            finally:
                self._recv_lock.release()
        # While a race runs the measurement waits at its gate: say so rather than show a bar that stalls.
        return None if self.measuring is None else {**self.measuring, "paused": self.busy}

    def pending(self) -> bool:
        """A message is waiting (never blocks)."""
        try:
            return self.conn.poll(0)
        except (EOFError, OSError):
            return True   # the next recv reports the exit

    def race(self, request, max_run_seconds: float | None = None, grace_s: float | None = None) -> Iterator[tuple]:
        """Send one race (a validated `specviz.request.RaceRequest`, which pickles as it is) and yield
        its events up to and including "end" or "error".

        Closing the generator early (Stop, a closed tab) tells the worker to stop
        and drains what it still sends, so the next race starts clean. The worker ends its race itself
        at `max_run_seconds` (between two steps); one still racing `grace_s` after that (a step or a load
        that hangs) is killed, and `WorkerUnavailable` says so: the slot then starts a fresh worker.
        """
        self._send(("race", request, max_run_seconds))
        self.busy = True
        finished = False
        hard_stop = None if max_run_seconds is None or grace_s is None else \
            time.monotonic() + max_run_seconds + grace_s
        try:
            while True:
                event = self._recv(quiet_after=WAITING_TICK_S)
                if hard_stop is not None and time.monotonic() > hard_stop:
                    self.kill()
                    finished = True   # nothing left to drain
                    raise WorkerUnavailable(f"the race did not end within its time limit of {max_run_seconds:.0f} s "
                                            f"(a step or a load hung for {grace_s:.0f} s more), so its worker "
                                            f"was stopped")
                if event is None:
                    yield ("waiting",)   # nothing new for a second: the page shows the seconds passing
                    continue
                if event[0] in ("end", "error"):
                    finished = True
                yield event
                if finished:
                    return
        finally:
            if not finished:
                self.stop()
                self._drain()
            self.busy = False

    def stop(self) -> None:
        """Ask the running race to end after its current step (safe from any thread)."""
        with contextlib.suppress(WorkerUnavailable):
            self._send(("stop",))

    def _drain(self, timeout: float = 30.0) -> None:
        try:
            while self._recv(timeout)[0] not in ("end", "error"):
                pass
        except WorkerUnavailable:
            self.close()   # a worker that cannot finish cleanly is replaced on the next race

    def kill(self) -> None:
        """End a worker that no longer answers, at once (a hung step would never read "exit")."""
        self.conn.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self, timeout: float = 5.0) -> None:
        """End the worker (idempotent): ask, then terminate, then kill."""
        if not self.conn.closed:
            with contextlib.suppress(OSError, ValueError), self._send_lock:
                self.conn.send(("exit",))
            self.conn.close()
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()


# ----------------------------------------------------------------------------- the worker's side


def _serve(conn: Connection) -> None:
    cpus = os.environ.get("SPECVIZ_WORKER_CPUS", "")
    if cpus:   # before torch starts its threads, which inherit it
        pin_cpus(os.getpid(), [int(c) for c in cpus.split(",")])
    import torch

    from .race import PairCache, race_events, ran_first_sizes

    threads = int(os.environ.get("SPECVIZ_WORKER_THREADS", "0") or 0)
    if threads > 0:
        torch.set_num_threads(threads)
    pairs = PairCache()
    lock = threading.Lock()

    def send(message) -> None:   # from two threads, the race's and the measurement's: one message at a time
        with lock:
            conn.send(message)

    measurer = Measurer(pairs, send)
    send(("ready", {"threads": torch.get_num_threads(), "cpus": sorted(os.sched_getaffinity(0))}))
    try:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return   # the app is gone: so is the worker
            if message[0] == "exit":
                return
            if message[0] == "measure":
                measurer.add(message[1])
            if message[0] == "race":
                stop = _StopWatch(conn, measurer)
                request, max_run_seconds = message[1], message[2]
                first = False
                with measurer.paused():
                    # No race waits for a measurement: an 'auto' size this machine has not measured yet
                    # starts with its method's first sizes, and the measurer measures it after the race.
                    events = race_events(pairs, request, stop, max_run_seconds=max_run_seconds, first_sizes=True)
                    for event in _guarded(events, pairs):
                        send(event)
                        first = first or (event[0] == "end" and ran_first_sizes(event[1]))
                if first:
                    measurer.add(request)
                if stop.app_gone:
                    return
    finally:
        measurer.close()


# Measurements queued or under way at most: what visitors ask for must not pile up work. A request beyond
# them is dropped (its race runs on first sizes, and a later race on them asks again).
MAX_MEASUREMENTS = 4


class Measurer:
    """The worker's background measurement of this machine for `auto` sizes (`race.measure_sizes`).

    One thread takes requests in order and measures what each needs that is not cached (the app asks for
    its initial request as soon as it is served, and for any race that ran on first sizes). A request
    whose measurement (`race.measure_key`) is queued or under way already is not queued again, and at
    most `MAX_MEASUREMENTS` are. Progress goes to the app as ("measuring", Progress dict) and ("measured",
    {...}) when a request is done. A race pauses it (`paused`): the measurement stops at its next tick, between
    two timed forwards, and goes on after the race, so no measurement runs beside a timed race and none is
    timed with a race beside it.
    """

    def __init__(self, pairs, send):
        import queue

        from ..engine.measuring import Measuring

        self.pairs, self.send = pairs, send
        self.gate = threading.Event()
        self.gate.set()
        self.jobs: "queue.Queue" = queue.Queue()
        self.keys: set = set()   # the measure keys queued or under way; idle when none
        self.lock = threading.Lock()
        self.idle = threading.Event()
        self.idle.set()
        self.reporter = Measuring(report=self._report, gate=self.gate, interval_s=0.5)
        self.thread = threading.Thread(target=self._run, name="specviz-measurer", daemon=True)
        self.thread.start()

    @property
    def active(self) -> bool:
        """A measurement is under way or waiting to start."""
        return not self.idle.is_set()

    def add(self, request) -> bool:
        """Queue the request's measurement; False (dropped, no error) when the same one is queued or
        under way, or `MAX_MEASUREMENTS` are, or the request names nothing measurable."""
        from ..errors import SpecVizError
        from .race import measure_key

        try:
            key = measure_key(request)
        except SpecVizError:
            return False   # `measure_sizes` would refuse it the same way
        with self.lock:
            if key in self.keys or len(self.keys) >= MAX_MEASUREMENTS:
                return False
            self.keys.add(key)
            self.idle.clear()
        self.jobs.put((key, request))
        return True

    def _done(self, key) -> None:
        with self.lock:
            self.keys.discard(key)
            if not self.keys:
                self.idle.set()

    def close(self) -> None:
        self.gate.set()
        self.jobs.put(None)

    def _report(self, progress) -> None:
        with contextlib.suppress(OSError, ValueError):   # the app is gone; the worker's main loop ends it
            self.send(("measuring", progress.to_dict()))

    def _run(self) -> None:
        from ..errors import SpecVizError
        from ..engine.measuring import measuring
        from .race import measure_sizes

        with measuring(self.reporter):
            while True:
                job = self.jobs.get()
                if job is None:
                    return
                key, request = job
                self.reporter.wait_at_gate()   # a race that came first goes first
                try:
                    self.send(("measuring", {"what": f"loading {request.label}", "done": 0, "total": 1,
                                             "part": 0, "left_s": None}))
                    done = {"methods": measure_sizes(self.pairs, request)}
                    self.reporter.finish()
                except SpecVizError as exc:
                    done = {"error": str(exc)}
                except Exception as exc:   # never fatal to the worker: races still run on first sizes
                    done = {"error": f"{type(exc).__name__}: {exc}"}
                finally:
                    self._done(key)
                try:
                    self.send(("measured", {**done, "pending": not self.idle.is_set()}))
                except (OSError, ValueError):
                    return

    @contextlib.contextmanager
    def paused(self):
        """Hold the measurement at its next tick for the block (a race), waiting until it is held."""
        self.gate.clear()
        try:
            start = time.monotonic()
            while self.active and not self.reporter.paused.is_set() and time.monotonic() - start < PAUSE_TIMEOUT_S:
                if self.reporter.paused.wait(WAITING_TICK_S):
                    break
                self.send(("status", f"Pausing this machine's measurement for the race… "
                                     f"({time.monotonic() - start:.0f} s)"))
            yield
        finally:
            self.gate.set()


def _guarded(events, pairs) -> Iterator[tuple]:
    """The race's events, with any exception turned into a final ("error", kind, message)."""
    from ..errors import SpecVizError
    from .race import free_accelerator_memory, is_out_of_memory, release_freed_memory

    try:
        yield from events
    except SpecVizError as exc:
        yield ("error", "input", str(exc))
    except Exception as exc:
        if is_out_of_memory(exc):
            pairs.clear()   # drop loaded weights too: the next run reloads what it needs
            free_accelerator_memory()
            yield ("error", "oom", str(exc))
        else:
            yield ("error", "failed", f"{type(exc).__name__}: {exc}")
    finally:
        release_freed_memory()


class _StopWatch:
    """Between two steps: has the app asked to stop (or gone away)? One poll, no blocking. A request
    to measure that arrives meanwhile goes to the measurer, held at its gate until the race ends."""

    def __init__(self, conn: Connection, measurer: Measurer | None = None):
        self.conn = conn
        self.measurer = measurer
        self.app_gone = False
        self.stopped = False

    def __call__(self) -> bool:
        try:
            while not self.stopped and self.conn.poll(0):
                message = self.conn.recv()
                kind = message[0]
                if kind == "measure" and self.measurer is not None:
                    self.measurer.add(message[1])   # held at the gate until the race ends
                    continue
                self.stopped = kind in ("stop", "exit")
                self.app_gone = kind == "exit"
        except (EOFError, OSError):
            self.stopped = self.app_gone = True
        return self.stopped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="SpecViz decoding worker (started by the app)")
    parser.add_argument("--fd", type=int, required=True, help="the socket inherited from the app")
    args = parser.parse_args(argv)
    conn = Connection(args.fd)
    try:
        _serve(conn)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        pass   # the app closed its end mid-race
    finally:
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())


class WorkerSlot:
    """The app's one worker: started on first use (or at once by `warm_up`), replaced when it died, and
    given up for good (the app then decodes in its own process) when it cannot start at all."""

    def __init__(self, factory=None):
        # The policy every worker of this slot runs under, read once: once the server keeps off the first
        # worker's CPUs (`keep_server_off`), a policy read from the server's own CPUs would be another one.
        self.policy = thread_policy() if factory is None else None
        self.factory = factory or (lambda: RaceWorker(self.policy))
        self.worker: RaceWorker | None = None
        self.failed: str | None = None
        self.warm_up_request = None   # measured by every worker this slot starts
        self._lock = threading.Lock()

    def get(self) -> RaceWorker | None:
        with self._lock:
            if self.failed is not None:
                return None
            if self.worker is None or not self.worker.alive:
                if self.worker is not None:
                    self.worker.close()
                try:
                    self.worker = self.factory()
                except WorkerUnavailable as exc:
                    self.worker, self.failed = None, str(exc)
                    return None
                if self.warm_up_request is not None:
                    with contextlib.suppress(WorkerUnavailable):   # it died at once: the next get() replaces it
                        self.worker.measure(self.warm_up_request)
            return self.worker

    def ready(self) -> bool:
        """A live worker is there already (get() will not wait for one to start)."""
        return self.worker is not None and self.worker.alive and not self._lock.locked()

    def warm_up(self, request) -> threading.Thread:
        """Start the worker now, in the background, and have it measure what `auto` needs for `request`
        (the page's initial race) before anyone presses Start."""
        self.warm_up_request = request
        thread = threading.Thread(target=self.get, name="specviz-warm-up", daemon=True)
        thread.start()
        return thread

    def measurement(self) -> dict | None:
        """The worker's measurement progress for the page (`RaceWorker.poll_measurement`); a starting
        worker with a warm-up to run reports that; None when nothing is being measured."""
        worker = self.worker
        if worker is not None and worker.alive:
            return worker.poll_measurement()
        if self.warm_up_request is not None and self.failed is None:
            return {"what": "starting the decoding worker", "done": 0, "total": 1, "part": 0, "left_s": None}
        return None

    def discard(self) -> None:
        """Drop a worker that misbehaved; the next race starts a fresh one."""
        with self._lock:
            if self.worker is not None:
                self.worker.close()
            self.worker = None

    close = discard
