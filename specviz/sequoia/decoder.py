"""Sequoia: tree speculative decoding with an optimal tree and exact sampling.

Each step (one target forward):
1. draft, level by level: one draft forward per tree level over all of that
   level's nodes (tree attention on the draft's own cache); every node draws its
   children from the draft distribution without replacement (Gumbel-top-k via
   q / Exp(1)), or takes the draft's top-c at temperature 0;
2. one target forward over the whole tree (additive float mask, explicit positions);
3. the verification walk (`verify.py`) picks the accepted path and a
   bonus token;
4. both caches keep only the accepted path; the bonus token becomes the next
   step's root, which has no K/V yet.

Cache layout, with C committed tokens (prompt + generated; the last one is the
root): the target cache holds C - 1 slots; the tree's node i goes to slot
C - 1 + i, at position C - 1 + depth(i). The draft cache holds the committed
tokens it has seen (`draft_seen`); at level 0 it is fed the ones it has not
(the root last, plus the deepest accepted token of the last step when the path
reached the last level, which the draft never processes).
"""

from __future__ import annotations

import torch

from ..draft.feature import FeatureDraftForward
from ..draws import exponential_like, first_argmax
from ..engine.decoder import Decoder, PhaseTimer
from ..engine.lean import VocabSubsetHead, make_forward
from ..engine.sampling import next_token, probs_from_logits
from ..trace import (
    PHASE_DRAFT,
    PHASE_TARGET,
    PHASE_VERIFY,
    SOURCE_AR,
    SOURCE_BONUS,
    SOURCE_DRAFT,
    StepRecord,
    TreeNode,
    TreePayload,
)
from .adaptive import allocate_children, level_pays, scratch_mask
from .sizing import adaptive_plan, resolve_tree
from .tree import TreeShape, TreeTensors
from .verify import greedy_walk, sampling_walk

ADAPTIVE_SHAPES_KEPT = 256   # prepared tensors of recent adaptive trees (a few shapes recur)


