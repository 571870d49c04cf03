"""Sequoia's verification walks, on the device: fixed loops, no host branching, no sync.

Sampling (any temperature): walk from the root. At the current node, for its children x_1..x_c in
drawing order, with q the draft distribution the children were drawn from (without replacement) and
P the target distribution there:
  - accept x_i with probability min(1, P(x_i) / q(x_i)) and move to it;
  - on rejection P <- normalise(max(P - q, 0)) (P itself when that is numerically zero), then
    q(x_i) <- 0 and q is renormalised;
  - a child whose q is zero was never really drawn (the draft's support ran out before c draws) and
    is skipped.
When every child is rejected, or the node is a leaf, the bonus token is drawn from the current P. The
output is distributed exactly as autoregressive sampling from the target (Sequoia, Theorem 3.5 /
SpecInfer). Greedy (temperature 0): accept the child equal to the target's argmax; the bonus is the
argmax at the last accepted node.

The sampled walk is a fixed loop over the tree's levels and child ranks whose every decision is a
`torch.where`; the greedy one needs no loop (a pass over the ancestor matrix). Neither asks the host
which way to go: a GPU captures them with the step, and a step reads the outcome back once, with
everything else its record needs. On a CPU, where nothing is captured and a flag is read for free, the
sampled walk skips the work it can see is moot (`prune`), and the greedy one is followed on the host
(`greedy_walk_on_host`), with the same outcome. `tests/sequoia_reference.py` states the same rules as a plain host
walk, against which the tests check these on every enumerated case.

What a walk returns (`DeviceWalk`), all on the device:
- `path` (depth + 1,): the root, then the accepted nodes, padded by repeating the deepest: the
  fixed-length index both caches are compacted through;
- `accepted` (0-d): how many of `path[1:]` are real;
- `bonus` (0-d): the bonus token;
- `status` (n,): each node's status code (`STATUS_NAMES`);
- `tests` (4, n): each node's test as it happened, rows `TEST_ROWS`: accept_prob, the probability it
  was accepted with given the siblings rejected before it, min(1, P'(x) / q'(x)) under the residual P'
  and renormalised q' its test saw (a first child's are the node's own P and q); uniform, its U(0, 1)
  draw (accepted exactly when uniform < accept_prob); and P'(x), q'(x). NOT_TESTED where a node was
  not tested; a greedy walk's accept_prob is 1 or 0 and it draws nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..draws import race_sample
from .tree import TreeShape

# A residual whose mass is below this is treated as zero: P - q vanished only by rounding.
RESIDUAL_EPS = 1e-9
ROOT, ACCEPTED, REJECTED, NOT_REACHED = "root", "accepted", "rejected", "not_reached"
STATUS_NAMES = (ROOT, ACCEPTED, REJECTED, NOT_REACHED)   # a status code is its index here
ROOT_CODE, ACCEPTED_CODE, REJECTED_CODE, NOT_REACHED_CODE = range(4)
NOT_TESTED = -1.0   # a `tests` value of a node no test reached
TEST_ROWS = ("accept_prob", "uniform", "tested_p", "tested_q")


@dataclass
class DeviceWalk:
    path: torch.Tensor
    accepted: torch.Tensor
    bonus: torch.Tensor
    status: torch.Tensor
    tests: torch.Tensor


class WalkTables:
    """One tree shape's index tables for the device walks, built once.

    `children[i, r]` is node i's child of rank r + 1 (0 where it has none, `has_child` False);
    `level_width[d]` the widest fan-out of level d's nodes (how many ranks a level's loop tests).
    """

    def __init__(self, shape: TreeShape, device):
        width = max(1, max(len(c) for c in shape.children))
        children = torch.tensor([c + [0] * (width - len(c)) for c in shape.children], dtype=torch.long, device=device)
        has_child = torch.tensor([[r < len(c) for r in range(width)] for c in shape.children], dtype=torch.bool,
                                 device=device)
        level_width = [max(len(shape.children[i]) for i in range(s, e)) for s, e in shape.level_ranges]
        self._for_sampling(children, has_child, level_width)
        self.path_depths = torch.arange(self.depth + 1, device=device)
        self.depths = torch.tensor(shape.depths, dtype=torch.long, device=device)
        self.parents = torch.tensor([max(p, 0) for p in shape.parents], dtype=torch.long, device=device)
        below_root = shape.ancestor_matrix()   # (i, j): j is i or an ancestor of i
        below_root[:, 0] = False
        self.ancestors_below_root = below_root.to(device)

    @classmethod
    def of_children(cls, children: torch.Tensor, has_child: torch.Tensor, level_width: list[int]) -> "WalkTables":
        """The sampled walk's tables for a tree whose edges are data on the device (`lookahead.verify`'s trie of
        candidates): `children` and `has_child` (n, width), level d's nodes testing `level_width[d]` ranks (depth + 1
        widths, the leaves' last). No greedy walk reads them."""
        tables = cls.__new__(cls)
        tables._for_sampling(children, has_child, level_width)
        return tables

    def _for_sampling(self, children: torch.Tensor, has_child: torch.Tensor, level_width: list[int]) -> None:
        device = children.device
        self.children, self.has_child, self.level_width = children, has_child, level_width
        self.n, self.depth = children.shape[0], len(level_width) - 1   # one width a level, the last level's 0
        self.node_ids = torch.arange(self.n, device=device)
        self.levels = torch.arange(self.depth, device=device)
        self.codes = torch.arange(len(STATUS_NAMES), device=device)
        self.zero = torch.zeros((), dtype=torch.long, device=device)
        self.true = torch.ones((), dtype=torch.bool, device=device)


