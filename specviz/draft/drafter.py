"""The drafter interface: what a tree decoder asks of a draft, whatever the draft is.

Modelled on transformers' `CandidateGenerator` (generation/candidate_generator.py),
for trees and level by level. A decoder drafts one step as

    slot, logits = drafter.root(generated, causal_mask)        # level 0: the root's children
    logits = drafter.level(tokens, parent_rows, slot, positions, mask)   # each later level
    ...one target forward, the verification walk...
    drafter.commit(path, keep_from, read_slots, target_features, drafted)   # keep the accepted path
    drafter.widen(new_ids)                                      # head rows for written tokens

Shapes. `root` returns (1, V') logits; `level` takes n nodes (`tokens` (n,), their
parents' rows (n,), `positions` (n,), an additive `mask` (1, 1, n, slot + n)) and
returns (n, V') logits, V' = len(`vocab_ids`) (or the vocabulary when it is None).
Every row a step reads (the root's first, then each level's, in order) is one
"row" of the step, which is what `parent_rows` index: for a fixed tree a node's
row is its breadth-first id. A fixed tree's level widths are known up front, so
each `level` call's shapes depend only on (tree shape, level), and a drafter
allocates nothing per call whose shape depends on data (its step rows are
preallocated). Two shapes still follow the data: the committed tokens `root`
reads (those the draft has not read yet, a few) and V', which `widen` grows
between steps. The adaptive tree's levels follow the draft's confidence; one held
to a fixed node count per level would pad each level to that count (rows that
repeat a parent, whose outputs are not drawn from).

Cost. What the sizing and the profiler time as one draft level is the draft
model's: `engine.profiler.timing_forward(model)` (a draft whose levels run another
forward gives its own `timing_forward`), cached under `forward_kind(model)` (a
draft's `decoding_kind`, when it has one).

Implementations: `ModelDrafter` (an independent draft: a pruned, distilled or any
causal LM; also the target drafting for itself) here, and `FeatureDrafter`
(`feature_drafter.py`, EAGLE style). A draft model names its drafter by
`drafter_kind`, looked up in `DRAFTERS` by module path, as the engine's methods are.
"""

from __future__ import annotations

import importlib
from typing import Callable, Protocol

import torch

from ..engine.lean import VocabSubsetHead, make_forward
from ..engine.static import full_vocabulary_head, static_supported

# drafter_kind -> "module:class", imported on first use; a draft model without a drafter_kind is
# an ordinary causal LM (`ModelDrafter`).
DRAFTERS = {
    "feature": "specviz.draft.feature_drafter:FeatureDrafter",
}

# causal_mask(prefix_len, pending): the mask a fixed tree's level 0 reads its pending tokens under.
CausalMask = Callable[[int, int], torch.Tensor]


class Drafter(Protocol):
    """One decoder's draft: its caches, its head's rows, and what it asks of the target."""

    reads_features: bool          # every target forward returns its hidden states for this drafter
    taps: tuple[int, ...]         # target layers whose outputs join those features
    settings: dict                # what the trace records about the draft

    @property
    def vocab_ids(self) -> torch.Tensor | None: ...   # token of each logits column (None: column = token)

    @property
    def dtype(self) -> torch.dtype: ...   # of the masks its levels take

    def prefill(self, prompt: torch.Tensor, target_features: torch.Tensor | None) -> None: ...

    def root(self, generated: list[int], causal_mask: CausalMask | None) -> tuple[int, torch.Tensor]: ...

    def level(self, tokens: torch.Tensor, parent_rows, slot: int, positions: torch.Tensor,
              mask: torch.Tensor) -> torch.Tensor: ...

    def commit(self, path: list[int], keep_from: int, read_slots: torch.Tensor,
               target_features: torch.Tensor | None, drafted: bool) -> None: ...

    def widen(self, token_ids: list[int]) -> None: ...

    def input_label(self, depth: int) -> str: ...


