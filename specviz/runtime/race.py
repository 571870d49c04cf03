"""The race: several decoders on one prompt, advanced in turn on one device.

One thread steps the decoders one target forward at a time, always the one with
the least compute time of its own so far (the sum of its steps' `time_ms`). They
never compete for the CPU/GPU, so each method's visible progress against the
clock is its real speed. A decoder that raises is retired with its error while
the others run on. The whole race is recorded as a `specviz.trace.RaceTrace`.

Nothing here imports gradio or plotly: the runtime is usable from scripts and tests.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from typing import Any, Callable

from ..engine.curve import interpolate
from ..errors import InvalidInput, SpecVizError
from ..trace import RACE_METHODS, RaceTrace, RunTrace, StepRecord


def compute_ms(trace: RunTrace) -> float:
    """A method's own accumulated compute time: the sum of its steps' phase times."""
    return sum(s.total_ms for s in trace.steps)


def is_out_of_memory(exc: BaseException) -> bool:
    import torch

    oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    return isinstance(exc, oom) or (isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower())


def free_accelerator_memory() -> None:
    """Give cached GPU blocks back after an out-of-memory error, so the next run can start."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def release_freed_memory() -> None:
    """After a race: collect, and hand glibc's freed heap pages back to the OS.

    Decoder caches are allocated from several worker threads' malloc arenas; without
    a trim, freed blocks stay resident and a long-running server's RSS creeps up.
    """
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):   # not glibc (macOS, Windows, musl): nothing to do
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, SpecVizError):
        return str(exc)
    if is_out_of_memory(exc):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return ("out of memory: this method's run did not fit on the device "
                f"({first}); try fewer new tokens, a smaller tree or window, or a smaller model")
    return f"{type(exc).__name__}: {exc}"


# How far a decoder may run ahead of the one most behind before the turn passes (ms of its own compute). Stepped
# one forward each in turn, a speculative decoder finds its draft's weights and its caches evicted by the others'
# steps (q4, one thread: Sequoia's steps 1.16x as long beside `ar` and Lookahead as alone). A turn of a few steps
# keeps them warm (a whole race, 12 prompts, three runs: Sequoia ~2% faster raced, `experiments/raced_or_alone.py`),
# and the page, sent the texts every 0.15 s (`SPECVIZ_TEXT_INTERVAL`), still shows all of them racing.
TURN_MS = 30.0


class Race:
    """Advance several decoders in turn, least accumulated compute first, a turn of up to `turn_ms` at a time.

    `decoders` maps method -> a built `Decoder`, or the exception that building
    it raised (shown in that method's column). Use `start_race` to build one.
    """

    def __init__(self, decoders: dict[str, Any], prompt: str, prompt_ids: list[int], *,
                 sampling: dict | None = None, options: dict | None = None, pair=None, turn_ms: float = TURN_MS):
        self.methods = list(decoders)
        self.turn_ms = float(turn_ms)
        self.last: str | None = None   # the decoder whose turn it is
        self.decoders = {}
        self.runs: dict[str, RunTrace] = {}
        self.compute: dict[str, float] = {}
        self.order: list[list] = []
        self.cancelled = False
        # step() and close() may come from different threads (a Stop button): one at a time.
        self._lock = threading.Lock()
        for method, dec in decoders.items():
            if isinstance(dec, BaseException):
                self.runs[method] = RunTrace(method=method, prompt=prompt, prompt_token_ids=list(prompt_ids),
                                             settings={}, finish_reason="error", error=_error_text(dec))
            else:
                self.decoders[method] = dec
                self.runs[method] = dec.trace
                self.compute[method] = compute_ms(dec.trace)
        self.trace = RaceTrace(
            prompt=prompt, prompt_token_ids=list(prompt_ids), methods=self.methods, runs=self.runs,
            order=self.order, sampling=dict(sampling or {}), options=dict(options or {}),
            target_name=getattr(pair, "target_name", ""), draft_name=getattr(pair, "draft_name", ""),
            device=str(getattr(pair, "device", "")), vocab_size=int(getattr(pair, "vocab_size", 0) or 0))
        if pair is not None:
            from ..engine.machine import machine_words
            from ..engine.profiler import dtype_name

            self.trace.dtype = pair.precision if hasattr(pair, "precision") else dtype_name(pair.dtype)
            self.trace.precision_choice = getattr(pair, "precision_choice", "")
            self.trace.machine = machine_words(pair.device)
            self.trace.floors = floors_of(pair)

    @property
    def live(self) -> list[str]:
        return [m for m in self.methods if m in self.decoders and not self.decoders[m].done]

    @property
    def done(self) -> bool:
        return not self.live

    def next_method(self) -> str | None:
        """The decoder whose turn goes on (less than `turn_ms` ahead of the one most behind), else the live decoder
        with the least compute of its own (ties: the order given)."""
        live = self.live
        if not live:
            return None
        behind = min(live, key=lambda m: self.compute[m])
        if self.last in live and self.compute[self.last] < self.compute[behind] + self.turn_ms:
            return self.last
        return behind

    def step(self) -> tuple[str, StepRecord | None] | None:
        """One target forward of the decoder whose turn it is (`next_method`): (method, record), record None on
        error."""
        with self._lock:
            method = self.next_method()
            if method is None:
                return None
            decoder = self.decoders[method]
            self.last = method
            try:
                record = decoder.step()
            except Exception as exc:  # one decoder's failure must not stop the others
                self._retire(method, exc)
                return method, None
            self.compute[method] += record.total_ms
            self.order.append([method, record.step])
            return method, record

    def run(self, on_step: Callable[[str, StepRecord | None], None] | None = None) -> RaceTrace:
        try:
            while not self.done:
                method, record = self.step()
                if on_step is not None:
                    on_step(method, record)
        finally:
            self.close()
        return self.trace

    def _retire(self, method: str, exc: BaseException) -> None:
        decoder = self.decoders[method]
        decoder.done = True
        decoder.trace.error = _error_text(exc)
        decoder.trace.finish_reason = "error"
        _close_quietly(decoder)
        if is_out_of_memory(exc):
            free_accelerator_memory()

    def close(self) -> None:
        """Stop every unfinished decoder (cancelled) and free all their caches. Idempotent."""
        with self._lock:
            for decoder in self.decoders.values():
                if not decoder.done:
                    decoder.done = True
                    decoder.trace.finish_reason = "cancelled"
                    self.cancelled = True
                    self.trace.cancelled = True
                _close_quietly(decoder)

    def __enter__(self) -> "Race":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _close_quietly(decoder) -> None:
    with contextlib.suppress(Exception):   # freeing memory must never mask the real outcome
        decoder.close()


