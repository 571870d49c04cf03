"""Lookahead's verification walks on the host: the independent reference the device walks
(`specviz.lookahead.verify`, what the decoder runs) are checked against.

Both take the candidate n-grams (pool order) and what the target said in the
step's forward: the prediction after t0 and the prediction after every
candidate token. They return a `Verdict`: the tokens to emit (accepted
candidate tokens, then the target's own next token, so a full match of N-1
tokens yields N), how many of those came from a candidate, which candidate and
every candidate's match length. Written as plain loops over Python lists, in
the order the rules are stated, so they share nothing with the device walks but
the `Verdict` they return.
"""

from __future__ import annotations

import torch

from helpers import sample
from specviz.lookahead.verify import Verdict


def _prefix_match(candidate, tokens) -> int:
    m = 0
    for a, b in zip(candidate, tokens):
        if a != b:
            break
        m += 1
    return m


def greedy_verify(candidates: list, first_pred: int, cand_preds: list[list[int]]) -> Verdict:
    """Longest match wins (first on ties); `cand_preds[k][j]` is the argmax after candidate k's token j."""
    match_lengths = []
    for cand, preds in zip(candidates, cand_preds):
        expected = first_pred
        m = 0
        for j, tok in enumerate(cand):
            if tok != expected:
                break
            m += 1
            expected = preds[j]
        match_lengths.append(m)
    best_len = max(match_lengths, default=0)
    if best_len == 0:
        return Verdict([first_pred], 0, None, match_lengths)
    best = match_lengths.index(best_len)
    tokens = list(candidates[best][:best_len]) + [cand_preds[best][best_len - 1]]
    return Verdict(tokens, best_len, best, match_lengths)


def sampling_verify(candidates: list, first_probs: torch.Tensor, cand_probs: torch.Tensor,
                    generator: torch.Generator) -> Verdict:
    """Exact verification of deterministic drafts (q one-hot) against the target distribution P.

    At each position, for each distinct token x the surviving candidates offer,
    in pool order: accept with probability P(x); on rejection P(x) <- 0 and
    renormalise. Accepting x keeps only the candidates that share it; if every
    offer is rejected, sample from what is left of P and stop. This is recursive
    rejection sampling with one-hot drafts, so the output is distributed exactly
    as sampling from the target. `cand_probs[k, j]` is P after candidate k's token j.
    """
    survivors = list(range(len(candidates)))
    probs = first_probs
    tokens: list[int] = []
    n_positions = len(candidates[0]) if candidates else 0
    for j in range(n_positions):
        residual = None          # P with rejected tokens zeroed, made lazily
        accepted = None
        tried = set()
        for k in survivors:
            x = candidates[k][j]
            if x in tried:
                continue         # already rejected: its probability is now 0
            tried.add(x)
            current = probs if residual is None else residual
            px = float(current[x])
            if px > 0 and float(torch.rand((), generator=generator, device=probs.device)) < px:
                accepted = x
                break
            residual = current.clone() if residual is None else residual
            residual[x] = 0.0
            mass = float(residual.sum())
            if mass <= 0.0:      # numerically all of P was on x: it is the only possible token
                accepted = x
                break
            residual /= mass
        if accepted is None:
            final = probs if residual is None else residual
            tokens.append(int(sample(final, generator)))
            break
        tokens.append(accepted)
        survivors = [k for k in survivors if candidates[k][j] == accepted]
        probs = cand_probs[survivors[0], j]
    else:
        tokens.append(int(sample(probs, generator)))
    n_accepted = len(tokens) - 1
    best = survivors[0] if n_accepted > 0 else None
    match_lengths = [_prefix_match(c, tokens[:n_accepted]) for c in candidates]
    return Verdict(tokens, n_accepted, best, match_lengths)