class StaticDrafter(Drafter, Protocol):
    """A drafter's static-buffer step (`engine.static`; graph-captured on CUDA), for a fixed tree.

    Every call has a shape fixed by (tree, level), reads the draft's full vocabulary head (no `widen`),
    and takes its inputs from device tensors (no host round trip):

        drafter.static_prepare(shape)                        # once: the tree's (a TreeShape) shapes
        drafter.static_prefill(prompt, target_features, target_static)
        logits = drafter.static_root(history, committed)     # (1, V): the root's children
        logits = drafter.static_level(level, tokens, root_slot)   # (level's nodes, V)
        drafter.static_commit(path, root_slot, target_features)

    `history` holds every committed token by slot (the decoder keeps it on the device); `path` is the
    step's fixed-length compaction index (node ids: the root and the accepted path, padded by
    repeating its deepest node; `sequoia.device_verify`), `root_slot` = committed - 1.
    """

    def static_prepare(self, shape) -> None: ...   # a `sequoia.tree.TreeShape`

    def static_prefill(self, prompt: torch.Tensor, target_features: torch.Tensor | None, target_static) -> None: ...

    def static_root(self, history: torch.Tensor, committed: int) -> torch.Tensor: ...

    def static_level(self, level: int, tokens: torch.Tensor, root_slot: int) -> torch.Tensor: ...

    def static_commit(self, path: torch.Tensor, root_slot: int,
                      target_features: torch.Tensor | None) -> None: ...


def drafter_class(pair) -> type:
    kind = getattr(pair.draft, "drafter_kind", None)
    if kind is None:
        return ModelDrafter
    module_name, _, class_name = DRAFTERS[kind].partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def make_drafter(pair, prompt_ids: list[int], max_len: int, max_nodes: int, target_forward,
                 lean: bool = True, session=None) -> Drafter:
    """The drafter of `pair.draft` for one decoder (caches of `max_len` slots, steps of up to `max_nodes`).

    With a `GraphSession` (`engine.static`), a drafter for the static-buffer step (`StaticDrafter`)."""
    cls = drafter_class(pair)
    if cls is ModelDrafter:
        return ModelDrafter(pair, prompt_ids, max_len, target_forward, lean, session=session)
    return cls(pair, prompt_ids, max_len, max_nodes, session=session)


def static_drafter_supported(pair) -> bool:
    """Whether `pair.draft`'s drafter has a static step for this pair."""
    return drafter_class(pair).static_supported(pair)


