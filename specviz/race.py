"""The race: several decoders on one prompt, advanced in turn on one device.

One thread steps the decoders one target forward at a time, always the one with
the least compute time of its own so far (the sum of its steps' `time_ms`). They
never compete for the CPU/GPU, so each method's visible progress against the
clock is its real speed. A decoder that raises is retired with its error while
the others run on. `RaceTrace` is the whole race as plain data: it goes to JSON
and back (with validation), so an uploaded trace replays with no model loaded.

Nothing here imports gradio or plotly: the engine is usable from scripts and tests.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from .errors import InvalidInput, SpecVizError
from .trace import TOKEN_SOURCES, RunTrace, StepRecord

RACE_SCHEMA_VERSION = 1
MAX_TRACE_BYTES = 20 * 1024 * 1024   # an uploaded trace larger than this is refused unread
MAX_TRACE_STEPS = 20_000             # per method
MAX_NODES_PER_STEP = 4096
RACE_METHODS = ("ar", "sequoia", "lookahead")


@dataclass
class RaceTrace:
    """Every method's `RunTrace` plus the global order in which their steps ran."""

    prompt: str
    prompt_token_ids: list[int]
    methods: list[str]
    runs: dict[str, RunTrace]
    order: list[list]                      # [method, step index] per global step, in run order
    sampling: dict[str, Any] = field(default_factory=dict)
    options: dict[str, dict] = field(default_factory=dict)   # method -> constructor options asked for
    target_name: str = ""
    draft_name: str = ""
    device: str = ""
    dtype: str = ""
    vocab_size: int = 0
    cancelled: bool = False
    schema_version: int = RACE_SCHEMA_VERSION

    @property
    def greedy(self) -> bool:
        return float(self.sampling.get("temperature", 0.0) or 0.0) == 0.0

    def steps_done(self, upto: int) -> dict[str, int]:
        """How many steps each method had taken after the first `upto` global steps."""
        counts = {m: 0 for m in self.methods}
        for method, _ in self.order[:max(0, upto)]:
            counts[method] = counts.get(method, 0) + 1
        return counts

    def to_dict(self) -> dict:
        return {
            "kind": "specviz-race",
            "schema_version": self.schema_version,
            "prompt": self.prompt,
            "prompt_token_ids": self.prompt_token_ids,
            "methods": self.methods,
            "sampling": self.sampling,
            "options": self.options,
            "target_name": self.target_name,
            "draft_name": self.draft_name,
            "device": self.device,
            "dtype": self.dtype,
            "vocab_size": self.vocab_size,
            "cancelled": self.cancelled,
            "order": self.order,
            "runs": {m: t.to_dict() for m, t in self.runs.items()},
        }

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @staticmethod
    def from_json(text: str | bytes, vocab_size: int | None = None,
                  max_bytes: int = MAX_TRACE_BYTES) -> "RaceTrace":
        """Parse and validate an uploaded trace; every problem is an `InvalidInput`."""
        if isinstance(text, str):
            size = len(text.encode("utf-8", errors="replace"))
        else:
            size = len(text)
        if size > max_bytes:
            raise InvalidInput(f"the trace file is {size / 1e6:.1f} MB; the limit is {max_bytes / 1e6:.0f} MB")
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"the trace file is not valid JSON ({exc})") from None
        return RaceTrace.from_dict(data, vocab_size=vocab_size)

    @staticmethod
    def from_dict(data: Any, vocab_size: int | None = None) -> "RaceTrace":
        if not isinstance(data, dict) or data.get("kind") != "specviz-race":
            raise InvalidInput("this JSON is not a SpecViz race trace (download one from the app's Replay tab)")
        if data.get("schema_version") != RACE_SCHEMA_VERSION:
            raise InvalidInput(f"unsupported trace schema version {data.get('schema_version')!r} "
                               f"(this SpecViz reads version {RACE_SCHEMA_VERSION})")
        try:
            runs_data = data["runs"]
            if not isinstance(runs_data, dict):
                raise TypeError("'runs' must be an object")
            runs = {}
            for method, run in runs_data.items():
                if method not in RACE_METHODS:
                    raise ValueError(f"unknown method {method!r}")
                if not isinstance(run, dict):
                    raise TypeError(f"run {method!r} must be an object")
                runs[method] = RunTrace.from_dict(run)
            race = RaceTrace(
                prompt=_typed(data["prompt"], str, "prompt"),
                prompt_token_ids=_typed(data["prompt_token_ids"], list, "prompt_token_ids"),
                methods=_typed(data["methods"], list, "methods"),
                runs=runs,
                order=_typed(data["order"], list, "order"),
                sampling=_typed(data.get("sampling", {}), dict, "sampling"),
                options=_typed(data.get("options", {}), dict, "options"),
                target_name=str(data.get("target_name", "")),
                draft_name=str(data.get("draft_name", "")),
                device=str(data.get("device", "")),
                dtype=str(data.get("dtype", "")),
                vocab_size=_typed(data.get("vocab_size", 0), int, "vocab_size"),
                cancelled=bool(data.get("cancelled", False)),
            )
        except InvalidInput:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            what = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise InvalidInput(f"the trace file does not have the expected structure: {what}") from None
        _validate(race, vocab_size)
        return race


