"""Sequoia: tree speculative decoding with an optimal tree and exact sampling.

Each step (one target forward):
1. draft, level by level through the drafter (`specviz.draft.drafter`, the same
   for every kind of draft): one draft forward per tree level over all of that
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
C - 1 + i, at position C - 1 + depth(i). The draft's cache is its drafter's:
at level 0 it is fed the committed tokens it has not read (the root last, plus
the deepest accepted token of the last step when the path reached the last
level, which the draft never processes), and a level's nodes are written from
the slot the root's level returns, at that slot + depth.

With graphs wanted (`engine.graphs`: on CUDA by default, or `graphs="on"`), a fixed tree
runs the same step on static buffers instead (`static_step.py`: fixed-shape forwards a GPU
captures and replays, the walks on the device, one host read a step); the adaptive tree
keeps this eager step.
"""

from __future__ import annotations

import torch

from ..draft.drafter import make_drafter, static_drafter_supported
from ..draws import exponential_like, first_argmax
from ..engine.decoder import Decoder, PhaseTimer
from ..engine.lean import make_forward
from ..engine.sampling import next_token, probs_from_logits
from ..engine.static import static_supported
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
from .static_step import StaticTreeStep
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


class SequoiaDecoder(Decoder):
    method = "sequoia"
    lean = True  # False: transformers' own forward for both models (A/B measurements, tests)

    def __init__(self, pair, prompt, prompt_ids, sampling, max_new_tokens, tree_choice, graphs="auto"):
        """`tree_choice`: the tree, resolved before the decoder is built (`sizing.tree_choice`, which
        `engine.methods.make_decoder` asks for): a fixed tree's parents, or an adaptive tree's limits.
        `graphs`: 'auto' | 'on' | 'off' (`engine.graphs`), the static-buffer step where it is wanted."""
        super().__init__(pair, prompt, prompt_ids, sampling, max_new_tokens, graphs=graphs)
        self.adaptive = tree_choice.parents is None
        if self.adaptive:
            # A level is read only where it can pay for itself (`adaptive.level_pays`), at these costs.
            self.adaptive_plan, self.adaptive_costs = tree_choice.adaptive_plan, tree_choice.adaptive_costs
            self.shape = None   # grown each step (`_draft_adaptive`)
            max_nodes, self.max_depth = self.adaptive_plan["max_nodes"], self.adaptive_plan["max_depth"]
        else:
            self.shape = TreeShape.from_parents(tree_choice.parents)
            max_nodes, self.max_depth = self.shape.size, self.shape.depth
        self.trace.settings.update(tree_choice.settings)
        self.vocab = pair.vocab_size
        # Both models run through one forward interface (a lean Llama forward where exact, else
        # transformers'), each over its own cache, even when the target drafts for itself.
        max_len = len(self.prompt_ids) + self.max_new_tokens + max_nodes
        self.static = None   # the static-buffer step (`static_step`), where wanted and supported
        if (self.static_wanted and not self.adaptive and static_supported(pair.target)
                and static_drafter_supported(pair)):
            # The adaptive tree keeps the eager step under graphs for now: its shape follows the draft's
            # confidence, so a static one needs each level padded to a fixed node count, a target block
            # built on the device from the drawn parents, and a host read per level for the allocation.
            self.static = StaticTreeStep(self, tree_choice.parents, max_len)
            self.target_fwd, self.drafter = None, self.static.drafter
            self.graph_stats = self.static.stats
        else:
            self.target_fwd = make_forward(pair.target, max_len, lean=self.lean)
            self.drafter = make_drafter(pair, self.prompt_ids, max_len, max_nodes, self.target_fwd, lean=self.lean)
        self.trace.settings.update(self.drafter.settings)
        # What every target forward returns for the drafter besides logits (a feature draft's features).
        self.target_features, self.taps = self.drafter.reads_features, self.drafter.taps
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

    def _depth(self) -> int:
        """Levels this step may speculate: none past what can be emitted, nor past the model's context."""
        committed = len(self.prompt_ids) + len(self.generated)
        remaining = self.max_new_tokens - len(self.generated)
        return max(0, min(self.max_depth, remaining - 1, self.pair.max_context - committed))

    def _step(self) -> StepRecord:
        if self.static is not None:
            return self._static_step()
        if not self.trace.steps:
            return self._prefill()
        committed = len(self.prompt_ids) + len(self.generated)
        depth = self._depth()
        timer = PhaseTimer(self.device)
        timer.start(PHASE_DRAFT)
        expanded_slots = None   # adaptive trees: the draft slot of each expanded node
        if self.adaptive:
            tt, tokens, draft_probs, child_q, expanded_slots = self._draft_adaptive(depth)
        else:
            tt = self._tree(depth)
            tokens, draft_probs, child_q = self._draft_tree(tt)
        timer.start(PHASE_TARGET)
        root_slot = committed - 1
        out, hidden = self._target(tokens.unsqueeze(0), root_slot, positions=tt.depth_offsets + root_slot,
                                   mask=tt.target_mask(root_slot), rows=tt.shape.size)
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
        self._compact(walk.accepted, shape, depth, root_slot, hidden, expanded_slots)
        new_ids = [token_list[i] for i in walk.accepted] + [walk.bonus_token]
        sources = [SOURCE_DRAFT] * len(walk.accepted) + [SOURCE_BONUS]
        payload = self._payload(tt, token_list, walk, logits, target_probs, child_q)
        times = timer.stop()
        payload.draft_ms = round(times.get(PHASE_DRAFT, 0.0), 4)
        payload.verify_ms = round(times.get(PHASE_TARGET, 0.0) + times.get(PHASE_VERIFY, 0.0), 4)
        self.drafter.widen(new_ids)
        return self._emit(new_ids, sources, shape.size, times, payload)

    def _static_step(self) -> StepRecord:
        """The step on static buffers (`static_step`): device-side drafting, walk and compaction, one read."""
        static = self.static
        timer = PhaseTimer(self.device)
        if not self.trace.steps:
            timer.start(PHASE_TARGET)
            token = static.prefill()
            return self._emit([token], [SOURCE_AR], len(self.prompt_ids), timer.stop())
        committed = len(self.prompt_ids) + len(self.generated)
        depth = self._depth()
        timer.start(PHASE_DRAFT)
        static.draft(committed)
        timer.start(PHASE_TARGET)
        logits, hidden = static.target_forward(committed)
        timer.start(PHASE_VERIFY)
        got = static.verify(committed, depth, logits, hidden)
        shape = self._cut_tree(depth)   # the rows past `depth` were computed but never candidates
        tokens = got["tokens"]
        new_ids = [tokens[i] for i in got["accepted"]] + [got["bonus"]]
        sources = [SOURCE_DRAFT] * len(got["accepted"]) + [SOURCE_BONUS]
        payload = self._tree_payload(shape, tokens, got["accepted"], got["bonus"], got["target_p"],
                                     got["draft_p"], got["status"])
        times = timer.stop()
        payload.draft_ms = round(times.get(PHASE_DRAFT, 0.0), 4)
        payload.verify_ms = round(times.get(PHASE_TARGET, 0.0) + times.get(PHASE_VERIFY, 0.0), 4)
        # The forward ran the whole fixed tree, cut or not: what the cost fits and the what-if read as its size.
        return self._emit(new_ids, sources, static.shape.size, times, payload)

    def _cut_tree(self, depth: int) -> TreeShape:
        """The fixed tree cut to `depth` levels (kept: a run cuts it at a few depths, near its end)."""
        key = ("cut", depth)
        shape = self._tensors.get(key)
        if shape is None:
            shape = self._tensors[key] = self.shape if depth == self.shape.depth else self.shape.truncated(depth)
        return shape

    def _target(self, ids: torch.Tensor, start: int, **kwargs) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The target's logits, and the hidden states of every row where the drafter reads them (else None)."""
        out = self.target_fwd(ids, start, hidden=self.target_features, taps=self.taps, **kwargs)
        return out if self.target_features else (out, None)

    def _prefill(self) -> StepRecord:
        """Step 0: the target reads the prompt and yields the first token, like autoregressive."""
        timer = PhaseTimer(self.device)
        timer.start(PHASE_TARGET)
        ids = torch.tensor([self.prompt_ids], dtype=torch.long, device=self.device)
        out, hidden = self._target(ids, 0)
        logits = out[:, :self.vocab]
        token = int(next_token(logits, self.sampling, self.generator))
        timer.start(PHASE_DRAFT)
        self.drafter.prefill(ids, hidden)
        self.drafter.widen([token])
        return self._emit([token], [SOURCE_AR], len(self.prompt_ids), timer.stop())

    def _draft_tree(self, tt: TreeTensors) -> tuple[torch.Tensor, dict, torch.Tensor]:
        """Fill the tree's tokens level by level.

        Returns the tokens, q at every node with children (sampling only), and each
        node's draft probability when it was drawn (for the app). A node's row among the
        draft's rows of the step is its id: the root's first, then each level's in order.
        """
        shape = tt.shape
        tokens = torch.empty(shape.size, dtype=torch.long, device=self.device)
        tokens[0] = self.generated[-1]
        child_q = torch.ones(shape.size, device=self.device)
        draft_probs: dict[int, torch.Tensor] = {}
        if shape.depth == 0:
            return tokens, draft_probs, child_q
        root_slot, logits = self.drafter.root(self.generated, lambda start, pending: tt.draft_mask(0, start, pending))
        self._draw_children(tt, 0, logits, self.drafter.vocab_ids, tokens, draft_probs, child_q)
        for level in range(1, shape.depth):
            start, end = shape.level_ranges[level]
            logits = self.drafter.level(tokens[start:end], tt.parents[start:end], root_slot + start,
                                        tt.depth_offsets[start:end] + root_slot, tt.draft_mask(level, root_slot))
            self._draw_children(tt, level, logits, self.drafter.vocab_ids, tokens, draft_probs, child_q)
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

    def _draft_adaptive(self, max_depth: int):
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
        root_slot, logits = self.drafter.root(self.generated, None)   # causal after the cache
        vocab_ids = self.drafter.vocab_ids
        target_cost, level_cost = self.adaptive_costs["target"], self.adaptive_costs["draft"]
        spent = level_cost[1]   # the draft's cost so far (the root's level)
        # Expanded nodes: their draft slot and their row among the rows the draft read this step.
        frontier, slot_of, row_of = [0], {0: root_slot}, {0: 0}
        next_slot, rows_read = root_slot + 1, 1
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
            mask = scratch_mask(ancestors, root_slot + 1, next_slot, self.drafter.dtype, self.device)
            positions = torch.tensor([root_slot + depths[i] for i in frontier], dtype=torch.long,
                                     device=self.device)
            ids = torch.tensor([token_ids[i] for i in frontier], dtype=torch.long, device=self.device)
            logits = self.drafter.level(ids, [row_of[parents[i]] for i in frontier], next_slot, positions, mask)
            for j, i in enumerate(frontier):
                slot_of[i], row_of[i] = next_slot + j, rows_read + j
            next_slot += len(frontier)
            rows_read += len(frontier)
        tt = self._adaptive_tree(parents)
        return (tt, torch.tensor(token_ids, dtype=torch.long, device=self.device), draft_probs,
                torch.tensor(child_q, device=self.device), slot_of)

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
                 hidden: torch.Tensor | None, expanded_slots: dict[int, int] | None = None) -> None:
        """Keep the root and the accepted path in both caches, right after the prefix."""
        path = [0] + accepted
        keep = torch.tensor(path, dtype=torch.long, device=self.device) + root_slot
        self.target_fwd.keep(root_slot, keep)
        if expanded_slots is not None:
            # An adaptive tree's expanded path nodes (a prefix of the path: a node is read only if its
            # parent was) sit in scratch slots after the root's; the rest stay pending.
            slots = [expanded_slots[i] for i in accepted if i in expanded_slots]
            keep_from, read = root_slot + 1, torch.tensor(slots, dtype=torch.long, device=self.device)
        else:
            # The draft read levels 0 .. depth-1 only: a path node on the last level is pending.
            keep_from, read = root_slot, keep[:sum(1 for i in path if shape.depths[i] < depth)]
        self.drafter.commit(path, keep_from, read, hidden, drafted=depth > 0)

    def _full_vocab(self, q: torch.Tensor, vocab_ids: torch.Tensor | None) -> torch.Tensor:
        """q over the whole vocabulary (zero outside the draft head's rows), as verification needs."""
        if vocab_ids is None:
            return q
        return q.new_zeros(self.vocab).index_copy_(0, vocab_ids, q)

    def _payload(self, tt: TreeTensors, tokens: list[int], walk, logits: torch.Tensor,
                 target_probs: torch.Tensor | None, child_q: torch.Tensor) -> TreePayload:
        shape = tt.shape
        parent_rows = tt.parents  # prepared once per tree shape
        token_ids = torch.tensor(tokens, device=self.device)
        if target_probs is None:
            # Greedy: show the softmax at temperature 1, the model's own confidence.
            target_p = _probs_at(logits, parent_rows, token_ids, tt.inner_rows, tt.parent_place).tolist()
        else:
            target_p = target_probs[parent_rows, token_ids].tolist()
        return self._tree_payload(shape, tokens, walk.accepted, walk.bonus_token, target_p, child_q.tolist(),
                                  walk.statuses(shape.size))

    def _tree_payload(self, shape: TreeShape, tokens: list[int], accepted: list[int], bonus: int,
                      target_p: list[float], draft_p: list[float], status: list[str]) -> TreePayload:
        n = shape.size
        nodes = [TreeNode(id=i, parent=shape.parents[i], depth=shape.depths[i], token_id=tokens[i],
                          text=self._text(tokens[i]), draft_prob=1.0 if i == 0 else round(draft_p[i], 6),
                          target_prob=1.0 if i == 0 else round(target_p[i], 6), status=status[i],
                          draft_input=self.drafter.input_label(shape.depths[i]))
                 for i in range(n)]
        return TreePayload(nodes=nodes, accepted_path=list(accepted), bonus_token_id=bonus,
                           bonus_text=self._text(bonus), budget=n, depth=shape.depth,
                           draft_ms=0.0, verify_ms=0.0)

    def close(self) -> None:
        self.target_fwd = None
        self.drafter = None
        self._tensors.clear()
        if self.static is not None:
            self.static.close()
            self.static = None