def _row(table: torch.Tensor, node: torch.Tensor) -> torch.Tensor:
    """table[node] for a 0-d device index (index_select: indexing with a 0-d tensor may read it on the host)."""
    return table.index_select(0, node.view(1))[0]


def _stacked(tables: WalkTables, path: list[torch.Tensor]) -> torch.Tensor:
    """A walk's nodes, padded to depth + 1 by repeating its deepest."""
    return torch.stack(path + [path[-1]] * (tables.depth + 1 - len(path)))


def _finish(tables: WalkTables, path_t: torch.Tensor, accepted: torch.Tensor, bonus: torch.Tensor,
            rejected: torch.Tensor, tests: torch.Tensor | None = None) -> DeviceWalk:
    """The walk's outcome, with every node's status (and, greedy, accept_prob 1 or 0 from it, no draw)."""
    real = tables.levels[None, :] < accepted   # which of path[1:] are real
    on_path = ((tables.node_ids[:, None] == path_t[None, 1:]) & real).any(dim=1)
    codes = tables.codes
    status = torch.where(on_path, codes[ACCEPTED_CODE], torch.where(rejected, codes[REJECTED_CODE],
                                                                     codes[NOT_REACHED_CODE]))
    status = torch.where(tables.node_ids == 0, codes[ROOT_CODE], status)
    if tests is None:
        tests = torch.full((len(TEST_ROWS), tables.n), NOT_TESTED, dtype=torch.float64, device=path_t.device)
        tests[0] = torch.where(on_path, 1.0, torch.where(rejected, 0.0, NOT_TESTED))
    return DeviceWalk(path_t, accepted, bonus, status, tests)


