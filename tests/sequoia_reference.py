"""Sequoia's verification rules as a plain host walk: the independent reference the device walks of
`specviz.sequoia.verify` are checked against (every enumerated case, and the mutants of
`scripts/mutation_check.py`). The package runs only the device walks.

Sampling (any temperature): walk from the root. At the current node, for its
children x_1..x_c in drawing order, with q the draft distribution the children
were drawn from (without replacement) and P the target distribution there:
  - accept x_i with probability min(1, P(x_i) / q(x_i)) and move to it;
  - on rejection P <- normalise(max(P - q, 0)) (falling back to the old P when
    that is numerically zero), then q(x_i) <- 0 and q is renormalised.
When every child is rejected, or the node is a leaf, the bonus token is drawn
from the current P. The output is distributed exactly as autoregressive
sampling from the target (Sequoia, Theorem 3.5 / SpecInfer).

Greedy (temperature 0): accept the child equal to the target's argmax; the bonus
token is the argmax at the last accepted node.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from helpers import sample

from specviz.sequoia.verify import ACCEPTED, NOT_REACHED, REJECTED, RESIDUAL_EPS, ROOT


@dataclass
class WalkResult:
    accepted: list[int]              # node ids below the root, root excluded, in path order
    bonus_token: int
    rejected: list[int] = field(default_factory=list)   # children tested and rejected

    def statuses(self, n: int) -> list[str]:
        status = [NOT_REACHED] * n
        status[0] = ROOT
        for i in self.rejected:
            status[i] = REJECTED
        for i in self.accepted:
            status[i] = ACCEPTED
        return status


def greedy_walk(children: list[list[int]], tokens: list[int], target_argmax) -> WalkResult:
    """Follow the child whose token is the target's argmax; the bonus is the argmax where the path ends.

    target_argmax[node] is read once per node on the path (a list, or picks made on demand).
    """
    node, accepted, rejected = 0, [], []
    while True:
        want = target_argmax[node]
        nxt = None
        for child in children[node]:
            if nxt is None and tokens[child] == want:
                nxt = child
            else:
                rejected.append(child)
        if nxt is None:
            return WalkResult(accepted, want, rejected)
        accepted.append(nxt)
        node = nxt


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """normalise(max(P - q, 0)), or P itself when the difference has (numerically) no mass."""
    r = (p - q).clamp_min_(0)
    mass = r.sum()
    if float(mass) <= RESIDUAL_EPS:
        return p
    return r / mass


def verify_children(p: torch.Tensor, q: torch.Tensor, child_tokens: list[int], uniforms: list[float]
                    ) -> tuple[int | None, torch.Tensor]:
    """Test one node's children in order; return (index accepted or None, P for the bonus token).

    `uniforms[i]` is the U(0, 1) draw used for child i. A child whose q is zero was
    never really drawn (the draft's support ran out before c draws) and is skipped.
    """
    q = q.clone()
    for i, tok in enumerate(child_tokens):
        q_tok = float(q[tok])
        if q_tok <= 0.0:
            continue
        if uniforms[i] * q_tok < float(p[tok]):
            return i, p
        p = residual(p, q)
        q[tok] = 0.0
        mass = q.sum()
        if float(mass) > 0:
            q = q / mass
    return None, p


def sampling_walk(children: list[list[int]], tokens: list[int], target_probs, draft_probs: dict,
                  generator: torch.Generator) -> WalkResult:
    """The exact verification walk.

    `target_probs[node]` is P at that node (a (V,) tensor; indexable by node id),
    `draft_probs[node]` the q its children were drawn from (nodes with children only).
    """
    node, accepted, rejected = 0, [], []
    while True:
        p = target_probs[node]
        kids = children[node]
        if not kids:
            break
        kid_tokens = [tokens[k] for k in kids]
        uniforms = torch.rand(len(kids), generator=generator, device=p.device).tolist()
        hit, p = verify_children(p, draft_probs[node], kid_tokens, uniforms)
        tested = kids if hit is None else kids[:hit]
        rejected.extend(k for k in tested if float(draft_probs[node][tokens[k]]) > 0)
        if hit is None:
            break
        node = kids[hit]
        accepted.append(node)
    bonus = int(sample(p, generator))
    return WalkResult(accepted, bonus, rejected)
