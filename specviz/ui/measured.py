"""What a race measured, in the parts the what-if panel predicts, and the prediction for the run itself.

A decoding step's time is its target forward + its draft forwards + everything else (verification, cache
compaction, the trace): `StepParts` holds the means of each over a run's decoding steps, and the prompt's forward
(step 0) apart, since in a short race on a CPU it is a tenth of the wall time. A speedup is then predicted the way
the summary measures it, tokens per second over autoregressive's:

    wall = prompt's forward + (tokens - its tokens) / accepted length x step ms

so a prediction that is right in every part is right in the whole. The run's own prediction takes every cost from
the run (machine load shifts them from run to run) and predicts only accepted length (`sequoia_tokens_per_step`,
`lookahead_tokens_per_step`). Pure functions of trace data.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from ..methods import baseline, drafting, method_views
from ..trace import ORIGIN_COPY, ORIGIN_POOL, PHASE_DRAFT, PHASE_TARGET, LookaheadPayload, RunTrace, TreePayload


@dataclass(frozen=True)
class StepParts:
    """A run's (or a prediction's) mean decoding step and its prompt's forward, in milliseconds."""

    tokens_per_step: float
    target_ms: float
    draft_ms: float
    other_ms: float
    prefill_ms: float = 0.0
    prefill_tokens: int = 1
    tokens: int = 0            # the run's tokens, the prompt forward's included

    @property
    def step_ms(self) -> float:
        return self.target_ms + self.draft_ms + self.other_ms

    def wall_ms(self, tokens: int | None = None) -> float:
        """Time to write `tokens` (default: the run's): the prompt's forward, then decoding steps."""
        tokens = self.tokens if tokens is None else tokens
        decoded = max(tokens - self.prefill_tokens, 0)
        return self.prefill_ms + (decoded / self.tokens_per_step * self.step_ms if decoded else 0.0)


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def measured_parts(run: RunTrace | None) -> StepParts | None:
    """The run's mean decoding step (step 0, the prompt's forward, apart); None without decoding steps."""
    if run is None or len(run.steps) < 2:
        return None
    steps = run.steps[1:]
    target = _mean(s.time_ms.get(PHASE_TARGET, 0.0) for s in steps)
    draft = _mean(s.time_ms.get(PHASE_DRAFT, 0.0) for s in steps)
    other = _mean(s.total_ms for s in steps) - target - draft
    first = run.steps[0]
    return StepParts(tokens_per_step=_mean(len(s.new_token_ids) for s in steps), target_ms=target, draft_ms=draft,
                     other_ms=max(other, 0.0), prefill_ms=first.total_ms,
                     prefill_tokens=len(first.new_token_ids), tokens=len(run.token_ids))


def speedup(method: StepParts, ar: StepParts, tokens: int | None = None) -> float:
    """Tokens per second over autoregressive's, each writing its own run's tokens (or `tokens`)."""
    m_tokens = method.tokens if tokens is None else tokens
    a_tokens = ar.tokens if tokens is None else tokens
    m_wall, a_wall = method.wall_ms(m_tokens), ar.wall_ms(a_tokens)
    if m_wall <= 0 or a_wall <= 0 or not a_tokens:
        return 0.0
    return (m_tokens / m_wall) / (a_tokens / a_wall)


# ----------------------------------------------------------------------------- Sequoia's trees


def _tree_parents(payload: TreePayload) -> tuple[list[int], list[int], list[bool]]:
    """The step's tree as a parent list in id order, each node's rank among its siblings, and which were accepted."""
    nodes = sorted(payload.nodes, key=lambda n: n.id)
    index = {n.id: i for i, n in enumerate(nodes)}
    parents = [index.get(n.parent, -1) if n.parent >= 0 else -1 for n in nodes]
    seen: dict[int, int] = {}
    ranks = []
    for par in parents:
        seen[par] = seen.get(par, 0) + 1
        ranks.append(seen[par] if par >= 0 else 0)
    return parents, ranks, [n.status == "accepted" for n in nodes]


