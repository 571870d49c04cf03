"""Token-tree structure, prepared once per tree shape and reused every step.

A tree is a parent list in breadth-first order (root = node 0, parent -1): each
level's nodes are contiguous and a node's children are consecutive, ordered by
drawing rank. From it we precompute everything the hot loop needs: depths, level
ranges, the ancestor matrix (the block of the tree's attention), and the index
tensors that scatter each level's top-c draws to its child nodes.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

import torch

from ..errors import InvalidInput


def check_parents(parents) -> list[int]:
    """Validate a breadth-first parent list; return it as plain ints."""
    try:
        parents = [int(x) for x in parents]
    except (TypeError, ValueError):
        raise InvalidInput(f"a tree must be a list of parent indices, got {parents!r}") from None
    if not parents or parents[0] != -1:
        raise InvalidInput("a tree's first node must be the root, with parent -1")
    depth = [0]
    for i, par in enumerate(parents[1:], 1):
        if not (0 <= par < i):
            raise InvalidInput(f"node {i} has parent {par}; parents must come before their children")
        if par < parents[i - 1]:
            raise InvalidInput(f"node {i}: children must be numbered breadth first (parents non-decreasing)")
        depth.append(depth[par] + 1)
        if depth[i] < depth[i - 1]:
            raise InvalidInput(f"node {i}: levels must be contiguous (breadth-first order)")
    return parents


@dataclass
class TreeShape:
    """Pure-Python description of one tree shape (no tensors)."""

    parents: list[int]
    depths: list[int]
    ranks: list[int]                     # 1-based drawing rank among siblings (0 for the root)
    children: list[list[int]]            # node -> child ids, in rank order
    level_ranges: list[tuple[int, int]]  # depth -> [start, end) node ids

    @staticmethod
    def from_parents(parents) -> "TreeShape":
        parents = check_parents(parents)
        n = len(parents)
        depths, ranks = [0] * n, [0] * n
        children: list[list[int]] = [[] for _ in range(n)]
        for i in range(1, n):
            par = parents[i]
            depths[i] = depths[par] + 1
            children[par].append(i)
            ranks[i] = len(children[par])
        # Breadth first, depths never decrease: each level is one run of them.
        level_ranges = [(bisect_left(depths, d), bisect_right(depths, d)) for d in range(depths[-1] + 1)]
        return TreeShape(parents, depths, ranks, children, level_ranges)

    @property
    def size(self) -> int:
        return len(self.parents)

    @property
    def depth(self) -> int:
        return len(self.level_ranges) - 1

    @property
    def draft_rows(self) -> list[int]:
        """Rows each draft forward of a step reads: one forward per level that has children, the root's
        over its one row, every other level's over its nodes."""
        return [1 if level == 0 else end - start for level, (start, end) in enumerate(self.level_ranges[:self.depth])]

    def truncated(self, depth: int) -> "TreeShape":
        """The same tree cut to `depth` levels: a prefix of the breadth-first order."""
        end = self.level_ranges[min(depth, self.depth)][1]
        return TreeShape.from_parents(self.parents[:end])

    def ancestor_matrix(self) -> torch.Tensor:
        """(n, n) bool: row i attends to column j when j is i itself or an ancestor of i."""
        n = self.size
        rows: list[list[bool]] = []
        for i, parent in enumerate(self.parents):   # built in Python: one tensor call, not n row updates
            row = list(rows[parent]) if parent >= 0 else [False] * n
            row[i] = True
            rows.append(row)
        return torch.tensor(rows, dtype=torch.bool)


class TreeTensors:
    """Device index tensors for one tree shape, built once and reused every step.

    - `parents` (n,): each node's parent (the root its own), the rows a node's p and q are read at;
    - `level_width[d]`: the widest fan-out of level d (how many draws its forward needs);
    - `draw_row[d]`, `draw_rank[d]`: for the nodes of level d + 1, which row of level d's top-c draws
      (their parent's place within level d) and which column (rank - 1) holds their token.
    """

    def __init__(self, shape: TreeShape, device: torch.device):
        self.parents = torch.tensor([max(p, 0) for p in shape.parents], dtype=torch.long, device=device)
        self.level_width = [max(len(c) for c in shape.children[s:e]) for s, e in shape.level_ranges]
        self.draw_row = [torch.tensor([shape.parents[i] - shape.level_ranges[d][0]
                                       for i in range(*shape.level_ranges[d + 1])], device=device)
                         for d in range(shape.depth)]
        self.draw_rank = [torch.tensor([shape.ranks[i] - 1 for i in range(*shape.level_ranges[d + 1])],
                                       device=device) for d in range(shape.depth)]