def graphs_reason(mode: str, device) -> str:
    """Why a race's decoders run graphs or not, where no hosting policy decided (`hosting.zerogpu_graphs`
    does on ZeroGPU): recorded in each run's settings["graphs_reason"]."""
    cuda = str(device).startswith("cuda")
    if mode == "auto":
        return "auto: on for a CUDA device" if cuda else "auto: off on a CPU (nothing to capture on)"
    if mode == "on" and not cuda:
        return "on: nothing captured without a CUDA device (the same step, run eagerly)"
    return f"{mode}: asked for"


def graphs_path(runs_graphs) -> str:
    """Which path runs took, from each run's `trace.graphs` (`GraphStats.to_dict`, None for none): "replayed"
    (some captured shapes replayed), "failed" (capture was on and nothing replayed), "static" (the static
    buffers' step, nothing captured) or "off". The race's words and the bench's column say it from this."""
    stats = [g for g in runs_graphs if g]
    if any(g.get("capturing") and g.get("replays") for g in stats):
        return "replayed"
    if any(g.get("enabled") and g.get("capturing") for g in stats):
        return "failed"
    return "static" if any(g.get("enabled") for g in stats) else "off"


def graphs_words(runs_graphs, reason: str | None = None) -> str:
    """The graphs of a run or race in words, from each run's `trace.graphs` (`GraphStats.to_dict`):
    "graphs: replayed (N shapes, capture X ms)", "graphs: static, eager (capture failed)" or "graphs: off"
    (nothing captured: every decoder's step runs over the static buffers, so only capture is news), then
    `reason` in brackets when given (a hosting policy's decision)."""
    stats = [g for g in runs_graphs if g]
    path = graphs_path(stats)
    if path == "replayed":
        replayed = [g for g in stats if g.get("capturing") and g.get("replays")]
        shapes = sum(g.get("shapes_captured", 0) + g.get("reused", 0) for g in replayed)
        reused = sum(g.get("reused", 0) for g in replayed)
        capture = sum(g.get("capture_ms", 0.0) for g in replayed)
        words = f"graphs: replayed ({shapes} shapes, capture {capture:.0f} ms" + (
            f", {reused} reused" if reused else "") + ")"
        failed = sum(len(g.get("failed") or []) for g in stats)
        words += f", {failed} shapes eager after a failed capture" if failed else ""
    elif path == "failed":
        words = "graphs: static, eager (capture failed)"
    else:
        words = "graphs: off"
    return words + (f" ({reason})" if reason else "")