def _drafted(payload: TreePayload) -> TreePayload:
    """The step's tree without its copied nodes (prompt lookup): what the draft proposed, which the acceptance
    model predicts. Copies hang below the drafted nodes, so what is left is still a tree."""
    if not any(n.origin == ORIGIN_COPY for n in payload.nodes):
        return payload
    kept = [n for n in payload.nodes if n.origin != ORIGIN_COPY]
    ids = {n.id for n in kept}
    return replace(payload, nodes=kept, accepted_path=[i for i in payload.accepted_path if i in ids])


def copied_accepted(payload: TreePayload) -> int:
    """The copied tokens the step's walk accepted: the run's own measure, added to the draft's prediction."""
    return sum(n.origin == ORIGIN_COPY and n.status == "accepted" for n in payload.nodes)


def _trees(run: RunTrace | None):
    for rec in (run.steps[1:] if run is not None else []):
        if isinstance(rec.payload, TreePayload) and len(_drafted(rec.payload).nodes) > 1:
            yield _drafted(rec.payload)


def tree_acceptance(run: RunTrace | None) -> dict | None:
    """Acceptance counted on the run's own trees: p[k-1] = how often a reached node's k-th child was the
    accepted one, among reached nodes with at least k children; per level (`by_depth`), and for the
    children of rank-2-or-lower nodes apart (`under_lower_ranks`), as the tree DP takes them."""
    # counts[class][level][rank] = [accepted, offered]; class 1 = children of a node drawn at rank >= 2
    counts: list[dict] = [{}, {}]
    for payload in _trees(run):
        parents, ranks, accepted = _tree_parents(payload)
        level = [0] * len(parents)
        for i, par in enumerate(parents):   # ids in breadth-first order: a parent before its children
            if par < 0:
                continue
            level[i] = level[par] + 1
            if par != 0 and not accepted[par]:
                continue   # only a reached node's children had their turn
            cell = counts[1 if ranks[par] >= 2 else 0].setdefault(level[i], {}).setdefault(ranks[i], [0, 0])
            cell[0] += accepted[i]
            cell[1] += 1
    if not counts[0]:
        return None
    pooled: dict[int, list[int]] = {}
    for by_rank in counts[0].values():
        for rank, (hit, seen) in by_rank.items():
            cell = pooled.setdefault(rank, [0, 0])
            cell[0] += hit
            cell[1] += seen
    flat = [pooled[k][0] / pooled[k][1] if k in pooled else 0.0 for k in range(1, max(pooled) + 1)]

    def rows(table: dict) -> list[list[float]]:
        out = []
        for lvl in range(1, max(table) + 1):
            by_rank = table.get(lvl, {})
            out.append([by_rank[k][0] / by_rank[k][1] if k in by_rank else flat[k - 1] if k <= len(flat) else 0.0
                        for k in range(1, len(flat) + 1)])
        return out

    by_depth = rows(counts[0])
    lower = rows(counts[1]) if counts[1] else None
    return {"acceptance": _valid(flat), "by_depth": [_valid(r) for r in by_depth],
            "under_lower_ranks": [_valid(r) for r in lower] if lower else None}


def _valid(row: list[float]) -> list[float]:
    """A vector the DP accepts: ranks' probabilities sum to at most 1 (counts from few steps may not)."""
    total = sum(row)
    row = [r / total for r in row] if total > 1 else list(row)
    return row if any(row) else [1e-6] + row[1:]


