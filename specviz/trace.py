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
import math
import types
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from functools import cache
from typing import Any, Union, get_args, get_origin, get_type_hints

from . import safejson
from .errors import InvalidInput
from .methods import method_ids

TRACE_SCHEMA_VERSION = 1

# How a generated token came to be, used to colour the text in the app.
SOURCE_AR = "ar"          # one token from one plain target forward
SOURCE_DRAFT = "draft"    # a draft-tree token the target accepted
SOURCE_BONUS = "bonus"    # the target's own token after the accepted path (bonus / correction)
SOURCE_NGRAM = "ngram"    # a Lookahead n-gram token the target accepted
SOURCE_COPY = "copy"      # a token copied from the prompt or the text so far (prompt lookup) and accepted
TOKEN_SOURCES = (SOURCE_AR, SOURCE_DRAFT, SOURCE_BONUS, SOURCE_NGRAM, SOURCE_COPY)
ORIGIN_DRAFT = "draft"    # a Sequoia tree node the draft proposed
ORIGIN_POOL = "pool"      # a Lookahead candidate from its n-gram pool
ORIGIN_COPY = "copy"      # a candidate copied from the prompt or the text so far (`prompt_lookup.match`)
NODE_STATUSES = ("root", "accepted", "rejected", "not_reached")
FINISH_REASONS = ("eos", "length", "cancelled", "error")

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
    origin: str = ORIGIN_DRAFT  # or ORIGIN_COPY for a token copied from the text (its q is one-hot)
    # The test as it happened, None where the node was not tested: the probability it was accepted with given
    # the siblings rejected before it (min(1, P'/q') under the residual P' and renormalised q' its test saw;
    # a first child's are P and q; greedy 1 or 0), and its U(0, 1) draw (accepted exactly when uniform <
    # accept_prob; None under greedy, which draws nothing). Additive fields.
    accept_prob: float | None = None
    uniform: float | None = None
    tested_p: float | None = None   # P'(token): the target's (residual) probability its test saw
    tested_q: float | None = None   # q'(token): the draft's (renormalised) probability its test saw


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


@dataclass
class NgramCandidate:
    tokens: list[int]
    texts: list[str]
    match_length: int
    origin: str = ORIGIN_POOL            # ORIGIN_POOL or ORIGIN_COPY
    # Per position, each try as it happened (None where this candidate's token was not tried there: the walk
    # had stopped, it had left the survivors, or an earlier candidate offered the same token): the
    # probability the try was accepted with (P'(x) under P with the earlier tries' tokens removed; greedy 1
    # or 0) and its U(0, 1) draw (None under greedy). Additive fields.
    accept_probs: list[float | None] = field(default_factory=list)
    uniforms: list[float | None] = field(default_factory=list)


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
    copies: int = 0                      # rows for copied candidates, besides the pool's G


PAYLOAD_KINDS = {"tree": TreePayload, "lookahead": LookaheadPayload}


def _payload_from_dict(data: dict | None, at: "_At"):
    if data is None:
        return None
    if not isinstance(data, dict):
        raise InvalidInput(f"{at.field('payload')} should be an object, got {safejson.json_kind(data)}")
    cls = PAYLOAD_KINDS.get(data.get("kind")) if isinstance(data.get("kind"), str) else None
    if cls is None:
        raise InvalidInput(f"{at.place} has a payload whose 'kind' is {_shown(data.get('kind'))}; expected one of "
                           f"{', '.join(PAYLOAD_KINDS)}")
    return _load(cls, data, _At(f"{at.place} payload"))


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
        if self.payload is not None:
            data["payload"] = {"kind": "tree" if isinstance(self.payload, TreePayload) else "lookahead",
                               **data["payload"]}
        return data


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
        kept = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("steps", "schema_version")}
        derived = {name: getattr(self, name) for name in RUN_DERIVED}   # for readers of the JSON, ignored on load
        return {"schema_version": self.schema_version, **kept, **derived, "steps": [s.to_dict() for s in self.steps]}

    @staticmethod
    def from_dict(data: dict) -> "RunTrace":
        return _load(RunTrace, data, _At("the trace's run"))

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)


# Written by `RunTrace.to_dict` for readers of the JSON; recomputed, so ignored on load.
RUN_DERIVED = ("token_ids", "text", "target_forwards", "tokens_per_second", "wall_seconds")

