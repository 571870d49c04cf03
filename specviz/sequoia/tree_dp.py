"""Sequoia's optimal token tree: dynamic programming over an acceptance vector.

`p[k-1]` is the probability that the k-th child drawn (without replacement) at a
node is the one the target accepts. The value of a tree is the expected number
of tokens one target forward yields: the sum over nodes of the product of
p[rank] along the path from the root (the root contributes 1).

best(m, d) = the best value of a tree with exactly m nodes (root included) and at
most d speculated levels (root excluded). It is built from T[m][d][b], the best
tree whose root has exactly b children:

    T[1][d][0] = 1
    T[m][d][b] = max_{1 <= y < m} T[y][d][b-1] + p[b] * best(m - y, d - 1)

(the root and its first b-1 subtrees use y nodes; the b-th child gets a subtree
of m - y nodes and at most d - 1 levels). For fixed (d, b) the update over all m
is a max-plus convolution, done as one (N x N) numpy max, so N = 128, D = 12,
W = 32 costs 384 small array ops.

Two refinements a feature draft needs, both measured (`measure.profile_acceptance_by_depth`):
p may differ per tree level (row k for level k + 1), and per the rank of a child's
parent: the children of a node drawn at rank 2 or below are accepted less often
than a rank-1 node's. Then best() is kept per class of its root (rank 1 or root /
rank 2 or below), and the b-th child's subtree is looked up in its own class:

    T_c[m][d][b] = max_y T_c[y][d][b-1] + p_c[b] * best_{class(b)}(m - y, d - 1)
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidInput

NEG = -np.inf


@dataclass
class TreeDPResult:
    value: float                        # best(N, D)
    parents: list[int]                  # the optimal tree, breadth first, -1 for the root
    table: dict[tuple[int, int], float]  # (n, d) -> best(n, d), feasible entries only
    acceptance: list[float]
    budget: int
    depth: int

    def to_dict(self) -> dict:
        return {"value": round(self.value, 6), "parents": self.parents,
                "table": {f"{n},{d}": round(v, 6) for (n, d), v in self.table.items()},
                "acceptance": self.acceptance, "budget": self.budget, "depth": self.depth}


def check_acceptance(acceptance) -> np.ndarray:
    try:
        p = np.asarray(acceptance, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise InvalidInput(f"the acceptance vector must be a list of numbers, got {acceptance!r}") from None
    if p.size == 0:
        raise InvalidInput("the acceptance vector is empty")
    if not np.all(np.isfinite(p)) or np.any(p < 0) or np.any(p > 1):
        raise InvalidInput(f"acceptance probabilities must lie in [0, 1], got {p.tolist()}")
    if p.sum() > 1 + 1e-6:
        raise InvalidInput(f"acceptance probabilities are per rank of one draw and must sum to at most 1; "
                           f"these sum to {p.sum():.4f}")
    return p


def _check_size(budget, depth) -> tuple[int, int]:
    for name, v in (("budget", budget), ("depth", depth)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise InvalidInput(f"tree {name} must be an integer, got {v!r}")
    if budget < 1:
        raise InvalidInput(f"tree budget (nodes including the root) must be at least 1, got {budget}")
    if depth < 0:
        raise InvalidInput(f"tree depth must be at least 0, got {depth}")
    return int(budget), int(depth)


def max_nodes(width: int, depth: int) -> int:
    """The most nodes a tree with at most `width` children per node and `depth` levels can hold."""
    return sum(width ** k for k in range(depth + 1))


def check_acceptance_by_depth(rows) -> np.ndarray:
    """Per-depth vectors: row k = p at the nodes of level k + 1 (deeper levels reuse the last row)."""
    try:
        arr = [check_acceptance(r) for r in rows]
    except TypeError:
        raise InvalidInput(f"per-depth acceptance must be a list of vectors, got {rows!r}") from None
    if not arr:
        raise InvalidInput("the per-depth acceptance list is empty")
    width = max(len(r) for r in arr)
    return np.stack([np.pad(r, (0, width - len(r))) for r in arr])


def acceptance_rows(acceptance, by_depth=None, under_lower_ranks=None) -> np.ndarray:
    """All the DP's vectors as one (levels, parent classes, ranks) array.

    Class 0 holds the children of the root or of a rank-1 node, class 1 (present only with
    `under_lower_ranks`) the children of a node drawn at rank 2 or below. A feature draft
    predicts its features for its likeliest token, so a rank-2 node's own children are
    drafted from a feature meant for another token, and are accepted less often.
    Missing levels repeat the last row; class 1's row 0 is never read (the root has no rank).
    """
    first = check_acceptance_by_depth(by_depth) if by_depth is not None else check_acceptance(acceptance)[None, :]
    if under_lower_ranks is None:
        return first[:, None, :]
    lower = check_acceptance_by_depth(under_lower_ranks)
    levels, width = max(len(first), len(lower)), max(first.shape[1], lower.shape[1])

    def fit(rows):
        rows = np.pad(rows, ((0, 0), (0, width - rows.shape[1])))
        return np.concatenate([rows, np.repeat(rows[-1:], levels - len(rows), axis=0)])

    return np.stack([fit(first), fit(lower)], axis=1)


def child_class(rank: int, classes: int) -> int:
    """The parent class a node of this rank (1-based) gives its own children."""
    return min(rank, classes) - 1


class _Tables:
    """best[d, m] plus the back-pointers needed to rebuild any (m, d) tree.

    `rows` is `acceptance_rows`' (levels, classes, ranks) array. With several levels the
    value of a subtree depends on where it hangs, so the table is built for one total
    depth `total`: a subtree with d levels left hangs at level total - d, and its
    children use row total - d. With two parent classes every (d, m) entry exists
    once per class of the subtree's root; `best` is the root's class.
    """

    def __init__(self, rows: np.ndarray, budget: int, depth: int, total: int | None = None):
        total = depth if total is None else total
        n_max, width = budget, min(rows.shape[2], budget - 1)
        self.classes = rows.shape[1]
        best = np.full((self.classes, depth + 1, n_max + 1), NEG)
        best[:, :, 1] = 1.0
        # split[c, d, b, m] = y, the nodes left to the root and its first b-1 subtrees.
        self.split = np.zeros((self.classes, depth + 1, width + 1, n_max + 1), dtype=np.int32)
        self.n_children = np.zeros((self.classes, depth + 1, n_max + 1), dtype=np.int32)
        m_idx = np.arange(n_max + 1)
        # sub[m, y] = m - y, valid for 1 <= y < m
        sub = m_idx[:, None] - m_idx[None, :]
        valid = (sub >= 1) & (m_idx[None, :] >= 1)
        sub_clipped = np.where(valid, sub, 0)
        for d in range(1, depth + 1):
            level = rows[min(max(total - d, 0), len(rows) - 1)]
            # The b-th child's subtree, by the class that child's rank gives it.
            prev = [best[c, d - 1][sub_clipped] for c in range(self.classes)]
            feasible = [np.isfinite(v) for v in prev]   # p = 0 times an infeasible -inf must stay -inf
            for c in range(self.classes):
                p = level[c]
                t_prev = np.full(n_max + 1, NEG)
                t_prev[1] = 1.0                          # T[.][d][0]: the root alone
                best_d = t_prev.copy()
                for b in range(1, width + 1):
                    k = child_class(b, self.classes)
                    gain = np.where(feasible[k], p[b - 1] * np.where(feasible[k], prev[k], 0.0), NEG)
                    cand = np.where(valid, t_prev[None, :] + gain, NEG)
                    y = cand.argmax(axis=1)
                    t_b = cand[m_idx, y]
                    self.split[c, d, b] = y
                    better = t_b > best_d + 1e-12        # ties keep fewer children
                    best_d = np.where(better, t_b, best_d)
                    self.n_children[c, d] = np.where(better, b, self.n_children[c, d])
                    t_prev = t_b
                best[c, d] = best_d
        self.best = best[0]

    def children_sizes(self, m: int, d: int, c: int = 0) -> list[int]:
        """Subtree sizes of the root's children, in rank order, for the best (m, d) tree of class c."""
        sizes = []
        for b in range(int(self.n_children[c, d, m]), 0, -1):
            y = int(self.split[c, d, b, m])
            sizes.append(m - y)
            m = y
        assert m == 1
        return sizes[::-1]

    def parents(self, m: int, d: int) -> list[int]:
        """The best (m, d) tree as a parent list in breadth-first order, children by rank."""
        parents = [-1]
        queue = deque([(0, m, d, 0)])
        while queue:
            node, size, levels, c = queue.popleft()
            if size == 1:
                continue
            for rank, child_size in enumerate(self.children_sizes(size, levels, c), start=1):
                parents.append(node)
                queue.append((len(parents) - 1, child_size, levels - 1, child_class(rank, self.classes)))
        return parents


