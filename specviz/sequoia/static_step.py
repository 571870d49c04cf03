"""Sequoia's step on static buffers for a fixed tree: what a GPU captures and replays.

One step, with C committed tokens (root = the last, at slot C - 1):
1. draft: the drafter's fixed root read, then one fixed-shape forward per level (`drafter.StaticDrafter`);
   children are drawn on the device (top-c, or Gumbel-top-k without replacement when sampling);
2. target: ONE `StaticShape` per tree shape (write offsets 0..n-1 from the root's slot, positions =
   depths, block = the tree's ancestor matrix, every row's logits; features when the drafter reads them);
3. verify: the greedy or sampled walk as fixed loops on the device (`device_verify`);
4. compact both caches through the walk's fixed-length path index, and write the new committed tokens
   into the device-side `history` (the next root and the drafter's inputs come from it);
5. ONE host read: the accepted path, the bonus, and every node's token, p, q and status.

Near the end of a run the eager path cuts the tree (`depth` < the tree's): here the whole tree is
drafted and verified and the walk is held to `depth` levels instead (a host number that only bounds a
Python loop, so no new shape). Capturing the cut trees too would add a target graph and a set of level
graphs per cut depth, each replayed once or twice a run, so their capture would cost far more than the
unused rows do (on a GPU a few more rows of a forward are nearly free). The step record and the app's
tree show the cut tree (the nodes past `depth` were computed but were never candidates).
"""

from __future__ import annotations

import torch

from ..draft.drafter import make_drafter
from ..draws import exponential_like, first_argmax
from ..engine.sampling import next_token_on_device, probs_from_logits
from ..engine.static import cache_capacity, checkout, release
from .device_verify import STATUS_NAMES, WalkTables, greedy_walk_device, sampled_walk_device
from .tree import TreeShape, TreeTensors


