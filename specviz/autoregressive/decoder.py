"""Plain autoregressive decoding: the baseline every speedup is measured against.

One target forward per token over a KV cache, as lean as gpt-fast's loop, run as one step
program over `engine.static`: the prompt's prefill, then the shape "one" (one token at the
committed length) every step. The engine decides whether that shape is captured as a CUDA
graph and replayed (`graphs.capture_wanted`) or run eagerly over the filled slots (every CPU
run); the step is the same either way. For Llama-family models (the offline default, Qwen2)
the forward is `engine.lean`'s short function over the model's own weights with a
preallocated KV cache and precomputed rotary tables: transformers' module machinery, mask
building and cache bookkeeping cost about a fifth of each step on a CPU (measured with
pyinstrument, see the bench notes). It runs the very same tensor ops as transformers' Llama,
so greedy fp32 output equals `model.generate`. Any other architecture
runs the model's own forward behind the same static shapes (never captured).
"""

from __future__ import annotations

import torch

from ..draws import NO_MASS
from ..engine.decoder import Decoder, PhaseTimer
from ..engine.native import logit_summary
from ..engine.sampling import draw_token
from ..trace import PHASE_TARGET, PHASE_VERIFY, SOURCE_AR, StepRecord

TOP_ALTERNATIVES = 3   # the narration's alternatives per step


class AutoregressiveDecoder(Decoder):
    method = "ar"

    def __init__(self, pair, prompt, prompt_ids, sampling, max_new_tokens, graphs="auto", **options):
        if options:
            raise TypeError(f"autoregressive decoding takes no options, got {sorted(options)}")
        super().__init__(pair, prompt, prompt_ids, sampling, max_new_tokens, graphs=graphs)
        self.position = 0
        max_len = len(self.prompt_ids) + self.max_new_tokens
        self.forward = self._checkout(max_len)
        self.one_token = self.forward.shape("one", write_offsets=[0], position_offsets=[0],
                                            block=torch.ones(1, 1, dtype=torch.bool), rows=[0])
        # The next forward's input: the whole prompt first (prefill), then one token.
        self.pending = torch.tensor([self.prompt_ids], dtype=torch.long, device=self.device)

    def _step(self) -> StepRecord:
        """One forward, the token left on the device, and one read that brings back it, the narration's
        top three and the sampler's check (no other sync)."""
        timer = PhaseTimer(self.device)
        timer.start(PHASE_TARGET)
        n_in = self.pending.shape[1]
        if self.position == 0:
            logits = self.forward.prefill(self.pending)
        else:
            logits = self.one_token(self.pending, self.position)
        self.position += n_in
        timer.start(PHASE_VERIFY)
        row = logits.reshape(-1, logits.shape[-1])[-1:]
        # The narration's top three with p at the sampling temperature (1 when greedy), before top-p; when
        # greedy, the first of them is the token (one op reads the logits for both).
        greedy = self.sampling.greedy
        top, top_ids, norm = logit_summary(row, TOP_ALTERNATIVES, 1.0 if greedy else 1.0 / self.sampling.temperature)
        token, has_mass = (top_ids[0, 0], None) if greedy else draw_token(row, self.sampling, self.generator)
        self.pending = token.view(1, 1)
        probs = torch.exp(top[0] - norm[0])
        checks = [has_mass.view(1).double()] if has_mass is not None else []
        read = torch.cat([token.view(1).double(), top_ids[0].double(), probs.double(), *checks]).tolist()
        if checks and not read[-1]:
            raise ValueError(NO_MASS)
        k = TOP_ALTERNATIVES
        record = self._emit([int(read[0])], [SOURCE_AR], n_in, timer.stop())
        record.alternatives = [{"id": int(i), "text": self._text(int(i)), "p": round(float(p), 5)}
                               for i, p in zip(read[1:1 + k], read[1 + k:1 + 2 * k])]
        return record

    def close(self) -> None:
        self.forward = None
        self.one_token = None
        self.pending = None
        super().close()