def start_race(pair, prompt: str, methods: list[str], *, sampling=None, max_new_tokens: int = 128,
               options: dict[str, dict] | None = None, graphs: str = "auto",
               graphs_reason_text: str | None = None) -> Race:
    """Build one decoder per method on `pair` (errors kept per method) and return the race.

    `graphs` ('auto' | 'on' | 'off') goes to every decoder; why it was chosen (`graphs_reason_text`, or
    `graphs_reason`) is recorded in each run's settings["graphs_reason"].

    Bad shared input (empty prompt, unknown method, bad sampling or length) raises
    `InvalidInput` at once; a method that cannot be built (not implemented, bad
    method option, load problem) gets the error in its own column.
    """
    from ..engine.decoder import validate_max_new_tokens
    from ..engine.graphs import check_graphs
    from ..engine.methods import make_decoder
    from ..engine.sampling import SamplingConfig
    from ..engine.text import encode_prompt

    if not methods:
        raise InvalidInput("choose at least one method to run")
    unknown = [m for m in methods if m not in RACE_METHODS]
    if unknown:
        raise InvalidInput(f"unknown method '{unknown[0]}' (choose from {', '.join(RACE_METHODS)})")
    sampling = (sampling or SamplingConfig()).validated()
    graphs = check_graphs(graphs)
    reason = graphs_reason_text or graphs_reason(graphs, pair.device)
    prompt_ids = encode_prompt(pair.tokenizer, prompt)
    # Settings shared by every method are checked once, up front, as one clear error.
    max_new_tokens = validate_max_new_tokens(max_new_tokens, len(prompt_ids), pair.max_context)
    options = {m: dict((options or {}).get(m, {})) for m in methods}
    decoders: dict[str, Any] = {}
    for method in dict.fromkeys(methods):
        try:
            decoders[method] = make_decoder(method, pair, prompt, sampling=sampling,
                                            max_new_tokens=max_new_tokens, prompt_ids=prompt_ids,
                                            graphs=graphs, **options[method])
            decoders[method].trace.settings["graphs_reason"] = reason
        except Exception as exc:
            decoders[method] = exc
    return Race(decoders, prompt, prompt_ids, sampling=sampling.to_dict(), options=options, pair=pair)


class PairCache:
    """Loaded model pairs, one load per (target, draft, dtype), shared read-only by all races; at most
    `max_pairs`, the least recently used dropped first.

    The decoders keep all per-run state (caches, traces) themselves, so sharing the
    weights leaks nothing between visitors. One lock serialises loading.
    """

    def __init__(self, max_pairs: int = 2, device: str | None = None):
        from .auto_notes import LastRaces

        self.max_pairs = max_pairs
        self.device = device   # None: the GPU when there is one (`load_pair`'s choice)
        self.pairs: OrderedDict[tuple, object] = OrderedDict()   # least recently used first
        self.lock = threading.Lock()
        # What `auto` chose at the last race of each request's settings, for what changed since (`auto_notes`).
        self.last_races = LastRaces()

    def _resolved(self, target: str, draft: str | None, dtype: str) -> tuple[tuple, str | None]:
        """(the key, `auto`'s words now or None where a precision was asked for). `auto` names what it
        resolves to now: once this machine's precisions are measured (in the background,
        `measure_sizes`), the next race loads the precision chosen."""
        if dtype in (None, "", "auto"):
            from ..engine.models import auto_precision, choose_device

            chosen, words = auto_precision(target, choose_device(self.device))
            return (target, draft, f"auto:{chosen}" if chosen else "auto"), words
        return (target, draft, dtype), None

    def get(self, target: str, draft: str | None, dtype: str):
        from ..engine.models import load_pair

        key, words = self._resolved(target, draft, dtype)
        with self.lock:
            if key in self.pairs:   # the least recently raced pair goes first, not the first loaded
                self.pairs.move_to_end(key)
            else:
                while len(self.pairs) >= self.max_pairs:   # room first: memory holds max_pairs at most
                    self.pairs.popitem(last=False)
                self.pairs[key] = load_pair(target, draft, dtype=dtype, device=self.device)
            pair = self.pairs[key]
            if words is not None:   # the same precision, and what is known of it now (a measurement confirms q4)
                pair.precision_choice = words
            return pair

    def loaded(self, target: str, draft: str | None, dtype: str):
        """The pair if it is loaded already, else None (never loads)."""
        key = self._resolved(target, draft, dtype)[0]
        with self.lock:
            return self.pairs.get(key)

    def clear(self) -> None:
        with self.lock:
            self.pairs.clear()