class _DepthTables:
    """`_Tables`' interface over per-depth vectors: one table per total depth D."""

    def __init__(self, rows: np.ndarray, budget: int, depth: int):
        self.by_total = [_Tables(rows, budget, d, total=d) for d in range(depth + 1)]
        self.best = np.stack([self.by_total[d].best[d] for d in range(depth + 1)])

    def parents(self, m: int, d: int) -> list[int]:
        return self.by_total[d].parents(m, d)


def build_tables(acceptance, budget: int, depth: int, by_depth=None, under_lower_ranks=None):
    """best(n, d) tables from one vector, or from per-depth vectors (`by_depth`, row k = level k + 1),
    optionally with other per-depth vectors for the children of rank-2-or-lower nodes."""
    budget, depth = _check_size(budget, depth)
    rows = acceptance_rows(acceptance, by_depth if by_depth is not None and len(by_depth) > 1 else None,
                           under_lower_ranks)
    if len(rows) > 1:
        return _DepthTables(rows, budget, depth)
    return _Tables(rows, budget, depth)


def optimal_tree(acceptance, budget: int, depth: int) -> TreeDPResult:
    """The best tree with exactly `budget` nodes and at most `depth` speculated levels."""
    p = check_acceptance(acceptance)
    budget, depth = _check_size(budget, depth)
    tables = _Tables(acceptance_rows(p), budget, depth)
    value = tables.best[depth, budget]
    if not np.isfinite(value):
        raise InvalidInput(
            f"no tree has {budget} nodes within depth {depth} when each node has at most {len(p)} children "
            f"(at most {max_nodes(len(p), depth)} nodes fit): lower the budget, or raise the depth or "
            "the acceptance vector's length")
    table = {(n, d): float(tables.best[d, n]) for d in range(depth + 1) for n in range(1, budget + 1)
             if np.isfinite(tables.best[d, n])}
    return TreeDPResult(float(value), tables.parents(budget, depth), table, p.tolist(), budget, depth)


def tree_value(parents: list[int], acceptance, by_depth=None, under_lower_ranks=None) -> float:
    """F(T) of any tree given as a parent list (parents before children).

    by_depth: per-depth vectors (row k for the nodes of level k + 1, the last row for deeper ones);
    under_lower_ranks: the same for the children of nodes drawn at rank 2 or below.
    """
    rows = acceptance_rows(acceptance, by_depth, under_lower_ranks)
    classes = rows.shape[1]
    reach = [1.0] * len(parents)
    rank = [0] * len(parents)
    level = [0] * len(parents)
    seen_children = [0] * len(parents)
    for i, par in enumerate(parents):
        if par < 0:
            continue
        seen_children[par] += 1
        rank[i] = seen_children[par]
        level[i] = level[par] + 1
        klass = 0 if parents[par] < 0 else child_class(rank[par], classes)
        p = rows[min(level[i], len(rows)) - 1, klass]
        reach[i] = reach[par] * (p[rank[i] - 1] if rank[i] <= len(p) else 0.0)
    return float(sum(reach))
