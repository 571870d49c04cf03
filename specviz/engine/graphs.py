"""CUDA-graph capture and replay of the decoders' fixed-shape forwards, with an eager fallback.

On a GPU a small model's step is bound by kernel launches, not by arithmetic: the
offline default's eager forward launches several hundred kernels (about 14 ms on an
H200) for weights that take under 0.1 ms to read. A CUDA graph records those launches
once and replays them as one (docs/graphs.md). What a graph replays
must read only static buffers, so every graphed function here is a closure over
tensors that the decoder refills in place (`copy_`, `fill_`) before each call; its
outputs are tensors the graph owns, valid until the next replay of any graph of the
same runner (all shapes share one memory pool, as Sequoia's and SGLang's runners do).

`GraphRunner.run(key, fn)`:
- off, or on a CPU: calls `fn()` (eager; the static buffers make it the same
  computation, so a CPU run with graphs on tests everything but the capture);
- on CUDA: captures `fn` the first time `key` is seen (warm-up calls on a side stream,
  then `torch.cuda.graph`), then replays. A shape that fails to capture runs eagerly
  from then on, and the trace says so.

A graphed function must be idempotent over its buffers (warm-up runs it more than
once before the replay that counts): it may write K/V at the slots its buffers name,
never advance a counter. Capture cost is recorded; the trace reports it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..errors import InvalidInput

GRAPH_MODES = ("auto", "on", "off")
WARMUP_CALLS = 2   # cuBLAS and the attention kernels pick their algorithms on the first calls
# Captured shapes a runner keeps, the least recently replayed released first: each holds its outputs in the
# pool, and a long-lived server's visitors' trees would otherwise keep every shape it ever met. One run's
# shapes stay below it, so a run never recaptures its own: a fixed tree's target forward, a draft forward
# per level and, near max_new_tokens, the tree cut at each depth, about 2 x depth (the deepest tree a
# request may ask for has 32 levels); adaptive trees share one padded shape.
MAX_SHAPES = 128


def check_graphs(mode) -> str:
    """The graphs setting, validated: 'auto' (on for CUDA), 'on' or 'off'."""
    if isinstance(mode, bool):
        return "on" if mode else "off"
    if mode not in GRAPH_MODES:
        raise InvalidInput(f"graphs must be one of {', '.join(GRAPH_MODES)}, got {mode!r}")
    return mode


def capture_wanted(mode: str, device: torch.device) -> bool:
    """Whether a decoder's static step is captured as CUDA graphs and replayed: the one place that says.

    'auto' and 'on': on CUDA; 'off': never; a CPU never captures (its step runs eagerly, over the filled
    slots only). The static step itself runs either way; the trace's `graphs` record says which.
    """
    return check_graphs(mode) != "off" and torch.device(device).type == "cuda"


@dataclass
class _Captured:
    graph: "torch.cuda.CUDAGraph"
    outputs: object


@dataclass
class GraphStats:
    """What the trace reports about graphs in one run."""

    enabled: bool                 # the static-buffer step ran
    capturing: bool               # CUDA graphs were captured and replayed (False: eager over the buffers)
    shapes_captured: int = 0
    capture_ms: float = 0.0       # warm-up and capture, all shapes, this run
    replays: int = 0
    eager_calls: int = 0          # static-buffer calls run eagerly (a CPU, a failed capture, graphs off)
    reused: int = 0               # shapes found already captured (a reused worker or an earlier race)
    failed: list[str] = field(default_factory=list)   # shapes whose capture failed, with why
    # GPU time inside the replays (CUDA events around each; no sync): a step's wall time minus this is
    # what the host and the eager ops between replays cost (`bench`'s host ms/step; docs/graphs.md).
    replay_ms: float = 0.0
    _events: list = field(default_factory=list, repr=False)

    def settle(self) -> None:
        """Add up the replays' event times; called once the step's host read has waited for the GPU."""
        for start, end in self._events:
            self.replay_ms += start.elapsed_time(end)
        self._events.clear()

    def to_dict(self) -> dict:
        self.settle()
        return {"enabled": self.enabled, "capturing": self.capturing, "shapes_captured": self.shapes_captured,
                "capture_ms": round(self.capture_ms, 3), "replays": self.replays,
                "replay_ms": round(self.replay_ms, 3), "eager_calls": self.eager_calls,
                "reused": self.reused, "failed": list(self.failed)}


class GraphRunner:
    """Captures each shape's function on first use and replays it; eager where it cannot capture."""

    def __init__(self, device: torch.device, capture: bool = True):
        self.device = torch.device(device)
        self.capture = capture and self.device.type == "cuda"
        self._graphs: OrderedDict = OrderedDict()   # least recently replayed first
        self._eager: set = set()
        self._pool = None
        self._seen: set = set()   # shapes this run has used (a shape captured by an earlier run is `reused`)
        self.stats = GraphStats(enabled=True, capturing=self.capture)

    def begin_run(self) -> GraphStats:
        """Fresh counters for one decoder's run (the graphs themselves are kept for the next)."""
        self.stats = GraphStats(enabled=True, capturing=self.capture)
        self._seen = set()
        return self.stats

    def forget(self, role: str) -> None:
        """Drop the graphs of a forward's shapes (keys `(role, name)`): the forward they replay is gone."""
        def of_role(key) -> bool:
            return isinstance(key, tuple) and bool(key) and key[0] == role

        self._graphs = OrderedDict((k, v) for k, v in self._graphs.items() if not of_role(k))
        self._eager = {k for k in self._eager if not of_role(k)}
        self._seen = {k for k in self._seen if not of_role(k)}

    def run(self, key, fn: Callable[[], object], eager: Callable[[], object] | None = None,
            capturable: bool = True):
        """fn's outputs: replayed from key's graph, captured now if new, or computed eagerly by `eager`
        (default fn: the same computation, which a shape may run over fewer slots when nothing is
        captured). `capturable` False: always eager (transformers' own forward)."""
        eager = eager or fn
        if not self.capture or not capturable or key in self._eager:
            self.stats.eager_calls += 1
            return eager()
        entry = self._graphs.get(key)
        if entry is None:
            entry = self._capture(key, fn)
            if entry is None:
                self.stats.eager_calls += 1
                return eager()
        else:
            self._graphs.move_to_end(key)
            if key not in self._seen:
                self._seen.add(key)
                self.stats.reused += 1
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        entry.graph.replay()
        end.record()
        self.stats._events.append((start, end))
        self.stats.replays += 1
        return entry.outputs

    def _capture(self, key, fn):
        started = time.perf_counter()
        try:
            entry = self._record(fn)
        except Exception as exc:   # a shape that cannot be captured still runs, eagerly
            torch.cuda.synchronize(self.device)
            self._eager.add(key)
            self.stats.failed.append(f"{key}: {type(exc).__name__}: {exc}"[:300])
            return None
        # Kept, releasing the least recently replayed beyond `MAX_SHAPES`. A released graph's outputs are not
        # read again: outputs hold only until the runner's next replay.
        self._graphs[key] = entry
        while len(self._graphs) > MAX_SHAPES:
            self._graphs.popitem(last=False)
        self._seen.add(key)
        self.stats.shapes_captured += 1
        self.stats.capture_ms += (time.perf_counter() - started) * 1000
        return entry

    def _record(self, fn) -> _Captured:
        """fn warmed up on a side stream, then captured into this runner's pool."""
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(WARMUP_CALLS):
                fn()
        torch.cuda.current_stream(self.device).wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            outputs = fn()
        torch.cuda.synchronize(self.device)
        return _Captured(graph, outputs)


def graphs_off_stats() -> dict:
    """The trace's record before a decoder's first step (every decoder sets its session's record)."""
    return GraphStats(enabled=False, capturing=False).to_dict()
