"""Step and run traces: what a decoder did, as plain data.

The app, the CLI and the benchmarks consume only these records, never a live
decoder, so that a saved trace replays with no model loaded. Everything here
serialises to JSON with `to_dict` and comes back with `from_dict`; `RaceTrace`
(several methods on one prompt, in the order their steps ran) is what the app
downloads, and `RaceTrace.from_json` validates an uploaded one.

Method-specific detail lives in `StepRecord.payload`:
- Sequoia: `TreePayload` (every speculated node, the accepted path, the bonus token);
- Lookahead: `LookaheadPayload` (the Jacobi window, harvested n-grams, pool, candidates).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import InvalidInput

TRACE_SCHEMA_VERSION = 1

# How a generated token came to be, used to colour the text in the app.
SOURCE_AR = "ar"          # one token from one plain target forward
SOURCE_DRAFT = "draft"    # a draft-tree token the target accepted
SOURCE_BONUS = "bonus"    # the target's own token after the accepted path (bonus / correction)
SOURCE_NGRAM = "ngram"    # a Lookahead n-gram token the target accepted
TOKEN_SOURCES = (SOURCE_AR, SOURCE_DRAFT, SOURCE_BONUS, SOURCE_NGRAM)

# Phases a step's wall time is split into.
PHASE_DRAFT = "draft"     # draft-model forwards and sampling the tree
PHASE_TARGET = "target"   # the target forward
PHASE_VERIFY = "verify"   # verification walk, cache compaction, bookkeeping

# An adaptive tree's `tree_budget_from` when its budget came from the target's measured forward times (the
# step caption and the hardware panel explain that budget; a given or default one needs no explaining).
BUDGET_FROM_FREE_ROWS = "target's free rows"


@dataclass
class TreeNode:
    id: int
    parent: int            # -1 for the root
    depth: int             # root = 0
    token_id: int
    text: str
    draft_prob: float      # q(token) at the parent, when it was drawn (1.0 for the root)
    target_prob: float     # P(token) at the parent under the target's distribution
    status: str            # "root" | "accepted" | "rejected" | "not_reached"
    # What the draft read when it proposed this node: "" for an independent draft; for a feature
    # draft, the target's hidden state (depth 1) or its own predicted one (deeper). Additive field.
    draft_input: str = ""


@dataclass
class TreePayload:
    nodes: list[TreeNode]
    accepted_path: list[int]         # node ids from the root's first accepted child down
    bonus_token_id: int | None
    bonus_text: str | None
    budget: int                      # N: nodes including the root
    depth: int                       # D: speculated levels
    draft_ms: float
    verify_ms: float

    @staticmethod
    def from_dict(data: dict) -> "TreePayload":
        nodes = [TreeNode(**n) for n in data.get("nodes", [])]
        rest = {k: v for k, v in data.items() if k not in ("nodes", "kind")}
        return TreePayload(nodes=nodes, **rest)


@dataclass
class NgramCandidate:
    tokens: list[int]
    texts: list[str]
    match_length: int


@dataclass
class LookaheadPayload:
    window: list[list[int]]              # levels x columns of token ids (level 0 has W-1)
    window_text: list[list[str]]
    harvested: list[list[int]]           # n-grams inserted this step (key first)
    pool_size: int                       # n-grams in the pool after this step
    key_token_id: int                    # the last committed token the candidates follow
    candidates: list[NgramCandidate]     # verified this step, in pool order
    accepted_candidate: int | None       # index into candidates, None when none matched
    pool_entry: list[list[int]]          # the pool's list for the key after this step
    step_ms: float
    warmup: bool = False
    window_size: int = 0                 # W
    ngram_size: int = 0                  # N
    guesses: int = 0                     # G

    @staticmethod
    def from_dict(data: dict) -> "LookaheadPayload":
        cands = [NgramCandidate(**c) for c in data.get("candidates", [])]
        rest = {k: v for k, v in data.items() if k not in ("candidates", "kind")}
        return LookaheadPayload(candidates=cands, **rest)


PAYLOAD_KINDS = {"tree": TreePayload, "lookahead": LookaheadPayload}


def _payload_to_dict(payload) -> dict | None:
    if payload is None:
        return None
    kind = "tree" if isinstance(payload, TreePayload) else "lookahead"
    return {"kind": kind, **asdict(payload)}


def _payload_from_dict(data: dict | None):
    if data is None:
        return None
    cls = PAYLOAD_KINDS.get(data.get("kind", ""))
    if cls is None:
        raise ValueError(f"unknown payload kind {data.get('kind')!r}")
    return cls.from_dict(data)


@dataclass
class StepRecord:
    """One decoder step: exactly one target forward (and whatever drafting preceded it)."""

    step: int
    new_token_ids: list[int]
    new_token_texts: list[str]
    token_sources: list[str]
    # Tokens the target forward took as input: its whole shape as it ran (under capture a cut tree's unused rows
    # and padded Lookahead candidates included), since that is what the cost fits and the what-if time.
    tokens_processed: int
    cumulative_tokens: int            # generated tokens so far, this step included
    time_ms: dict[str, float]         # phase -> milliseconds (PHASE_*)
    payload: TreePayload | LookaheadPayload | None = None
    finished: bool = False
    finish_reason: str | None = None  # "eos" | "length" | "cancelled" | "error"
    # The target's top alternatives at this step (autoregressive only, issue 14): up to 3 of
    # {"id", "text", "p"}, p at the sampling temperature (1 when greedy), before top-p. Optional:
    # older traces have none.
    alternatives: list[dict] | None = None

    @property
    def total_ms(self) -> float:
        return float(sum(self.time_ms.values()))

    def to_dict(self) -> dict:
        data = asdict(self)
        data["payload"] = _payload_to_dict(self.payload)
        return data

    @staticmethod
    def from_dict(data: dict) -> "StepRecord":
        fields = dict(data)
        fields["payload"] = _payload_from_dict(fields.get("payload"))
        return StepRecord(**fields)


@dataclass
class RunTrace:
    """A whole run of one method on one prompt."""

    method: str
    prompt: str
    prompt_token_ids: list[int]
    settings: dict[str, Any]
    target_name: str = ""
    draft_name: str = ""
    device: str = ""
    dtype: str = ""
    steps: list[StepRecord] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None
    # Whether the static-buffer step ran, CUDA graphs replayed it, and what capture cost
    # (`engine.graphs.GraphStats.to_dict`); None in traces older than graphs.
    graphs: dict | None = None
    schema_version: int = TRACE_SCHEMA_VERSION

    @property
    def token_ids(self) -> list[int]:
        return [t for s in self.steps for t in s.new_token_ids]

    @property
    def text(self) -> str:
        return "".join(t for s in self.steps for t in s.new_token_texts)

    @property
    def target_forwards(self) -> int:
        return len(self.steps)

    @property
    def wall_seconds(self) -> float:
        return sum(s.total_ms for s in self.steps) / 1000.0

    @property
    def tokens_per_second(self) -> float:
        wall = self.wall_seconds
        return len(self.token_ids) / wall if wall > 0 else 0.0

    @property
    def tokens_per_forward(self) -> float:
        return len(self.token_ids) / self.target_forwards if self.steps else 0.0

    def summary(self) -> dict:
        return {
            "method": self.method,
            "new_tokens": len(self.token_ids),
            "target_forwards": self.target_forwards,
            "tokens_per_forward": round(self.tokens_per_forward, 4),
            "wall_seconds": round(self.wall_seconds, 4),
            "tokens_per_second": round(self.tokens_per_second, 3),
            "finish_reason": self.finish_reason,
        }

    def to_dict(self) -> dict:
        return {
            "schema_version": self.schema_version,
            "method": self.method,
            "prompt": self.prompt,
            "prompt_token_ids": self.prompt_token_ids,
            "settings": self.settings,
            "target_name": self.target_name,
            "draft_name": self.draft_name,
            "device": self.device,
            "dtype": self.dtype,
            "finish_reason": self.finish_reason,
            "error": self.error,
            "graphs": self.graphs,
            # Derived fields: handy for readers of the JSON, ignored on load.
            "token_ids": self.token_ids,
            "text": self.text,
            "target_forwards": self.target_forwards,
            "tokens_per_second": self.tokens_per_second,
            "wall_seconds": self.wall_seconds,
            "steps": [s.to_dict() for s in self.steps],
        }

    @staticmethod
    def from_dict(data: dict) -> "RunTrace":
        derived = {"token_ids", "text", "target_forwards", "tokens_per_second", "wall_seconds"}
        fields = {k: v for k, v in data.items() if k not in derived and k != "steps"}
        trace = RunTrace(**fields)
        trace.steps = [StepRecord.from_dict(s) for s in data.get("steps", [])]
        return trace

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)


RACE_SCHEMA_VERSION = 1
MAX_TRACE_BYTES = 20 * 1024 * 1024   # an uploaded trace larger than this is refused unread
MAX_TRACE_STEPS = 20_000             # per method
MAX_NODES_PER_STEP = 4096
RACE_METHODS = ("ar", "sequoia", "lookahead")


def _check_size(size: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise InvalidInput(f"the trace file is {size / 2**20:.1f} MB; the limit is {max_bytes / 2**20:.3g} MB")


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
    # The race's settings as asked for (`specviz.request.RaceRequest.to_dict`); None in traces
    # recorded before requests were kept, or by races started without one. Written only when set.
    request: dict | None = None
    # Where it ran, for the speeds' sake: "AMD EPYC (avx2, fma), 1 thread" (`engine.machine.cpu_words`), or
    # the GPU's name. Absolute tokens/s differ by CPU and thread count; "" in traces from before it was kept.
    machine: str = ""
    # Why this precision ran, where `auto` chose it on a CPU (`engine.precision`); "" otherwise.
    precision_choice: str = ""

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
        data = {
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
        if self.request is not None:
            data["request"] = self.request
        if self.machine:
            data["machine"] = self.machine
        if self.precision_choice:
            data["precision_choice"] = self.precision_choice
        return data

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @staticmethod
    def from_json(text: str | bytes, vocab_size: int | None = None,
                  max_bytes: int = MAX_TRACE_BYTES) -> "RaceTrace":
        """Parse and validate an uploaded trace; every problem is an `InvalidInput`."""
        _check_size(len(text.encode("utf-8", errors="replace")) if isinstance(text, str) else len(text), max_bytes)
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"the trace file is not valid JSON ({exc})") from None
        return RaceTrace.from_dict(data, vocab_size=vocab_size)

    @staticmethod
    def from_file(path, vocab_size: int | None = None, max_bytes: int = MAX_TRACE_BYTES) -> "RaceTrace":
        """`from_json` of an uploaded file, whose size on disk is checked before a byte of it is read."""
        _check_size(Path(path).stat().st_size, max_bytes)
        return RaceTrace.from_json(Path(path).read_bytes(), vocab_size=vocab_size, max_bytes=max_bytes)

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
                request=_typed(data["request"], dict, "request") if data.get("request") is not None else None,
                machine=_typed(data.get("machine", ""), str, "machine"),
                precision_choice=_typed(data.get("precision_choice", ""), str, "precision_choice"),
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
            if rec.alternatives is not None:
                if not isinstance(rec.alternatives, list) or not all(
                        isinstance(a, dict) and isinstance(a.get("p", 0.0), (int, float)) for a in rec.alternatives):
                    raise InvalidInput(f"the trace's {where} has malformed alternatives")
                _check_ids([a.get("id", 0) for a in rec.alternatives], vocab, where + " (alternatives)")
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
