"""Sequoia: tree speculative decoding with an optimal tree and exact sampling.

One step program, over `engine.static` shapes, whatever the device (a GPU captures each shape as a
CUDA graph and replays it; a CPU runs the same calls eagerly over the filled slots only). A step,
with C committed tokens (the root is the last, at slot C - 1, with no K/V yet):
1. draft, level by level through the drafter (`draft.drafter`, the same for every kind of draft):
   the root's read, then one draft forward per tree level over that level's nodes (tree attention);
   every node draws its children from the draft distribution without replacement (Gumbel-top-k via
   q / Exp(1)), or takes the draft's top-c at temperature 0, on the device;
2. ONE target forward over the whole tree: node i at slot C - 1 + i, position C - 1 + depth(i);
3. the verification walk on the device (`verify.py`), which picks the accepted path and a bonus
   token: fixed loops, no host branching;
4. both caches keep the root and the accepted path (a fixed-length index), and the committed tokens
   go into the device-side `history` the next root is read from;
5. ONE host read: the path, the bonus, and every node's token, p, q and status for the trace.

A fixed tree's shapes are made once. Near the end of a run the tree is cut to the levels that can
still be emitted: uncaptured, the cut tree runs (its own target shape; the draft levels are the
tree's first ones); captured, the whole tree runs and the walk is held to the cut depth (a cut tree
replays once or twice a run, so capturing it would cost more than its unused rows). An adaptive
tree grows each step from the draft's confidence (`adaptive.py`), reading the allocation on the
host level by level. Uncaptured, each step's tree runs at its own size (its shapes are kept: a handful
recur). Captured, it is held to fixed shapes, as Lookahead pads its candidates: one target shape of
`max_nodes` rows and one per draft level (`adaptive.padded_levels`), whose blocks and depths are the
step's, refilled in place; padding rows see the root only, and their logits are never read.

Copied tokens (prompt lookup, `prompt_lookup.match`): where the text's last tokens occurred before, what
followed them there joins the drafted tree as a chain, grafted where the tree stops following it (greedy:
at any node, as one more child; sampled: only at a node with no drafted children, whose one child then
has a one-hot q, so the walk's rule stays exact). The tree is renumbered breadth first and verified in
the same one forward; a copy costs no draft forward, and on code or a rewrite it reaches past where the
draft gives up. Where `auto` planned the tree, a step whose copy the plan's own curve and step costs predict
to pay more than the drafted tree as this run drafts it (`copy_cost.CopyPricing`, from the copy's measured
hit rates and the tokens this run's drafted steps brought) verifies the copied chain alone and skips the
draft: on a CPU the draft's forward is a large share of a step, and a long match is right more often than
a draft level. Both choices depend on the text and the plan only, so a
seed still gives the same tokens. Only where nothing is captured (a captured step replays fixed shapes).

Random numbers are drawn at shapes fixed by the tree (the walk's uniforms at the whole tree's depth
and width, one Gumbel draw per drafted level), so a seed gives the same tokens whether a step is
replayed or run eagerly, cut or not.
"""

from __future__ import annotations

import torch

from ..draft.drafter import TreeLevel, make_drafter
from ..draws import exponential_like
from ..engine.decoder import Decoder, PhaseTimer
from ..engine.native import logit_summary
from ..engine.sampling import next_token_on_device, probs_from_logits
from ..engine.static import recently_used
from ..trace import (
    PHASE_DRAFT,
    PHASE_TARGET,
    PHASE_VERIFY,
    SOURCE_AR,
    SOURCE_BONUS,
    SOURCE_COPY,
    SOURCE_DRAFT,
    ORIGIN_COPY,
    ORIGIN_DRAFT,
    StepRecord,
    TreeNode,
    TreePayload,
)
from ..request import Range
from ..prompt_lookup.match import Copy, CopyRates, NgramIndex
from .adaptive import allocate_children, level_pays, padded_block, padded_levels, read_block
from .copy_cost import CopyPricing
from .tree import TreeShape, TreeTensors
from .verify import (NOT_TESTED, STATUS_NAMES, TEST_ROWS, WalkTables, greedy_walk, greedy_walk_on_host,
                     sampled_walk)

