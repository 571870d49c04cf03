"""A feature draft (EAGLE style, `feature.py`) as a tree decoder's `Drafter`.

It reads the target's hidden states: every target forward returns them, and the draft's cache holds
pairs (f_j, x_{j+1}) at slot j built from true features only. The root x_{C-1} is in the pair at slot
C - 2, so a tree node read at offset k sits at slot C - 2 + k, position C - 2 + depth. The root's
read feeds the last R = depth + 1 true pairs (slots C - 1 - R .. C - 2, the root's last): at most
depth + 1 pairs are new after a step (the root's and the accepted path's), so the window always covers
them, and re-reading the others rewrites the same true pairs. On a CPU, where its forward attends over
the filled slots only, it feeds exactly the new pairs (their count is the decoder's `fresh`). Its last output is the root's predicted
feature, which drafts level 1. A node at level d >= 1 reads (its parent's predicted feature, its token)
and attends to the committed pairs and its ancestors; these scratch slots are overwritten by the next
step's root window, so only true-feature entries persist. The true features live on the device by slot
(`features_by_slot`, written from each target forward through the step's compaction index) and the
tokens in the decoder's `history`: nothing on the host counts what the draft has read.
"""

from __future__ import annotations

import torch

from . import feature
from .drafter import HeadRows, ModelDrafter, TreeLevel, session_role, with_prompt_tokens
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

    def __init__(self, pair, prompt_ids: list[int], session, max_nodes: int, max_depth: int):
        draft = pair.draft
        self.device, self.vocab = pair.device, pair.vocab_size
        self.prompt_len = len(prompt_ids)
        self.taps = draft.taps   # target layers that join the true features
        self.labels: dict[int, str] = {}
        # The session outlives the race: a forward kept for this draft is reused only where a new one
        # would be the same (its weights in int8 or not).
        int8 = feature.int8_decoding_supported(pair.device, draft.fc.weight.dtype)
        role = session_role(f"feature-draft-{'int8' if int8 else 'dense'}", draft)
        found = session.kept(role, draft, lambda: FeatureStaticForward(draft, session.capacity, session.runner, role))
        self.forward = found
        inner = found.eager_forward   # on a CPU: the eager forward (int8, a head over a widening subset)
        self.head = None
        if inner is not None:   # the session outlives a race: this race's head starts from its own prompt
            found.reset_head(with_prompt_tokens(draft.vocab_ids, prompt_ids, self.device))
            self.head = HeadRows(inner, pair.vocab_size, self.device)
        # draft_int8: its levels ran in weight-only int8 (on a CPU; proposals only, exactness untouched)
        self.settings = {"draft_kind": "feature", "draft_int8": inner is not None and inner.int8}
        self.hidden, self.width = draft.hidden, draft.hidden * (1 + len(self.taps))
        self.window = max_depth + 1
        self.root_shapes: dict = {}   # pairs -> the forward's shape for a root read of that many
        dev, dtype = self.device, found.dtype
        # + window: the compaction index writes a whole path's rows from the last root on.
        self.features_by_slot = torch.zeros(found.max_len + self.window, self.width, dtype=dtype, device=dev)
        # By node id; one more for a padded level's rows, which all write the scratch node `max_nodes`.
        self.predicted = torch.zeros(max_nodes + 1, self.hidden, dtype=dtype, device=dev)

    @property
    def vocab_ids(self) -> torch.Tensor | None:
        return self.forward.vocab_ids

    def prefill(self, prompt: torch.Tensor, target_features: torch.Tensor | None, target) -> None:
        """Pairs (f_j, x_{j+1}) for j < P - 1 go into the draft's cache now; (f_{P-1}, first token) is the
        first step's newest pair, whose output drafts the root's children."""
        n = self.prompt_len
        self.features_by_slot[:n] = target_features
        if n > 1:
            self.forward.prefill(prompt[:, 1:], target_features[:n - 1])

    def _root_shape(self, pairs: int):
        """The root read's shape over `pairs` new pairs, looked up here first: its spec is built only once (a
        root runs every step)."""
        found = self.root_shapes.get(pairs)
        if found is None:
            found = self.root_shapes[pairs] = self.forward.shape(
                ("root", pairs, self.width), self.width, write_offsets=list(range(pairs)),
                position_offsets=list(range(pairs)), block=torch.ones(pairs, pairs, dtype=torch.bool).tril(),
                rows=[pairs - 1])
        return found

    def root(self, history: torch.Tensor, committed: int, fresh: int, unread: int) -> torch.Tensor:
        # On a CPU only the fresh pairs (a few shapes, one per count); else the fixed window (only a
        # prompt shorter than it makes a narrower one, at the start).
        pairs = min(fresh if self.forward.eager_forward is not None else self.window, committed - 1)
        origin = committed - 1 - pairs
        logits, out = self._root_shape(pairs)(history[origin + 1:committed],
                                              self.features_by_slot[origin:origin + pairs], origin)
        self.predicted[:1] = out[-1:]
        return self._logits(logits)

    def level(self, level: TreeLevel, tokens: torch.Tensor, root_slot: int) -> torch.Tensor:
        """The level's nodes read (their parent's predicted feature, their token) from the root's pair
        (slot C - 2) on."""
        shape = level.prepared(self.forward.shape(("level",) + level.key, self.hidden, **level.shape_spec()))
        logits, out = shape(tokens, self.predicted.index_select(0, level.parents), root_slot - 1)
        self.predicted.index_copy_(0, level.nodes, out)
        return self._logits(logits)

    _logits = ModelDrafter._logits   # over the head's rows, or the real vocabulary (no padding rows)

    def commit(self, path: torch.Tensor, path_slots: torch.Tensor, root_slot: int,
               target_features: torch.Tensor | None) -> None:
        """The true features of the root and the accepted path, at slots root_slot.. (the rows past the
        path are rewritten by later target forwards before any root window reads them)."""
        slots = self.forward.columns[:path.numel()] + root_slot
        self.features_by_slot.index_copy_(0, slots, target_features.index_select(0, path).to(self.forward.dtype))

    def widen(self, token_ids: list[int]) -> None:
        if self.head is not None:   # None: the whole head, read everywhere but on a CPU
            self.head.widen(token_ids)

    def input_label(self, depth: int) -> str:
        label = self.labels.get(depth)
        if label is None:
            label = self.labels[depth] = feature_input_label(depth, self.taps)
        return label
