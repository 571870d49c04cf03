"""Verifying Lookahead's candidates against the target, greedy and exact sampling, on the device.

Greedy: the longest self-consistent match wins, the first on ties. Sampling: the one-hot drafts'
recursive rejection, which is Sequoia's sampled walk over the candidates' trie with a one-hot q
(`candidate_trie`, `sequoia.verify.sampled_walk`), so the output is distributed exactly as sampling from
the target. Both are
written so nothing depends on the data's values: the step verifies `count` candidate rows of
L = N-1 tokens (under capture always G, the padding rows marked invalid by `valid`), with fixed
loops over positions and `torch.where` in place of host branches. The result is one packed long
tensor (`verdict_width(count, L)` values, see `pack`), read back with the step's other values in
the step's one `.tolist()`; `unpack` turns it into a `Verdict` for the real candidates.

Pure functions: no model, no cache. tests/lookahead_reference.py states the same rules as host
loops, the independent reference these are checked against.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..draws import race_sample
from ..sequoia.verify import WalkTables, sampled_walk

NO_CANDIDATE = -1   # `best` when nothing was accepted, and the tokens past the emitted ones
NOT_TRIED = -1.0    # a try's probability and draw where the candidate's token was not tried


@dataclass
class Verdict:
    tokens: list[int]            # emitted: accepted candidate tokens + the target's next token
    n_accepted: int              # leading tokens of `tokens` that came from the candidate
    best: int | None             # index of the accepted candidate, None when nothing matched
    match_lengths: list[int]     # per candidate: leading tokens equal to what was emitted


def verdict_width(guesses: int, cand_len: int) -> int:
    """Values in a packed verdict: L + 1 tokens, the accepted count, the best candidate, G match lengths."""
    return cand_len + 1 + 2 + guesses


def pack(tokens: torch.Tensor, n_accepted: torch.Tensor, best: torch.Tensor, match_lengths: torch.Tensor):
    """(L+1,) tokens (NO_CANDIDATE past the emitted ones), 0-d count, 0-d best, (G,) lengths -> one long tensor."""
    return torch.cat([tokens, n_accepted.view(1), best.view(1), match_lengths]).long()


def unpack(values: list[int], n_candidates: int, cand_len: int) -> Verdict:
    """The host's Verdict from a packed verdict already read back (only the first n_candidates are real)."""
    n_accepted = values[cand_len + 1]
    best = values[cand_len + 2]
    lengths = values[cand_len + 3:cand_len + 3 + n_candidates]
    return Verdict(values[:n_accepted + 1], n_accepted, None if best == NO_CANDIDATE else best, lengths)


