"""Where every token of a Lookahead step sits: order, positions, attention.

One step's input (notes/lookahead.md section 2), in order:
    t0 (the last committed token), level 0 (W-1 guesses), levels 1..N-2 (W each),
    then up to G candidates of L tokens: the pool[t0]'s n-grams (N-1 tokens) and copies.
Positions are relative to t0 (= 0): level 0 column j at j+1, level l column i at
l+i, every candidate's tokens at 1..L. L is N-1 unless a step verifies a longer
copy (`decoder.LookaheadDecoder._candidates`: a copy's length is its own, not the
window's). `allowed` covers only the step's new tokens; every row also sees the
whole committed cache (the static shape's block over its slots, `engine.static`).

During warm-up (`fill` < N-2 levels beyond level 0 filled) the window is wider:
level 0 has L-1 tokens and levels 1..fill have L = W + (N-2-fill) each, so that
dropping one column per warm-up step leaves exactly W-1 and W when it is full.

Everything here is built once per (W, N, G, fill, L); a step with fewer than G
candidates uses the leading `n_tokens(g)` rows and columns, because candidates
come last and never see each other.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LookaheadLayout:
    window: int                  # W
    ngram: int                   # N
    guesses: int                 # G
    fill: int                    # levels beyond level 0 present (N-2 when the window is full)
    level_lengths: list[int]     # tokens per level, level 0 first
    level_starts: list[int]      # input index of each level's first token
    n_lookahead: int             # t0 + every window token
    allowed: torch.Tensor        # (n_max, n_max) bool, True = row may attend to column
    offsets: torch.Tensor        # (n_max,) long, position relative to t0
    logits_index: torch.Tensor   # (n_kept_max,) long, input rows whose logits a step needs
    new_level_rows: int          # the first rows of the kept logits: the last level's predictions
    t0_row: int                  # row of the kept logits that predicts the token after t0
    n_kept_fixed: int            # kept logits rows before the candidates' rows
    candidate_start: int         # input index of the first candidate token
    cand_len: int                # L: tokens per candidate (N-1 unless a longer copy is verified)

    @property
    def steady(self) -> bool:
        return self.fill == self.ngram - 2

    @property
    def n_max(self) -> int:
        return self.n_lookahead + self.guesses * self.cand_len

    def n_tokens(self, n_candidates: int) -> int:
        return self.n_lookahead + n_candidates * self.cand_len

    def n_kept(self, n_candidates: int) -> int:
        return self.n_kept_fixed + n_candidates * self.cand_len


def level_lengths(window: int, ngram: int, fill: int) -> list[int]:
    width = window + (ngram - 2 - fill)
    return [width - 1] + [width] * fill


def build_layout(window: int, ngram: int, guesses: int, fill: int | None = None,
                 cand_len: int | None = None) -> LookaheadLayout:
    """The input layout for one (W, N, G), warm-up fill level (default: the full window) and candidate
    length L (default N-1)."""
    if fill is None:
        fill = ngram - 2
    if cand_len is None:
        cand_len = ngram - 1
    assert window >= 1 and ngram >= 2 and guesses >= 0 and 0 <= fill <= ngram - 2 and cand_len >= ngram - 1
    lengths = level_lengths(window, ngram, fill)
    starts, index = [], 1
    for n in lengths:
        starts.append(index)
        index += n
    n_lookahead = index
    n_max = n_lookahead + guesses * cand_len
    allowed = torch.zeros(n_max, n_max, dtype=torch.bool)
    offsets = torch.zeros(n_max, dtype=torch.long)

    # Level 0 (with t0 in front) is plainly causal: a guessed continuation of t0.
    allowed[:starts[0] + lengths[0], :starts[0] + lengths[0]] = torch.tril(
        torch.ones(1 + lengths[0], 1 + lengths[0], dtype=torch.bool))
    offsets[:1 + lengths[0]] = torch.arange(1 + lengths[0])
    # Level l column i sits at l+i and sees the consecutive positions before it:
    # t0, level-0 columns < i (positions 1..i), then its own column at levels 1..l.
    for level in range(1, fill + 1):
        for col in range(lengths[level]):
            row = starts[level] + col
            offsets[row] = level + col
            allowed[row, 0] = True
            allowed[row, starts[0]:starts[0] + min(col, lengths[0])] = True
            for lower in range(1, level + 1):
                allowed[row, starts[lower] + col] = True
    # Candidates: each a causal chain after t0, blind to the window and to each other.
    cand_causal = torch.tril(torch.ones(cand_len, cand_len, dtype=torch.bool))
    for k in range(guesses):
        start = n_lookahead + k * cand_len
        allowed[start:start + cand_len, 0] = True
        allowed[start:start + cand_len, start:start + cand_len] = cand_causal
        offsets[start:start + cand_len] = torch.arange(1, cand_len + 1)

    # Rows whose predictions the step reads: t0 (the sure next token), the last
    # level (the new level of the window) and every candidate token.
    if fill == 0:
        last_rows = list(range(0, n_lookahead))          # t0 + level 0
        keep = last_rows
    else:
        last_rows = list(range(starts[fill], starts[fill] + lengths[fill]))
        keep = last_rows + [0]
    t0_row = keep.index(0)
    n_kept_fixed = len(keep)
    keep = keep + list(range(n_lookahead, n_max))
    return LookaheadLayout(
        window=window, ngram=ngram, guesses=guesses, fill=fill, level_lengths=lengths,
        level_starts=starts, n_lookahead=n_lookahead, allowed=allowed, offsets=offsets,
        logits_index=torch.tensor(keep, dtype=torch.long), new_level_rows=len(last_rows),
        t0_row=t0_row, n_kept_fixed=n_kept_fixed, candidate_start=n_lookahead, cand_len=cand_len)
