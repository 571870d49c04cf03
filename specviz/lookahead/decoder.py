"""Lookahead decoding: the target guesses its own future by Jacobi iteration.

No draft model. Each step is one target forward over two branches (see
`window.py`): the lookahead branch refines a 2-D window of guesses and
yields W n-grams for the pool; the verification branch checks up to G pool
n-grams that follow the last committed token. Accepted candidate tokens plus
the target's own next token are emitted, so a step yields 1..N tokens, and the
output is exactly greedy (or sampled) decoding of the target.

Copied candidates (prompt lookup, `prompt_lookup.match`): where the text's last tokens occurred before,
what followed them there is verified first, in up to `copies` rows of their own beside the pool's G. A
copy is deterministic given the text, as a pool n-gram is, so the one-hot verification keeps the output
exact; on code or a rewrite it is the candidate the pool's Jacobi harvest rarely has. Uncaptured, a
copy's rows run only in the steps that found one. Where `auto` sized the window (or a first estimate did),
the step prices its copy's length as prompt lookup does (`prompt_lookup.match.best_length` over the
measured t(n), the run's own copy rates), so a good match verifies more than N-1 tokens: the step's
candidates are then that long, the pool's n-grams padded with t0 (a wrong guess costs a row, never a token).

One step program, on a CPU as on a GPU: the window and the pool stay host-side Python; the host sends
the step's ids in one copy, the device runs the forward over a fixed shape (`engine.static`), the
window's argmax and the verification (`verify.py`), and one read brings back the new level and
the verdict. Where the session captures CUDA graphs every step of a fill level runs one shape with G
candidates (missing ones padded with n-grams nobody sees and verification skips), so a graph replays
it; where nothing is captured (a CPU, graphs off) padding is not free, so the shape has exactly the
candidates the pool gave (one shape per fill level and candidate count, made when first needed).
"""

from __future__ import annotations

import random

import torch

from ..engine.decoder import Decoder, PhaseTimer
from ..engine.native import logit_summary
from ..engine.sampling import next_token_on_device, probs_from_logits
from ..errors import InvalidInput
from ..request import Range
from ..engine.curve import Curve
from ..prompt_lookup.match import MAX_TOKENS, VERIFY_MS, CopyRates, NgramIndex, best_length
from ..trace import (
    PHASE_TARGET,
    PHASE_VERIFY,
    SOURCE_AR,
    SOURCE_BONUS,
    SOURCE_COPY,
    SOURCE_NGRAM,
    ORIGIN_COPY,
    ORIGIN_POOL,
    LookaheadPayload,
    NgramCandidate,
    StepRecord,
)
from .verify import (NOT_TRIED, greedy_tries, greedy_verdict, greedy_verdict_on_host, sampled_verdict, unpack,
                     verdict_width)
from .pool import NgramPool
from .sizing import COPY_ROWS, resolve_settings
from .window import LookaheadLayout, build_layout


class _StagedInputs:
    """A step's host-built inputs, sent to the device in one copy (from pinned memory on CUDA, so it does
    not wait; the buffer is rewritten only after the step's read, when that copy is long done)."""

    def __init__(self, size: int, device: torch.device):
        cuda = device.type == "cuda"
        self.host = torch.zeros(size, dtype=torch.long, pin_memory=cuda)
        self.device_copy = torch.zeros(size, dtype=torch.long, device=device) if cuda else self.host

    def put(self, values: list[int]) -> torch.Tensor:
        self.host[:len(values)] = torch.tensor(values, dtype=torch.long)
        if self.device_copy is not self.host:
            self.device_copy.copy_(self.host, non_blocking=True)
        return self.device_copy


