"""Measuring an acceptance vector: the Sequoia decoder itself on a star tree (a comb of one level).

p[k-1] is the probability that the k-th child drawn without replacement at a
node is the one the target accepts. Each verification step of a star tree
(root + W children) accepts rank k or none; the normalised histogram over a few
hundred steps is the vector, cached for `acceptance.acceptance_for`. A comb of
several levels measures one vector per level the same way.
"""

from __future__ import annotations

import sys

from ..engine.profiler import save_cached
from ..engine.sampling import SamplingConfig
from ..engine.text import encode_prompt
from ..errors import InvalidInput
from .acceptance import model_id, profile_key
from .decoder import SequoiaDecoder
from .sizing import tree_choice


# The nodes of each comb level whose children measure the lower class (`tree_dp.acceptance_rows`),
# how many children each gets, and how many steps' worth of the rank-1 row a lower row leans on:
# a rank-2 node is reached on about one step in ten, so a deep lower row rests on tens of steps.
LOWER_RANKS = (2, 3)
LOWER_WIDTH = 4
LOWER_PRIOR_STEPS = 10


def _comb(width: int, depths: int, lower_width: int) -> tuple[list[int], list[int], list[list[tuple[int, int]]]]:
    """The comb profiling measures with: a chain of rank-1 nodes, each with `width` children, so that level k's
    children measure depth k + 1, in breadth-first order (level 1 = nodes 1..W, node 1 = rank 1; level 2 = the W
    children of node 1; and so on); with `lower_width`, the rank-2 and rank-3 nodes of each level but the last
    also get that many children (leaves), which measure the children of lower-ranked parents.

    Returns (parents, chain, lower): chain[k] = the rank-1 node of level k (the root first); lower[k] =
    (node, its first child) for each lower-ranked node of level k whose children are on level k + 1."""
    parents, chain, lower = [-1], [0], []
    for k in range(depths):   # builds level k + 1: the chain node's children, then the lower nodes'
        first = len(parents)
        parents += [chain[k]] * width
        groups = []
        if k > 0 and lower_width:
            for rank in LOWER_RANKS:
                if rank <= width:
                    node = chain[k] + rank - 1   # the chain node's sibling of this rank, on level k
                    groups.append((node, len(parents)))
                    parents += [node] * lower_width
        lower.append(groups)
        chain.append(first)
    return parents, chain, lower


