"""Token-tree structure, prepared once per tree shape and reused every step.

A tree is a parent list in breadth-first order (root = node 0, parent -1): each
level's nodes are contiguous and a node's children are consecutive, ordered by
drawing rank. From it we precompute everything the hot loop needs: depths, level
ranges, the additive ancestor mask block, position offsets, and the index
tensors that scatter each level's top-c draws to its child nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

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
        level_ranges = []
        for d in range(max(depths) + 1):
            ids = [i for i in range(n) if depths[i] == d]
            level_ranges.append((ids[0], ids[-1] + 1))
        return TreeShape(parents, depths, ranks, children, level_ranges)

    @property
    def size(self) -> int:
        return len(self.parents)

    @property
    def depth(self) -> int:
        return len(self.level_ranges) - 1

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


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """0 where attention is allowed, the dtype's minimum where it is blocked."""
    out = torch.zeros(allowed.shape, dtype=dtype)
    return out.masked_fill_(~allowed, torch.finfo(dtype).min)


class TreeTensors:
    """Device tensors for one tree shape, built once and reused every step.

    - `mask_block` (1, 1, n, n): the target's tree-attention block;
    - `draft_masks[d]`: the block the draft uses at level d (rows of level d,
      columns of every node up to the end of level d);
    - `depth_offsets` (n,): position of each node minus the root's position;
    - `draw_row[d]`, `draw_rank[d]`: for the nodes of level d + 1, which row of
      level d's top-c draws (their parent's position within level d) and which
      column (rank - 1) holds their token.
    """

    def __init__(self, shape: TreeShape, device: torch.device, dtype: torch.dtype):
        self.shape = shape
        n = shape.size
        allowed = shape.ancestor_matrix()
        block = additive_mask(allowed, dtype).to(device)
        self.mask_block = block.view(1, 1, n, n)
        self.depth_offsets = torch.tensor(shape.depths, dtype=torch.long, device=device)
        self.parents = torch.tensor([max(p, 0) for p in shape.parents], dtype=torch.long, device=device)
        # The nodes with children (the only rows whose softmax the app's tree shows a child's probability
        # from) and, per node, its parent's place among them: normalising those rows alone instead of
        # every leaf's too saves most of the step's softmax work.
        inner = [i for i in range(n) if shape.children[i]] or [0]
        place = {node: k for k, node in enumerate(inner)}
        self.inner_rows = torch.tensor(inner, dtype=torch.long, device=device)
        self.parent_place = torch.tensor([place.get(max(p, 0), 0) for p in shape.parents], dtype=torch.long,
                                         device=device)
        # Children per node and the widest fan-out per level: how many draws a level's forward needs.
        self.n_children = [len(c) for c in shape.children]
        self.level_width = [max(self.n_children[s:e]) for s, e in shape.level_ranges]
        self.dtype = dtype
        self.device = device
        self._pending_blocks: dict[int, torch.Tensor] = {}   # level 0's causal block, by input length
        self._zeros = torch.zeros(1, 1, n, 0, dtype=dtype, device=device)   # the attend-all prefix, grown on demand

    # A fixed tree's levels are drafted with these; an adaptive tree (a new shape on most steps) never
    # reads them, so they are built on first use.
    @cached_property
    def draft_masks(self) -> list[torch.Tensor]:
        block = self.mask_block[0, 0]
        return [block[s:e, :e].reshape(1, 1, e - s, e) for s, e in self.shape.level_ranges]

    @cached_property
    def draw_row(self) -> list[torch.Tensor]:
        shape = self.shape
        return [torch.tensor([shape.parents[i] - shape.level_ranges[d][0] for i in range(*shape.level_ranges[d + 1])],
                             device=self.device) for d in range(shape.depth)]

    @cached_property
    def draw_rank(self) -> list[torch.Tensor]:
        shape = self.shape
        return [torch.tensor([shape.ranks[i] - 1 for i in range(*shape.level_ranges[d + 1])], device=self.device)
                for d in range(shape.depth)]

    def target_mask(self, prefix_len: int) -> torch.Tensor:
        """(1, 1, n, prefix_len + n): the whole committed prefix, then the tree block."""
        return torch.cat([self._prefix(self.shape.size, prefix_len), self.mask_block], dim=-1)

    def draft_mask(self, level: int, prefix_len: int, pending: int = 1) -> torch.Tensor:
        """Mask for the draft's forward over level `level`, after `prefix_len` cached slots.

        At level 0 the input is the `pending` committed tokens the draft has not
        seen yet, the root last: plain causal among themselves.
        """
        if level == 0:
            block = self._pending_blocks.get(pending)
            if block is None:
                causal = torch.ones(pending, pending, dtype=torch.bool).tril()
                block = additive_mask(causal, self.dtype).to(self.device).view(1, 1, pending, pending)
                self._pending_blocks[pending] = block
        else:
            block = self.draft_masks[level]
        return torch.cat([self._prefix(block.shape[2], prefix_len), block], dim=-1)

    def _prefix(self, rows: int, cols: int) -> torch.Tensor:
        """A (1, 1, rows, cols) view of zeros: every committed slot is visible to every node."""
        if self._zeros.shape[2] < rows or self._zeros.shape[3] < cols:
            # Grown geometrically, so a run allocates it a handful of times rather than every step.
            grown = (1, 1, max(rows, self._zeros.shape[2]), max(2 * cols, 256, self._zeros.shape[3]))
            self._zeros = torch.zeros(grown, dtype=self.dtype, device=self.device)
        return self._zeros[:, :, :rows, :cols]