def _pick(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """values[index] for a 0-d index tensor, as a gather (a tensor index would read it on the host)."""
    return values.index_select(0, index.view(1))[0]


def _emitted(accepted: torch.Tensor, n_accepted: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """(L+1,) the accepted tokens, then `last` at n_accepted, NO_CANDIDATE after."""
    positions = torch.arange(accepted.shape[0] + 1, device=accepted.device)
    padded = torch.cat([accepted, accepted.new_full((1,), NO_CANDIDATE)])
    return torch.where(positions < n_accepted, padded,
                       torch.where(positions == n_accepted, last, padded.new_full((), NO_CANDIDATE)))


def _prefix_lengths(candidates: torch.Tensor, tokens: torch.Tensor, n_accepted: torch.Tensor) -> torch.Tensor:
    """(G,) leading tokens of each candidate equal to the first n_accepted of `tokens`."""
    positions = torch.arange(candidates.shape[1], device=candidates.device)
    same = (candidates == tokens[:candidates.shape[1]].view(1, -1)) & (positions < n_accepted).view(1, -1)
    return same.long().cumprod(1).sum(1)


def greedy_verdict(candidates: torch.Tensor, valid: torch.Tensor, first_pred: torch.Tensor,
                   cand_preds: torch.Tensor) -> torch.Tensor:
    """The greedy verdict: candidates and cand_preds (G, L) long, valid (G,) bool,
    first_pred 0-d (the target's token after t0). Packed verdict (see `pack`)."""
    guesses, cand_len = candidates.shape
    if guesses == 0:   # a size, not data: no candidates, the target's own token
        zero = first_pred.new_zeros(())
        return pack(_emitted(first_pred.new_zeros(cand_len), zero, first_pred), zero,
                    zero + NO_CANDIDATE, first_pred.new_zeros(0))
    # Candidate k's token j must equal what the target said after its tokens < j (after t0 for j = 0).
    expected = torch.cat([first_pred.view(1, 1).expand(guesses, 1), cand_preds[:, :-1]], dim=1)
    matches = (candidates == expected) & valid.view(-1, 1)
    lengths = matches.long().cumprod(1).sum(1)
    top = lengths.max(dim=0)
    n_accepted, best = top.values, top.indices        # the first of the longest
    bonus = _pick(cand_preds.reshape(-1), best * cand_len + (n_accepted - 1).clamp(min=0))
    last = torch.where(n_accepted > 0, bonus, first_pred)
    tokens = _emitted(_pick_row(candidates, best), n_accepted, last)
    return pack(tokens, n_accepted, torch.where(n_accepted > 0, best, NO_CANDIDATE), lengths)


def greedy_verdict_on_host(candidates: list, n_valid: int, first_pred: int, cand_preds: list,
                           cand_len: int) -> list[int]:
    """`greedy_verdict` on the host, for a CPU, where reading the target's choices costs no sync: its ~20 small
    ops cost a Lookahead or prompt-lookup step ~0.1-0.2 ms there in a decode. The same packed values, as a list
    (rows of `cand_len` tokens, the first `n_valid` real); `tests/test_lookahead_static.py` checks the two
    against each other and the reference."""
    lengths = []
    for k, (tokens, preds) in enumerate(zip(candidates, cand_preds)):
        length = 0
        if k < n_valid:
            expected = [first_pred] + list(preds[:-1])
            while length < cand_len and tokens[length] == expected[length]:
                length += 1
        lengths.append(length)
    n_accepted = max(lengths, default=0)
    best = lengths.index(n_accepted) if lengths else 0   # the first of the longest
    last = cand_preds[best][n_accepted - 1] if n_accepted else first_pred
    accepted = list(candidates[best][:n_accepted]) if candidates else []
    tokens = accepted + [last] + [NO_CANDIDATE] * (cand_len - n_accepted)
    return tokens + [n_accepted, best if n_accepted else NO_CANDIDATE] + lengths


def _pick_row(rows: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return rows.index_select(0, index.view(1))[0]


def candidate_trie(candidates: torch.Tensor, valid: torch.Tensor) -> WalkTables:
    """The candidates as a trie, in the sampled walk's tables (`sequoia.verify.WalkTables.of_children`).

    Node 0 is t0; node 1 + k * L + j is candidate k's token j (the order of the verified rows), a node of the
    trie where k is the first valid candidate with its first j + 1 tokens (a later one with the same prefix
    shares that node, so each token is tried once). A node's child of rank k' is candidate k''s next token:
    ranks are pool order, so a level's tries and their draws (`uniforms[j, k']`) are the candidates', in order."""
    guesses, cand_len = candidates.shape
    device = candidates.device
    both = valid.view(-1, 1, 1) & valid.view(1, -1, 1)
    # [k, k', j]: candidates k and k' agree on their first j + 1 tokens
    agree = (candidates.unsqueeze(1) == candidates.unsqueeze(0)).long().cumprod(2).bool() & both
    earlier = torch.ones(guesses, guesses, dtype=torch.bool, device=device).tril(-1)   # [k, k']: k' before k
    first = valid.view(-1, 1) & ~(agree & earlier.unsqueeze(2)).any(1)                 # (G, L)
    # (k, j)'s child of rank k': (k', j + 1), where k and k' agree through j and each is first with its prefix;
    # a candidate's last token has none
    inner = first[:, None, :-1] & agree[:, :, :-1] & first[None, :, 1:]               # [k, k', j]
    last = torch.zeros(guesses, guesses, 1, dtype=torch.bool, device=device)
    has_child = torch.cat([first[:, 0].view(1, -1),
                           torch.cat([inner, last], 2).transpose(1, 2).reshape(-1, guesses)])
    depth = torch.cat([torch.zeros(1, dtype=torch.long, device=device),
                       torch.arange(1, cand_len + 1, device=device).repeat(guesses)])
    children = 1 + cand_len * torch.arange(guesses, device=device).view(1, -1) + depth.view(-1, 1)
    return WalkTables.of_children(torch.where(has_child, children, 0), has_child, [guesses] * cand_len + [0])


def sampled_verdict(candidates: torch.Tensor, valid: torch.Tensor, node_probs: torch.Tensor,
                    uniforms: torch.Tensor, generator: torch.Generator,
                    prune: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampled verdict, exact in distribution, and its tries as they happened.

    candidates (G, L) long, valid (G,) bool, node_probs (1 + G * L, V): P after t0, then P after candidate k's
    token j at row 1 + k * L + j (the verified rows' order, so a caller passes its probabilities as they are);
    uniforms (L, G) float64 on [0, 1): the pre-drawn acceptance draw of each try.
    The candidates are proposals made for certain, so verifying them is Sequoia's walk over their trie with
    a one-hot q (`sequoia.verify.sampled_walk` with no `draft_q`): at position j the surviving candidates
    offer their tokens in pool order, each distinct token tried once, the i-th try x_i accepted with
    probability P(x_i) / (1 - P(x_1) - ... - P(x_{i-1})), the first accepted try winning. When every try fails
    the token is drawn from P without the tried tokens and the walk stops; after a full match the bonus
    token is drawn from P after the last one. `prune` as the walk's.

    Returns (the packed verdict, tries (2, L, G) float64): each candidate's try at each position, its
    acceptance probability capped at 1, then its draw; NOT_TRIED where the token was not tried (repeated,
    no longer a survivor, past an accepted try or the walk's end).
    """
    guesses, cand_len = candidates.shape
    device = node_probs.device
    if guesses == 0:   # a size, not data: no candidates, the target's own token
        zero = torch.zeros((), dtype=torch.long, device=device)
        last = race_sample(node_probs[:1], generator)[0]
        return (pack(_emitted(zero.new_zeros(cand_len), zero, last), zero, zero + NO_CANDIDATE, zero.new_zeros(0)),
                torch.empty(2, cand_len, 0, dtype=torch.float64, device=device))
    tokens = torch.cat([candidates.new_zeros(1), candidates.reshape(-1)])   # each node's
    walk = sampled_walk(candidate_trie(candidates, valid), tokens, node_probs, None, uniforms, cand_len,
                        generator, prune)
    emitted = _emitted(tokens.index_select(0, walk.path[1:]), walk.accepted, walk.bonus)
    best = torch.where(walk.accepted > 0, (walk.path[-1] - 1) // cand_len, NO_CANDIDATE)   # the deepest node's
    tries = walk.tests[:2, 1:].view(2, guesses, cand_len).transpose(1, 2)
    return pack(emitted, walk.accepted, best, _prefix_lengths(candidates, emitted, walk.accepted)), tries


def greedy_tries(match_lengths: list[int], cand_len: int) -> list[list[float | None]]:
    """Each candidate's tests under greedy verification, from its match length: a token equal to the
    target's choice passed (1), the first that differed failed (0), none after it was tested."""
    return [[1.0 if j < m else 0.0 if j == m else None for j in range(cand_len)] for m in match_lengths]
