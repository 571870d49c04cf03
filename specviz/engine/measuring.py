"""What a measurement of this machine reports while it runs, and where a background one may pause.

`auto` sizes are measured (forward curves, step costs, the DP tree's race against the adaptive tree),
which takes tens of seconds on a CPU the first time. The measuring code calls `phase` when it starts a
piece of work and `tick` after each untimed moment between two timed forwards; whoever started the
measurement decides what those do by installing a `Measuring` with `measuring(...)`:

- the command line draws a tqdm bar on stderr per phase (`specviz.cliargs.cli_measuring`);
- the app's worker sends each report to the page, and pauses its background measurement at a tick
  while a race runs, so no measurement ever runs beside a timed race (`runtime.worker`).

With nothing installed (a library caller, a test) both are no-ops. The installed reporter is a context
variable: each thread sees its own, so a race on one thread never pauses on another's gate.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable


@dataclass
class Progress:
    """One report: the phase under way, how far it is, and the seconds its rate leaves."""

    what: str
    done: int
    total: int
    part: int                       # 1, 2, ...: which phase of this measurement
    elapsed_s: float
    left_s: float | None            # None until a rate is known
    cached_in: str | None = None    # set on the report that says where a result was saved

    def to_dict(self) -> dict:
        return {**asdict(self), "elapsed_s": round(self.elapsed_s, 2),
                "left_s": None if self.left_s is None else round(self.left_s, 1)}


@dataclass
class Measuring:
    """Receives a measurement's phases and ticks. `report(Progress)` is called at most every
    `interval_s` (and at each phase's start and end); `gate`, when given, is waited on at every tick:
    clear it to pause the measurement between two forwards, set it to let it go on."""

    report: Callable[[Progress], None] | None = None
    gate: threading.Event | None = None
    interval_s: float = 0.25
    paused: threading.Event = field(default_factory=threading.Event)   # set while waiting at the gate
    _what: str = ""
    _done: int = 0
    _total: int = 0
    _part: int = 0
    _start: float = 0.0
    _last: float = 0.0

    def phase(self, what: str, total: int) -> None:
        self.finish()
        self._what, self._done, self._total, self._part = what, 0, max(1, int(total)), self._part + 1
        self._start = self._last = time.monotonic()
        self._emit()

    def tick(self, n: int = 1) -> None:
        self.wait_at_gate()
        self._done += n
        now = time.monotonic()
        if now - self._last >= self.interval_s or self._done >= self._total:
            self._last = now
            self._emit()

    def saved(self, path: Path | str) -> None:
        self._emit(cached_in=str(path))

    def wait_at_gate(self) -> None:
        if self.gate is None or self.gate.is_set():
            return
        self.paused.set()
        began = time.monotonic()
        try:
            self.gate.wait()
        finally:
            self.paused.clear()
            self._start += time.monotonic() - began   # the time left is judged on working time only

    def finish(self) -> None:
        """The phase under way is over (its work may end short of its estimate: a prompt that stops early)."""
        if self._what and self._done < self._total:
            self._done = self._total
            self._emit()

    def _progress(self, cached_in: str | None = None) -> Progress:
        elapsed = time.monotonic() - self._start
        left = elapsed / self._done * (self._total - self._done) if self._done else None
        return Progress(self._what, self._done, self._total, self._part, elapsed, left, cached_in)

    def _emit(self, cached_in: str | None = None) -> None:
        if self.report is not None and self._what:
            self.report(self._progress(cached_in))


_CURRENT: contextvars.ContextVar[Measuring | None] = contextvars.ContextVar("specviz_measuring", default=None)


@contextlib.contextmanager
def measuring(reporter: Measuring | None):
    """Install `reporter` for the measurements this thread runs inside the block."""
    token = _CURRENT.set(reporter)
    try:
        yield reporter
    finally:
        _CURRENT.reset(token)
        if reporter is not None:
            reporter.finish()


def current() -> Measuring | None:
    return _CURRENT.get()


def phase(what: str, total: int) -> None:
    """A measurement starts a piece of work of `total` ticks (no-op with nothing installed)."""
    reporter = _CURRENT.get()
    if reporter is not None:
        reporter.phase(what, total)


def tick(n: int = 1) -> None:
    """One more unit done, between two timed forwards: a paused background measurement waits here."""
    reporter = _CURRENT.get()
    if reporter is not None:
        reporter.tick(n)


def saved(path) -> None:
    """A measured result was cached at `path`."""
    reporter = _CURRENT.get()
    if reporter is not None:
        reporter.saved(path)