RACE_SCHEMA_VERSION = 1
MAX_TRACE_BYTES = 20 * 1024 * 1024   # an uploaded trace larger than this is refused unread
MAX_TRACE_STEPS = 20_000             # per method
MAX_NODES_PER_STEP = 4096
MAX_WINDOW_SIZE = 4096               # W, N, G: a view draws a row of W cells, so a size is a size, not a bomb
RACE_METHODS = method_ids()


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
    # On a CPU whose rates were measured: {"rates": `floors.Rates`, "work": `floors.ForwardWork`} as plain data,
    # what the hardware panel draws t(n)'s two floors from (`engine.floors`); {} otherwise.
    floors: dict[str, Any] = field(default_factory=dict)

    @property
    def temperature(self) -> float:
        return float(self.sampling.get("temperature", 0.0) or 0.0)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def steps_done(self, upto: int) -> dict[str, int]:
        """How many steps each method had taken after the first `upto` global steps."""
        counts = {m: 0 for m in self.methods}
        for method, _ in self.order[:max(0, upto)]:
            counts[method] = counts.get(method, 0) + 1
        return counts

    def to_dict(self) -> dict:
        shared = ("prompt", "prompt_token_ids", "methods", "sampling", "options", "target_name", "draft_name",
                  "device", "dtype", "vocab_size", "cancelled", "order")
        data = {"kind": "specviz-race", "schema_version": self.schema_version,
                **{name: getattr(self, name) for name in shared}, "runs": {m: t.to_dict() for m, t in self.runs.items()}}
        if self.request is not None:
            data["request"] = self.request
        for name in ("machine", "precision_choice", "floors"):   # written only when set
            if getattr(self, name):
                data[name] = getattr(self, name)
        return data

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @staticmethod
    def from_json(text: str | bytes, vocab_size: int | None = None,
                  max_bytes: int = MAX_TRACE_BYTES) -> "RaceTrace":
        """Parse and validate an uploaded trace; every problem is an `InvalidInput`."""
        size = len(text.encode("utf-8", errors="replace")) if isinstance(text, str) else len(text)
        safejson.check_size(size, max_bytes, "the trace file")
        return RaceTrace.from_dict(safejson.loads(text, "the trace file"), vocab_size=vocab_size)

    @staticmethod
    def from_file(path, vocab_size: int | None = None, max_bytes: int = MAX_TRACE_BYTES) -> "RaceTrace":
        """`from_json` of an uploaded file, whose size on disk is checked before a byte of it is read."""
        return RaceTrace.from_json(safejson.read_limited(path, max_bytes, "the trace file"), vocab_size=vocab_size,
                                   max_bytes=max_bytes)

    @staticmethod
    def from_dict(data: Any, vocab_size: int | None = None) -> "RaceTrace":
        if not isinstance(data, dict):
            raise InvalidInput(f"this JSON is {_a_kind(data)}, not a SpecViz race trace (download one "
                               f"from the app's Replay tab)")
        if data.get("kind") != "specviz-race":
            raise InvalidInput("this JSON is not a SpecViz race trace (download one from the app's Replay tab)")
        if data.get("schema_version") != RACE_SCHEMA_VERSION:
            raise InvalidInput(f"unsupported trace schema version {_shown(data.get('schema_version'))} "
                               f"(this SpecViz reads version {RACE_SCHEMA_VERSION})")
        runs = data.get("runs")
        unknown = [m for m in runs if m not in RACE_METHODS] if isinstance(runs, dict) else []
        if unknown:   # before its runs are read: a message names a run by its method
            raise InvalidInput(f"the trace file does not have the expected structure: unknown method "
                               f"{_shown(unknown[0])} (expected {', '.join(RACE_METHODS)})")
        try:
            race = _load(RaceTrace, data, _At("the trace"))
            _validate(race, vocab_size)
        except InvalidInput:
            raise
        # The checks above should leave nothing to fail; a hostile file that finds a way still gets words, not a
        # traceback (deep recursion, a huge number, a wrong type where a check assumed one).
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as exc:
            what = f"missing field {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
            raise InvalidInput(f"the trace file does not have the expected structure: {what[:200]}") from None
        return race


# ----------------------------------------------------------------------------- loading, field by field


@dataclass(frozen=True)
class _At:
    """Where in a trace a value sits, for messages: 'the trace's sequoia step 3' and, for a part of it such as a
    tree node, how a message names the part's fields ('has a tree node whose')."""

    place: str
    whose: str = ""

    def field(self, name: str) -> str:
        return f"{self.place} {self.whose} '{name}'" if self.whose else f"{self.place} field '{name}'"

    @property
    def noun(self) -> str:
        return f"{self.place} ({self.whose.removeprefix('has ').removesuffix(' whose')})" if self.whose else self.place



