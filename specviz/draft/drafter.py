"""The drafter interface: what a tree decoder asks of a draft, whatever the draft is.

Modelled on transformers' `CandidateGenerator` (generation/candidate_generator.py), for trees
and level by level, over `engine.static` shapes (so a GPU captures each call and replays it).
A decoder drafts one step as

    logits = drafter.root(history, committed, fresh, unread)   # the root's children, (1, V')
    logits = drafter.level(level, tokens, root_slot)     # each later level's nodes, (n, V')
    ...one target forward, the verification walk...
    drafter.commit(path, path_slots, root_slot, target_features)   # keep the accepted path
    drafter.widen(new_ids)                               # head rows for written tokens

`history` holds every committed token by slot on the device (the root is `history[committed - 1]`),
so a captured root's read is a fixed window of the last committed tokens, not "the tokens not read
yet": nothing on the device counts what the draft has read. `fresh` (the tokens committed since the
last root read) and `unread` (how many of them no draft forward read), host numbers from the step's
one read, let an uncaptured read take only what it needs. A `TreeLevel` says which nodes a level reads,
where their K/V go (offsets after the root's slot), their depths and which earlier slots each sees;
a fixed tree's levels are made once per tree, an adaptive tree's each step (their shapes are kept,
a handful recur). `path` (node ids) and `path_slots` (each path node's offset) are fixed-length
device tensors: the root, the accepted nodes, then the deepest repeated.

Logits columns are the tokens `vocab_ids` names (None: column = token). On a CPU a draft with a
vocabulary-subset head reads only that subset, the draft's own rows and the prompt's tokens, widened as
the target writes new ones: there the full 49k-row head is most of a small draft's cost. Elsewhere it
reads the whole head (`whole_head_wanted`: a fixed width that graphs can capture, no `widen`; on a GPU
it costs microseconds).

Cost. What the sizing and the profiler time as one draft level is the draft model's:
`engine.profiler.timing_forward(model)` (a draft whose levels run another forward gives its own
`timing_forward`), cached under `forward_kind(model)` (a draft's `decoding_kind`, when it has one).

Implementations: `ModelDrafter` (an independent draft: a pruned, distilled or any causal LM; also
the target drafting for itself) here, and `FeatureDrafter` (`feature_drafter.py`, EAGLE style). A
draft model names its drafter by `drafter_kind`, looked up in `DRAFTERS` by module path, as the
engine's methods are.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Protocol

import torch

from ..engine.lean import VocabSubsetHead
from ..engine.static import full_vocabulary_head

# drafter_kind -> "module:class", imported on first use; a draft model without a drafter_kind is
# an ordinary causal LM (`ModelDrafter`).
DRAFTERS = {
    "feature": "specviz.draft.feature_drafter:FeatureDrafter",
}
ADAPTIVE_SHAPES_KEPT = 256   # an adaptive tree's level shapes held per draft forward (a few recur)


@dataclass(eq=False)
class TreeLevel:
    """One draft forward over some of a step's tree nodes (a fixed tree's level, or an adaptive tree's
    nodes that may still get children).

    Slots are counted from the root's (offset 0): a row's K/V go to root + `offsets[j]`, it sits at
    position root + `depths[j]`, and it sees every slot before the root's and those of root ..
    root + B - 1 that `block[j]` allows (itself and its ancestors). `key` names the shape (equal keys,
    equal offsets and block); `adaptive`: one of many shapes that follow the data (kept bounded);
    `varies`: one fixed shape whose block is this step's (a padded adaptive level, captured on a GPU).
    """

    key: tuple
    nodes: torch.Tensor     # (n,) node ids read, in row order (on the device)
    parents: torch.Tensor   # (n,) their parents' node ids
    offsets: list[int]
    depths: list[int]
    block: torch.Tensor     # (n, B) bool
    adaptive: bool = False
    varies: bool = False

    def shape_spec(self) -> dict:
        return {"write_offsets": self.offsets, "position_offsets": self.depths, "block": self.block,
                "rows": list(range(len(self.offsets))), "kept": ADAPTIVE_SHAPES_KEPT if self.adaptive else None}

    def prepared(self, shape):
        """`shape` holding this level's block (made with it, or refilled where the block varies)."""
        if self.varies:
            shape.refill(block=self.block)
        return shape


class Drafter(Protocol):
    """One decoder's draft: its forwards (in the decoder's `GraphSession`), its head's rows, and what it
    asks of the target."""

    reads_features: bool          # every target forward returns its hidden states for this drafter
    taps: tuple[int, ...]         # target layers whose outputs join those features
    settings: dict                # what the trace records about the draft

    @property
    def vocab_ids(self) -> torch.Tensor | None: ...   # token of each logits column (None: column = token)

    def prefill(self, prompt: torch.Tensor, target_features: torch.Tensor | None, target) -> None: ...

    def root(self, history: torch.Tensor, committed: int, fresh: int, unread: int) -> torch.Tensor: ...

    def level(self, level: TreeLevel, tokens: torch.Tensor, root_slot: int) -> torch.Tensor: ...

    def commit(self, path: torch.Tensor, path_slots: torch.Tensor, root_slot: int,
               target_features: torch.Tensor | None) -> None: ...

    def widen(self, token_ids: list[int]) -> None: ...

    def input_label(self, depth: int) -> str: ...


def make_drafter(pair, prompt_ids: list[int], session, max_nodes: int, max_depth: int) -> Drafter:
    """The drafter of `pair.draft` for one decoder, its forwards in the decoder's `GraphSession`, for
    trees of up to `max_nodes` nodes and `max_depth` levels."""
    kind, cls = getattr(pair.draft, "drafter_kind", None), ModelDrafter
    if kind is not None:
        module_name, _, class_name = DRAFTERS[kind].partition(":")
        cls = getattr(importlib.import_module(module_name), class_name)
    return cls(pair, prompt_ids, session, max_nodes, max_depth)