# Bins of the draft's confidence q for `confidence_calibration`.
CONFIDENCE_EDGES = (0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


def confidence_calibration(run: RunTrace | None):
    """q -> how often a reached node's child drawn with confidence q was the accepted one, on this run's
    trees (binned by q; a bin it never saw keeps q itself)."""
    import bisect

    offered, taken = Counter(), Counter()   # q's bin -> children offered, and accepted
    for payload in _trees(run):
        reached = {n.id for n in payload.nodes if n.status in ("root", "accepted")}
        for node in payload.nodes:
            if node.parent in reached:
                b = bisect.bisect(CONFIDENCE_EDGES, node.draft_prob)
                offered[b] += 1
                taken[b] += node.status == "accepted"

    def calibrated(q: float) -> float:
        b = bisect.bisect(CONFIDENCE_EDGES, q)
        return taken[b] / offered[b] if offered.get(b) else q

    return calibrated


def _confidence_value(payload: TreePayload, calibrated) -> float:
    """1 + the sum over nodes of the chance their whole path is accepted, each node at its calibrated q."""
    reach, total = {}, 1.0
    for node in sorted(payload.nodes, key=lambda n: n.id):
        if node.parent < 0:
            reach[node.id] = 1.0
            continue
        reach[node.id] = reach.get(node.parent, 0.0) * calibrated(node.draft_prob)
        total += reach[node.id]
    return total


def sequoia_tokens_per_step(run: RunTrace | None, acc: dict | None) -> float | None:
    """Predicted accepted length over the run's own trees (their drafted nodes; the copied tokens a step accepted
    are the run's own, added as measured).

    A fixed tree: from acceptance vectors `acc` (per level and rank, `tree_dp.tree_value`). An adaptive
    tree grows where the draft is confident, so a level's average acceptance undersells its deep
    branches (a fifth too few tokens measured): each node is valued at the acceptance its draft
    confidence earned on this run's trees instead."""
    from ..sequoia.tree_dp import tree_value

    if run is None or not acc:
        return None
    adaptive = isinstance(run.settings, dict) and run.settings.get("tree") == "adaptive"
    calibrated = confidence_calibration(run) if adaptive else None
    values = []
    for rec in run.steps[1:]:
        p = rec.payload
        copied = copied_accepted(p) if isinstance(p, TreePayload) else 0
        p = _drafted(p) if isinstance(p, TreePayload) else p
        if not isinstance(p, TreePayload) or len(p.nodes) < 2:
            values.append(1.0 + copied)   # a root-only step (the race's last token, or a copy alone)
        elif adaptive:
            values.append(_confidence_value(p, calibrated) + copied)
        else:
            parents, _, _ = _tree_parents(p)
            values.append(tree_value(parents, acc["acceptance"], acc.get("by_depth"), acc.get("under_lower_ranks"))
                          + copied)
    return _mean(values) if values else None


def draft_ms_per_level(run: RunTrace | None) -> float | None:
    """The draft's mean cost per tree level this run (its time over the levels its trees had)."""
    ms = levels = 0.0
    for rec in (run.steps[1:] if run is not None else []):
        p = rec.payload
        p = _drafted(p) if isinstance(p, TreePayload) else p
        if isinstance(p, TreePayload) and len(p.nodes) > 1:   # the levels the draft read (copies read none)
            ms += rec.time_ms.get(PHASE_DRAFT, 0.0)
            levels += max(n.depth for n in p.nodes)
    return ms / levels if levels else None


# ----------------------------------------------------------------------------- Lookahead's n-grams


def lookahead_rates(run: RunTrace | None) -> dict | None:
    """The rates the run's verified n-grams matched at, token by token, and how many it verified per step.

    Each candidate is checked token by token until one differs: at position k, `rates[k-1]` is the share
    of the candidates checked there whose k-th token was right (their first k-1 were); `rate` is the same
    over all positions (the model's single `a`). Text that repeats itself matches its later tokens far
    more often than its first, which one rate would miss."""
    if run is None:
        return None
    longest = 1
    counts = {origin: ({}, {}) for origin in (ORIGIN_POOL, ORIGIN_COPY)}   # origin -> (hits, tries) by position
    per_step, copies, widths = [], [], []
    for rec in run.steps[1:]:
        p = rec.payload
        if not isinstance(p, LookaheadPayload):
            continue
        longest = max([longest, (p.ngram_size or 2) - 1] + [len(c.tokens) for c in p.candidates])
        per_step.append(len(p.candidates))
        copies.append(sum(c.origin == ORIGIN_COPY for c in p.candidates))
        widths.append(len(p.candidates[0].tokens) if p.candidates else (p.ngram_size or 2) - 1)
        for cand in p.candidates:
            hits, tries = counts[cand.origin]
            # A candidate is as long as its step's longest (a copy may outrun N-1): tested up to its own end.
            for k in range(1, min(cand.match_length + 1, len(cand.tokens) or (p.ngram_size or 2) - 1) + 1):
                tries[k] = tries.get(k, 0) + 1
                hits[k] = hits.get(k, 0) + (k <= cand.match_length)
    if not per_step:
        return None

    def rates_of(*origins) -> tuple[float, list[float]]:
        hits = {k: sum(counts[o][0].get(k, 0) for o in origins) for k in range(1, longest + 1)}
        tries = {k: sum(counts[o][1].get(k, 0) for o in origins) for k in range(1, longest + 1)}
        total = sum(tries.values())
        rate = sum(hits.values()) / total if total else 0.0
        return rate, [hits[k] / tries[k] if tries.get(k) else rate for k in range(1, longest + 1)]

    rate, rates = rates_of(ORIGIN_POOL, ORIGIN_COPY)
    # Copies (prompt lookup) match at rates of their own: apart, so a step's mix of the two is predicted right.
    pool_rate, pool_rates = rates_of(ORIGIN_POOL)
    _, copy_rates = rates_of(ORIGIN_COPY)
    return {"rate": rate, "rates": rates, "candidates": per_step, "pool_rate": pool_rate, "pool_rates": pool_rates,
            "copy_rates": copy_rates, "copies": copies, "widths": widths}


def _per_position(rate, positions: int) -> list[float]:
    rates = [float(rate)] * positions if isinstance(rate, (int, float)) else list(rate)
    return rates + [rates[-1] if rates else 0.0] * (positions - len(rates))


def lookahead_expected(rate, ngram: int, candidates: float, copy_rate=0.0, copies: float = 0,
                       copy_len: float = 0) -> float:
    """1 + sum over k of P(some candidate matches k tokens), candidates independent; `rate` is one
    per-token rate or one per position (a candidate matches k tokens with the product of the first k);
    `copies` copied candidates match at `copy_rate` likewise, over `copy_len` tokens where a priced copy
    outruns the pool's N-1 (`lookahead.decoder`)."""
    longest = max(ngram - 1, int(round(copy_len)) if copies else 0)
    rates, copy_rates = _per_position(rate, ngram - 1), _per_position(copy_rate, longest)
    expected, whole, copy_whole = 1.0, 1.0, 1.0
    for k in range(1, longest + 1):
        whole = whole * rates[k - 1] if k < ngram else 0.0
        copy_whole *= copy_rates[k - 1]
        expected += 1.0 - (1.0 - whole) ** candidates * (1.0 - copy_whole) ** copies
    return expected


def lookahead_tokens_per_step(run: RunTrace | None) -> float | None:
    """Predicted accepted length, step by step from the candidates it verified, at the run's matching rates."""
    rates = lookahead_rates(run)
    if rates is None:
        return None
    ngram = int(run.settings.get("ngram") or 2) if isinstance(run.settings, dict) else 2
    return _mean(lookahead_expected(rates["pool_rates"], ngram, n - c, rates["copy_rates"], c, width)
                 for n, c, width in zip(rates["candidates"], rates["copies"], rates["widths"]))


# ----------------------------------------------------------------------------- the run's own prediction


def run_prediction(trace, method: str) -> dict | None:
    """{'predicted': StepParts, 'measured': StepParts, 'predicted_speedup', 'measured_speedup'} for one
    method of a finished race with autoregressive in it; None when either is missing."""
    if trace is None:
        return None
    run, ar = trace.runs.get(method), trace.runs.get(baseline())
    measured, ar_parts = measured_parts(run), measured_parts(ar)
    views = method_views(method)
    if measured is None or ar_parts is None or not hasattr(views, "tokens_per_step"):
        return None
    tokens = views.tokens_per_step(run)
    if not tokens:
        return None
    predicted = StepParts(tokens, measured.target_ms, measured.draft_ms, measured.other_ms, measured.prefill_ms,
                          measured.prefill_tokens, measured.tokens)
    ar_speed = ar.tokens_per_second
    return {"predicted": predicted, "measured": measured, "predicted_speedup": speedup(predicted, ar_parts),
            "measured_speedup": run.tokens_per_second / ar_speed if ar_speed > 0 else None}


# ----------------------------------------------------------------------------- why it pays, or not


def level_acceptance(run: RunTrace | None) -> float | None:
    """Leviathan's alpha for the run's trees: of the levels a step tested (each accepted level, and the one where
    every child was rejected), the share where a drafted token was accepted. For a chain it is the acceptance
    rate; for a tree, the chance that a reached level yields a token, whichever sibling it was."""
    tested = accepted = 0
    for tree in _trees(run):
        path = tree.accepted_path
        last = path[-1] if path else next(n.id for n in tree.nodes if n.parent < 0)
        stopped = any(n.parent == last for n in tree.nodes)   # its children were tested and all rejected
        accepted += len(path)
        tested += len(path) + stopped
    return accepted / tested if tested else None


def leviathan_speedup(alpha: float, gamma: float, c: float) -> float:
    """Leviathan et al.'s expected speedup of a chain of `gamma` drafted tokens, each accepted with probability
    `alpha`, a draft forward costing `c` target forwards, and the verifying forward costing one."""
    return expected_chain_tokens(alpha, gamma) / (gamma * c + 1)


def expected_chain_tokens(alpha: float, gamma: float) -> float:
    """(1 - alpha^(gamma + 1)) / (1 - alpha): the tokens a chain's step writes, its bonus token counted."""
    return gamma + 1 if alpha >= 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)