# Fields whose value (or, for a list, each item) is one of a few words; the noun names a wrong one.
_CHOICES = {
    ("TreeNode", "status"): (NODE_STATUSES, "node status"),
    ("StepRecord", "token_sources"): (TOKEN_SOURCES, "token source"),
    ("NgramCandidate", "origin"): ((ORIGIN_POOL, ORIGIN_COPY), "candidate origin"),
    ("TreeNode", "origin"): ((ORIGIN_DRAFT, ORIGIN_COPY), "tree node origin"),
    ("StepRecord", "finish_reason"): (FINISH_REASONS, "finish reason"),
    ("RunTrace", "finish_reason"): (FINISH_REASONS, "finish reason"),
}
# Keys `to_dict` writes that are no field: a payload's and a race's "kind", a run's derived numbers.
_IGNORED = {"TreePayload": ("kind",), "LookaheadPayload": ("kind",), "RaceTrace": ("kind",),
            "RunTrace": RUN_DERIVED}
# How a message names one item of a list of parts.
_PART_WHOSE = {"TreeNode": "has a tree node whose", "NgramCandidate": "has an n-gram candidate whose"}


def _a_kind(value: Any) -> str:
    """'an array', 'a string', 'null': what a JSON value is, as a message says it."""
    kind = safejson.json_kind(value)
    return kind if kind == "null" else ("an " if kind[:1] in "aeiou" else "a ") + kind


def _shown(value: Any, limit: int = 40) -> str:
    """A value quoted in a message, cut short: an upload's strings can be long (and are escaped where shown)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


_hints = cache(get_type_hints)   # a dataclass's field annotations, resolved once


def _load(cls, data: Any, at: _At):
    """A `cls` dataclass from JSON `data`: no unknown field, every required one present, each value of its
    annotated type (`_typed`) and, where it is one of a few words, one of them (`_CHOICES`)."""
    if not isinstance(data, dict):
        raise InvalidInput(f"{at.noun} should be an object, got {safejson.json_kind(data)}")
    known = {f.name: f for f in fields(cls)}
    ignore = _IGNORED.get(cls.__name__, ())
    unknown = [k for k in data if k not in known and k not in ignore]
    if unknown:
        raise InvalidInput(f"the trace file does not have the expected structure: {at.noun} has an unknown "
                           f"field {_shown(unknown[0])}")
    values = {}
    for name, f in known.items():
        if name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise InvalidInput(f"the trace file does not have the expected structure: missing field '{name}' "
                                   f"in {at.noun}")
            continue
        if name == "payload" and cls is StepRecord:
            values[name] = _payload_from_dict(data[name], at)
            continue
        values[name] = _typed(data[name], _hints(cls)[name], at, name)
        _check_choice(cls.__name__, name, values[name], at)
    return cls(**values)


def _check_choice(owner: str, name: str, value: Any, at: _At) -> None:
    allowed, noun = _CHOICES.get((owner, name), (None, ""))
    if allowed is None or value is None:
        return
    for item in (value if isinstance(value, list) else [value]):
        if item not in allowed:
            raise InvalidInput(f"{at.field(name)} is {_shown(item)}; expected one of {', '.join(allowed)} "
                               f"(an unknown {noun})")


def _is_union(hint) -> bool:
    return get_origin(hint) in (Union, types.UnionType)


def _want(hint) -> str:
    """A type as a message names it: 'int', 'float', 'list', 'int or None'."""
    if _is_union(hint):
        return " or ".join(_want(a) for a in get_args(hint))
    if hint is type(None):
        return "None"
    origin = get_origin(hint) or hint
    return getattr(origin, "__name__", str(origin))


def _typed(value: Any, hint, at: _At, name: str, item: str = ""):
    """`value` checked against the annotation `hint` (str, int but not bool, float as a finite int or float,
    bool, list[...], dict[str, ...], a dataclass, Optional, Any) and returned, parts built as dataclasses."""
    if hint is Any:
        return value
    if _is_union(hint):
        args = get_args(hint)
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return _typed(value, rest[0], at, name, item)
    elif is_dataclass(hint):
        return _load(hint, value, at)
    else:
        origin, args = get_origin(hint) or hint, get_args(hint)
        if origin is list and isinstance(value, list):
            return [_typed(v, args[0], _item_at(args[0], at, name, i), name, f" item {i}")
                    for i, v in enumerate(value)] if args else value
        if origin is dict and isinstance(value, dict):
            if not all(isinstance(k, str) for k in value):
                raise InvalidInput(f"{at.field(name)} should have text keys")
            return {k: _typed(v, args[1], _entry_at(args[1], at, k), name, f" entry {_shown(k, 24)}")
                    for k, v in value.items()} if args else value
        if _scalar_ok(value, origin):
            return value
    raise InvalidInput(f"{at.field(name)}{item} should be {_want(hint)}, got {_got(value)}")


def _item_at(hint, at: _At, name: str, index: int) -> _At:
    """Where the `index`-th item of a list of parts sits: a run's steps are named by number, a payload's parts
    by the step they belong to."""
    if hint is StepRecord:
        return _At(f"{at.place.removesuffix(' run')} step {index}")
    whose = _PART_WHOSE.get(getattr(hint, "__name__", ""))
    return _At(at.place.removesuffix(" payload"), whose) if whose else at


def _entry_at(hint, at: _At, key: str) -> _At:
    """Where the entry `key` of a mapping sits: the trace's runs are named by their method."""
    return _At(f"the trace's {key} run") if hint is RunTrace else at