ADAPTIVE_TREES_KEPT = 256   # prepared adaptive trees (a few shapes recur)
TREES_KEPT = 2 * ADAPTIVE_TREES_KEPT   # prepared trees a session keeps for its next races (fixed and adaptive)
COPY_TOKENS = 6   # the longest copied chain grafted onto a step's tree
# A copied token is grafted only where it is reached with at least this probability (`Copy.worth`). A tree row
# costs about 0.13 t(1) on a CPU's q4 forward and a step of ~1.6 t(1) yields ~1.7 tokens, so by the copy's
# overall hit rates a row would pay from ~0.14; but where a copy is grafted the draft has already proposed
# the likely tokens, and paired runs (12 bench prompts, q4, 2 threads) measured grafts at 0.2 at 0.97x of no
# copies. So only a long match's first tokens are grafted; copy-alone steps (`_copy_alone`) are what paid.
COPY_MIN_REACH = 0.5


class _Tree:
    """One tree shape's prepared state: the target's shape for it (or the padded one it refills), its
    draft levels (a fixed tree's), the walk's tables and the draws' index tensors."""

    def __init__(self, decoder: "SequoiaDecoder", shape: TreeShape, adaptive: bool):
        dev = decoder.device
        self.shape, self.n = shape, shape.size
        self.tensors = TreeTensors(shape, dev)
        self.tables = WalkTables(shape, dev)
        ancestors = shape.ancestor_matrix()
        self.levels: list[TreeLevel | None] = [None]
        self.fills = None
        if adaptive and decoder.padded:
            self.target = decoder.padded_target()
            rows = self.target.n
            block = torch.eye(rows, dtype=torch.bool)
            block[:, 0] = True
            block[:self.n, :self.n] = ancestors
            depths = torch.tensor(shape.depths + [0] * (rows - self.n), dtype=torch.long)
            self.fills = (block.to(dev), depths.to(dev))   # copied into the padded shape each step it runs
            return
        key = ("tree", tuple(shape.parents), decoder.features, decoder.taps)
        self.target = decoder.target.shape(
            key, kept=ADAPTIVE_TREES_KEPT if adaptive else None, write_offsets=list(range(self.n)),
            position_offsets=shape.depths, block=ancestors, rows=list(range(self.n)),
            hidden=decoder.features, taps=decoder.taps)
        if adaptive:
            return
        # Each level's node ids (where a sampled step keeps the q its nodes drew children from).
        self.level_nodes = [torch.arange(start, end, device=dev) for start, end in shape.level_ranges]
        parents = self.tensors.parents
        for level in range(1, shape.depth):
            start, end = shape.level_ranges[level]
            # Keyed by the nodes up to this level only, so a cut tree shares the whole tree's levels.
            self.levels.append(TreeLevel(
                ("tree", tuple(shape.parents[:end]), level), nodes=self.level_nodes[level],
                parents=parents[start:end], offsets=list(range(start, end)), depths=shape.depths[start:end],
                block=ancestors[start:end, :end]))

    def forward(self, tokens: torch.Tensor, origin: int):
        """The target's forward over this tree (`tokens`: the decoder's node buffer); it runs `self.target.n`
        rows, past `n` when the shape is padded."""
        if self.fills is not None:
            self.target.refill(*self.fills)
        return self.target(tokens[:self.target.n], origin)


