"""Lookahead decoding: the target guesses its own future by Jacobi iteration.

No draft model. Each step is one target forward over two branches (see
`window.py`): the lookahead branch refines a 2-D window of guesses and
yields W n-grams for the pool; the verification branch checks up to G pool
n-grams that follow the last committed token. Accepted candidate tokens plus
the target's own next token are emitted, so a step yields 1..N tokens, and the
output is exactly greedy (or sampled) decoding of the target.
"""

from __future__ import annotations

import random

import torch

from ..draws import first_argmax
from ..engine.decoder import Decoder, PhaseTimer
from ..engine.lean import make_forward
from ..engine.sampling import next_token, probs_from_logits
from ..errors import InvalidInput
from ..trace import (
    PHASE_TARGET,
    PHASE_VERIFY,
    SOURCE_AR,
    SOURCE_BONUS,
    SOURCE_NGRAM,
    LookaheadPayload,
    NgramCandidate,
    StepRecord,
)
from .pool import NgramPool
from .sizing import resolve_settings
from .verify import greedy_verify, sampling_verify
from .window import build_layout


class _LazyProbs:
    """P after candidate k's token j, computed only for the rows verification reaches."""

    def __init__(self, logits: torch.Tensor, sampling):
        self.logits, self.sampling = logits, sampling

    def __getitem__(self, kj):
        return probs_from_logits(self.logits[kj], self.sampling)