def whole_head_wanted(device: torch.device) -> bool:
    """Whether a draft reads its whole head rather than a widening subset: everywhere but on a CPU.

    Decided by the device, not by capture, so a seed gives the same tokens whether a step is replayed or
    run eagerly (the subset changes q, and so the draws)."""
    return torch.device(device).type != "cpu"


def session_role(kind: str, draft) -> str:
    """A draft's role in a `GraphSession`: one per draft model (the session is kept on the target, and a
    later race may bring another draft). The id names the model while it lives; a later model given the
    same id gets a forward of its own (`GraphSession.kept` checks the model itself)."""
    return f"{kind}:{id(draft)}"


def with_prompt_tokens(ids: torch.Tensor, prompt_ids: list[int], device) -> torch.Tensor:
    """A draft head's tokens widened by the prompt's: answers quote their prompt."""
    prompt = torch.tensor(prompt_ids, dtype=torch.long, device=device)
    return torch.unique(torch.cat([ids.to(device), prompt]))


class HeadRows:
    """The tokens a drafter's head has rows for (None: all); the target's own words join them as it
    writes them: an answer repeats its words, and a token the head lacks can never be drafted."""

    def __init__(self, forward, vocab_size: int, device):
        self.forward, self.vocab_size, self.device = forward, vocab_size, device
        ids = getattr(forward, "vocab_ids", None)
        self.tokens = set(ids.tolist()) if ids is not None and hasattr(forward, "widen") else None

    def widen(self, new_ids: list[int]) -> None:
        """Rows for the written tokens the head lacks (a few a run; the head is cut anew)."""
        if self.tokens is None:
            return
        fresh = [t for t in dict.fromkeys(new_ids) if t not in self.tokens and t < self.vocab_size]
        if fresh:
            self.tokens.update(fresh)
            self.forward.widen(torch.tensor(fresh, dtype=torch.long, device=self.device))


class ModelDrafter:
    """An independent draft (a causal LM over its own cache, the target's included) as a `Drafter`.

    Its cache mirrors the target's: the root at slot C - 1, a tree's node read at offset k at C - 1 + k,
    so the accepted path is kept by moving its slots. The committed tokens the draft has not read are
    the root and at most one before it (the path's deepest node, when it was never read: a fixed tree's
    last level, an adaptive tree's unexpanded node). Captured, the root re-reads the last TWO (slots
    C - 2 and C - 1, causally) every step: rewriting a slot with the token it already holds only
    refreshes a draft's K/V, which proposes and never decides, so the root's shape is fixed. On a CPU
    it reads only the unread ones (the decoder counts them).
    """

    reads_features = False
    taps: tuple[int, ...] = ()

    def __init__(self, pair, prompt_ids: list[int], session, max_nodes: int, max_depth: int):
        draft = pair.draft
        self.device, self.vocab = pair.device, pair.vocab_size
        self.prompt_len = len(prompt_ids)
        self.settings: dict = {}
        head = getattr(draft, "lm_head", None)
        # Off a CPU the whole head, captured or not (`whole_head_wanted`): its columns are the tokens.
        self.full_head = whole_head_wanted(self.device)
        role = session_role("draft", draft)
        self.forward = session.forward(role, draft, full_vocabulary_head(draft) if self.full_head else None)
        inner = self.forward.lean
        if isinstance(head, VocabSubsetHead) and not self.full_head and hasattr(inner, "cut_head"):
            # A kept session's head may have been widened by an earlier prompt: this prompt's subset.
            inner.cut_head(with_prompt_tokens(head.vocab_ids, prompt_ids, self.device))
        self.head = HeadRows(None if self.full_head else inner, self.vocab, self.device)
        self.copies_target = pair.draft_is_target

    @property
    def vocab_ids(self) -> torch.Tensor | None:
        return None if self.full_head else self.forward.lean.vocab_ids

    def prefill(self, prompt: torch.Tensor, target_features: torch.Tensor | None, target) -> None:
        if self.copies_target:   # same weights, same prompt: copy the target's cache
            self.forward.lean.copy_prefix(target.lean, self.prompt_len)
        else:
            self.forward.prefill(prompt)

    def root(self, history: torch.Tensor, committed: int, fresh: int, unread: int) -> torch.Tensor:
        # On a CPU only the unread tokens (the root, and the path's deepest node when no level read it);
        # captured, always the last two.
        n = 2 if self.full_head else min(unread, committed)
        shape = self.forward.shape(("root", n), write_offsets=list(range(n)), position_offsets=list(range(n)),
                                   block=torch.ones(n, n, dtype=torch.bool).tril(), rows=[n - 1])
        return self._logits(shape(history[committed - n:committed], committed - n))

    def level(self, level: TreeLevel, tokens: torch.Tensor, root_slot: int) -> torch.Tensor:
        shape = level.prepared(self.forward.shape(("level",) + level.key, **level.shape_spec()))
        return self._logits(shape(tokens, root_slot))

    def _logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits over the head's rows, or the real vocabulary (no padding rows)."""
        return logits if self.vocab_ids is not None else logits[:, :self.vocab]

    def commit(self, path: torch.Tensor, path_slots: torch.Tensor, root_slot: int,
               target_features: torch.Tensor | None) -> None:
        """The root and the accepted path's K/V to root_slot.. (a node never read has garbage there,
        which the next root's window rewrites)."""
        self.forward.keep(root_slot, path_slots + root_slot)

    def widen(self, token_ids: list[int]) -> None:
        self.head.widen(token_ids)

    def input_label(self, depth: int) -> str:
        return ""
