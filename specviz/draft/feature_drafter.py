"""A feature draft (EAGLE style, `feature.py`) as a tree decoder's `Drafter`.

It reads the target's hidden states: every target forward returns them, and the
draft's cache holds pairs (f_j, x_{j+1}) at slot j built from true features only.
The root x_{C-1} is in the pair at slot C - 2, so a fixed tree's node i sits at
slot C - 2 + i, position C - 2 + depth(i). Level 0 feeds the pending true pairs
(ending with the root's); its last output is the root's predicted feature, which
drafts level 1. A node at level d >= 1 reads (its parent's predicted feature, its
token) and attends to the committed pairs and its ancestors (the tree mask); these
scratch slots are overwritten by the next step's pending pairs, so only
true-feature entries persist.
"""

from __future__ import annotations

import torch

from ..engine.static import static_supported
from .drafter import CausalMask, HeadRows, session_role, with_prompt_tokens
from .feature import FeatureDraftForward
from .feature_static import FeatureStaticForward


def feature_input_label(depth: int, taps: tuple[int, ...] = ()) -> str:
    """What a feature draft read when it proposed a node at `depth` (for the app's hover)."""
    if depth <= 0:
        return ""
    if depth == 1:
        if taps:
            return f"target's hidden states at the root (last layer, and layers {', '.join(map(str, taps))})"
        return "target's hidden state at the root"
    return f"draft's predicted hidden state ({depth - 1} step{'s' if depth > 2 else ''} from the target's)"