def _sizing_call(method: str, what: str, pair, request, graphs: str, options: dict):
    from ..engine.methods import sizing

    return sizing(method, what)(pair, request.sampling(), graphs, **options.get(method, {}))


def pending_sizes(pair, request, graphs: str) -> list[str]:
    """The request's methods whose `auto` size this machine has not measured yet (measures nothing)."""
    from ..methods import sized

    options = request.method_options()
    return [m for m in request.methods if m in sized()
            and _sizing_call(m, "auto_pending", pair, request, graphs, options)]


def measure_key(request) -> tuple:
    """What `measure_sizes` measures for a request, so the worker queues each measurement once: the pair,
    precision and graphs setting, the methods and their options, and the sampling mode; never the prompt,
    the seed or the sampling's floats, which the sizing's caches are not keyed by either
    (`sequoia.sizing._plan_key`). Measures and loads nothing."""
    options = sorted((m, repr(sorted(o.items()))) for m, o in request.method_options().items())
    return (request.models(), request.dtype or "auto", getattr(request, "graphs", "auto") or "auto",
            request.sampling().mode, tuple(options))


def floors_of(pair) -> dict:
    """What the hardware panel draws t(n)'s floors from (`engine.floors`): this CPU's rates where they were
    measured (nothing is measured here) and the target's work; {} on a GPU, or before the rates are known."""
    from ..engine import floors

    target = getattr(pair, "target", None)
    if target is None or getattr(pair.device, "type", "") != "cpu":
        return {}
    work = floors.forward_work(target)
    rates = floors.cached_rates(floors.read_mib(work))
    return {} if rates is None else floors.as_record(rates, work)


def measure_sizes(pairs, request) -> list[str]:
    """Measure and cache every `auto` size the request asks for that is not cached yet (the app's worker
    runs this in the background, paused while a race runs); returns the methods it measured for."""
    target, draft = request.models()
    if (request.dtype or "auto") == "auto":   # the precision first: the sizes are measured at the one chosen
        from ..engine.models import choose_device, ensure_precisions_measured

        ensure_precisions_measured(target, choose_device(pairs.device))
    pair = pairs.get(target, draft, request.dtype or "auto")
    if pair.device.type == "cpu":   # the bandwidth and int8 peak t(n) is drawn against (a second, once per CPU)
        from ..engine.floors import forward_work, measured_rates, read_mib

        measured_rates(read_mib(forward_work(pair.target)))
    graphs = getattr(request, "graphs", "auto") or "auto"
    pending, options = pending_sizes(pair, request, graphs), request.method_options()
    for method in pending:
        _sizing_call(method, "measure_auto", pair, request, graphs, options)
    return pending


FIRST_SIZES_NOTE = ("this machine's measurements for 'auto' are still running, so this race started at once "
                    "with first sizes; the next race uses the measured ones")


def ran_first_sizes(trace) -> bool:
    """Whether any run of the race started on first sizes (`race_events(first_sizes=True)`), or `auto`
    chose its precision before this CPU's precisions were measured (the rule, or q4 for SpecViz's kernel,
    which the measurement then confirms: `engine.precision`)."""
    from ..engine.precision import waits_for_measurement

    return waits_for_measurement(trace.precision_choice) or any(
        (run.settings or {}).get("sizing") == "first" for run in trace.runs.values() if run is not None)