def _scalar_ok(value: Any, kind) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False   # JSON's true is not the number 1
    if kind is int:
        return isinstance(value, int)
    if kind is float:
        return isinstance(value, (int, float)) and math.isfinite(value)
    return kind in (str, list, dict) and isinstance(value, kind)


def _got(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    kind = type(value).__name__
    return kind if not isinstance(value, (int, float)) or isinstance(value, bool) else f"{kind} {_shown(value)}"


def _check_ids(ids, vocab: int, where: str) -> None:
    for tok in ids:
        if not isinstance(tok, int) or isinstance(tok, bool):
            raise InvalidInput(f"the trace has a non-integer token id {_shown(tok)} in {where}")
        if tok < 0 or (vocab > 0 and tok >= vocab):
            raise InvalidInput(f"the trace refers to token id {tok} in {where}, outside the vocabulary "
                               f"of {vocab} tokens")


# Settings the views read, by the type they read them as (a run's other settings are shown, never computed with).
SETTING_TYPES = {"threshold": float | None, "tree_budget": int | None, "tree_depth": int | None,
                 "window": int | None, "ngram": int | None, "guesses": int | None, "tree": str | None,
                 "tree_budget_from": str | None, "sizing": str | None, "sizing_reason": str | None,
                 "graphs_reason": str | None}
SAMPLING_TYPES = {"temperature": float | None, "top_p": float | None, "top_k": int | None, "seed": int | None}


def _check_known(mapping: dict, types_by_key: dict, at: _At, prefix: str = "") -> None:
    for key, hint in types_by_key.items():
        if key in mapping:
            _typed(mapping[key], hint, at, prefix + key)


def _validate(race: RaceTrace, vocab_size: int | None) -> None:
    """Structural checks, so the renderers never meet a malformed trace."""
    if vocab_size and race.vocab_size and race.vocab_size != vocab_size:
        raise InvalidInput(f"the trace was recorded with a vocabulary of {race.vocab_size} tokens, "
                           f"but the loaded model has {vocab_size}")
    vocab = vocab_size or race.vocab_size
    if any(m not in RACE_METHODS for m in race.runs):
        raise InvalidInput(f"the trace's runs are not all of {', '.join(RACE_METHODS)}")
    if not race.methods or any(m not in race.runs for m in race.methods):
        raise InvalidInput("the trace's 'methods' do not match its 'runs'")
    _check_known(race.sampling, SAMPLING_TYPES, _At("the trace"), "sampling.")
    _check_ids(race.prompt_token_ids, vocab, "the prompt")
    for method, run in race.runs.items():
        if len(run.steps) > MAX_TRACE_STEPS:
            raise InvalidInput(f"the trace has {len(run.steps)} steps for {method}; the limit is {MAX_TRACE_STEPS}")
        _check_known(run.settings, SETTING_TYPES, _At(f"the trace's {method} run"), "settings.")
        for rec in run.steps:
            _validate_step(rec, f"{method} step {rec.step}", vocab)
    _validate_order(race)


def _validate_step(rec: StepRecord, where: str, vocab: int) -> None:
    if not (len(rec.new_token_ids) == len(rec.new_token_texts) == len(rec.token_sources)):
        raise InvalidInput(f"the trace's {where} has token ids, texts and sources of different lengths")
    if any(v < 0 for v in rec.time_ms.values()):
        raise InvalidInput(f"the trace's {where} has malformed timings (a negative time)")
    _check_ids(rec.new_token_ids, vocab, where)
    if rec.alternatives is not None:
        at = _At(f"the trace's {where}", "has an alternative whose")
        for alt in rec.alternatives:
            _check_known(alt, {"id": int, "text": str, "p": float}, at)
        _check_ids([a.get("id", 0) for a in rec.alternatives], vocab, where + " (alternatives)")
    payload = rec.payload
    if isinstance(payload, TreePayload):
        _validate_tree(payload, where, vocab)
    elif isinstance(payload, LookaheadPayload):
        _validate_lookahead(payload, where, vocab)


def _validate_tree(payload: TreePayload, where: str, vocab: int) -> None:
    if len(payload.nodes) > MAX_NODES_PER_STEP:
        raise InvalidInput(f"the trace's {where} has a tree of {len(payload.nodes)} nodes")
    ids = {n.id for n in payload.nodes}
    _check_ids([n.token_id for n in payload.nodes], vocab, where + " (tree)")
    if payload.bonus_token_id is not None:
        _check_ids([payload.bonus_token_id], vocab, where + " (bonus token)")
    if any(n.parent != -1 and n.parent not in ids for n in payload.nodes):
        raise InvalidInput(f"the trace's {where} has a tree node whose parent is missing")
    if any(i not in ids for i in payload.accepted_path):
        raise InvalidInput(f"the trace's {where} accepts a tree node that does not exist")
    for node in payload.nodes:
        _check_unit([node.accept_prob, node.uniform, node.tested_p, node.tested_q], where, "a tree node's test")
        # The views read a draw and P', q' only beside the probability they explain, and P' only with q'.
        if (node.accept_prob is None and (node.uniform, node.tested_p, node.tested_q) != (None, None, None)) \
                or (node.tested_p is None) != (node.tested_q is None):
            raise InvalidInput(f"the trace's {where} has a tree node whose test is incomplete (a draw or P', q' "
                               "without its probability, or P' without q')")


def _check_unit(values: list, where: str, what: str) -> None:
    """Probabilities and draws lie in [0, 1] (None: not tested)."""
    if any(v is not None and not 0.0 <= v <= 1.0 for v in values):
        raise InvalidInput(f"the trace's {where} has {what} outside [0, 1]")


def _validate_lookahead(payload: LookaheadPayload, where: str, vocab: int) -> None:
    for name in ("window_size", "ngram_size", "guesses", "pool_size"):
        value = getattr(payload, name)
        if not 0 <= value <= (MAX_WINDOW_SIZE if name != "pool_size" else 10**12):
            raise InvalidInput(f"the trace's {where} has a Lookahead '{name}' of {_shown(value)}, out of range")
    for row in payload.window:
        _check_ids(row, vocab, where + " (window)")
    for cand in payload.candidates:
        _check_ids(cand.tokens, vocab, where + " (candidate)")
        if not 0 <= cand.match_length <= len(cand.tokens):
            raise InvalidInput(f"the trace's {where} has an n-gram candidate that matched {cand.match_length} of its "
                               f"{len(cand.tokens)} tokens")
        if len(cand.accept_probs) > len(cand.tokens) or len(cand.uniforms) != len(cand.accept_probs) or any(
                a is None and u is not None for a, u in zip(cand.accept_probs, cand.uniforms)):
            raise InvalidInput(f"the trace's {where} has an n-gram candidate whose tries do not match (more tries "
                               "than tokens, or a draw without its probability)")
        _check_unit(cand.accept_probs + cand.uniforms, where, "an n-gram candidate's try")
    chosen = payload.accepted_candidate
    if chosen is not None and not 0 <= chosen < len(payload.candidates):
        raise InvalidInput(f"the trace's {where} accepts n-gram candidate {chosen}, but it has "
                           f"{len(payload.candidates)}")


def _validate_order(race: RaceTrace) -> None:
    counts = {m: 0 for m in race.runs}
    for entry in race.order:
        if (not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], str)
                or entry[0] not in race.runs or not _scalar_ok(entry[1], int) or entry[1] != counts[entry[0]]):
            raise InvalidInput("the trace's step order does not match its runs")
        counts[entry[0]] += 1
    if any(counts[m] != len(race.runs[m].steps) for m in race.runs):
        raise InvalidInput("the trace's step order does not cover every step of its runs")
