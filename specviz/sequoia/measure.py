"""Measuring an acceptance vector: the Sequoia decoder itself on a star tree;
and measuring its steps' real times, which the tree sizing's step costs are fitted from.

p[k-1] is the probability that the k-th child drawn without replacement at a
node is the one the target accepts. Each verification step of a star tree
(root + W children) accepts rank k or none; the normalised histogram over a few
hundred steps is the vector, cached for `acceptance.acceptance_for`.
"""

from __future__ import annotations

import sys
import time

from ..autoregressive.decoder import AutoregressiveDecoder
from ..engine.profiler import save_cached, with_contention
from ..engine.sampling import SamplingConfig
from ..engine.text import encode_prompt
from ..errors import InvalidInput
from ..trace import PHASE_DRAFT
from .acceptance import model_id, profile_key
from .decoder import SequoiaDecoder


def star_tree(width: int) -> list[int]:
    return [-1] + [0] * width


def comb_tree(width: int, depths: int) -> list[int]:
    """A chain of rank-1 nodes, each with `width` children: level k's children measure depth k + 1.

    Breadth first: level 1 = nodes 1..W (node 1 = rank 1), level 2 = the W children of
    node 1, and so on; the chain continues through each level's first node.
    """
    parents, chain = [-1], 0
    for _ in range(depths):
        first = len(parents)
        parents += [chain] * width
        chain = first
    return parents


def profile_acceptance_by_depth(pair, prompts: list[str], width: int, depths: int, sampling: SamplingConfig,
                                steps: int = 300, max_new_tokens: int = 128, show_progress: bool = True,
                                save: bool = True) -> dict:
    """Acceptance vectors per tree level, measured with the decoder on a comb tree.

    At each level k the rank-1 node (reached only if every rank-1 node above it was
    accepted) has W children drawn without replacement; the rank the verification
    accepts among them (or none) is counted for depth k + 1, conditioned on reaching
    it, which is what the tree DP's per-level value needs. Row 0 is the plain
    star-tree vector; the result also stores it as `acceptance`.
    """
    if isinstance(depths, bool) or not isinstance(depths, int) or not 1 <= depths <= 8:
        raise InvalidInput(f"depths must be a whole number from 1 to 8, got {depths!r}")
    if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= 64:
        raise InvalidInput(f"width must be a whole number from 1 to 64, got {width!r}")
    sampling = sampling.validated()
    parents = comb_tree(width, depths)
    chain = [0] + [1 + k * width for k in range(depths)]   # the rank-1 node of each level (root first)
    counts = [[0] * width for _ in range(depths)]
    reached = [0] * depths
    done = run = 0
    bar = None
    if show_progress:
        from tqdm import tqdm

        bar = tqdm(total=steps, desc="acceptance by depth", unit="step", file=sys.stderr)
    while done < steps:
        prompt = prompts[run % len(prompts)]
        seed = None if sampling.seed is None else sampling.seed + run
        cfg = SamplingConfig(sampling.temperature, sampling.top_p, sampling.top_k, seed)
        ids = encode_prompt(pair.tokenizer, prompt)
        room = min(max_new_tokens, pair.max_context - len(ids))
        decoder = SequoiaDecoder(pair, prompt, ids, cfg, room, tree_parents=parents)
        while not decoder.done and done < steps:
            payload = decoder.step().payload
            if payload is None or payload.depth < depths:
                continue   # the prefill, or a tree cut near the end
            path = payload.accepted_path
            for k in range(depths):
                if k > 0 and (len(path) < k or path[k - 1] != chain[k]):
                    break   # the rank-1 node of level k was not accepted: level k + 1 is not reached
                reached[k] += 1
                if len(path) > k:
                    counts[k][path[k] - (1 + k * width)] += 1
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
        "acceptance_by_depth": by_depth, "counts_by_depth": counts, "reached_by_depth": reached,
        "device": str(pair.device), "dtype": str(pair.dtype).replace("torch.", ""),
    }
    if save:
        save_cached("acceptance", profile_key(pair.target_name, pair.draft_name, sampling), result)
    return result