def profile_acceptance_by_depth(pair, prompts: list[str], width: int, depths: int, sampling: SamplingConfig,
                                steps: int = 300, max_new_tokens: int = 128, show_progress: bool = True,
                                save: bool = True) -> dict:
    """Acceptance vectors per tree level, measured with the decoder on a comb tree.

    At each level k the rank-1 node (reached only if every rank-1 node above it was
    accepted) has W children drawn without replacement; the rank the verification
    accepts among them (or none) is counted for depth k + 1, conditioned on reaching
    it, which is what the tree DP's per-level value needs. Row 0 is the plain
    star-tree vector; the result also stores it as `acceptance`.

    The rank-2 and rank-3 nodes of each level get LOWER_WIDTH children too: counted
    the same way when one of them is accepted, they give `acceptance_under_lower_ranks`
    (row k for depth k + 1; row 0, under the root, is row 0 above). A row leans on
    LOWER_PRIOR_STEPS steps of the rank-1 row, since few steps reach a rank-2 node.
    """
    if isinstance(depths, bool) or not isinstance(depths, int) or not 1 <= depths <= 8:
        raise InvalidInput(f"depths must be a whole number from 1 to 8, got {depths!r}")
    if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= 64:
        raise InvalidInput(f"width must be a whole number from 1 to 64, got {width!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InvalidInput(f"steps must be a positive whole number, got {steps!r}")
    if not prompts:
        raise InvalidInput("no prompts to profile on")
    sampling = sampling.validated()
    lower_width = min(LOWER_WIDTH, width)   # a row leans on the rank-1 row's first ranks
    parents, chain, lower = _comb(width, depths, lower_width)
    counts = [[0] * width for _ in range(depths)]
    reached = [0] * depths
    lower_counts = [[0] * lower_width for _ in range(depths)]
    lower_reached = [0] * depths
    done = run = 0
    bar = None
    if show_progress:
        from tqdm import tqdm

        bar = tqdm(total=steps, desc="acceptance by depth" if depths > 1 else "acceptance", unit="step",
                   file=sys.stderr)
    while done < steps:
        prompt = prompts[run % len(prompts)]
        seed = None if sampling.seed is None else sampling.seed + run
        cfg = SamplingConfig(sampling.temperature, sampling.top_p, sampling.top_k, seed)
        ids = encode_prompt(pair.tokenizer, prompt)
        room = min(max_new_tokens, pair.max_context - len(ids))
        if room < 2:
            raise InvalidInput("a prompt fills the model's context; use shorter prompts")
        # No copies: the draft's own acceptance, level by level.
        decoder = SequoiaDecoder(pair, prompt, ids, cfg, room, tree_choice(pair, cfg, tree_parents=parents), copies=0)
        while not decoder.done and done < steps:
            payload = decoder.step().payload
            if payload is None or payload.depth < depths:
                continue   # the prefill, or a tree cut near the end
            _count_step(payload.accepted_path, chain, lower, lower_width, counts, reached, lower_counts, lower_reached)
            done += 1
            if bar is not None:
                bar.update(1)
        decoder.close()
        run += 1
    if bar is not None:
        bar.close()
    by_depth = [[round(c / max(reached[k], 1), 6) for c in counts[k]] for k in range(depths)]
    result = {
        "target": model_id(pair.target_name), "draft": model_id(pair.draft_name),
        "temperature": sampling.temperature, "top_p": sampling.top_p, "width": width, "steps": done,
        "counts": counts[0], "rejected_all": reached[0] - sum(counts[0]), "acceptance": by_depth[0],
        "device": str(pair.device), "dtype": str(pair.dtype).replace("torch.", "")}
    if depths > 1:   # a comb of several levels: a vector per level, and under the lower ranks
        result |= {"acceptance_by_depth": by_depth, "counts_by_depth": counts, "reached_by_depth": reached,
                   "lower_ranks": list(LOWER_RANKS), "lower_width": lower_width,
                   "lower_prior_steps": LOWER_PRIOR_STEPS, "counts_under_lower_ranks": lower_counts,
                   "reached_under_lower_ranks": lower_reached,
                   "acceptance_under_lower_ranks": [by_depth[0]] + [
                       lower_row(lower_counts[k], lower_reached[k], by_depth[k]) for k in range(1, depths)]}
    if save:
        save_cached("acceptance", profile_key(pair.target_name, pair.draft_name, sampling), result)
    return result


def _count_step(path, chain, lower, lower_width, counts, reached, lower_counts, lower_reached) -> None:
    """Add one step's accepted path to the comb's counts (see `profile_acceptance_by_depth`)."""
    for k in range(len(counts)):
        # Here every rank-1 node above level k was accepted (else the loop broke below).
        if k > 0 and len(path) >= k:
            for node, first_child in lower[k]:   # a lower-ranked node of level k was accepted
                if path[k - 1] == node:
                    lower_reached[k] += 1
                    if len(path) > k and first_child <= path[k] < first_child + lower_width:
                        lower_counts[k][path[k] - first_child] += 1
        if k > 0 and (len(path) < k or path[k - 1] != chain[k]):
            break   # the rank-1 node of level k was not accepted: level k + 1 is not reached
        reached[k] += 1
        if len(path) > k:
            counts[k][path[k] - chain[k + 1]] += 1


def lower_row(counts: list[int], reached: int, rank1_row: list[float]) -> list[float]:
    """One depth's vector under lower-ranked parents, leaning on LOWER_PRIOR_STEPS steps of the rank-1 row."""
    prior = LOWER_PRIOR_STEPS
    return [round((c + prior * rank1_row[i]) / (reached + prior), 6) for i, c in enumerate(counts)]
