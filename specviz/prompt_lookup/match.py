"""The n-gram match behind prompt lookup decoding: where the text's last few tokens occurred before,
the tokens that followed them there are a free guess at what follows now.

transformers' `prompt_lookup_num_tokens` and llama.cpp's `lookup` copy a continuation this way; code,
a rewrite and any repetition quote their own past, and a copied guess costs no draft forward. Sequoia's
tree and Lookahead's candidates take these guesses beside their own (`copied` tokens in the trace), and
a decoder may verify them alone.

The index is incremental: each committed token adds the n-grams (n = 1..max_ngram) that end at it, so
a lookup costs a few dictionary reads whatever the text's length. Matches are ranked longest first,
then most recent first (the nearest earlier occurrence is the likeliest pattern in code), and a
continuation already offered is not offered twice. `best_length` prices how many of a copy's tokens a step
verifies on the target's measured forward curve (prompt lookup's and Lookahead's steps). Pure Python, no model:
tested alone.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_NGRAM = 4     # the longest suffix looked for (transformers' default max_matching_ngram_size is 2)
MIN_NGRAM = 1     # one token of context still guesses well in code and rewrites (longer matches are tried first)
OCCURRENCES = 8   # the most recent earlier occurrences of a suffix looked at, per length
MAX_TOKENS = 10      # copied tokens a step verifies at most (transformers' prompt_lookup_num_tokens default)
# A copy step's own work besides the forward: the verdict's ops and its longer read (~0.3 ms on a 2-core Zen 4
# at q4, where `ar`'s step is ~3 ms); so a one-token match right a quarter of the time does not pay there.
VERIFY_MS = 0.3


# How often a copy is right, by the length of the match it came from (1..MAX_NGRAM): its first token, and
# each next one given the ones before. Measured: prompt lookup over `ar`'s own greedy texts of the 12 bench
# prompts (4 suites, 128 tokens, SmolLM2-135M fp32), 657 copies: a one-token match guesses its next token
# right 0.26 of the time, a four-token match 0.71, and then each next token about 0.75.
FIRST_RIGHT = {1: 0.26, 2: 0.52, 3: 0.39, 4: 0.71}
NEXT_RIGHT = {1: 0.6, 2: 0.6, 3: 0.65, 4: 0.75}


@dataclass(frozen=True)
class Copy:
    """A continuation copied from the text: `tokens` followed the `matched` tokens that end the text now,
    at token `source` (the index, in prompt + generated, of the continuation's first token)."""

    tokens: tuple[int, ...]
    matched: int
    source: int

    @property
    def rated(self) -> int:
        """The match length its rates are kept by (`FIRST_RIGHT`, `NEXT_RIGHT`: longer matches count as the longest)."""
        return min(self.matched, max(FIRST_RIGHT))

    def reaches(self) -> list[float]:
        """Each token's probability of being reached (it and every one before it right), by the measured rates."""
        return chain_reaches(len(self.tokens), FIRST_RIGHT[self.rated], NEXT_RIGHT[self.rated])

    def worth(self, min_reach: float) -> int:
        """How many of the copy's tokens to verify: those reached (all before them right) with probability at
        least `min_reach`, by the measured rates (`FIRST_RIGHT`, `NEXT_RIGHT`); a row costs what it costs,
        so a guess that is rarely reached does not pay for it. (Each rate is below 1: the reaches only fall.)"""
        return sum(reach >= min_reach for reach in self.reaches())


def chain_reaches(count: int, first: float, step: float) -> list[float]:
    """The reach probabilities of a chain's `count` tokens: the first right with probability `first`, each next
    one, given those before it, with probability `step`."""
    out, reach = [], first
    for _ in range(count):
        out.append(reach)
        reach *= step
    return out


class CopyRates:
    """How often this run's copies were right, by match length, starting from the measured rates.

    Each rate is the measured one (`FIRST_RIGHT`, `NEXT_RIGHT`) as `PRIOR_WEIGHT` tries, plus the run's own
    tries: a chat answer quotes its prompt far less than code does, and a rewrite more, so a run learns its
    text's rates within a few dozen copies. Choosing what to verify from past outcomes keeps sampling exact
    (the draft may depend on anything before the step's own draws)."""

    PRIOR_WEIGHT = 8.0

    def __init__(self):
        self.first = {n: [0, 0] for n in FIRST_RIGHT}   # n -> [tries, right]
        self.next = {n: [0, 0] for n in NEXT_RIGHT}

    def _rate(self, counts: list[int], prior: float) -> float:
        tries, right = counts
        return (prior * self.PRIOR_WEIGHT + right) / (self.PRIOR_WEIGHT + tries)

    def reaches(self, copy: Copy) -> list[float]:
        """Each of the copy's tokens' probability of being reached (it and every one before it right)."""
        n = copy.rated
        return chain_reaches(len(copy.tokens), self._rate(self.first[n], FIRST_RIGHT[n]),
                             self._rate(self.next[n], NEXT_RIGHT[n]))

    def update(self, copy: Copy, verified: int, accepted: int) -> None:
        """`verified` leading tokens of `copy` went to the target, which accepted `accepted` of them."""
        if verified < 1:
            return
        n = copy.rated
        self.first[n][0] += 1
        self.first[n][1] += accepted >= 1
        self.next[n][0] += min(accepted + 1, verified) - 1   # token j > 1 was tried when j - 1 was right
        self.next[n][1] += max(accepted - 1, 0)


class NgramIndex:
    """The text so far (prompt, then committed tokens) with every n-gram's end positions."""

    def __init__(self, token_ids=(), max_ngram: int = MAX_NGRAM, min_ngram: int = MIN_NGRAM):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram} and {max_ngram}")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.text: list[int] = []
        self.ends: dict[tuple[int, ...], list[int]] = {}
        self.extend(token_ids)

    def extend(self, token_ids) -> None:
        """Append committed tokens, indexing the n-grams that end at each."""
        text, ends = self.text, self.ends
        for token in token_ids:
            text.append(int(token))
            last = len(text) - 1
            for n in range(1, min(self.max_ngram, len(text)) + 1):
                ends.setdefault(tuple(text[last - n + 1:]), []).append(last)

    def __len__(self) -> int:
        return len(self.text)

    def copies(self, length: int, limit: int = 1) -> list[Copy]:
        """Up to `limit` distinct continuations of up to `length` tokens after earlier occurrences of the
        text's last n tokens (n from `max_ngram` down to `min_ngram`), the longest match first."""
        text, found, seen = self.text, [], set()
        last = len(text) - 1
        if length < 1 or limit < 1:
            return found
        for n in range(min(self.max_ngram, len(text) - 1), self.min_ngram - 1, -1):
            positions = self.ends.get(tuple(text[last - n + 1:]), ())
            # The suffix's own occurrence (ending at `last`) has nothing after it yet.
            for end in reversed(positions[-OCCURRENCES - 1:]):
                if end >= last:
                    continue
                tokens = tuple(text[end + 1:end + 1 + length])
                if tokens in seen:
                    continue
                seen.add(tokens)
                found.append(Copy(tokens, n, end + 1))
                if len(found) >= limit:
                    return found
        return found


def best_length(t, reaches: list[float], overhead: float, rows=None) -> int:
    """The number of leading copied tokens (0..len(reaches)) with the most expected tokens per unit of time:
    t(rows(L)) from the curve `t` (an `engine.curve.Curve`, prepared once per run), plus `overhead` for a step
    that verifies any.
    `rows(L)`: the forward's rows with L copied tokens, L + 1 for a chain (t0 and the copy); a Lookahead step
    passes its window's and pool's rows around the copy (`lookahead.decoder`)."""
    rows = rows or (lambda k: k + 1)
    best, length, tokens = 1.0 / t.at(rows(0)), 0, 1.0
    for k, reach in enumerate(reaches, 1):
        tokens += reach
        rate = tokens / (t.at(rows(k)) + overhead)
        if rate > best:
            best, length = rate, k
    return length