class LookaheadDecoder(Decoder):
    method = "lookahead"
    lean = True  # False: transformers' own forward (A/B measurements, tests)

    def __init__(self, pair, prompt, prompt_ids, sampling, max_new_tokens, window=None, ngram=None,
                 guesses=None, pool_from_prompt=True, graphs="auto"):
        if not isinstance(pool_from_prompt, bool):
            raise InvalidInput(f"pool from prompt must be true or false, got {pool_from_prompt!r}")
        if not prompt_ids:
            raise InvalidInput("the prompt is empty; give at least one token")
        window, ngram, guesses, auto = resolve_settings(pair, window, ngram, guesses)
        super().__init__(pair, prompt, prompt_ids, sampling, max_new_tokens, settings={
            "window": window, "ngram": ngram, "guesses": guesses, "pool_from_prompt": pool_from_prompt,
            "auto": auto}, graphs=graphs)
        self.W, self.N, self.G = window, ngram, guesses
        self.cache_len = 0
        self.t0: int | None = None          # last committed token, not yet in the cache
        dtype = self.pair.dtype

        # Everything shape-dependent is built here, once: one layout per warm-up fill level.
        self.layouts = [build_layout(window, ngram, guesses, fill) for fill in range(ngram - 1)]
        self.mask_blocks = [lay.mask_block(dtype, self.device) for lay in self.layouts]
        self.offsets = [lay.offsets.to(self.device) for lay in self.layouts]
        self.logits_index = [lay.logits_index.to(self.device) for lay in self.layouts]
        n_max = max(lay.n_max for lay in self.layouts)
        # The lean Llama forward where it is exact, else transformers'; one cache slot per token it can hold.
        self.forward = make_forward(pair.target, len(self.prompt_ids) + self.max_new_tokens + n_max,
                                    lean=self.lean)
        self.committed_mask = torch.zeros(1, 1, n_max, len(self.prompt_ids) + self.max_new_tokens,
                                          dtype=dtype, device=self.device)
        self.max_position = pair.max_context - 1

        # Window guesses come from a private stream: deterministic for a seed, never the global RNG.
        self.rng = random.Random(self.sampling.seed if self.sampling.seed is not None else 0)
        self.fill = 0
        self.levels = [[self.rng.choice(self.prompt_ids) for _ in range(self.layouts[0].level_lengths[0])]]
        self.pool = NgramPool(ngram - 1, guesses)
        if pool_from_prompt:
            self.pool.seed_from_prompt(self.prompt_ids)

    # -- one step ------------------------------------------------------------------------

    def _step(self) -> StepRecord:
        if self.t0 is None:
            return self._prefill()
        timer = PhaseTimer(self.device)
        timer.start(PHASE_TARGET)
        fill = self.fill
        layout = self.layouts[fill]
        t0, ctx = self.t0, self.cache_len
        candidates = self.pool.candidates(t0, self.G)
        n_cand = len(candidates)
        n_in = layout.n_tokens(n_cand)
        n_kept = layout.n_kept(n_cand)
        window_in = [list(level) for level in self.levels]
        ids = [t0] + [tok for level in self.levels for tok in level] + [tok for c in candidates for tok in c]
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        mask = torch.cat([self.committed_mask[:, :, :n_in, :ctx],
                          self.mask_blocks[fill][:n_in, :n_in].view(1, 1, n_in, n_in)], dim=-1)
        positions = (self.offsets[fill][:n_in] + ctx).clamp_(max=self.max_position)
        logits = self.forward(input_ids, ctx, positions=positions, mask=mask, rows=self.logits_index[fill][:n_kept])

        timer.start(PHASE_VERIFY)
        preds = first_argmax(logits).tolist()
        new_level = preds[:layout.new_level_rows]
        cand_len = self.N - 1
        cand_rows = layout.n_kept_fixed
        if self.sampling.greedy:
            cand_preds = [preds[cand_rows + k * cand_len:cand_rows + (k + 1) * cand_len] for k in range(n_cand)]
            verdict = greedy_verify(candidates, preds[layout.t0_row], cand_preds)
        else:
            first_probs = probs_from_logits(logits[layout.t0_row], self.sampling)
            cand_probs = _LazyProbs(logits[cand_rows:].view(n_cand, cand_len, logits.shape[-1]), self.sampling)
            verdict = sampling_verify(candidates, first_probs, cand_probs, self.generator)
        n_acc = verdict.n_accepted
        sources = [SOURCE_NGRAM] * n_acc + [SOURCE_BONUS if n_acc else SOURCE_AR]
        kept, reason = self._accept(verdict.tokens)

        # The cache keeps t0 and the accepted candidate tokens; the window's K/V go.
        if reason is None:
            first_slot = ctx + layout.candidate_start + (verdict.best or 0) * cand_len
            self.forward.keep(ctx + 1, torch.arange(first_slot, first_slot + n_acc, device=self.device))
            self.cache_len = ctx + 1 + n_acc
            self.t0 = verdict.tokens[-1]
        harvested = self._advance_window(t0, new_level)

        payload = LookaheadPayload(
            window=window_in, window_text=[[self._text(t) for t in level] for level in window_in],
            harvested=harvested, pool_size=len(self.pool), key_token_id=t0,
            candidates=[NgramCandidate(list(c), [self._text(t) for t in c], m)
                        for c, m in zip(candidates, verdict.match_lengths)],
            accepted_candidate=verdict.best, pool_entry=self.pool.snapshot(t0), step_ms=0.0,
            warmup=not layout.steady, window_size=self.W, ngram_size=self.N, guesses=self.G)
        times = timer.stop()
        payload.step_ms = round(sum(times.values()), 4)
        return self._emit(kept, sources, n_in, times, payload)

    def _prefill(self) -> StepRecord:
        timer = PhaseTimer(self.device)
        timer.start(PHASE_TARGET)
        prompt = torch.tensor([self.prompt_ids], dtype=torch.long, device=self.device)
        logits = self.forward(prompt, 0)[0]
        timer.start(PHASE_VERIFY)
        token = int(next_token(logits, self.sampling, self.generator))
        self.cache_len = len(self.prompt_ids)
        self.t0 = token
        window = [list(level) for level in self.levels]
        payload = LookaheadPayload(
            window=window, window_text=[[self._text(t) for t in level] for level in window], harvested=[],
            pool_size=len(self.pool), key_token_id=self.prompt_ids[-1], candidates=[], accepted_candidate=None,
            pool_entry=[], step_ms=0.0, warmup=True, window_size=self.W, ngram_size=self.N, guesses=self.G)
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
        self.committed_mask = None