def session_role(kind: str, weight: torch.Tensor) -> str:
    """A draft's role in a `GraphSession`: one per draft model (the session is kept on the target, and a
    later race may bring another draft; the session keeps the weights alive, so the address is unique)."""
    return f"{kind}:{weight.data_ptr()}"


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

    Its cache holds the committed tokens it has read (`seen`); the root is read at slot C - 1 and a
    tree node i of a fixed tree at slot C - 1 + i, so the accepted path is kept by moving its slots.
    """

    reads_features = False
    taps: tuple[int, ...] = ()

    def __init__(self, pair, prompt_ids: list[int], max_len: int, target_forward, lean: bool = True,
                 session=None):
        self.device, self.vocab = pair.device, pair.vocab_size
        self.prompt_len = len(prompt_ids)
        self.settings: dict = {}
        self.static = None
        if session is not None:
            self._static_init(pair, session)
            return
        head = getattr(pair.draft, "lm_head", None)
        vocab_ids = with_prompt_tokens(head.vocab_ids, prompt_ids, self.device) \
            if isinstance(head, VocabSubsetHead) else None
        self.forward = make_forward(pair.draft, max_len, vocab_ids, lean=lean)
        # The target drafting for itself through the same forward copies the target's prefill.
        self.copies_target = pair.draft_is_target and type(self.forward) is type(target_forward)
        self.target_forward = target_forward
        self.head = HeadRows(self.forward, self.vocab, self.device)
        self.seen = 0

    @property
    def vocab_ids(self) -> torch.Tensor | None:
        return None if self.static is not None else self.forward.vocab_ids

    @property
    def dtype(self) -> torch.dtype:
        if self.static is not None:
            return self.static.lean.dtype
        return getattr(self.forward, "dtype", None) or self.forward.model.dtype

    def prefill(self, prompt: torch.Tensor, target_features: torch.Tensor | None) -> None:
        if self.copies_target:   # same model, same prompt: the draft's cache is a copy, not a second prefill
            self.forward.copy_prefix(self.target_forward, self.prompt_len)
        else:
            self.forward(prompt, 0)
        self.seen = self.prompt_len

    def root(self, generated: list[int], causal_mask: CausalMask | None) -> tuple[int, torch.Tensor]:
        """Read the committed tokens not read yet (always generated ones after the prefill), the root last."""
        pending = generated[self.seen - self.prompt_len:]
        committed = self.prompt_len + len(generated)
        start = committed - len(pending)
        ids = torch.tensor([pending], dtype=torch.long, device=self.device)
        mask = None if causal_mask is None else causal_mask(start, len(pending))
        logits = self.forward(ids, start, mask=mask) if mask is not None else self.forward(ids, start)
        self.seen = committed
        return committed - 1, self._logits(logits)

    def level(self, tokens: torch.Tensor, parent_rows, slot: int, positions: torch.Tensor,
              mask: torch.Tensor) -> torch.Tensor:
        logits = self.forward(tokens.unsqueeze(0), slot, positions=positions, mask=mask, rows=tokens.numel())
        return self._logits(logits)

    def _logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits over the head's rows, or the real vocabulary (no padding rows)."""
        return logits if self.forward.vocab_ids is not None else logits[:, :self.vocab]

    def commit(self, path: list[int], keep_from: int, read_slots: torch.Tensor,
               target_features: torch.Tensor | None, drafted: bool) -> None:
        """Move the K/V of the accepted path's nodes this step read (`read_slots`) to slots `keep_from`..;
        the rest of the path is read next step."""
        if not drafted:
            return   # the draft ran no forward this step; its pending tokens simply grow
        self.forward.keep(keep_from, read_slots)
        self.seen = keep_from + int(read_slots.numel())

    def widen(self, token_ids: list[int]) -> None:
        if self.static is None:   # the static step reads the whole head
            self.head.widen(token_ids)

    def input_label(self, depth: int) -> str:
        return ""

    # -- the static-buffer step (`StaticDrafter`) ------------------------------------------------------

    @staticmethod
    def static_supported(pair) -> bool:
        return static_supported(pair.draft)

    def _static_init(self, pair, session) -> None:
        """The draft's static forward (its full head: fixed shapes, no widen) in the decoder's session."""
        draft = pair.draft
        role = session_role("draft", draft.model.layers[0].self_attn.q_proj.weight)
        self.static = session.forward(role, draft, full_vocabulary_head(draft))
        self.copies_target = pair.draft_is_target
        self.forward = None
        self._root_shape, self._level_shapes = None, []

    def static_prepare(self, shape) -> None:
        """The root's shape and each drafted level's (levels 1 .. depth - 1; the last level is never read).

        The root re-reads the last TWO committed tokens at slots C - 2 and C - 1 under a causal block:
        the committed tokens the draft has not read are the root and at most one before it (the deepest
        accepted node, when the path reached the last level), and rewriting a slot with the token it
        already holds only refreshes a draft's K/V, which proposes and never decides. So the root's
        shape is fixed, and nothing on the host counts what the draft has read.
        """
        parents, ancestors = shape.parents, shape.ancestor_matrix()
        self._root_shape = self.static.shape(("root", 2), write_offsets=[0, 1], position_offsets=[0, 1],
                                             block=torch.ones(2, 2, dtype=torch.bool).tril(), rows=[1])
        self._level_shapes = [None]
        for level in range(1, shape.depth):
            start, end = shape.level_ranges[level]
            self._level_shapes.append(self.static.shape(
                ("level", tuple(parents), level), write_offsets=list(range(start, end)),
                position_offsets=shape.depths[start:end], block=ancestors[start:end, :end],
                rows=list(range(end - start))))

    def static_prefill(self, prompt: torch.Tensor, target_features, target_static) -> None:
        if self.copies_target:   # same weights, same prompt: copy the target's cache
            self.static.lean.copy_prefix(target_static.lean, self.prompt_len)
        else:
            self.static.prefill(prompt)

    def static_root(self, history: torch.Tensor, committed: int) -> torch.Tensor:
        return self._root_shape(history[committed - 2:committed], committed - 2)[:, :self.vocab]

    def static_level(self, level: int, tokens: torch.Tensor, root_slot: int) -> torch.Tensor:
        """Level `level`'s nodes at slots root_slot + node id, positions root_slot + depth."""
        return self._level_shapes[level](tokens, root_slot)[:, :self.vocab]

    def static_commit(self, path: torch.Tensor, root_slot: int, target_features) -> None:
        """The root and the accepted path to root_slot.. (a node on the last level was never read: its
        slot is rewritten by the next root, which re-reads it)."""
        self.static.keep(root_slot, path + root_slot)
