"""A tree shaped each step by the draft's own confidence (pure functions, no model).

Sequoia's DP tree is optimal for the *average* acceptance; a calibrated draft
says, step by step, where acceptance is likely. With the feature draft of the
offline default the top-1 probability q1 predicts agreement (q1 < 0.1: 0.10,
0.4-0.5: 0.53, >= 0.9: 0.99 on held-out text), so a node's *score* (the product
of the ranked draft probabilities on its path) estimates how likely it is to be
accepted, and the expected tokens of a step are 1 + the sum of its nodes' scores.

The tree grows level by level: after the draft has read one level's expanded
nodes, each node v gets the ranked children k = 1, 2, ... whose score
s_v * q_v^(k) (q_v^(k): the k-th largest probability of v's draft distribution)
reaches a threshold tau, at most `max_children`, until the node budget is spent;
higher-scored nodes are served first. A node is read by the draft (expanded) only
if its own score reaches tau, since none of its children could.

Exactness at any temperature: how many children v gets depends on v's score, on
the ranked probabilities of q_v and on the nodes served before v, never on the
tokens drawn as v's children or below them. The children are then the first
draws without replacement from q_v (Gumbel-top-k order), so Sequoia's walk
(`verify.sampled_walk`) stays exact; greedy walks accept any tree. A child's
score takes the ranked probability of its rank, not its drawn token's own: the
count of v's children must be fixed before they are drawn, and the same numbers
then score them (a drawn token's own probability would also be exact for its
children's counts, and predicted acceptance no better in a T=0.6 trial: Brier
0.1036 against 0.1034).
"""

from __future__ import annotations


def allocate_children(scores: list[float], ranked_probs: list[list[float]], tau: float, max_children: int,
                      budget: int) -> list[int]:
    """How many children each expanded node gets, in the order the nodes were given.

    scores[r]: node r's path score; ranked_probs[r]: its draft distribution's largest
    probabilities, descending. Nodes are served by descending score (ties: first given),
    each taking ranked children while score * probability >= tau, within `budget` nodes.
    """
    counts = [0] * len(scores)
    for r in sorted(range(len(scores)), key=lambda r: -scores[r]):
        for p in ranked_probs[r][:max_children]:
            if budget <= 0 or scores[r] * p < tau:
                break
            counts[r] += 1
            budget -= 1
    return counts


def free_rows(target_cost: list[float], row_price: float, least: int, most: int) -> int:
    """How many nodes a tree may hold before the target's forward starts charging for them.

    target_cost[n]: a target forward over n nodes, in one-token forwards (this machine's measured
    curve, piecewise linear between the sizes timed). Rows are added while each costs at most
    `row_price`; the count is kept within [least, most]. On a 2-core CPU the 135M target reads
    up to 8 rows for 0.3% of a forward each and every row past 8 for about 4%, so its trees are
    held to 8 nodes; on a GPU the curve stays flat far longer and `most` binds.

    The `least` rows are held anyway, so the count grows from there: only the rows past the floor
    must be free. In fp32 on a Zen 4 EPYC (MKL's sgemm) two rows cost 1.7x one and four to eight
    about 1.4x, flat: counted from one row, the first step's jump held the trees to the floor of 4
    nodes, the dearest per node, and the adaptive tree raced at 0.95x the DP tree instead of 1.07x.
    """
    n = min(least, most)
    while n < most and target_cost[n + 1] - target_cost[n] <= row_price:
        n += 1
    return n


def read_block(frontier: list[int], parents: list[int], offset_of: dict[int, int], first: int) -> list[list[bool]]:
    """Which slots after the root's each node of one adaptive draft level sees (the block of its shape).

    The level's nodes are read at offsets first, first + 1, ... after the root's slot (offset 0); row i
    sees the root, the offsets of its read ancestors (every ancestor below the root was read, since it
    has children) and its own; the committed slots before the root's are visible to every row anyway.
    """
    width = first + len(frontier)
    rows = []
    for i, node in enumerate(frontier):
        row = [False] * width
        row[0] = row[first + i] = True
        ancestor = parents[node]
        while ancestor > 0:
            row[offset_of[ancestor]] = True
            ancestor = parents[ancestor]
        rows.append(row)
    return rows


def padded_levels(max_nodes: int, max_depth: int, max_children: int, tau: float) -> tuple[list[int], list[int]]:
    """Rows and first read offset of each draft level of an adaptive tree held to fixed shapes (so that
    a GPU captures them): index d is the level that reads depth d's nodes, d = 1 .. max_depth - 1
    (index 0, the root's read, is not a level: 0 rows, offset 0).

    Depth d holds at most max_children^d nodes, and at most max_nodes - 1; and since a node is made only
    when its score reaches tau, and the scores at one depth sum to at most 1 (each parent's children
    share its score), at most 1 / tau. The levels' offsets follow one another after the root's, as a
    fixed tree's do, so every level writes its own slots.
    """
    rows, first = [0], [0]
    offset = 1
    for depth in range(1, max_depth):
        rows.append(min(max_children ** depth, max_nodes - 1, int(1 / tau + 1e-9)))
        first.append(offset)
        offset += rows[-1]
    return rows, first


def padded_block(rows: list[list[bool]], first: int, width: int) -> list[list[bool]]:
    """A level's block (`read_block`) held to `width` rows: a padding row sees the root and its own slot
    only (its K/V and logits are never read)."""
    columns = first + width
    return ([row + [False] * (columns - len(row)) for row in rows]
            + [[c == 0 or c == first + j for c in range(columns)] for j in range(len(rows), width)])


def level_pays(frontier_scores: list[float], child_share: float, expected_tokens: float, level_cost: float,
               step_cost: float) -> bool:
    """Whether one more draft level over the frontier is expected to pay for itself.

    Reading it costs `level_cost` on top of the step's cost T (both in target forwards); its
    children add to the step's expected tokens E about the frontier's scores times the chance a
    child is accepted, estimated as `child_share`, the draft's mean top-1 probability at the level
    just drawn (the draft is calibrated: its top-1 probability predicts acceptance). Tokens per
    second grow only if (E + gain) / (T + level_cost) > E / T, i.e. gain x T > E x level_cost.
    A myopic rule (a level also opens the ones below), so a cheap draft (a feature draft's level
    is 0.04 of a target forward on a CPU) is rarely stopped, and a costly one (a 4-layer draft:
    0.18) reads a level only where the frontier is likely to be accepted.
    """
    return sum(frontier_scores) * child_share * step_cost > expected_tokens * level_cost
