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

from .drafter import CausalMask, HeadRows, with_prompt_tokens
from .feature import FeatureDraftForward


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

    def __init__(self, pair, prompt_ids: list[int], max_len: int, max_nodes: int):
        draft = pair.draft
        self.device = pair.device
        self.prompt_len = len(prompt_ids)
        self.taps = draft.taps   # target layers that join the true features
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
        self.labels: dict[int, str] = {}

    @property
    def vocab_ids(self) -> torch.Tensor:
        return self.forward.vocab_ids

    @property
    def dtype(self) -> torch.dtype:
        return self.forward.dtype

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
        self.head.widen(token_ids)

    def input_label(self, depth: int) -> str:
        label = self.labels.get(depth)
        if label is None:
            label = self.labels[depth] = feature_input_label(depth, self.taps)
        return label