class FeatureDrafter:
    reads_features = True

    def __init__(self, pair, prompt_ids: list[int], max_len: int, max_nodes: int, session=None):
        draft = pair.draft
        self.device = pair.device
        self.prompt_len = len(prompt_ids)
        self.taps = draft.taps   # target layers that join the true features
        self.labels: dict[int, str] = {}
        self.static = None
        if session is not None:
            self._static_init(pair, prompt_ids, session)
            return
        self.forward = FeatureDraftForward(draft, max_len, with_prompt_tokens(draft.vocab_ids, prompt_ids,
                                                                              self.device))
        # draft_int8: its levels ran in weight-only int8 (on a CPU; proposals only, exactness untouched)
        self.settings = {"draft_kind": "feature", "draft_int8": self.forward.int8}
        self.head = HeadRows(self.forward, pair.vocab_size, self.device)
        # This step's predicted features, one row per node read (the root's first), which children read.
        self.rows = torch.empty(max_nodes, draft.hidden, dtype=self.forward.dtype, device=self.device)
        self.n_rows = 0
        self.pending_feats: torch.Tensor | None = None   # true features of the pairs not yet fed
        self.seen = 0

    @property
    def vocab_ids(self) -> torch.Tensor | None:
        return self.forward.vocab_ids if self.static is None else self.static.vocab_ids

    @property
    def dtype(self) -> torch.dtype:
        return self.static.dtype if self.static is not None else self.forward.dtype

    def prefill(self, prompt: torch.Tensor, target_features: torch.Tensor | None) -> None:
        """Pairs (f_j, x_{j+1}) for j < P - 1 go into the draft's cache now; (f_{P-1}, first token) is
        the first step's pending pair, whose output drafts the root's children."""
        n = self.prompt_len
        if n > 1:
            self.forward(prompt[:, 1:], target_features[:n - 1], 0)
        self.pending_feats = target_features[n - 1:]
        self.seen = n - 1

    def root(self, generated: list[int], causal_mask: CausalMask | None) -> tuple[int, torch.Tensor]:
        """Feed the pending pairs, the root's last: the root's slot (C - 2) and its children's logits."""
        pending = generated[self.seen + 1 - self.prompt_len:]
        ids = torch.tensor([pending], dtype=torch.long, device=self.device)
        out = self.forward(ids, self.pending_feats, self.seen)[-1:]
        self.seen += len(pending)
        self.rows[:1] = out
        self.n_rows = 1
        return self.prompt_len + len(generated) - 2, self.forward.logits(out)

    def level(self, tokens: torch.Tensor, parent_rows, slot: int, positions: torch.Tensor,
              mask: torch.Tensor) -> torch.Tensor:
        parents = torch.as_tensor(parent_rows, dtype=torch.long, device=self.device)
        out = self.forward(tokens, self.rows.index_select(0, parents), slot, positions=positions, mask=mask)
        self.rows[self.n_rows:self.n_rows + out.shape[0]] = out
        self.n_rows += out.shape[0]
        return self.forward.logits(out)

    def commit(self, path: list[int], keep_from: int, read_slots: torch.Tensor,
               target_features: torch.Tensor | None, drafted: bool) -> None:
        """The next step's pending pairs: (f_root, a_1), (f_a1, a_2), ..., (f_ak, bonus), true features
        only; the draft re-reads them, so none of this step's slots is kept."""
        feats = target_features.index_select(0, torch.tensor(path, dtype=torch.long, device=self.device))
        self.pending_feats = feats if drafted else torch.cat([self.pending_feats, feats])

    def widen(self, token_ids: list[int]) -> None:
        if self.head is not None:   # None: a captured static step reads the whole head
            self.head.widen(token_ids)

    def input_label(self, depth: int) -> str:
        label = self.labels.get(depth)
        if label is None:
            label = self.labels[depth] = feature_input_label(depth, self.taps)
        return label

    # -- the static-buffer step (`drafter.StaticDrafter`) ----------------------------------------------
    #
    # The draft's cache holds the pair (f_j, x_{j+1}) at slot j, as on the eager path, but the true
    # features live on the device by slot (`features_by_slot`, written from each target forward through
    # the fixed-length compaction index) and the tokens in the decoder's `history`, so the root's read
    # is a fixed window instead of "the pairs not read yet": the last R = depth + 1 pairs, slots
    # C - 1 - R .. C - 2, the root's last. At most depth + 1 pairs are new after a step (the root's and
    # the accepted path's), so the window always covers them; re-reading the others rewrites the same
    # true pairs, and it overwrites the tree levels' scratch pairs (predicted features) as the eager path
    # does. Only a prompt shorter than R makes a narrower window (one more shape per width, at the start).

    @staticmethod
    def static_supported(pair) -> bool:
        return static_supported(pair.target)   # the draft's own forward is plain torch

    def _static_init(self, pair, prompt_ids: list[int], session) -> None:
        draft = pair.draft
        role = session_role("feature-draft", draft.fc.weight)
        found = session.forwards.get(role)
        if found is None:
            found = session.forwards[role] = FeatureStaticForward(draft, session.capacity, session.runner, role)
        self.static, self.forward = found, None
        self.hidden, self.width = draft.hidden, draft.hidden * (1 + len(self.taps))
        inner = found.eager_forward   # uncaptured: the eager path's forward (int8, a head over a subset)
        self.head = None
        if inner is not None:   # the session outlives a race: this race's head starts from its own prompt
            found.reset_head(with_prompt_tokens(draft.vocab_ids, prompt_ids, self.device))
            self.head = HeadRows(inner, pair.vocab_size, self.device)
        self.settings = {"draft_kind": "feature", "draft_int8": inner is not None and inner.int8}
        self.features_by_slot = None

    def static_prepare(self, shape) -> None:
        """The tree's (a `sequoia.tree.TreeShape`) level shapes and the step's device buffers."""
        self.tree, parents = shape, shape.parents
        self.window = shape.depth + 1
        dev, dtype = self.device, self.static.dtype
        # + depth + 1: the compaction index writes a whole path's rows from the last root on.
        self.features_by_slot = torch.zeros(self.static.max_len + self.window, self.width, dtype=dtype, device=dev)
        self.predicted = torch.zeros(shape.size, self.hidden, dtype=dtype, device=dev)   # by node id
        self.parent_rows = torch.tensor([max(p, 0) for p in parents], dtype=torch.long, device=dev)
        ancestors = shape.ancestor_matrix()
        self._level_shapes = [None]
        for level in range(1, shape.depth):
            start, end = shape.level_ranges[level]
            self._level_shapes.append(self.static.shape(
                ("level", tuple(parents), level), self.hidden, write_offsets=list(range(start, end)),
                position_offsets=shape.depths[start:end], block=ancestors[start:end, :end],
                rows=list(range(end - start))))

    def _root_shape(self, pairs: int):
        return self.static.shape(("root", pairs, self.width), self.width, write_offsets=list(range(pairs)),
                                 position_offsets=list(range(pairs)),
                                 block=torch.ones(pairs, pairs, dtype=torch.bool).tril(), rows=[pairs - 1])

    def static_prefill(self, prompt: torch.Tensor, target_features, target_static) -> None:
        n = self.prompt_len
        self.features_by_slot[:n] = target_features
        if n > 1:
            self.static.prefill(prompt[:, 1:], target_features[:n - 1])

    def static_root(self, history: torch.Tensor, committed: int) -> torch.Tensor:
        pairs = min(self.window, committed - 1)
        origin = committed - 1 - pairs
        logits, out = self._root_shape(pairs)(history[origin + 1:committed],
                                              self.features_by_slot[origin:origin + pairs], origin)
        self.predicted[:1] = out[-1:]
        return logits

    def static_level(self, level: int, tokens: torch.Tensor, root_slot: int) -> torch.Tensor:
        """Level `level`'s nodes read (their parent's predicted feature, their token) at slots
        C - 2 + node id (the root's pair is at C - 2), positions C - 2 + depth."""
        start, end = self.tree.level_ranges[level]
        logits, out = self._level_shapes[level](tokens, self.predicted.index_select(0, self.parent_rows[start:end]),
                                                root_slot - 1)
        self.predicted[start:end] = out
        return logits

    def static_commit(self, path: torch.Tensor, root_slot: int, target_features) -> None:
        """The true features of the root and the accepted path, at slots root_slot.. (the rows past the
        path are rewritten by later target forwards before any root window reads them)."""
        slots = self.static.columns[:path.numel()] + root_slot
        self.features_by_slot.index_copy_(0, slots, target_features.index_select(0, path).to(self.static.dtype))