def drafted_run(trace) -> RunTrace | None:
    """The race's first run of a method that drafts (`Method.drafts`: Sequoia's), the one Leviathan's terms fit."""
    return next((trace.runs[m] for m in trace.methods if m in drafting() and m in trace.runs), None)


def why_it_pays(trace) -> dict | None:
    """Sequoia's race in Leviathan's terms: alpha (`level_acceptance`), gamma (the tree's mean depth), c (a draft
    level's time over autoregressive's step) and the speedup their formula predicts; then the same tokens priced
    with what this machine's step really costs (the tree's forward t(n) over t(1), the step's other work), and
    the race's own accepted length and speedup. None without a Sequoia run that drafted, and `ar`."""
    if trace is None:
        return None
    run, ar = drafted_run(trace), trace.runs.get(baseline())
    parts, ar_parts, level_ms = measured_parts(run), measured_parts(ar), draft_ms_per_level(run)
    alpha = level_acceptance(run)
    depths = [max(n.depth for n in tree.nodes) for tree in _trees(run)]
    if parts is None or ar_parts is None or level_ms is None or alpha is None or not depths or ar_parts.step_ms <= 0:
        return None
    t1 = ar_parts.step_ms
    gamma, c = _mean(depths), level_ms / t1
    chain = expected_chain_tokens(alpha, gamma)
    verify, other = parts.target_ms / t1, parts.other_ms / t1
    priced_step = gamma * c + verify + other   # the step in t(1)s, as this machine ran it
    measured = run.tokens_per_second / ar.tokens_per_second if ar.tokens_per_second > 0 else None
    return {"alpha": alpha, "gamma": gamma, "c": c, "draft_level_ms": level_ms, "ar_step_ms": t1, "chain_tokens": chain,
            "leviathan_speedup": leviathan_speedup(alpha, gamma, c), "leviathan_step_over_t1": gamma * c + 1,
            "verify_over_t1": verify, "other_over_t1": other, "priced_step_over_t1": priced_step,
            "priced_speedup": chain / priced_step, "tokens_per_step": parts.tokens_per_step,
            "measured_speedup": measured}