def _typed(value, kind, name):
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidInput(f"the trace field '{name}' should be {kind.__name__}, got {type(value).__name__}")
    return value


def _check_ids(ids, vocab: int, where: str) -> None:
    for tok in ids:
        if not isinstance(tok, int) or isinstance(tok, bool):
            raise InvalidInput(f"the trace has a non-integer token id {tok!r} in {where}")
        if tok < 0 or (vocab > 0 and tok >= vocab):
            raise InvalidInput(f"the trace refers to token id {tok} in {where}, outside the vocabulary "
                               f"of {vocab} tokens")


def _validate(race: RaceTrace, vocab_size: int | None) -> None:
    """Structural checks, so the renderers never meet a malformed trace."""
    if vocab_size and race.vocab_size and race.vocab_size != vocab_size:
        raise InvalidInput(f"the trace was recorded with a vocabulary of {race.vocab_size} tokens, "
                           f"but the loaded model has {vocab_size}")
    vocab = vocab_size or race.vocab_size
    if not race.methods or any(m not in race.runs for m in race.methods):
        raise InvalidInput("the trace's 'methods' do not match its 'runs'")
    _check_ids(race.prompt_token_ids, vocab, "the prompt")
    for method, run in race.runs.items():
        if len(run.steps) > MAX_TRACE_STEPS:
            raise InvalidInput(f"the trace has {len(run.steps)} steps for {method}; the limit is {MAX_TRACE_STEPS}")
        for rec in run.steps:
            where = f"{method} step {rec.step}"
            if not (len(rec.new_token_ids) == len(rec.new_token_texts) == len(rec.token_sources)):
                raise InvalidInput(f"the trace's {where} has token ids, texts and sources of different lengths")
            if any(s not in TOKEN_SOURCES for s in rec.token_sources):
                raise InvalidInput(f"the trace's {where} has an unknown token source")
            if not isinstance(rec.time_ms, dict) or not all(
                    isinstance(v, (int, float)) and v >= 0 for v in rec.time_ms.values()):
                raise InvalidInput(f"the trace's {where} has malformed timings")
            _check_ids(rec.new_token_ids, vocab, where)
            payload = rec.payload
            if payload is None:
                continue
            if hasattr(payload, "nodes"):
                if len(payload.nodes) > MAX_NODES_PER_STEP:
                    raise InvalidInput(f"the trace's {where} has a tree of {len(payload.nodes)} nodes")
                ids = {n.id for n in payload.nodes}
                _check_ids([n.token_id for n in payload.nodes], vocab, where + " (tree)")
                if any(n.parent != -1 and n.parent not in ids for n in payload.nodes):
                    raise InvalidInput(f"the trace's {where} has a tree node whose parent is missing")
                if any(i not in ids for i in payload.accepted_path):
                    raise InvalidInput(f"the trace's {where} accepts a tree node that does not exist")
            else:
                for row in payload.window:
                    _check_ids(row, vocab, where + " (window)")
                for cand in payload.candidates:
                    _check_ids(cand.tokens, vocab, where + " (candidate)")
    counts = {m: 0 for m in race.runs}
    for entry in race.order:
        if (not isinstance(entry, list) or len(entry) != 2 or entry[0] not in race.runs
                or entry[1] != counts[entry[0]]):
            raise InvalidInput("the trace's step order does not match its runs")
        counts[entry[0]] += 1
    if any(counts[m] != len(race.runs[m].steps) for m in race.runs):
        raise InvalidInput("the trace's step order does not cover every step of its runs")


