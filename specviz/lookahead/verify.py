"""Verifying Lookahead's candidates against the target, greedy and exact sampling, on the device.

Greedy: the longest self-consistent match wins, the first on ties. Sampling: the one-hot drafts'
recursive rejection, so the output is distributed exactly as sampling from the target. Both are
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

from ..draws import first_argmax, race_sample

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


def _first_true(flags: torch.Tensor) -> torch.Tensor:
    """Index of the first True of a 1-D bool tensor (0 when none): max's first-maximum rule."""
    return first_argmax(flags.to(torch.int8))


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


def sampled_verdict(candidates: torch.Tensor, valid: torch.Tensor, first_probs: torch.Tensor,
                    cand_probs: torch.Tensor, uniforms: torch.Tensor, generator: torch.Generator
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampled verdict, exact in distribution, and its tries as they happened.

    candidates (G, L) long, valid (G,) bool, first_probs (V,) = P after t0, cand_probs (G, L, V) = P after
    candidate k's token j, uniforms (L, G) float64 on [0, 1): the pre-drawn acceptance draw of each try.
    At position j the surviving candidates offer their tokens in pool order, each distinct token tried
    once: the i-th try x_i is accepted with probability P(x_i) / (1 - P(x_1) - ... - P(x_{i-1})), which
    is what the renormalised residual gives; the first accepted try wins. When every try fails,
    the token is drawn from P with the tried tokens zeroed and the walk stops; after a full match the
    bonus token is drawn from P after the last one. The one draw at the end is `race_sample`'s.

    Returns (the packed verdict, tries (2, L, G) float64): each candidate's try at each position, its
    acceptance probability P(x_i) / (1 - P(x_1) - ... - P(x_{i-1})) capped at 1, then its draw; NOT_TRIED
    where the token was not tried (repeated, no longer a survivor, past an accepted try or the walk's end).
    """
    guesses, cand_len = candidates.shape
    device = first_probs.device
    if guesses == 0:   # a size, not data: no candidates, the target's own token
        zero = torch.zeros((), dtype=torch.long, device=device)
        last = race_sample(first_probs.view(1, -1), generator)[0]
        return (pack(_emitted(zero.new_zeros(cand_len), zero, last), zero, zero + NO_CANDIDATE, zero.new_zeros(0)),
                torch.empty(2, cand_len, 0, dtype=torch.float64, device=device))
    earlier = torch.ones(guesses, guesses, dtype=torch.bool, device=device).tril(-1)   # [k, k']: k' before k
    flat = cand_probs.reshape(guesses * cand_len, -1)
    survivors = valid.clone()
    alive = torch.ones((), dtype=torch.bool, device=device)
    n_accepted = torch.zeros((), dtype=torch.long, device=device)
    probs, final = first_probs, first_probs
    accepted, reached, tried_probs = [], [], []
    order = torch.arange(guesses, device=device)
    for j in range(cand_len):
        offered = candidates[:, j]
        # A token an earlier survivor already offered was tried (and rejected) there: its P is now 0.
        repeated = ((offered.view(-1, 1) == offered.view(1, -1)) & earlier & survivors.view(1, -1)).any(1)
        tries = survivors & ~repeated & alive
        p_offered = probs.index_select(0, offered).double() * tries
        tried_before = p_offered.cumsum(0) - p_offered
        accept = tries & (uniforms[j] * (probs.double().sum() - tried_before) < p_offered)
        took = alive & accept.any()
        first = _first_true(accept)
        token = _pick(offered, first)
        # Tries past the first accepted one were never reached, as the pool-order reading has it.
        reached.append(tries & (~took | (order <= first)))
        tried_probs.append(p_offered / (probs.double().sum() - tried_before).clamp_min(1e-300))
        # Every try failed: the token comes from P without the tried tokens, and the walk stops here.
        tried = torch.zeros_like(probs).index_add_(0, offered, tries.to(probs.dtype))
        final = torch.where(alive & ~took, torch.where(tried > 0, 0.0, probs), final)
        accepted.append(torch.where(took, token, NO_CANDIDATE))
        n_accepted = n_accepted + took.long()
        survivors = torch.where(took, survivors & (offered == token), survivors)
        row = _pick_row(flat, _first_true(survivors) * cand_len + j)
        probs = torch.where(took, row, probs)
        alive = took
    final = torch.where(alive, probs, final)            # a full match: the bonus token after it
    last = race_sample(final.view(1, -1), generator)[0]
    tokens = _emitted(torch.stack(accepted), n_accepted, last)
    best = torch.where(n_accepted > 0, _first_true(survivors), NO_CANDIDATE)
    was_tried = torch.stack(reached)
    tries = torch.stack([torch.where(was_tried, torch.stack(tried_probs).clamp(max=1.0), NOT_TRIED),
                         torch.where(was_tried, uniforms.double(), NOT_TRIED)])
    return pack(tokens, n_accepted, best, _prefix_lengths(candidates, tokens, n_accepted)), tries


def greedy_tries(match_lengths: list[int], cand_len: int) -> list[list[float | None]]:
    """Each candidate's tests under greedy verification, from its match length: a token equal to the
    target's choice passed (1), the first that differed failed (0), none after it was tested."""
    return [[1.0 if j < m else 0.0 if j == m else None for j in range(cand_len)] for m in match_lengths]