def _probs_at(logits: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor,
              norm_rows: torch.Tensor | None = None, places: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(logits)[rows, cols] without materialising the softmax of every row.

    With `norm_rows` only those rows are normalised, and `places` says where each of `rows` sits
    among them (a tree's leaves are never a parent, so their logsumexp is not needed).
    """
    if norm_rows is None:
        return (logits[rows, cols].float() - logits.float().logsumexp(dim=-1)[rows]).exp()
    norms = logits.index_select(0, norm_rows).float().logsumexp(dim=-1)
    return (logits[rows, cols].float() - norms[places]).exp()


class _GreedyPicks:
    """The target's greedy token at a tree node, picked when the verification walk reads it.

    A greedy walk reads only the rows of the accepted path and the node where it ends (two or three of a
    12-node tree's), so on a CPU picking those rows alone costs a fraction of one pick over every row.
    On a GPU every read would be a device sync, so there all rows are picked at once.
    """

    def __init__(self, logits: torch.Tensor):
        self.logits = logits
        self.all = first_argmax(logits).tolist() if logits.device.type != "cpu" else None

    def __getitem__(self, node: int) -> int:
        if self.all is not None:
            return self.all[node]
        return int(first_argmax(self.logits[node]))


def _draft_vocab(draft, prompt_ids: list[int], device) -> torch.Tensor | None:
    """The draft head's tokens widened by the prompt's: answers quote their prompt (None: whole vocabulary)."""
    if getattr(draft, "is_feature_draft", False):
        ids = draft.vocab_ids
    else:
        head = getattr(draft, "lm_head", None)
        if not isinstance(head, VocabSubsetHead):
            return None
        ids = head.vocab_ids
    prompt = torch.tensor(prompt_ids, dtype=torch.long, device=device)
    return torch.unique(torch.cat([ids.to(device), prompt]))


def feature_input_label(depth: int, taps: tuple[int, ...] = ()) -> str:
    """What a feature draft read when it proposed a node at `depth` (for the app's hover)."""
    if depth <= 0:
        return ""
    if depth == 1:
        if taps:
            return f"target's hidden states at the root (last layer, and layers {', '.join(map(str, taps))})"
        return "target's hidden state at the root"
    return f"draft's predicted hidden state ({depth - 1} step{'s' if depth > 2 else ''} from the target's)"


class SequoiaDecoder(Decoder):
    method = "sequoia"
    lean = True  # False: transformers' own forward for both models (A/B measurements, tests)

    def __init__(self, pair, prompt, prompt_ids, sampling, max_new_tokens, tree_budget=None, tree_depth=None,
                 tree_parents=None, tree=None, tree_threshold=None):
        super().__init__(pair, prompt, prompt_ids, sampling, max_new_tokens)
        self.adaptive = tree == "adaptive"
        parents, settings = (None, {}) if self.adaptive else resolve_tree(
            pair, self.sampling, tree_budget, tree_depth, tree_parents, type(self))
        if parents is None:   # asked for, or `auto` raced it faster on this machine (`sizing.race_trees`)
            self.adaptive = True
            # A level is read only where it can pay for itself (`adaptive.level_pays`), at these costs;
            # by default a tree holds only the nodes the target reads for free (`sizing.adaptive_plan`).
            self.adaptive_plan, self.adaptive_costs = adaptive_plan(pair, tree_budget, tree_depth, tree_parents,
                                                                    tree_threshold)
            self.shape = None   # grown each step (`_draft_adaptive`)
            max_nodes, self.max_depth = self.adaptive_plan["max_nodes"], self.adaptive_plan["max_depth"]
            self.trace.settings.update(settings)
            self.trace.settings.update(tree="adaptive", tree_budget=max_nodes, tree_depth=self.max_depth,
                                       level_cost=round(self.adaptive_costs["draft"][1], 4),
                                       level_cost_from=self.adaptive_costs["from"], **self.adaptive_plan)
        else:
            self.shape = TreeShape.from_parents(parents)
            max_nodes, self.max_depth = self.shape.size, self.shape.depth
            self.trace.settings.update(tree_budget=self.shape.size, tree_depth=self.shape.depth,
                                       tree_parents=parents, **settings)
        self.vocab = pair.vocab_size
        # Both models run through one forward interface (a lean Llama forward where exact, else
        # transformers'), each over its own cache, even when the target drafts for itself.
        max_len = len(self.prompt_ids) + self.max_new_tokens + max_nodes
        self.target_fwd = make_forward(pair.target, max_len, lean=self.lean)
        vocab_ids = _draft_vocab(pair.draft, self.prompt_ids, self.device)
        # A feature draft (EAGLE style) reads the target's hidden states: every target forward returns
        # them, and the draft's cache holds pairs (f_j, x_{j+1}) at slot j built from true features only.
        self.feature = bool(getattr(pair.draft, "is_feature_draft", False))
        self.taps = pair.draft.taps if self.feature else ()   # target layers that join the true features
        if self.feature:
            self.draft_fwd = FeatureDraftForward(pair.draft, max_len, vocab_ids)
            self.pending_feats: torch.Tensor | None = None   # true features of the pairs not yet fed
            # draft_int8: its levels ran in weight-only int8 (on a CPU; proposals only, exactness untouched)
            self.trace.settings.update(draft_kind="feature", draft_int8=self.draft_fwd.int8)
        else:
            self.draft_fwd = make_forward(pair.draft, max_len, vocab_ids, lean=self.lean)
        # Tokens the draft's head has rows for (None: all). The target's own words join them as it
        # writes them: an answer repeats its words, and a token the head lacks can never be drafted.
        self.head_tokens = set(self.draft_fwd.vocab_ids.tolist()) \
            if getattr(self.draft_fwd, "vocab_ids", None) is not None and hasattr(self.draft_fwd, "widen") else None
        self.draft_seen = 0
        self._tensors: dict = {}   # depth (or an adaptive tree's parents) -> prepared tensors

    # -- per-shape preparation ----------------------------------------------------------------

    def _tree(self, depth: int) -> TreeTensors:
        """Tensors for the tree cut to `depth` levels (near max_new_tokens or the context end)."""
        tt = self._tensors.get(depth)
        if tt is None:
            shape = self.shape if depth == self.shape.depth else self.shape.truncated(depth)
            tt = self._tensors[depth] = TreeTensors(shape, self.device, self.pair.dtype)
        return tt

    # -- the step -----------------------------------------------------------------------------

    def _adaptive_tree(self, parents: list[int]) -> TreeTensors:
        """Prepared tensors of an adaptive step's tree: a handful of shapes recur, so they are kept."""
        key = tuple(parents)
        tt = self._tensors.get(key)
        if tt is None:
            if len(self._tensors) >= ADAPTIVE_SHAPES_KEPT:
                self._tensors.pop(next(iter(self._tensors)))
            tt = self._tensors[key] = TreeTensors(TreeShape.from_parents(parents), self.device, self.pair.dtype)
        return tt

    def _step(self) -> StepRecord:
        if not self.trace.steps:
            return self._prefill()
        committed = len(self.prompt_ids) + len(self.generated)
        remaining = self.max_new_tokens - len(self.generated)
        # No speculation past what can be emitted, nor past the model's context.
        depth = max(0, min(self.max_depth, remaining - 1, self.pair.max_context - committed))
        drafted = depth > 0   # the draft runs this step (and reads its pending pairs)
        timer = PhaseTimer(self.device)
        timer.start(PHASE_DRAFT)
        expanded_slots = None   # adaptive trees: the draft slot of each expanded node
        if self.adaptive:
            tt, tokens, draft_probs, child_q, expanded_slots = self._draft_adaptive(committed, depth)
        else:
            tt = self._tree(depth)
            tokens, draft_probs, child_q = self._draft_tree(tt, committed)
        timer.start(PHASE_TARGET)
        root_slot = committed - 1
        out = self.target_fwd(tokens.unsqueeze(0), root_slot, positions=tt.depth_offsets + root_slot,
                              mask=tt.target_mask(root_slot), rows=tt.shape.size, hidden=self.feature,
                              taps=self.taps)
        hidden = None
        if self.feature:
            out, hidden = out
        logits = out[:, :self.vocab]
        timer.start(PHASE_VERIFY)
        shape = tt.shape
        token_list = tokens.tolist()
        if self.sampling.greedy:
            walk = greedy_walk(shape.children, token_list, _GreedyPicks(logits))
            target_probs = None
        else:
            target_probs = probs_from_logits(logits, self.sampling)
            walk = sampling_walk(shape.children, token_list, target_probs, draft_probs, self.generator)
        self._compact(walk.accepted, shape, depth, root_slot, expanded_slots)
        if self.feature:
            # The next step's pending pairs: (f_root, a_1), (f_a1, a_2), ..., (f_ak, bonus), true features only.
            feats = hidden.index_select(0, torch.tensor([0] + walk.accepted, dtype=torch.long, device=self.device))
            self.pending_feats = feats if drafted else torch.cat([self.pending_feats, feats])
        new_ids = [token_list[i] for i in walk.accepted] + [walk.bonus_token]
        sources = [SOURCE_DRAFT] * len(walk.accepted) + [SOURCE_BONUS]
        payload = self._payload(tt, token_list, walk, logits, target_probs, child_q)
        times = timer.stop()
        payload.draft_ms = round(times.get(PHASE_DRAFT, 0.0), 4)
        payload.verify_ms = round(times.get(PHASE_TARGET, 0.0) + times.get(PHASE_VERIFY, 0.0), 4)
        self._widen_head(new_ids)
        return self._emit(new_ids, sources, shape.size, times, payload)

    def _widen_head(self, new_ids: list[int]) -> None:
        """Rows for the written tokens the draft's head lacks (a few a run; the head is cut anew)."""
        if self.head_tokens is None:
            return
        fresh = [t for t in dict.fromkeys(new_ids) if t not in self.head_tokens and t < self.vocab]
        if fresh:
            self.head_tokens.update(fresh)
            self.draft_fwd.widen(torch.tensor(fresh, dtype=torch.long, device=self.device))

    def _prefill(self) -> StepRecord:
        """Step 0: the target reads the prompt and yields the first token, like autoregressive."""
        timer = PhaseTimer(self.device)
        timer.start(PHASE_TARGET)
        ids = torch.tensor([self.prompt_ids], dtype=torch.long, device=self.device)
        out = self.target_fwd(ids, 0, hidden=self.feature, taps=self.taps)
        logits = (out[0] if self.feature else out)[:, :self.vocab]
        token = int(next_token(logits, self.sampling, self.generator))
        timer.start(PHASE_DRAFT)
        if self.feature:
            # Pairs (f_j, x_{j+1}) for j < P - 1 go into the draft's cache now; (f_{P-1}, first token) is
            # the first step's pending pair, whose output drafts the root's children.
            feats = out[1]
            n = len(self.prompt_ids)
            if n > 1:
                self.draft_fwd(ids[:, 1:], feats[:n - 1], 0)
            self.pending_feats = feats[n - 1:]
            self.draft_seen = n - 1
            self._widen_head([token])
            return self._emit([token], [SOURCE_AR], len(self.prompt_ids), timer.stop())
        if self.pair.draft_is_target and type(self.draft_fwd) is type(self.target_fwd):
            # Same model, same prompt: the draft's cache is a copy, not a second prefill.
            self.draft_fwd.copy_prefix(self.target_fwd, len(self.prompt_ids))
        else:
            self.draft_fwd(ids, 0)
        self.draft_seen = len(self.prompt_ids)
        self._widen_head([token])
        return self._emit([token], [SOURCE_AR], len(self.prompt_ids), timer.stop())

    def _draft_tree(self, tt: TreeTensors, committed: int) -> tuple[torch.Tensor, dict, torch.Tensor]:
        """Fill the tree's tokens level by level.

        Returns the tokens, q at every node with children (sampling only), and each
        node's draft probability when it was drawn (for the app).
        """
        shape = tt.shape
        tokens = torch.empty(shape.size, dtype=torch.long, device=self.device)
        tokens[0] = self.generated[-1]
        child_q = torch.ones(shape.size, device=self.device)
        draft_probs: dict[int, torch.Tensor] = {}
        if shape.depth == 0:
            return tokens, draft_probs, child_q
        if self.feature:
            return self._draft_tree_feature(tt, committed, tokens, draft_probs, child_q)
        # Tokens the draft has not read yet (always generated ones after the prefill); the root is last.
        pending = self.generated[self.draft_seen - len(self.prompt_ids):]
        root_slot = committed - 1
        vocab_ids = self.draft_fwd.vocab_ids   # the draft head's token per row (None: row = token)
        for level in range(shape.depth):
            start, end = shape.level_ranges[level]
            if level == 0:
                n_in = len(pending)
                ids = torch.tensor([pending], dtype=torch.long, device=self.device)
                logits = self.draft_fwd(ids, committed - n_in, mask=tt.draft_mask(0, committed - n_in, n_in))
            else:
                logits = self.draft_fwd(tokens[start:end].unsqueeze(0), root_slot + start,
                                        positions=tt.depth_offsets[start:end] + root_slot,
                                        mask=tt.draft_mask(level, root_slot), rows=end - start)
            self._draw_children(tt, level, self._draft_logits(logits), vocab_ids, tokens, draft_probs, child_q)
        return tokens, draft_probs, child_q

    def _draw_children(self, tt: TreeTensors, level: int, logits: torch.Tensor, vocab_ids: torch.Tensor | None,
                       tokens: torch.Tensor, draft_probs: dict, child_q: torch.Tensor) -> None:
        """From the draft's logits at one level's nodes, draw their children (without replacement)
        into `tokens`, with q per parent (sampling) and each child's draft probability."""
        shape = tt.shape
        start, end = shape.level_ranges[level]
        width = tt.level_width[level]
        if self.sampling.greedy:
            draws = logits.topk(width, dim=-1).indices
            q = None
        else:
            q = probs_from_logits(logits, self.sampling)
            draws = self._draws_without_replacement(q, width)
            for i in range(start, end):
                if shape.children[i]:
                    draft_probs[i] = self._full_vocab(q[i - start], vocab_ids)
        child_start, child_end = shape.level_ranges[level + 1]
        rows, ranks = tt.draw_row[level], tt.draw_rank[level]
        picked = draws[rows, ranks]
        if q is None:   # greedy: each drawn token's draft probability, only shown in the app
            child_q[child_start:child_end] = _probs_at(logits, rows, picked)
        else:
            child_q[child_start:child_end] = q[rows, picked]
        tokens[child_start:child_end] = picked if vocab_ids is None else vocab_ids[picked]

    def _draft_tree_feature(self, tt: TreeTensors, committed: int, tokens: torch.Tensor, draft_probs: dict,
                            child_q: torch.Tensor) -> tuple[torch.Tensor, dict, torch.Tensor]:
        """`_draft_tree` for a feature draft.

        Draft slot j holds the pair (f_j, x_{j+1}); the root x_{C-1} is in the pair at slot C - 2, so
        tree node i sits at slot C - 2 + i, position C - 2 + depth(i). Level 0 feeds the pending true
        pairs (ending with the root's); its last output is the root's predicted feature, which drafts
        level 1. A node at level d >= 1 reads (its parent's predicted feature, its token) and attends
        to the committed pairs and its ancestors (the tree mask); these scratch slots are overwritten
        by the next step's pending pairs, so only true-feature entries persist.
        """
        shape = tt.shape
        vocab_ids = self.draft_fwd.vocab_ids
        feats = torch.empty(shape.size, self.pair.draft.hidden, dtype=self.draft_fwd.dtype, device=self.device)
        root_slot, logits, feats[:1] = self._draft_root(committed)
        self._draw_children(tt, 0, logits, vocab_ids, tokens, draft_probs, child_q)
        for level in range(1, shape.depth):
            start, end = shape.level_ranges[level]
            out = self.draft_fwd(tokens[start:end], feats.index_select(0, tt.parents[start:end]),
                                 root_slot + start, positions=tt.depth_offsets[start:end] + root_slot,
                                 mask=tt.draft_mask(level, root_slot))
            feats[start:end] = out
            self._draw_children(tt, level, self.draft_fwd.logits(out), vocab_ids, tokens, draft_probs, child_q)
        return tokens, draft_probs, child_q

    def _draft_adaptive(self, committed: int, max_depth: int):
        """Grow this step's tree from the draft's confidence (`adaptive.py`).

        Nodes are numbered breadth first as they are made; an expanded node's K/V goes to the next free
        draft slot after the root's (scratch, overwritten next step). Returns the tree's prepared
        tensors, its tokens, q per node with children (sampling), each node's draft probability, and
        the draft slot of every expanded node (an independent draft keeps the accepted ones).
        """
        plan = self.adaptive_plan
        tau, max_children, max_nodes = plan["threshold"], plan["max_children"], plan["max_nodes"]
        parents, token_ids, scores, depths = [-1], [self.generated[-1]], [1.0], [0]
        child_q, draft_probs = [1.0], {}
        if max_depth == 0:
            tt = self._adaptive_tree(parents)
            return tt, torch.tensor(token_ids, device=self.device), draft_probs, torch.ones(1, device=self.device), {}
        root_slot, logits, feats = self._draft_root(committed)
        vocab_ids = self.draft_fwd.vocab_ids
        target_cost, level_cost = self.adaptive_costs["target"], self.adaptive_costs["draft"]
        spent = level_cost[1]   # the draft's cost so far (the root's level)
        # Expanded nodes: their draft slot and (feature draft) their row in feats, the features they output.
        frontier, slot_of, feat_row = [0], {0: root_slot}, {0: 0}
        next_slot = root_slot + 1
        for level in range(max_depth):
            q, draws, p_list = self._ranked_children(logits, max_children)
            counts = allocate_children([scores[v] for v in frontier], p_list, tau, max_children,
                                       max_nodes - len(parents))
            if not any(counts):
                break
            drawn = (draws if vocab_ids is None else vocab_ids[draws]).tolist()
            # Greedy draws are the ranked children themselves, so their q is the ranked probabilities.
            drawn_q = p_list if self.sampling.greedy else q.gather(-1, draws).tolist()
            made = []
            for r, v in enumerate(frontier):
                if counts[r] and not self.sampling.greedy:
                    draft_probs[v] = self._full_vocab(q[r], vocab_ids)
                for k in range(counts[r]):
                    parents.append(v)
                    token_ids.append(drawn[r][k])
                    scores.append(scores[v] * p_list[r][k])
                    depths.append(depths[v] + 1)
                    child_q.append(drawn_q[r][k])
                    made.append(len(parents) - 1)
            frontier = [i for i in made if scores[i] >= tau]
            if level == max_depth - 1 or not frontier or len(parents) >= max_nodes:
                break
            cost = level_cost[len(frontier)]
            top1 = sum(p[0] for p in p_list) / len(p_list)   # how sure the draft was at this level
            if not level_pays([scores[i] for i in frontier], top1, sum(scores), cost,
                              target_cost[len(parents)] + spent):
                break
            spent += cost
            # The draft reads the nodes that may still get children, each attending to the committed
            # tokens and to its expanded ancestors.
            ancestors = [self._ancestor_slots(i, parents, slot_of) for i in frontier]
            mask = scratch_mask(ancestors, root_slot + 1, next_slot, self.draft_fwd.dtype, self.device)
            positions = torch.tensor([root_slot + depths[i] for i in frontier], dtype=torch.long,
                                     device=self.device)
            ids = torch.tensor([token_ids[i] for i in frontier], dtype=torch.long, device=self.device)
            first_row = 0 if feats is None else feats.shape[0]
            logits, feats = self._draft_level(ids, [feat_row[parents[i]] for i in frontier], feats, next_slot,
                                              positions, mask)
            for j, i in enumerate(frontier):
                slot_of[i], feat_row[i] = next_slot + j, first_row + j
            next_slot += len(frontier)
        tt = self._adaptive_tree(parents)
        return (tt, torch.tensor(token_ids, dtype=torch.long, device=self.device), draft_probs,
                torch.tensor(child_q, device=self.device), slot_of)

    def _draft_root(self, committed: int) -> tuple[int, torch.Tensor, torch.Tensor | None]:
        """The draft reads the committed tokens it has not seen, the root last.

        Returns the root's draft slot, the draft's logits there (the root's children) and, for a
        feature draft, the root's predicted feature (the first row of the step's features). A
        feature draft's slot j holds the pair (f_j, x_{j+1}), so the root's pair sits at C - 2;
        an independent draft holds the root itself at C - 1.
        """
        if self.feature:
            pending = self.generated[self.draft_seen + 1 - len(self.prompt_ids):]
            ids = torch.tensor([pending], dtype=torch.long, device=self.device)
            out = self.draft_fwd(ids, self.pending_feats, self.draft_seen)[-1:]
            self.draft_seen += len(pending)
            return committed - 2, self.draft_fwd.logits(out), out
        pending = self.generated[self.draft_seen - len(self.prompt_ids):]
        ids = torch.tensor([pending], dtype=torch.long, device=self.device)
        logits = self.draft_fwd(ids, committed - len(pending))   # causal after the cache; the last row
        self.draft_seen = committed
        return committed - 1, self._draft_logits(logits), None

    def _draft_level(self, ids: torch.Tensor, parent_rows: list[int], feats: torch.Tensor | None, slot: int,
                     positions: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One draft forward over an adaptive tree's expanded nodes, written from `slot` on: their logits,
        and the step's features with theirs appended (a feature draft reads its parent's)."""
        if feats is None:
            logits = self.draft_fwd(ids.unsqueeze(0), slot, positions=positions, mask=mask, rows=ids.numel())
            return self._draft_logits(logits), None
        rows = torch.tensor(parent_rows, dtype=torch.long, device=self.device)
        out = self.draft_fwd(ids, feats.index_select(0, rows), slot, positions=positions, mask=mask)
        return self.draft_fwd.logits(out), torch.cat([feats, out])

    def _draft_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """An independent draft's logits over its head's rows, or its real vocabulary (no padding rows)."""
        return logits if self.draft_fwd.vocab_ids is not None else logits[:, :self.vocab]

    def _ranked_children(self, logits: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor, list]:
        """q per row (what children are drawn from), `width` draws per row in drawing order, and the
        ranked probabilities that score them.

        Scores use the draft's confidence at temperature 1, the scale on which it is calibrated
        (sharpened to T=0.6 it promised acceptance that sampled steps did not get).
        """
        confidence = logits.float().softmax(dim=-1)
        ranked = confidence.topk(width, dim=-1)
        if self.sampling.greedy:
            return confidence, ranked.indices, ranked.values.tolist()
        q = probs_from_logits(logits, self.sampling)
        return q, self._draws_without_replacement(q, width), ranked.values.tolist()

    def _draws_without_replacement(self, q: torch.Tensor, width: int) -> torch.Tensor:
        """`width` tokens per row of q, drawn without replacement, in drawing order (Gumbel-top-k: the
        top-c of q / Exp(1) is such a draw)."""
        return (q / exponential_like(q, self.generator)).topk(width, dim=-1).indices

    @staticmethod
    def _ancestor_slots(node: int, parents: list[int], slot_of: dict[int, int]) -> list[int]:
        """Draft slots of a node's ancestors below the root (all expanded, since they have children)."""
        slots, a = [], parents[node]
        while a > 0:
            slots.append(slot_of[a])
            a = parents[a]
        return slots

    def _compact(self, accepted: list[int], shape: TreeShape, depth: int, root_slot: int,
                 expanded_slots: dict[int, int] | None = None) -> None:
        """Keep the root and the accepted path in both caches, right after the prefix."""
        path = [0] + accepted
        keep = torch.tensor(path, dtype=torch.long, device=self.device) + root_slot
        self.target_fwd.keep(root_slot, keep)
        if depth == 0 or self.feature:   # a feature draft re-reads the accepted pairs with true features
            return  # the draft ran no forward this step; its pending tokens simply grow
        if expanded_slots is not None:
            # An adaptive tree's expanded path nodes (a prefix of the path: a node is read only if its
            # parent was) sit in scratch slots after the root's; the rest stay pending.
            slots = [expanded_slots[i] for i in accepted if i in expanded_slots]
            self.draft_fwd.keep(root_slot + 1, torch.tensor(slots, dtype=torch.long, device=self.device))
            self.draft_seen = root_slot + 1 + len(slots)
            return
        # The draft processed levels 0 .. depth-1 only: a path node on the last level is pending.
        seen = [i for i in path if shape.depths[i] < depth]
        self.draft_fwd.keep(root_slot, keep[:len(seen)])
        self.draft_seen = root_slot + len(seen)

    def _full_vocab(self, q: torch.Tensor, vocab_ids: torch.Tensor | None) -> torch.Tensor:
        """q over the whole vocabulary (zero outside the draft head's rows), as verification needs."""
        if vocab_ids is None:
            return q
        return q.new_zeros(self.vocab).index_copy_(0, vocab_ids, q)

    def _payload(self, tt: TreeTensors, tokens: list[int], walk, logits: torch.Tensor,
                 target_probs: torch.Tensor | None, child_q: torch.Tensor) -> TreePayload:
        shape = tt.shape
        n = shape.size
        parent_rows = tt.parents  # prepared once per tree shape
        token_ids = torch.tensor(tokens, device=self.device)
        if target_probs is None:
            # Greedy: show the softmax at temperature 1, the model's own confidence.
            target_p = _probs_at(logits, parent_rows, token_ids, tt.inner_rows, tt.parent_place).tolist()
        else:
            target_p = target_probs[parent_rows, token_ids].tolist()
        draft_p = child_q.tolist()
        status = walk.statuses(n)
        nodes = [TreeNode(id=i, parent=shape.parents[i], depth=shape.depths[i], token_id=tokens[i],
                          text=self._text(tokens[i]), draft_prob=1.0 if i == 0 else round(draft_p[i], 6),
                          target_prob=1.0 if i == 0 else round(target_p[i], 6), status=status[i],
                          draft_input=feature_input_label(shape.depths[i], self.taps) if self.feature else "")
                 for i in range(n)]
        bonus = walk.bonus_token
        return TreePayload(nodes=nodes, accepted_path=list(walk.accepted), bonus_token_id=bonus,
                           bonus_text=self._text(bonus), budget=n, depth=shape.depth,
                           draft_ms=0.0, verify_ms=0.0)

    def close(self) -> None:
        self.target_fwd = None
        self.draft_fwd = None
        self._tensors.clear()