class SequoiaDecoder(Decoder):
    method = "sequoia"
    # Whether an adaptive tree runs at fixed, padded shapes: None follows the capture (a GPU's graphs need
    # fixed shapes; uncaptured, padding rows would cost a CPU for nothing); True lets a CPU test run them.
    pad_adaptive: bool | None = None

    def __init__(self, pair, prompt, prompt_ids, sampling, max_new_tokens, tree_choice, graphs="auto",
                 copies=COPY_TOKENS):
        """`tree_choice`: the tree, resolved before the decoder is built (`sizing.tree_choice`, which
        `engine.methods.make_decoder` asks for): a fixed tree's parents, or an adaptive tree's limits.
        `graphs`: 'auto' | 'on' | 'off' (`engine.graphs`): whether the step's shapes are captured.
        `copies`: the longest chain of copied tokens grafted onto a step's tree (0: none)."""
        copies = Range("copied tokens", 0, 16).check_whole(copies)
        super().__init__(pair, prompt, prompt_ids, sampling, max_new_tokens, graphs=graphs)
        self.adaptive = tree_choice.parents is None
        self.padded = self.adaptive and (self.capture if self.pad_adaptive is None else self.pad_adaptive)
        if self.adaptive:
            # A level is read only where it can pay for itself (`adaptive.level_pays`), at these costs.
            self.adaptive_plan, self.adaptive_costs = tree_choice.adaptive_plan, tree_choice.adaptive_costs
            self.shape = None   # grown each step (`_draft_adaptive`)
            max_nodes, self.max_depth = self.adaptive_plan["max_nodes"], self.adaptive_plan["max_depth"]
            self.max_width = self.adaptive_plan["max_children"]
        else:
            self.shape = TreeShape.from_parents(tree_choice.parents)
            max_nodes, self.max_depth = self.shape.size, self.shape.depth
            self.max_width = max(1, max(len(c) for c in self.shape.children))
        self.trace.settings.update(tree_choice.settings)
        self.vocab = pair.vocab_size
        self.max_nodes = max_nodes
        # Copies change the tree's shape each step: only where shapes are not captured (nor padded).
        self.copy_len = 0 if (self.capture or self.padded) else copies
        plan = tree_choice.settings.get("plan")   # `auto`'s: its curve and step costs price a copy-only step
        self.copy_pricing = CopyPricing(plan) if (self.copy_len and isinstance(plan, dict) and plan.get("target_ms")
                                                  and plan.get("choice")) else None
        self.trace.settings["copies"] = self.copy_len
        self.index = NgramIndex(self.prompt_ids) if self.copy_len else None
        self.copy_rates = CopyRates()   # how often this run's copies verified alone were right (`_copy_alone`)
        self.drafted = [0, 0]   # this run's steps that drafted, and the tokens they wrote (`_copy_alone`'s bar)
        self.grafted = None   # this step's copied chain, when one was grafted (`_graft`)
        span = max_nodes + self.copy_len   # slots after the root's that a step's forwards write
        if self.padded:
            plan = self.adaptive_plan
            self.level_rows, self.level_first = padded_levels(max_nodes, self.max_depth, plan["max_children"],
                                                              plan["threshold"])
            span = max(span, self.level_first[-1] + self.level_rows[-1])
            self.trace.settings["tree_padded"] = True
        max_len = len(self.prompt_ids) + self.max_new_tokens + span
        nodes, levels = max_nodes + self.copy_len, self.max_depth + self.copy_len   # a tree with its copy
        # Both models run in the session, each over its own cache, even when the target drafts for itself.
        self.target = self._checkout(max_len)
        self.drafter = make_drafter(pair, self.prompt_ids, self.session, max_nodes, self.max_depth)
        self.trace.settings.update(self.drafter.settings)
        # What every target forward returns for the drafter besides logits (a feature draft's features).
        self.features, self.taps = self.drafter.reads_features, self.drafter.taps
        dev = self.device
        self.tokens = torch.zeros(nodes, dtype=torch.long, device=dev)
        self.child_q = torch.ones(nodes, device=dev)
        # q of every node that drew children, over the whole vocabulary (sampling only), by node id.
        self.draft_q = None if self.sampling.greedy else torch.zeros(nodes, self.vocab, device=dev)
        # Every committed token by slot: the root and the drafters' inputs are read from it on the device.
        self.history = torch.zeros(self.session.capacity + levels + 2, dtype=torch.long, device=dev)
        self.arange = torch.arange(levels + 1, device=dev)
        self.trees: dict = {}   # this run's fixed trees by depth (the whole and its cuts)
        # What the draft's next root read must cover (host numbers, from each step's one read): the tokens
        # committed since its last root read, and how many of them no draft forward has read.
        self.fresh = self.unread = 1

    # -- the step -----------------------------------------------------------------------------

    def _step(self) -> StepRecord:
        if not self.trace.steps:
            return self._prefill()
        committed = len(self.prompt_ids) + len(self.generated)
        depth = self._depth()
        timer = PhaseTimer(self.device)
        timer.start(PHASE_DRAFT)
        self.tokens[:1] = self.history[committed - 1:committed]
        read_slots = None
        self.grafted = None
        room, copy = self._copy(committed) if self.copy_len and depth else (0, None)
        alone = self._copy_alone(copy, room) if copy and self.copy_pricing else None
        if alone is not None:
            tree, read_slots, depth = alone
        elif self.adaptive:
            tree, read_slots = self._draft_adaptive(committed, depth)
        else:
            tree = self._fixed_tree(depth)
            self._draft_fixed(tree, committed, depth)
        if copy and not self.grafted:
            tree, read_slots, depth = self._graft(tree, read_slots, copy, room, depth)
        timer.start(PHASE_TARGET)
        out = tree.forward(self.tokens, committed - 1)
        logits, hidden = out if self.features else (out, None)
        timer.start(PHASE_VERIFY)
        got = self._verify(tree, committed, depth, logits[:tree.n, :self.vocab], hidden, read_slots)
        shape = tree.shape if tree.shape.depth <= depth else self._cut_shape(depth)
        new_ids = [got["tokens"][i] for i in got["accepted"]] + [got["bonus"]]
        copied = self.grafted["copied"] if self.grafted else ()
        sources = [SOURCE_COPY if i in copied else SOURCE_DRAFT for i in got["accepted"]] + [SOURCE_BONUS]
        payload = self._tree_payload(shape, got)
        times = timer.stop()
        payload.draft_ms = round(times.get(PHASE_DRAFT, 0.0), 4)
        payload.verify_ms = round(times.get(PHASE_TARGET, 0.0) + times.get(PHASE_VERIFY, 0.0), 4)
        self.drafter.widen(new_ids)
        if self.grafted and self.grafted.get("alone"):
            self.copy_rates.update(copy, len(self.grafted["copied"]), len(got["accepted"]))
        elif depth:
            self.drafted[0] += 1
            self.drafted[1] += len(new_ids)
        self._count_fresh(new_ids, got["accepted"], depth, tree, read_slots)
        # tokens_processed: the rows the target's forward ran (a captured cut step runs the whole tree, a
        # padded adaptive one its padding too).
        return self._emit(new_ids, sources, tree.target.n, times, payload)

    def _prefill(self) -> StepRecord:
        """Step 0: the target reads the prompt and yields the first token, like autoregressive."""
        timer = PhaseTimer(self.device)
        timer.start(PHASE_TARGET)
        ids = torch.tensor([self.prompt_ids], dtype=torch.long, device=self.device)
        out = self.target.prefill(ids, hidden=self.features, taps=self.taps)
        logits, hidden = out if self.features else (out, None)
        token = next_token_on_device(logits[-1:, :self.vocab], self.sampling, self.generator)
        prompt_len = ids.shape[1]
        self.history[:prompt_len] = ids[0]
        self.history[prompt_len:prompt_len + 1] = token
        timer.start(PHASE_DRAFT)
        self.drafter.prefill(ids, hidden, self.target)
        first = int(token)
        self.drafter.widen([first])
        return self._emit([first], [SOURCE_AR], prompt_len, timer.stop())

    def _count_fresh(self, new_ids: list[int], accepted: list[int], depth: int, tree: _Tree,
                     read_slots: torch.Tensor | None) -> None:
        """`fresh` and `unread` for the next root read. A step that drafted read its root and the accepted
        nodes it expanded; the path's deepest node is unread when it sat on the last level drafted (a
        fixed tree) or was never expanded (an adaptive one, whose read nodes have an offset past the root's)."""
        if depth == 0 or (self.grafted and self.grafted.get("alone")):   # no draft forward this step
            self.fresh += len(new_ids)
            self.unread += len(new_ids)
            return
        if self.grafted:   # a copied chain: any number of the path's last nodes were never read
            read = self.grafted["read"]
            trailing = 0
            for node in reversed(accepted):
                if read[node]:
                    break
                trailing += 1
            self.fresh, self.unread = len(new_ids), 1 + trailing
            return
        deepest_read = True
        if accepted:
            deepest = accepted[-1]
            deepest_read = (tree.shape.depths[deepest] < depth if read_slots is None
                            else deepest in self._expanded)
        self.fresh = len(new_ids)
        self.unread = 1 if deepest_read else 2

    def _depth(self) -> int:
        """Levels this step may speculate: none past what can be emitted, nor past the model's context."""
        committed = len(self.prompt_ids) + len(self.generated)
        remaining = self.max_new_tokens - len(self.generated)
        return max(0, min(self.max_depth, remaining - 1, self.pair.max_context - committed))

    def _fixed_tree(self, depth: int) -> _Tree:
        """The fixed tree this step runs: cut to `depth` levels when nothing is captured (fewer rows for
        the same walk), else the whole tree (its one captured shape), the walk held to `depth`."""
        if self.capture:
            depth = self.shape.depth
        tree = self.trees.get(depth)
        if tree is None:
            shape = self._cut_shape(depth)
            tree = self.trees[depth] = self._prepared(shape.parents, False, lambda: _Tree(self, shape, adaptive=False))
        return tree

    def _prepared(self, parents: list[int], adaptive: bool, make) -> _Tree:
        """A tree's prepared state, kept on the session so that its next races reuse it (a sampling test's
        thousands of short runs, a room's races): what it holds depends only on the tree and the forwards."""
        # A padded tree runs the padded target shape of this run's `max_nodes` rows: another budget, another tree.
        padded_rows = self.max_nodes if self.padded else None
        key = ("sequoia-tree", tuple(parents), adaptive, self.features, self.taps, padded_rows)
        return recently_used(self.session.prepared, key, TREES_KEPT, make)

    def _cut_shape(self, depth: int) -> TreeShape:
        return self.shape if depth >= self.shape.depth else self.shape.truncated(depth)

    # -- copied tokens ----------------------------------------------------------------------------

    def _graft(self, tree: _Tree, read_slots: torch.Tensor | None, copy: Copy, room: int,
               depth: int) -> tuple[_Tree, torch.Tensor | None, int]:
        """The drafted tree with the text's copied continuation grafted on (`COPY_TOKENS` at most), renumbered
        breadth first, its tokens, q and read offsets moved to the new numbering; or the tree as it was,
        when the copy is already in it or finds no place. Returns (tree, read offsets, the depth the walk may
        go to)."""
        shape, n = tree.shape, tree.n
        tokens = self.tokens[:n].tolist()
        node, chain = 0, list(copy.tokens)
        while chain:   # follow the copy down the tree while the draft proposed it too
            child = next((c for c in shape.children[node] if tokens[c] == chain[0]), None)
            if child is None:
                break
            node = child
            chain.pop(0)
        chain = chain[:min(room, copy.worth(COPY_MIN_REACH)) - shape.depths[node]]
        # Sampled, a node's drafted children were drawn from its q: a copy joins only a node with none.
        if not chain or (not self.sampling.greedy and shape.children[node]):
            return tree, read_slots, depth
        order, parents = self._grafted_order(shape, node, len(chain))
        k = len(chain)
        index = torch.tensor(order, dtype=torch.long, device=self.device)
        self.tokens[n:n + k] = torch.tensor(chain, dtype=torch.long, device=self.device)
        self.child_q[n:n + k] = 1.0
        self.tokens[:n + k] = self.tokens.index_select(0, index)
        self.child_q[:n + k] = self.child_q.index_select(0, index)
        if self.draft_q is not None:   # each copied child's q is one-hot: accepted with P, its residual exact
            holders = torch.tensor([node] + list(range(n, n + k - 1)), dtype=torch.long, device=self.device)
            self.draft_q.index_fill_(0, holders, 0.0)
            self.draft_q[holders, self.tokens.new_tensor(chain)] = 1.0
            self.draft_q[:n + k] = self.draft_q.index_select(0, index)
        # Where each node's draft K/V sit (a node no draft read keeps its depth, as `_draft_adaptive` says).
        offsets = (list(range(n)) if read_slots is None else read_slots.tolist()) + [
            shape.depths[node] + 1 + j for j in range(k)]
        if read_slots is None:
            was_read = [shape.depths[i] < depth for i in range(n)]
        else:
            was_read = [i in self._expanded for i in range(n)]
        was_read += [False] * k
        self.grafted = {"copied": {new for new, old in enumerate(order) if old >= n},
                        "read": [was_read[old] for old in order]}
        merged = self._adaptive_tree(parents)
        return (merged, torch.tensor([offsets[old] for old in order], dtype=torch.long, device=self.device),
                max(depth, merged.shape.depth))

    def _copy(self, committed: int) -> tuple[int, Copy | None]:
        """(the levels a step may still emit, this step's copy or None), the text indexed up to now."""
        room = min(self.max_new_tokens - len(self.generated) - 1, self.pair.max_context - committed)
        self.index.extend(self.generated[len(self.index) - len(self.prompt_ids):])
        found = self.index.copies(min(self.copy_len, room), 1) if room > 0 else []
        return room, (found[0] if found else None)

    def _copy_alone(self, copy: Copy, room: int) -> tuple[_Tree, torch.Tensor, int] | None:
        """The copied chain as this step's whole tree, where the plan predicts it pays more than the drafted
        tree (no draft forward); else None. Its tokens are priced at this run's own rates, learned from the
        copies it verified alone (`match.CopyRates`: a chat answer's copies are right far less often)."""
        speedup, length = self.copy_pricing.best_step(self.copy_rates.reaches(copy)[:room])
        if not length or speedup <= self.copy_pricing.tree_speedup_at(*self.drafted):
            return None
        chain = list(copy.tokens[:length])
        dev = self.device
        self.tokens[1:length + 1] = torch.tensor(chain, dtype=torch.long, device=dev)
        self.child_q[1:length + 1] = 1.0
        if self.draft_q is not None:   # node i's one child is the copy's token i + 1: q one-hot
            self.draft_q[:length].zero_()
            self.draft_q[torch.arange(length, device=dev), self.tokens.new_tensor(chain)] = 1.0
        self.grafted = {"copied": set(range(1, length + 1)), "read": [False] * (length + 1), "alone": True}
        tree = self._adaptive_tree([-1] + list(range(length)))
        return tree, torch.arange(length + 1, device=dev), length

    @staticmethod
    def _grafted_order(shape: TreeShape, node: int, k: int) -> tuple[list[int], list[int]]:
        """The tree with a chain of k nodes (ids n..n+k-1) under `node`, in breadth-first order: the old id
        of each new node, and the new parent list."""
        n = shape.size
        children = [list(c) for c in shape.children] + [[] for _ in range(k)]
        parent_of = list(shape.parents) + [node] + list(range(n, n + k - 1))
        for j in range(k):
            children[parent_of[n + j]].append(n + j)
        order = [0]
        for old in order:   # breadth first: the list grows as it is read
            order.extend(children[old])
        new_of = {old: new for new, old in enumerate(order)}
        return order, [-1] + [new_of[parent_of[old]] for old in order[1:]]

    # -- drafting ---------------------------------------------------------------------------------

    def _draft_fixed(self, tree: _Tree, committed: int, depth: int) -> None:
        """Fill `tokens` (and q per node with children, each child's draft probability) level by level."""
        if depth == 0:
            return
        logits = self.drafter.root(self.history, committed, self.fresh, self.unread)
        self._draw_children(tree, 0, logits)
        for level in range(1, depth):
            start, end = tree.shape.level_ranges[level]
            logits = self.drafter.level(tree.levels[level], self.tokens[start:end], committed - 1)
            self._draw_children(tree, level, logits)

    def _draw_children(self, tree: _Tree, level: int, logits: torch.Tensor) -> None:
        """From the draft's logits at one level's nodes, draw their children (without replacement)
        into `tokens`, with q per parent (sampling) and each child's draft probability."""
        shape, tt = tree.shape, tree.tensors
        width = tt.level_width[level]
        rows, ranks = tt.draw_row[level], tt.draw_rank[level]
        child_start, child_end = shape.level_ranges[level + 1]
        if self.sampling.greedy:
            top, top_ids, norms = logit_summary(logits, width)
            picked = top_ids[rows, ranks]
            self.child_q[child_start:child_end] = (top[rows, ranks] - norms[rows]).exp()
        else:
            q = probs_from_logits(logits, self.sampling)
            self._keep_q(tree.level_nodes[level], q)
            picked = self._without_replacement(q, width)[rows, ranks]
            self.child_q[child_start:child_end] = q[rows, picked]
        vocab_ids = self.drafter.vocab_ids
        self.tokens[child_start:child_end] = picked if vocab_ids is None else vocab_ids[picked]

    def _keep_q(self, nodes: torch.Tensor, q: torch.Tensor) -> None:
        """q at `nodes` over the whole vocabulary (zero outside the draft head's rows), for the walk."""
        vocab_ids = self.drafter.vocab_ids
        if vocab_ids is not None:
            q = q.new_zeros(q.shape[0], self.vocab).index_copy_(1, vocab_ids, q)
        self.draft_q.index_copy_(0, nodes, q)

    def _without_replacement(self, q: torch.Tensor, width: int) -> torch.Tensor:
        """`width` tokens per row of q, drawn without replacement, in drawing order (Gumbel-top-k: the
        top-c of q / Exp(1) is such a draw)."""
        return (q / exponential_like(q, self.generator)).topk(width, dim=-1).indices

    def _draft_adaptive(self, committed: int, max_depth: int) -> tuple[_Tree, torch.Tensor]:
        """Grow this step's tree from the draft's confidence (`adaptive.py`).

        Nodes are numbered breadth first as they are made. The draft reads a level's nodes that may
        still get children, each at the next free offset after the root's (scratch, overwritten next
        step), attending to the committed tokens and its read ancestors. Returns the prepared tree and
        each node's read offset (what the draft's cache keeps of the accepted path).
        """
        plan = self.adaptive_plan
        tau, max_children, max_nodes = plan["threshold"], plan["max_children"], plan["max_nodes"]
        parents, token_ids, scores, depths, child_q = [-1], [None], [1.0], [0], [1.0]
        offset_of = {0: 0}
        self._expanded = offset_of   # the nodes the draft read (`_count_fresh`)
        if max_depth > 0:
            logits = self.drafter.root(self.history, committed, self.fresh, self.unread)
            vocab_ids = self.drafter.vocab_ids
            target_cost, level_cost = self.adaptive_costs["target"], self.adaptive_costs["draft"]
            spent = level_cost[1]   # the draft's cost so far (the root's level)
            target_rows = self.max_nodes if self.padded else None   # a padded tree's forward: always its rows
            frontier, next_offset = [0], 1
            for level in range(max_depth):
                q, draws, p_list = self._ranked_children(logits, max_children)
                counts = allocate_children([scores[v] for v in frontier], p_list, tau, max_children,
                                           max_nodes - len(parents))
                if not any(counts):
                    break
                if not self.sampling.greedy:
                    drew = [r for r, c in enumerate(counts) if c]
                    self._keep_q(torch.tensor([frontier[r] for r in drew], device=self.device),
                                 q[drew] if len(drew) < len(frontier) else q)
                drawn = (draws if vocab_ids is None else vocab_ids[draws]).tolist()
                # Greedy draws are the ranked children themselves, so their q is the ranked probabilities.
                drawn_q = p_list if self.sampling.greedy else q.gather(-1, draws).tolist()
                made = []
                for r, v in enumerate(frontier):
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
                if self.padded:   # the level's rows (`padded_levels` bounds them; the best-scored kept)
                    width = self.level_rows[level + 1]
                    frontier = sorted(sorted(frontier, key=lambda i: -scores[i])[:width])
                    next_offset = self.level_first[level + 1]
                cost = level_cost[width if self.padded else len(frontier)]
                top1 = sum(p[0] for p in p_list) / len(p_list)   # how sure the draft was at this level
                if not level_pays([scores[i] for i in frontier], top1, sum(scores), cost,
                                  target_cost[target_rows or len(parents)] + spent):
                    break
                spent += cost
                for j, i in enumerate(frontier):
                    offset_of[i] = next_offset + j
                step_level, ids = self._adaptive_level(frontier, parents, depths, token_ids, offset_of,
                                                       next_offset)
                logits = self.drafter.level(step_level, ids, committed - 1)[:len(frontier)]
                next_offset += len(frontier)
        n = len(parents)
        if n > 1:
            self.tokens[1:n] = torch.tensor(token_ids[1:], dtype=torch.long, device=self.device)
            self.child_q[:n] = torch.tensor(child_q, device=self.device)
        # A node the draft never read keeps its own depth as offset: the next root's window rewrites it.
        read_slots = torch.tensor([offset_of.get(i, depths[i]) for i in range(n)], dtype=torch.long,
                                  device=self.device)
        return self._adaptive_tree(parents), read_slots

    def _adaptive_level(self, frontier: list[int], parents: list[int], depths: list[int], token_ids: list,
                        offset_of: dict[int, int], first: int) -> tuple[TreeLevel, torch.Tensor]:
        """The draft's read of `frontier` at offsets first.. (`adaptive.read_block`), and its tokens. Padded,
        the level's fixed rows: the ones past the frontier read the root's slot into a scratch node."""
        rows = read_block(frontier, parents, offset_of, first)
        depth = depths[frontier[0]]   # a level's nodes are all at one depth
        nodes, ids = list(frontier), [token_ids[i] for i in frontier]
        if self.padded:
            width = self.level_rows[depth]
            rows = padded_block(rows, first, width)
            pad = width - len(frontier)
            nodes, ids = nodes + [self.max_nodes] * pad, ids + [0] * pad
            key = ("adaptive", depth, first, width)   # a session's next race may have other limits
        else:
            key = ("adaptive", first, depth, tuple(map(tuple, rows)))
        dev, n = self.device, len(nodes)
        level = TreeLevel(key, nodes=torch.tensor(nodes, device=dev),
                          parents=torch.tensor([parents[i] if i < self.max_nodes else 0 for i in nodes], device=dev),
                          offsets=list(range(first, first + n)), depths=[depth] * n,
                          block=torch.tensor(rows, dtype=torch.bool), adaptive=not self.padded, varies=self.padded)
        return level, torch.tensor(ids, dtype=torch.long, device=dev)

    def padded_target(self):
        """The target's one shape for every padded adaptive tree (`max_nodes` rows; each tree refills it)."""
        rows = self.max_nodes
        return self.target.shape(("tree-padded", rows, self.features, self.taps), write_offsets=list(range(rows)),
                                 position_offsets=[0] * rows, block=torch.eye(rows, dtype=torch.bool),
                                 rows=list(range(rows)), hidden=self.features, taps=self.taps)

    def _adaptive_tree(self, parents: list[int]) -> _Tree:
        return self._prepared(parents, True, lambda: _Tree(self, TreeShape.from_parents(parents), adaptive=True))

    def _ranked_children(self, logits: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor, list]:
        """q per row (what children are drawn from), `width` draws per row in drawing order, and the
        ranked probabilities that score them.

        Scores use the draft's confidence at temperature 1, the scale on which it is calibrated
        (sharpened to T=0.6 it promised acceptance that sampled steps did not get).
        """
        top, top_ids, norms = logit_summary(logits, width)
        ranked = (top - norms.unsqueeze(-1)).exp().tolist()
        if self.sampling.greedy:   # the draws are the ranked children; q is not kept
            return None, top_ids, ranked
        q = probs_from_logits(logits, self.sampling)
        return q, self._without_replacement(q, width), ranked

    # -- verification ---------------------------------------------------------------------------

    def _verify(self, tree: _Tree, committed: int, depth: int, logits: torch.Tensor,
                hidden: torch.Tensor | None, read_slots: torch.Tensor | None) -> dict:
        """The device walk held to `depth` levels, compaction, the next tokens; ONE host read of it all."""
        root_slot, n, tt = committed - 1, tree.n, tree.tensors
        tokens = self.tokens[:n]
        if self.sampling.greedy:
            _, best, norms = logit_summary(logits, 1)
            walk = (greedy_walk_on_host(tree.shape, tokens.tolist(), best[:, 0].tolist(), depth, self.device)
                    if self.host_reads_free else greedy_walk(tree.tables, tokens, best[:, 0], depth))
            # The model's own confidence (temperature 1) in each node's token.
            target_p = (logits[tt.parents, tokens].float() - norms[tt.parents]).exp()
        else:
            target_probs = probs_from_logits(logits, self.sampling)
            # Drawn at the whole tree's shape whatever runs, so a seed's draws do not depend on the cut.
            uniforms = torch.rand(max(self.max_depth + self.copy_len, 1), self.max_width, generator=self.generator,
                                  device=self.device)
            walk = sampled_walk(tree.tables, tokens, target_probs, self.draft_q, uniforms, depth,
                                self.generator, prune=self.host_reads_free)
            target_p = target_probs[tt.parents, tokens]
        self.target.keep(root_slot, walk.path + root_slot)
        path_slots = walk.path if read_slots is None else read_slots.index_select(0, walk.path)
        self.drafter.commit(walk.path, path_slots, root_slot, hidden)
        # The committed tokens after the root: the accepted path's, then the bonus (repeated past it).
        steps = self.arange[:walk.path.numel()]
        after = torch.cat([tokens.index_select(0, walk.path[1:]), walk.bonus.view(1)])
        self.history.index_copy_(0, steps + committed, torch.where(steps < walk.accepted, after, walk.bonus))
        read = torch.cat([walk.accepted.view(1).double(), walk.bonus.view(1).double(), walk.path.double(),
                          tokens.double(), target_p.double(), self.child_q[:n].double(),
                          walk.status.double(), walk.tests[:, :n].flatten()]).tolist()
        return self._unpack(read, walk.path.numel(), n)

    @staticmethod
    def _unpack(read: list[float], path_len: int, n: int) -> dict:
        accepted, bonus = int(read[0]), int(read[1])
        path = [int(x) for x in read[2:2 + path_len]]
        at = 2 + path_len
        return {"accepted": path[1:1 + accepted], "bonus": bonus, "tokens": [int(x) for x in read[at:at + n]],
                "target_p": read[at + n:at + 2 * n], "draft_p": read[at + 2 * n:at + 3 * n],
                "status": [STATUS_NAMES[int(x)] for x in read[at + 3 * n:at + 4 * n]],
                **{name: _tested(read[at + (4 + r) * n:at + (5 + r) * n]) for r, name in enumerate(TEST_ROWS)}}

    # -- the trace ---------------------------------------------------------------------------------

    def _tree_payload(self, shape: TreeShape, got: dict) -> TreePayload:
        """The tree as the app draws it: the cut tree's nodes (rows past it ran but were never candidates)."""
        tokens, target_p, draft_p, status = got["tokens"], got["target_p"], got["draft_p"], got["status"]
        copied = self.grafted["copied"] if self.grafted else ()
        nodes = [TreeNode(id=i, parent=shape.parents[i], depth=shape.depths[i], token_id=tokens[i],
                          text=self._text(tokens[i]), draft_prob=1.0 if i == 0 else round(draft_p[i], 6),
                          target_prob=1.0 if i == 0 else round(target_p[i], 6), status=status[i],
                          **{name: got[name][i] for name in TEST_ROWS},
                          draft_input="" if i in copied else self.drafter.input_label(shape.depths[i]),
                          origin=ORIGIN_COPY if i in copied else ORIGIN_DRAFT)
                 for i in range(shape.size)]
        bonus = got["bonus"]
        return TreePayload(nodes=nodes, accepted_path=list(got["accepted"]), bonus_token_id=bonus,
                           bonus_text=self._text(bonus), budget=shape.size, depth=shape.depth,
                           draft_ms=0.0, verify_ms=0.0)

    def close(self) -> None:
        self.target = self.drafter = None
        self.trees.clear()
        super().close()


def _tested(values: list[float]) -> list[float | None]:
    """One row of a walk's `tests` as the trace keeps it: None where the node was not tested."""
    return [None if v == NOT_TESTED else v for v in values]