def greedy_walk(tables: WalkTables, tokens: torch.Tensor, picks: torch.Tensor, limit: int) -> DeviceWalk:
    """The greedy walk: `picks` (n,) the target's argmax at every node, `limit` the
    levels the walk may descend (a tree cut near the end of the run).

    No loop: a node is on the path when it and each of its ancestors below the root carries its
    parent's argmax (one test per node, then one pass over the ancestor matrix). Siblings carry
    distinct tokens (they are draws without replacement), so at most one child of a node passes and the
    nodes on the path form one chain.
    """
    depths = tables.depths
    good = (tokens == picks.index_select(0, tables.parents)) & (depths <= limit)
    on = ~(tables.ancestors_below_root & ~good[None, :]).any(dim=1) & (depths > 0)
    accepted = on.long().sum()
    deepest = (on.long() * depths).argmax()   # the root when nothing was accepted
    with_root = on | (tables.node_ids == 0)
    tested = with_root.index_select(0, tables.parents) & (depths <= limit) & (depths > 0)
    at_depth = with_root[None, :] & (depths[None, :] == tables.path_depths[:, None])
    path = (at_depth.long() * tables.node_ids[None, :]).sum(dim=1)
    path = torch.where(tables.path_depths <= accepted, path, deepest)
    return _finish(tables, path, accepted, _row(picks, deepest), tested & ~on)


def greedy_walk_on_host(shape: TreeShape, tokens: list[int], picks: list[int], limit: int, device) -> DeviceWalk:
    """`greedy_walk` followed node by node on the host, for a CPU, where reading `tokens` and `picks` costs no
    sync: the device walk's ~25 small ops cost ~0.19 ms a step there in a decode (~0.07 ms in a loop; the
    caches are cold after the forwards), this a few microseconds plus the outcome's five tensors. The same
    outcome, bit for bit (`tests/test_verification.py` checks both against the reference walk)."""
    path = [0]
    while shape.depths[path[-1]] < limit:
        node = path[-1]
        child = next((c for c in shape.children[node] if tokens[c] == picks[node]), None)
        if child is None:
            break
        path.append(child)
    accepted, reached = len(path) - 1, set(path)
    status, tested = [], []
    for node in range(shape.size):
        if node == 0:
            status.append(ROOT_CODE)
            tested.append(NOT_TESTED)
        elif node in reached:
            status.append(ACCEPTED_CODE)
            tested.append(1.0)
        elif shape.parents[node] in reached and shape.depths[node] <= limit:
            status.append(REJECTED_CODE)
            tested.append(0.0)
        else:
            status.append(NOT_REACHED_CODE)
            tested.append(NOT_TESTED)
    tests = [tested] + [[NOT_TESTED] * shape.size for _ in TEST_ROWS[1:]]
    padded = path + [path[-1]] * (shape.depth - accepted)
    return DeviceWalk(torch.tensor(padded, dtype=torch.long, device=device),
                      torch.tensor(accepted, dtype=torch.long, device=device),
                      torch.tensor(picks[path[-1]], dtype=torch.long, device=device),
                      torch.tensor(status, dtype=torch.long, device=device),
                      torch.tensor(tests, dtype=torch.float64, device=device))


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """normalise(max(P - q, 0)), or P itself when that has (numerically) no mass."""
    r = (p - q).clamp_min(0)
    mass = r.sum()
    return torch.where(mass > RESIDUAL_EPS, r / mass.clamp_min(RESIDUAL_EPS), p)