class LookaheadDecoder(Decoder):
    method = "lookahead"

    def __init__(self, pair, prompt, prompt_ids, sampling, max_new_tokens, window=None, ngram=None,
                 guesses=None, pool_from_prompt=True, graphs="auto", copies=COPY_ROWS, copy_curve=None):
        """`copy_curve`: the target's forward ms by rows, which prices each step's copy length (`auto` passes
        the curve it sized the window on); without it a copy is N-1 tokens, as the window's n-grams."""
        if not isinstance(pool_from_prompt, bool):
            raise InvalidInput(f"pool from prompt must be true or false, got {pool_from_prompt!r}")
        copies = Range("copied candidates", 0, 8).check_whole(copies)
        if not prompt_ids:
            raise InvalidInput("the prompt is empty; give at least one token")
        if copy_curve is not None and (not isinstance(copy_curve, dict) or not copy_curve):
            raise InvalidInput("a Lookahead copy curve must map row counts to milliseconds")
        window, ngram, guesses, auto_curve = resolve_settings(pair, window, ngram, guesses, graphs=graphs)
        auto = auto_curve is not None
        copy_curve = auto_curve if copy_curve is None else copy_curve
        super().__init__(pair, prompt, prompt_ids, sampling, max_new_tokens, settings={
            "window": window, "ngram": ngram, "guesses": guesses, "pool_from_prompt": pool_from_prompt,
            "copies": copies, "auto": auto, "copy_tokens": ngram - 1 if copy_curve is None else MAX_TOKENS},
            graphs=graphs)
        self.W, self.N, self.G = window, ngram, guesses
        self.copies = copies
        self.rows = guesses + copies   # candidate rows a step may verify: copies first, then the pool's
        self.cache_len = 0
        self.t0: int | None = None          # last committed token, not yet in the cache

        # One layout per warm-up fill level and candidate length; the shapes over them are made when a step
        # first needs one. A copy longer than N-1 is priced per step, and not where steps replay graphs.
        self.copy_curve = None if copy_curve is None else Curve(copy_curve)
        self.copy_rates = CopyRates()
        longest = ngram - 1 if copy_curve is None or not copies else max(ngram - 1, MAX_TOKENS)
        self.layouts = {(fill, ngram - 1): build_layout(window, ngram, self.rows, fill) for fill in range(ngram - 1)}
        n_max = max(lay.n_lookahead for lay in self.layouts.values()) + self.rows * longest   # the longest step
        self.max_position = pair.max_context - 1
        # The lean forward where it is exact for the target, else transformers' own (never captured).
        self.forward = self._checkout(len(self.prompt_ids) + self.max_new_tokens + n_max)
        # Padding candidates is free only in a replayed graph; eagerly each step runs the pool's own count.
        self.padded = self.session.runner.capture and self.forward.capturable
        if self.padded:   # one shape per fill level to capture: copies N-1 long, as before
            self.copy_curve = None
            self.trace.settings["copy_tokens"] = ngram - 1
        self.shapes: dict = {}   # (fill level, candidate count, L) -> the forward's shape
        self.staged = _StagedInputs(1 + n_max, self.device)
        self.candidate_numbers = torch.arange(self.rows, device=self.device)
        self.slots: dict[int, torch.Tensor] = {}   # L -> the cache slots a kept candidate's K/V move from

        # Window guesses come from a private stream: deterministic for a seed, never the global RNG.
        self.rng = random.Random(self.sampling.seed if self.sampling.seed is not None else 0)
        self.fill = 0
        self.levels = [[self.rng.choice(self.prompt_ids) for _ in range(self.layout(0).level_lengths[0])]]
        self.pool = NgramPool(ngram - 1, guesses)
        if pool_from_prompt:
            self.pool.seed_from_prompt(self.prompt_ids)
        self.index = NgramIndex(self.prompt_ids)   # the text so far, for copied candidates

    def layout(self, fill: int, cand_len: int | None = None) -> LookaheadLayout:
        """The layout at a warm-up fill level for candidates of `cand_len` tokens (N-1 by default), made on
        first use (a step's copy may be longer than any seen before)."""
        key = (fill, self.N - 1 if cand_len is None else cand_len)
        found = self.layouts.get(key)
        if found is None:
            found = self.layouts[key] = build_layout(self.W, self.N, self.rows, *key)
        return found

    def _shape(self, layout: LookaheadLayout, count: int):
        """The layout with `count` candidates, its spec built on first use only (a step reuses it)."""
        key = (layout.fill, count, layout.cand_len)
        found = self.shapes.get(key)
        if found is None:
            found = self.shapes[key] = self._new_shape(layout, count)
        return found

    def _new_shape(self, layout: LookaheadLayout, count: int):
        """A padding candidate's rows see t0 and their own block only, and no other row sees them, so they
        change nothing the step reads (verification skips them too)."""
        n = layout.n_tokens(count)
        return self.forward.shape(
            (self.W, self.N, layout.fill, count, layout.cand_len), write_offsets=list(range(n)),
            position_offsets=layout.offsets[:n].tolist(), block=layout.allowed[:n, :n],
            rows=layout.logits_index[:layout.n_kept(count)].tolist(), max_position=self.max_position)

    # -- one step ------------------------------------------------------------------------

    def _step(self) -> StepRecord:
        """The host builds the ids (window and pool are host state) and sends them in one copy; the forward
        (replayed on CUDA), the window's argmax and the verification run on the device; one `.tolist()`
        brings back the new level and the verdict, the step's only read."""
        if self.t0 is None:
            return self._prefill()
        timer = PhaseTimer(self.device)
        timer.start(PHASE_TARGET)
        t0, ctx = self.t0, self.cache_len
        candidates, n_copied, copy = self._candidates(t0)
        width = len(candidates[0]) if candidates else self.N - 1
        layout = self.layout(self.fill, width)
        count = self.rows if self.padded else len(candidates)
        shape = self._shape(layout, count)
        window_in = [list(level) for level in self.levels]
        padding = [t0] * ((count - len(candidates)) * width)
        staged = self.staged.put([len(candidates), t0] + [tok for level in self.levels for tok in level]
                                 + [tok for c in candidates for tok in c] + padding)
        logits = shape(staged[1:1 + shape.n], ctx)
        timer.start(PHASE_VERIFY)
        if self.sampling.greedy and self.host_reads_free:
            values = self._greedy_on_host(layout, count, logits, candidates, t0)
        else:
            values = self._verdict_on_device(layout, count, logits, staged).tolist()
        packed = layout.new_level_rows + verdict_width(count, width)
        ints = [int(v) for v in values[:packed]]   # sampled steps read their tries' floats with them
        new_level = ints[:layout.new_level_rows]
        verdict = unpack(ints[layout.new_level_rows:], len(candidates), width)
        tries = self._tries(values[packed:], verdict, count, len(candidates), width)
        if copy is not None:   # the copy is candidate 0; a match past its own tokens ran into t0's padding
            verified = min(len(copy.tokens), width)
            self.copy_rates.update(copy, verified, min(verdict.match_lengths[0], verified))
        return self._conclude(timer, layout, t0, ctx, candidates, n_copied, window_in, new_level, verdict,
                              shape.n, tries)

    def _tries(self, values: list[float], verdict, count: int, n_real: int, cand_len: int) -> list[tuple[list, list]]:
        """Per real candidate, (accept_probs, uniforms) by position, None where its token was not tried."""
        if not values:   # greedy: passed or failed, from the match lengths; no draws
            return [(tested, [None] * cand_len) for tested in greedy_tries(verdict.match_lengths, cand_len)]
        half = cand_len * count
        as_kept = lambda v: None if v == NOT_TRIED else v   # noqa: E731
        return [([as_kept(values[j * count + k]) for j in range(cand_len)],
                 [as_kept(values[half + j * count + k]) for j in range(cand_len)]) for k in range(n_real)]

    def _candidates(self, t0: int) -> tuple[list[tuple[int, ...]], int, object]:
        """This step's candidates (the copies, then the pool's n-grams they do not repeat), how many are
        copies, and the first copy as found (its rates learn from the verdict; None where no copy was priced).
        Every candidate is as long as the step's: N-1, or a priced copy's length; a shorter one (a copy
        near the text's end, a pool n-gram beside a long copy) is padded with t0: a wrong guess costs a
        verified row, never a token."""
        self.index.extend(self.generated[len(self.index) - len(self.prompt_ids):])
        short = self.N - 1
        pooled = self.pool.candidates(t0, self.G + self.copies)
        if self.copy_curve is None:
            found, width, priced = self.index.copies(short, self.copies), short, None
        else:
            found, width = self._priced_copies(min(self.G, len(pooled)))
            priced = found[0] if found else None
        pad = lambda c: tuple(c) + (t0,) * (width - len(c))   # noqa: E731
        copied = [pad(c.tokens[:width]) for c in found]
        pooled = [c for c in map(pad, pooled) if c not in copied][:self.G]
        return copied + pooled, len(copied), priced

    def _priced_copies(self, pool_count: int) -> tuple[list, int]:
        """The step's copies and candidate length: the first copy's tokens that pay for their rows by the
        measured t(n) and the run's copy rates (`prompt_lookup.match.best_length`, the rule prompt lookup
        steps by), priced over this step's window and its `pool_count` n-grams; no copy where none pays."""
        room = self.max_new_tokens - len(self.generated) - 1
        found = self.index.copies(min(MAX_TOKENS, room), self.copies) if room > 0 else []
        short = self.N - 1
        if not found:
            return [], short
        window = self.layout(self.fill).n_lookahead

        def rows(k: int) -> int:   # k copied tokens: every candidate as long as the longest
            return window + pool_count * short if k == 0 else window + (pool_count + len(found)) * max(short, k)

        length = best_length(self.copy_curve, self.copy_rates.reaches(found[0]), VERIFY_MS, rows)
        return (found, max(short, length)) if length else ([], short)

    def _greedy_on_host(self, layout: LookaheadLayout, count: int, logits: torch.Tensor,
                        candidates: list[tuple[int, ...]], t0: int) -> list[int]:
        """What `_verdict_on_device(...).tolist()` gives a greedy step, the argmax read and the rule followed on
        the host (`verify.greedy_verdict_on_host`); rows past the real `candidates` are t0's padding."""
        cand_len, rows = layout.cand_len, layout.n_kept_fixed
        preds = logit_summary(logits, 1)[1][:, 0].tolist()
        padded = [list(c) for c in candidates] + [[t0] * cand_len] * (count - len(candidates))
        after = [preds[rows + k * cand_len:rows + (k + 1) * cand_len] for k in range(count)]
        return preds[:layout.new_level_rows] + greedy_verdict_on_host(padded, len(candidates), preds[layout.t0_row],
                                                                      after, cand_len)

    def _verdict_on_device(self, layout: LookaheadLayout, count: int, logits: torch.Tensor, staged: torch.Tensor):
        """[the new window level's argmax | the packed verdict] as one long tensor, nothing read yet.
        `staged` is [candidate count, the step's ids]; of the `count` candidate rows, those past the
        pool's candidates are padding."""
        cand_len, rows = layout.cand_len, layout.n_kept_fixed
        start = 1 + layout.candidate_start
        candidates = staged[start:start + count * cand_len].view(count, cand_len)
        valid = self.candidate_numbers[:count] < staged[0]
        if self.sampling.greedy:
            preds = logit_summary(logits, 1)[1][:, 0]
            verdict = greedy_verdict(candidates, valid, preds[layout.t0_row], preds[rows:].view(count, cand_len))
            return torch.cat([preds[:layout.new_level_rows], verdict])
        # P after t0, then after each candidate token. Once the window is full t0's row is the one before the
        # candidates' (a slice, no copy); in the warm-up it is the first row.
        t0 = layout.t0_row
        node_logits = logits[t0:] if t0 == rows - 1 else torch.cat([logits[t0:t0 + 1], logits[rows:]])
        node_probs = probs_from_logits(node_logits, self.sampling)
        # Drawn at (L, rows) whatever the shape's candidate count, so a seed gives the same tokens padded or not.
        uniforms = torch.rand(cand_len, self.rows, generator=self.generator, device=self.device,
                              dtype=torch.float64)
        verdict, tries = sampled_verdict(candidates, valid, node_probs, uniforms[:, :count], self.generator,
                                         prune=self.host_reads_free)
        # Token ids are exact in float64: the tries' floats come back in the step's one read.
        return torch.cat([logit_summary(logits[:layout.new_level_rows], 1)[1][:, 0].double(), verdict.double(),
                          tries.flatten()])

    def _conclude(self, timer: PhaseTimer, layout: LookaheadLayout, t0: int, ctx: int, candidates: list,
                  n_copied: int, window_in: list[list[int]], new_level: list[int], verdict, n_in: int,
                  tries: list[tuple[list, list]]) -> StepRecord:
        """Commit the verdict, move the window on and record the step."""
        n_acc = verdict.n_accepted
        copied = verdict.best is not None and verdict.best < n_copied
        sources = [SOURCE_COPY if copied else SOURCE_NGRAM] * n_acc + [SOURCE_BONUS if n_acc else SOURCE_AR]
        kept, reason = self._accept(verdict.tokens)

        # The cache keeps t0 and the accepted candidate tokens; the window's K/V go.
        if reason is None:
            self._keep_accepted(ctx + layout.candidate_start + (verdict.best or 0) * layout.cand_len, ctx, n_acc,
                                layout.cand_len)
            self.cache_len = ctx + 1 + n_acc
            self.t0 = verdict.tokens[-1]
        harvested = self._advance_window(t0, new_level)

        payload = LookaheadPayload(
            window=window_in, window_text=[[self._text(t) for t in level] for level in window_in],
            harvested=harvested, pool_size=len(self.pool), key_token_id=t0,
            candidates=[NgramCandidate(list(c), [self._text(t) for t in c], m,
                                       ORIGIN_COPY if k < n_copied else ORIGIN_POOL, *tried)
                        for k, (c, m, tried) in enumerate(zip(candidates, verdict.match_lengths, tries))],
            accepted_candidate=verdict.best, pool_entry=self.pool.snapshot(t0), step_ms=0.0,
            warmup=not layout.steady, window_size=self.W, ngram_size=self.N, guesses=self.G, copies=self.copies)
        times = timer.stop()
        payload.step_ms = round(sum(times.values()), 4)
        return self._emit(kept, sources, n_in, times, payload)

    def _keep_accepted(self, first_slot: int, ctx: int, n_acc: int, cand_len: int) -> None:
        """Move the accepted candidate's K/V (from first_slot) to right after t0's slot ctx."""
        if n_acc and first_slot != ctx + 1:   # in place already where the candidates follow t0 (no window)
            # A fixed-length index (L): slots past the accepted ones move too, masked until rewritten.
            slots = self.slots.get(cand_len)
            if slots is None:
                slots = self.slots[cand_len] = torch.arange(cand_len, device=self.device)
            self.forward.keep(ctx + 1, slots + first_slot)

    def _prefill(self) -> StepRecord:
        """The prompt's forward into the cache; the first token is drawn on the device and read once."""
        timer = PhaseTimer(self.device)
        timer.start(PHASE_TARGET)
        prompt = torch.tensor([self.prompt_ids], dtype=torch.long, device=self.device)
        logits = self.forward.prefill(prompt)
        timer.start(PHASE_VERIFY)
        row = logits.reshape(-1, logits.shape[-1])[-1:]
        token = next_token_on_device(row, self.sampling, self.generator)
        return self._prefill_record(timer, token.tolist()[0])

    def _prefill_record(self, timer: PhaseTimer, token: int) -> StepRecord:
        self.cache_len = len(self.prompt_ids)
        self.t0 = token
        window = [list(level) for level in self.levels]
        payload = LookaheadPayload(
            window=window, window_text=[[self._text(t) for t in level] for level in window], harvested=[],
            pool_size=len(self.pool), key_token_id=self.prompt_ids[-1], candidates=[], accepted_candidate=None,
            pool_entry=[], step_ms=0.0, warmup=True, window_size=self.W, ngram_size=self.N, guesses=self.G,
            copies=self.copies)
        times = timer.stop()
        payload.step_ms = round(sum(times.values()), 4)
        return self._emit([token], [SOURCE_AR], len(self.prompt_ids), times, payload)

    def _advance_window(self, t0: int, new_level: list[int]) -> list[list[int]]:
        """Harvest W n-grams (full window only), then shift the window up one level."""
        levels = self.levels
        harvested = []
        if self.fill == self.N - 2:
            level0, middle = levels[0], levels[1:]
            for col in range(self.W):
                key = t0 if col == 0 else level0[col - 1]
                ngram = [level[col] for level in middle] + [new_level[col]]
                self.pool.add(key, ngram)
                harvested.append([key] + ngram)
        new_level = [self._replace_eos(t) for t in new_level]
        if self.fill == self.N - 2:
            rows = middle + [new_level]
            self.levels = [rows[0][1:]] + rows[1:]
        else:
            # Warm-up: every level drops the column just committed; the new level is born.
            self.levels = [level[1:] for level in levels] + [new_level[1:]]
            self.fill += 1
        return harvested

    def _replace_eos(self, token: int) -> int:
        return self.rng.choice(self.prompt_ids) if token in self.eos_ids else token

    def close(self) -> None:
        self.forward = None
        self.shapes = {}
        super().close()