# ---------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------


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
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):   # not glibc (macOS, Windows, musl): nothing to do
        pass


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, SpecVizError):
        return str(exc)
    if is_out_of_memory(exc):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return ("out of memory: this method's run did not fit on the device "
                f"({first}); try fewer new tokens, a smaller tree or window, or a smaller model")
    return f"{type(exc).__name__}: {exc}"


class Race:
    """Advance several decoders in turn, least accumulated compute first.

    `decoders` maps method -> a built `Decoder`, or the exception that building
    it raised (shown in that method's column). Use `start_race` to build one.
    """

    def __init__(self, decoders: dict[str, Any], prompt: str, prompt_ids: list[int], *,
                 sampling: dict | None = None, options: dict | None = None, pair=None):
        self.methods = list(decoders)
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
            from .models import dtype_name

            self.trace.dtype = dtype_name(pair.dtype)

    @property
    def live(self) -> list[str]:
        return [m for m in self.methods if m in self.decoders and not self.decoders[m].done]

    @property
    def done(self) -> bool:
        return not self.live

    def next_method(self) -> str | None:
        """The live decoder with the least compute of its own (ties: the order given)."""
        live = self.live
        return min(live, key=lambda m: self.compute[m]) if live else None

    def step(self) -> tuple[str, StepRecord | None] | None:
        """One target forward of the most-behind decoder: (method, record), record None on error."""
        with self._lock:
            method = self.next_method()
            if method is None:
                return None
            decoder = self.decoders[method]
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
    try:
        decoder.close()
    except Exception:  # freeing memory must never mask the real outcome
        pass


def start_race(pair, prompt: str, methods: list[str], *, sampling=None, max_new_tokens: int = 128,
               options: dict[str, dict] | None = None) -> Race:
    """Build one decoder per method on `pair` (errors kept per method) and return the race.

    Bad shared input (empty prompt, unknown method, bad sampling or length) raises
    `InvalidInput` at once; a method that cannot be built (not implemented, bad
    method option, load problem) gets the error in its own column.
    """
    from .decoders import make_decoder
    from .decoders.base import validate_max_new_tokens
    from .sampling import SamplingConfig
    from .text import encode_prompt

    if not methods:
        raise InvalidInput("choose at least one method to run")
    unknown = [m for m in methods if m not in RACE_METHODS]
    if unknown:
        raise InvalidInput(f"unknown method '{unknown[0]}' (choose from {', '.join(RACE_METHODS)})")
    sampling = (sampling or SamplingConfig()).validated()
    prompt_ids = encode_prompt(pair.tokenizer, prompt)
    # Settings shared by every method are checked once, up front, as one clear error.
    max_new_tokens = validate_max_new_tokens(max_new_tokens, len(prompt_ids), pair.max_context)
    options = {m: dict((options or {}).get(m, {})) for m in methods}
    decoders: dict[str, Any] = {}
    for method in dict.fromkeys(methods):
        try:
            decoders[method] = make_decoder(method, pair, prompt, sampling=sampling,
                                            max_new_tokens=max_new_tokens, prompt_ids=prompt_ids,
                                            **options[method])
        except Exception as exc:
            decoders[method] = exc
    return Race(decoders, prompt, prompt_ids, sampling=sampling.to_dict(), options=options, pair=pair)