def profile_acceptance(pair, prompts: list[str], width: int, sampling: SamplingConfig, steps: int = 300,
                       max_new_tokens: int = 128, show_progress: bool = True, save: bool = True) -> dict:
    """Measure p on real prompts with a star tree of `width` children; cache and return it."""
    if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= 64:
        raise InvalidInput(f"width must be a whole number from 1 to 64, got {width!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InvalidInput(f"steps must be a positive whole number, got {steps!r}")
    if not prompts:
        raise InvalidInput("no prompts to profile on")
    sampling = sampling.validated()
    counts = [0] * width
    done = 0
    bar = None
    if show_progress:
        from tqdm import tqdm

        bar = tqdm(total=steps, desc="acceptance", unit="step", file=sys.stderr)
    run = 0
    while done < steps:
        prompt = prompts[run % len(prompts)]
        seed = None if sampling.seed is None else sampling.seed + run
        cfg = SamplingConfig(sampling.temperature, sampling.top_p, sampling.top_k, seed)
        ids = encode_prompt(pair.tokenizer, prompt)
        room = min(max_new_tokens, pair.max_context - len(ids))
        if room < 2:
            raise InvalidInput("a prompt fills the model's context; use shorter prompts")
        decoder = SequoiaDecoder(pair, prompt, ids, cfg, room, tree_parents=star_tree(width))
        while not decoder.done and done < steps:
            record = decoder.step()
            payload = record.payload
            if payload is None or payload.depth == 0:
                continue  # the prefill, or a step cut to the root near the end
            if payload.accepted_path:
                counts[payload.accepted_path[0] - 1] += 1  # children are nodes 1..W in rank order
            done += 1
            if bar is not None:
                bar.update(1)
        decoder.close()
        run += 1
    if bar is not None:
        bar.close()
    result = {
        "target": model_id(pair.target_name), "draft": model_id(pair.draft_name),
        "temperature": sampling.temperature, "top_p": sampling.top_p, "width": width, "steps": done,
        "counts": counts, "rejected_all": done - sum(counts),
        "acceptance": [round(c / done, 6) for c in counts],
        "device": str(pair.device), "dtype": str(pair.dtype).replace("torch.", ""),
    }
    if save:
        save_cached("acceptance", profile_key(pair.target_name, pair.draft_name, sampling), result)
    return result


# Open-ended prompts, so a step count is reached before an end of text; what they say does not matter.
CALIBRATION_PROMPTS = ("Explain how a bicycle works, step by step, for someone who has never ridden one.",
                       "Write a short story about a lighthouse keeper who finds a message in a bottle.")


def _timed_steps(makers: list, steps: int, warmup: int) -> list[list[tuple[float, float]]]:
    """(wall ms, draft-phase ms) of `steps` decoding steps per decoder maker, after `warmup` steps.

    Round robin, one step of each decoder per round: a slow spell of a shared machine then
    falls on every tree alike instead of on whichever was being timed. Steps whose tree was
    cut (near max_new_tokens) are not counted: they are smaller trees than the one timed.
    """
    out: list[list[tuple[float, float]]] = [[] for _ in makers]
    decoders: list = [None] * len(makers)
    seen, runs = [0] * len(makers), [0] * len(makers)
    max_runs = 4 * len(CALIBRATION_PROMPTS)   # prompts that end at once must not loop for ever

    def active(k: int) -> bool:
        live = decoders[k] is not None and not decoders[k].done
        return len(out[k]) < steps and (live or runs[k] < max_runs)

    try:
        while any(active(k) for k in range(len(makers))):
            for k, make in enumerate(makers):
                if not active(k):
                    continue
                if decoders[k] is None or decoders[k].done:
                    if decoders[k] is not None:
                        decoders[k].close()
                    decoders[k] = make(CALIBRATION_PROMPTS[runs[k] % len(CALIBRATION_PROMPTS)])
                    decoders[k].step()   # the prefill
                    seen[k], runs[k] = 0, runs[k] + 1
                    continue
                t0 = time.perf_counter()
                record = decoders[k].step()
                wall = (time.perf_counter() - t0) * 1000
                seen[k] += 1
                full = getattr(decoders[k], "shape", None)
                cut = full is not None and record.payload is not None and record.payload.depth < full.depth
                if seen[k] > warmup and not record.finished and not cut:
                    out[k].append((wall, record.time_ms.get(PHASE_DRAFT, 0.0)))
    finally:
        for decoder in decoders:
            if decoder is not None:
                decoder.close()
    return out


def measure_step_times(pair, sampling: SamplingConfig, trees: list[list[int]], steps: int = 24,
                       warmup: int = 3, max_new_tokens: int = 160) -> dict:
    """Real step times of the Sequoia decoder on each tree, and of autoregressive, for
    `sizing.fit_step_costs`: {"samples": [{parents, draft_ms, rest_ms}], "ar_ms": [...],
    "waiting_share": the share of the time the threads waited for a core (None off Linux)}.

    Wall time around `step()`, so whatever a step costs (the trace record included) counts.
    """
    sampling = sampling.validated()
    ids = {p: encode_prompt(pair.tokenizer, p) for p in CALIBRATION_PROMPTS}
    room = {p: max(2, min(max_new_tokens, pair.max_context - len(ids[p]))) for p in CALIBRATION_PROMPTS}

    def sequoia(parents):
        return lambda p: SequoiaDecoder(pair, p, ids[p], sampling, room[p], tree_parents=parents)

    def autoregressive(p):
        return AutoregressiveDecoder(pair, p, ids[p], sampling, room[p])

    timed, share = with_contention(
        lambda: _timed_steps([sequoia(t) for t in trees] + [autoregressive], steps, warmup), pair.device)
    samples = [{"parents": parents, "draft_ms": draft, "rest_ms": wall - draft}
               for parents, steps_ in zip(trees, timed) for wall, draft in steps_]
    return {"samples": samples, "ar_ms": [wall for wall, _ in timed[-1]], "waiting_share": share}