def race_events(pairs, request, should_stop: Callable[[], bool] = lambda: False,
                on_start: Callable[[Race], None] | None = None, max_run_seconds: float | None = None,
                graphs_policy: Callable | None = None, first_sizes: bool = False):
    """One race as a stream of plain, picklable events, wherever it runs (worker or app).

    ("status", text), ("start", RaceTrace), ("step", method, record, finish_reason,
    error) per target forward, and a final ("end", RaceTrace) once every cache is
    freed. `request` is a validated `specviz.request.RaceRequest`; the trace records
    it. `max_run_seconds` is the deployment's limit on one race (None: no limit).
    `graphs_policy(pair, request)` (ZeroGPU's, `serve.ZeroGpu.graphs_decision`) may turn the request's
    graphs setting into a decision with a reason; without one the request's setting is used as it is.
    `first_sizes`: an `auto` size not measured on this machine yet starts with its method's first sizes
    (`Method.sizing`), said in the status and the run's settings, instead of measuring first (the app's
    worker measures them after the race). Errors raise (the worker turns them into an ("error", ...) event).
    """
    import time

    # The run's clock starts before the load and the sizing, so they come out of the limit too.
    deadline = None if max_run_seconds is None else time.monotonic() + float(max_run_seconds)
    yield ("status", f"Loading {request.label}…")
    target, draft = request.models()
    pair = pairs.get(target, draft, request.dtype or "auto")
    options = request.method_options()
    decision = graphs_policy(pair, request) if graphs_policy is not None else None
    graphs = decision.mode if decision is not None else (getattr(request, "graphs", "auto") or "auto")
    pending = pending_sizes(pair, request, graphs)
    first = {}
    if pending and first_sizes:
        yield ("status", "Choosing first sizes (this machine's 'auto' measurements are not finished)…")
        for method in pending:   # each pending 'auto' size swapped for its method's first sizes
            options[method], first[method] = _sizing_call(method, "first_sizes", pair, request, graphs, options)
    note = " ('auto' sizes: the first run on this machine measures forward times first)" if pending and not first else ""
    yield ("status", f"Preparing the decoders{note}…")
    race = start_race(pair, request.prompt, list(request.methods), sampling=request.sampling(),
                      max_new_tokens=request.max_new_tokens, options=options, graphs=graphs,
                      graphs_reason_text=decision.reason if decision is not None else None)
    race.trace.request = request.to_dict()
    for method, words in first.items():
        if method in race.decoders:   # what the trace keeps: these sizes were a first estimate, and why
            race.runs[method].settings.update(sizing="first", sizing_reason=f"{words}: {FIRST_SIZES_NOTE}")
    from .auto_notes import annotate

    # Why a small `auto` size, and what `auto` changed since the last race with these settings, and why.
    try:
        annotate(race.trace, pair, graphs, getattr(pairs, "last_races", None), measure_key(request))
    except Exception:   # a sentence must never cost a race
        import traceback

        traceback.print_exc()
    if on_start is not None:
        on_start(race)
    try:
        yield ("status", f"Racing with first sizes: {'; '.join(first.values())}. ({FIRST_SIZES_NOTE.capitalize()}.)"
               if first else "Racing…")
        yield ("start", race.trace)
        while not race.done and not should_stop():   # one ("step", ...) per target forward
            if deadline is not None and time.monotonic() > deadline:
                yield ("status", f"Stopped at this server's time limit of {float(max_run_seconds):g} s per run.")
                break
            stepped = race.step()
            if stepped is None:
                break
            method, record = stepped
            run = race.runs[method]
            yield ("step", method, record, run.finish_reason, run.error)
    finally:
        race.close()   # frees every decoder's cache, also on Stop or a closed tab
    yield ("end", race.trace)


def run_race(request, pairs: PairCache | None = None, on_status: Callable[[str], None] | None = None) -> RaceTrace:
    """One race from a Python session (a notebook, a script), run here as the app's worker runs it.

    `request` is a `specviz.request.RaceRequest` (validated here); `pairs` keeps the loaded models for
    the next race. Returns the finished `RaceTrace`; `on_status` hears the status lines the page shows.
    """
    trace = None
    for event in race_events(pairs if pairs is not None else PairCache(), request.validated()):
        if event[0] == "status" and on_status is not None:
            on_status(event[1])
        elif event[0] == "end":
            trace = event[1]
    return trace


CONTENDED_RATIO = 2.0   # a target forward this many times its profiled cost: the CPU was shared


def forward_slowdown(runs, curve: dict | None = None) -> float | None:
    """Median of (measured target forward / its uncontended cost) over the race's decoding steps.

    The uncontended cost of a forward over n tokens is the lower of the profiled
    t(n) (`curve`, interpolated between its sizes, none past them; it may be stale
    or itself measured on a busy machine) and the race's own fast steps of that
    size (their 10th percentile). About 1 when the decoders had the machine to
    themselves; far above 1 when something else (a browser tab rendering, another
    program) took their cores, and then the speeds the race shows are distorted. The prefill step is left out.
    """
    import statistics

    groups: dict[tuple, list[float]] = {}
    for run in runs:
        for rec in run.steps[1:]:
            measured = rec.time_ms.get("target")
            if measured:
                groups.setdefault((run.method, rec.tokens_processed), []).append(measured)
    ratios = []
    for (_, n), times in groups.items():
        candidates = [interpolate(curve, n, past_end="none")] if curve else []
        if len(times) >= 5:
            candidates.append(statistics.quantiles(times, n=10)[0])
        base = min((c for c in candidates if c), default=None)
        if base:
            ratios += [t / base for t in times]
    return statistics.median(ratios) if len(ratios) >= 5 else None
