"""Step and run traces: what a decoder did, as plain data.

The app, the CLI and the benchmarks consume only these records, never a live
decoder, so that a saved trace replays with no model loaded. Everything here
serialises to JSON with `to_dict` and comes back with `from_dict`.

Method-specific detail lives in `StepRecord.payload`:
- Sequoia: `TreePayload` (every speculated node, the accepted path, the bonus token);
- Lookahead: `LookaheadPayload` (the Jacobi window, harvested n-grams, pool, candidates).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

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
    tokens_processed: int             # tokens the target forward took as input
    cumulative_tokens: int            # generated tokens so far, this step included
    time_ms: dict[str, float]         # phase -> milliseconds (PHASE_*)
    payload: TreePayload | LookaheadPayload | None = None
    finished: bool = False
    finish_reason: str | None = None  # "eos" | "length" | "cancelled" | "error"

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
