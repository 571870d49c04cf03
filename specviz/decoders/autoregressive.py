"""Plain autoregressive decoding: the baseline every speedup is measured against.

One target forward per token over a KV cache, as lean as gpt-fast's loop: no
logits processors, no stopping-criteria objects, no attention mask (batch 1 with
no padding lets the attention run plainly causal), and only the last position's
logits computed.
"""

from __future__ import annotations

import torch

from ..kvcache import new_cache
from ..sampling import next_token
from ..trace import PHASE_TARGET, PHASE_VERIFY, SOURCE_AR, StepRecord
from .base import Decoder, PhaseTimer


class AutoregressiveDecoder(Decoder):
    method = "ar"

    def __init__(self, pair, prompt, prompt_ids, sampling, max_new_tokens, **options):
        if options:
            raise TypeError(f"autoregressive decoding takes no options, got {sorted(options)}")
        super().__init__(pair, prompt, prompt_ids, sampling, max_new_tokens)
        self.model = pair.target
        self.cache = new_cache(self.model)
        # The next forward's input: the whole prompt first (prefill), then one token.
        self.pending = torch.tensor([self.prompt_ids], dtype=torch.long, device=self.device)

    def _step(self) -> StepRecord:
        timer = PhaseTimer(self.device)
        timer.start(PHASE_TARGET)
        n_in = self.pending.shape[1]
        logits = self.model(input_ids=self.pending, past_key_values=self.cache, use_cache=True,
                            logits_to_keep=1).logits[:, -1]
        timer.start(PHASE_VERIFY)
        token = next_token(logits, self.sampling, self.generator)
        self.pending = token.view(1, 1)
        token_id = int(token)
        record = self._emit([token_id], [SOURCE_AR], n_in, timer.stop())
        return record

    def close(self) -> None:
        self.cache = None
        self.pending = None