def residual_one_hot(p: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
    """`residual` for a q that is one token for certain: P without that token, renormalised."""
    r = p.index_fill(0, token, 0.0)
    mass = r.sum()
    return torch.where(mass > RESIDUAL_EPS, r / mass.clamp_min(RESIDUAL_EPS), p)


def sampled_walk(tables: WalkTables, tokens: torch.Tensor, target_probs: torch.Tensor,
                 draft_q: torch.Tensor | None, uniforms: torch.Tensor, limit: int,
                 generator: torch.Generator | None, prune: bool = False) -> DeviceWalk:
    """The sampled walk.

    target_probs (n, V): P at every node; draft_q (m, V): the q each node with children drew them
    from (row = node id; m covers every such node); uniforms (depth, width): the U(0, 1) of the child
    of each rank tested at each level (at most one node is tested per level, so each is used once).

    `draft_q` None: every child was proposed for certain, not drawn (Lookahead's and prompt lookup's
    candidates as a trie, `lookahead.verify`): each child's own q is one-hot, so a test accepts with
    probability P'(x) and a rejection leaves P without x, the same rule with q(x) = 1.

    `prune` (uncaptured, on a CPU, where reading a 0-d flag costs nothing): skip the ranks with nothing to
    test, the updates that would leave P and q as they are (no child rejected) and the levels after the
    walk stopped. The outcome and the random numbers used are the same; what is skipped is a few passes
    over the vocabulary per child.
    """
    cur, alive, accepted = tables.zero, tables.true, tables.zero
    rejected = torch.zeros(tables.n, dtype=torch.bool, device=tokens.device)
    # Each test's node (n, a slot past the nodes, when nothing was tested), probability and draw: scattered
    # into per-node tables once, after the loop.
    tested_at, tested_values = [], []
    beyond = torch.full((), tables.n, dtype=torch.long, device=tokens.device)
    certain = torch.ones((), dtype=target_probs.dtype, device=tokens.device)   # a one-hot q's q(x)
    p = target_probs[0]
    path = [cur]
    for level in range(min(limit, tables.depth)):
        if prune and not alive:   # every later level would leave the walk where it is
            break
        p = torch.where(alive, _row(target_probs, cur), p)
        # A leaf's row is never tested (has_child False).
        q = None if draft_q is None else _row(draft_q, cur.clamp(max=draft_q.shape[0] - 1))
        kids, has = _row(tables.children, cur), _row(tables.has_child, cur)
        moved, nxt = ~tables.true, cur
        for rank in range(tables.level_width[level]):
            offered = alive & ~moved & has[rank]
            if prune and not offered:   # the walk moved on, or no child of this rank
                continue
            kid = kids[rank]
            tok = tokens.index_select(0, kid.view(1))
            p_tok = p.index_select(0, tok)[0]
            q_tok = certain if q is None else q.index_select(0, tok)[0]
            tested = offered & (q_tok > 0)
            u = uniforms[level, rank]
            hit = tested & (u * q_tok < p_tok)
            tested_at.append(torch.where(tested, kid, beyond))
            tested_values.append((p_tok, q_tok, u))
            miss = tested & ~hit
            nxt = torch.where(hit, kid, nxt)
            moved = moved | hit
            if prune and not miss:   # nothing rejected: P and q stay as they are
                continue
            rejected = rejected | ((tables.node_ids == kid) & miss)
            if q is None:
                p = torch.where(miss, residual_one_hot(p, tok), p)
                continue
            p = torch.where(miss, residual(p, q), p)
            q = torch.where(miss, q.index_fill(0, tok, 0.0), q)
            q_mass = q.sum()
            q = torch.where(miss & (q_mass > 0), q / q_mass.clamp_min(1e-30), q)
        cur = torch.where(moved, nxt, cur)
        accepted = accepted + moved.long()
        alive = alive & moved
        path.append(cur)
    p = torch.where(alive, _row(target_probs, cur), p)
    return _finish(tables, _stacked(tables, path), accepted, race_sample(p, generator), rejected,
                   _per_node(tables, tested_at, tested_values))


def _per_node(tables: WalkTables, at: list[torch.Tensor], values: list[tuple]) -> torch.Tensor:
    """(4, n) `tests` from the walk's tests in order, (P', q', u) each (node n for a test that did not happen):
    a few ops once per step, not per test."""
    tests = torch.full((tables.n + 1, len(TEST_ROWS)), NOT_TESTED, dtype=torch.float64, device=tables.node_ids.device)
    if at:
        p, q, u = (torch.stack(column).double() for column in zip(*values))
        tests.index_copy_(0, torch.stack(at), torch.stack([(p / q.clamp_min(1e-300)).clamp(max=1.0), u, p, q], 1))
    return tests[:-1].T