def _probs_at(logits: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """softmax(logits)[rows, cols], temperature 1 (greedy steps show the model's own confidence)."""
    return (logits[rows, cols].float() - logits.float().logsumexp(dim=-1)[rows]).exp()


class StaticTreeStep:
    """One decoder's static state: session, target shape, drafter shapes, device buffers."""

    def __init__(self, decoder, parents: list[int], max_len: int):
        pair = decoder.pair
        self.decoder, self.device, self.vocab = decoder, decoder.device, pair.vocab_size
        self.sampling, self.generator = decoder.sampling, decoder.generator
        self.session = checkout(pair.target, "sequoia", cache_capacity(max_len), self.device.type == "cuda")
        self.target = self.session.forward("target", pair.target)
        self.drafter = make_drafter(pair, decoder.prompt_ids, max_len, len(parents), None, session=self.session)
        self.drafter.static_prepare(TreeShape.from_parents(parents))
        self.features, self.taps = self.drafter.reads_features, self.drafter.taps
        self.shape = TreeShape.from_parents(parents)
        self.tt = TreeTensors(self.shape, self.device, pair.dtype)
        self.tables = WalkTables(self.shape, self.device)
        n, depth = self.shape.size, self.shape.depth
        self.tree_forward = self.target.shape(
            ("tree", tuple(parents), self.features, self.taps), write_offsets=list(range(n)),
            position_offsets=self.shape.depths, block=self.shape.ancestor_matrix(), rows=list(range(n)),
            hidden=self.features, taps=self.taps)
        dev = self.device
        self.tokens = torch.zeros(n, dtype=torch.long, device=dev)
        self.child_q = torch.ones(n, device=dev)
        # Every committed token by slot: the root and the drafters' inputs are read from it on the device.
        self.history = torch.zeros(self.target.lean.max_len + depth + 2, dtype=torch.long, device=dev)
        self.arange = torch.arange(depth + 1, device=dev)
        inner_end = self.shape.level_ranges[depth - 1][1] if depth else 1
        self.draft_q = None if self.sampling.greedy else torch.zeros(inner_end, self.vocab, device=dev)
        self.parents = self.tt.parents

    @property
    def stats(self):
        return self.session.runner.stats

    # -- step 0 -----------------------------------------------------------------------------------

    def prefill(self) -> int:
        """The prompt through the target (eagerly), the first token, the drafter's prefill; one read."""
        ids = torch.tensor([self.decoder.prompt_ids], dtype=torch.long, device=self.device)
        out = self.target.prefill(ids, hidden=self.features, taps=self.taps)
        logits, hidden = out if self.features else (out, None)
        row = logits[-1:, :self.vocab]
        token = next_token_on_device(row, self.sampling, self.generator)
        prompt_len = ids.shape[1]
        self.history[:prompt_len] = ids[0]
        self.history[prompt_len:prompt_len + 1] = token
        self.drafter.static_prefill(ids, hidden, self.target)
        token = int(token)
        self.drafter.widen([token])
        return token

    # -- a tree step ------------------------------------------------------------------------------

    def draft(self, committed: int) -> None:
        """Fill `tokens` (and q per node with children, each child's draft probability) level by level."""
        root_slot = committed - 1
        self.tokens[:1] = self.history[root_slot:committed]
        if self.shape.depth == 0:
            return
        logits = self.drafter.static_root(self.history, committed)
        self._draw_children(0, logits)
        for level in range(1, self.shape.depth):
            start, end = self.shape.level_ranges[level]
            logits = self.drafter.static_level(level, self.tokens[start:end], root_slot)
            self._draw_children(level, logits)

    def _draw_children(self, level: int, logits: torch.Tensor) -> None:
        tt = self.tt
        vocab_ids = self.drafter.vocab_ids   # the token of each logits column (None: column = token)
        width = tt.level_width[level]
        rows, ranks = tt.draw_row[level], tt.draw_rank[level]
        child_start, child_end = self.shape.level_ranges[level + 1]
        if self.sampling.greedy:
            picked = logits.topk(width, dim=-1).indices[rows, ranks]
            self.child_q[child_start:child_end] = _probs_at(logits, rows, picked)
        else:
            q = probs_from_logits(logits, self.sampling)
            start, end = self.shape.level_ranges[level]
            if vocab_ids is None:
                self.draft_q[start:end] = q
            else:   # zero outside the head's rows: they only grow in a run, so no column is ever stale
                self.draft_q[start:end].index_copy_(1, vocab_ids, q)
            # Gumbel-top-k: the top-c of q / Exp(1) are c draws without replacement, in drawing order.
            picked = (q / exponential_like(q, self.generator)).topk(width, dim=-1).indices[rows, ranks]
            self.child_q[child_start:child_end] = q[rows, picked]
        self.tokens[child_start:child_end] = picked if vocab_ids is None else vocab_ids[picked]

    def target_forward(self, committed: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The tree's one target forward from the root's slot: logits of every node (and features)."""
        out = self.tree_forward(self.tokens, committed - 1)
        logits, hidden = out if self.features else (out, None)
        return logits[:, :self.vocab], hidden

    def verify(self, committed: int, depth: int, logits: torch.Tensor, hidden: torch.Tensor | None) -> dict:
        """The device walk held to `depth` levels, compaction, the next tokens; ONE host read of it all."""
        root_slot = committed - 1
        tokens, parents = self.tokens, self.parents
        if self.sampling.greedy:
            walk = greedy_walk_device(self.tables, tokens, first_argmax(logits), depth)
            target_p = _probs_at(logits, parents, tokens)
        else:
            target_probs = probs_from_logits(logits, self.sampling)
            uniforms = torch.rand(max(self.shape.depth, 1), self.tables.children.shape[1],
                                  generator=self.generator, device=self.device)
            walk = sampled_walk_device(self.tables, tokens, target_probs, self.draft_q, uniforms, depth,
                                       self.generator)
            target_p = target_probs[parents, tokens]
        self.target.keep(root_slot, walk.path + root_slot)
        self.drafter.static_commit(walk.path, root_slot, hidden)
        # The committed tokens after the root: the accepted path's, then the bonus (repeated past it).
        after = torch.cat([tokens.index_select(0, walk.path[1:]), walk.bonus.view(1)])
        self.history.index_copy_(0, self.arange + committed, torch.where(self.arange < walk.accepted, after,
                                                                         walk.bonus))
        read = torch.cat([walk.accepted.view(1).double(), walk.bonus.view(1).double(), walk.path.double(),
                          tokens.double(), target_p.double(), self.child_q.double(), walk.status.double()])
        got = self._unpack(read.tolist())
        self.drafter.widen([got["tokens"][i] for i in got["accepted"]] + [got["bonus"]])
        return got

    def _unpack(self, read: list[float]) -> dict:
        n, depth = self.shape.size, self.shape.depth
        accepted, bonus = int(read[0]), int(read[1])
        path = [int(x) for x in read[2:2 + depth + 1]]
        at = 3 + depth
        tokens = [int(x) for x in read[at:at + n]]
        return {"accepted": path[1:1 + accepted], "bonus": bonus, "tokens": tokens,
                "target_p": read[at + n:at + 2 * n], "draft_p": read[at + 2 * n:at + 3 * n],
                "status": [STATUS_NAMES[int(x)] for x in read[at + 3 * n:at + 4 * n]]}

    def close(self) -> None:
        release(self.session)
        self.session = self.drafter = self.target = None
