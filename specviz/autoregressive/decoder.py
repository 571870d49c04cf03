"""Plain autoregressive decoding: the baseline every speedup is measured against.

One target forward per token over a KV cache, as lean as gpt-fast's loop. For
Llama-family models (the offline default) the forward is a short function over
the model's own weights with a preallocated KV cache and precomputed rotary
tables: transformers' module machinery, mask building and cache bookkeeping cost
about a fifth of each step on a CPU (measured with pyinstrument, see the bench
notes). It runs the very same tensor ops as transformers' Llama, so greedy fp32
output equals `model.generate`. Any other architecture uses the model's own
forward over a DynamicCache, with no attention mask (batch 1 with no padding is
plainly causal) and only the last position's logits computed.
"""

from __future__ import annotations

import torch

from ..engine.decoder import Decoder, PhaseTimer
from ..engine.lean import make_forward
from ..engine.sampling import next_token
from ..trace import PHASE_TARGET, PHASE_VERIFY, SOURCE_AR, StepRecord


class AutoregressiveDecoder(Decoder):
    method = "ar"
    lean = True  # False: always use the model's own forward (kept for A/B measurements)

    def __init__(self, pair, prompt, prompt_ids, sampling, max_new_tokens, **options):
        if options:
            raise TypeError(f"autoregressive decoding takes no options, got {sorted(options)}")
        super().__init__(pair, prompt, prompt_ids, sampling, max_new_tokens)
        self.model = pair.target
        self.position = 0
        self.forward = make_forward(self.model, len(self.prompt_ids) + self.max_new_tokens, lean=self.lean)
        # The next forward's input: the whole prompt first (prefill), then one token.
        self.pending = torch.tensor([self.prompt_ids], dtype=torch.long, device=self.device)

    def _step(self) -> StepRecord:
        timer = PhaseTimer(self.device)
        timer.start(PHASE_TARGET)
        n_in = self.pending.shape[1]
        logits = self.forward(self.pending, self.position)
        self.position += n_in
        timer.start(PHASE_VERIFY)
        token = next_token(logits, self.sampling, self.generator)
        self.pending = token.view(1, 1)
        token_id = int(token)
        record = self._emit([token_id], [SOURCE_AR], n_in, timer.stop())
        record.alternatives = self._alternatives(logits)   # after the timer: not charged to the race
        return record

    def _alternatives(self, logits: torch.Tensor, k: int = 3) -> list[dict]:
        """The target's top-k next tokens with their probabilities, for the narrated step-through.

        One topk and one logsumexp over the logits already computed (the step has already
        synchronised on the token), p at the sampling temperature (1 when greedy), before top-p.
        """
        row = logits.reshape(-1, logits.shape[-1])[-1].float()
        if not self.sampling.greedy:
            row = row / self.sampling.temperature
        top = torch.topk(row, k)
        probs = torch.exp(top.values - torch.logsumexp(row, 0)).tolist()
        return [{"id": int(i), "text": self._text(int(i)), "p": round(float(p), 5)}
                for i, p in zip(top.indices.tolist(), probs)]

    def close(self) -> None:
        self.forward = None
        self.pending = None
