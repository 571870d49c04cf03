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
from ..engine.sampling import next_token, next_token_on_device
from ..engine.static import cache_capacity, checkout, release, static_supported
from ..trace import PHASE_TARGET, PHASE_VERIFY, SOURCE_AR, StepRecord


class AutoregressiveDecoder(Decoder):
    method = "ar"
    lean = True  # False: always use the model's own forward (kept for A/B measurements)

    def __init__(self, pair, prompt, prompt_ids, sampling, max_new_tokens, graphs="auto", **options):
        if options:
            raise TypeError(f"autoregressive decoding takes no options, got {sorted(options)}")
        super().__init__(pair, prompt, prompt_ids, sampling, max_new_tokens, graphs=graphs)
        self.model = pair.target
        self.position = 0
        max_len = len(self.prompt_ids) + self.max_new_tokens
        self.session = None
        if self.static_wanted and static_supported(self.model):
            # One token a step over static buffers: the shape a CUDA graph replays.
            self.session = checkout(self.model, self.method, cache_capacity(max_len), self.device.type == "cuda")
            self.forward = self.session.forward("target", self.model)
            self.one_token = self.forward.shape("one", write_offsets=[0], position_offsets=[0],
                                                block=torch.ones(1, 1, dtype=torch.bool), rows=[0])
            self.graph_stats = self.session.runner.stats
        else:
            self.forward = make_forward(self.model, max_len, lean=self.lean)
        # The next forward's input: the whole prompt first (prefill), then one token.
        self.pending = torch.tensor([self.prompt_ids], dtype=torch.long, device=self.device)

    def _step(self) -> StepRecord:
        if self.session is not None:
            return self._static_step()
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

    def _static_step(self) -> StepRecord:
        """The step on static buffers: the token stays on the device, and one read brings back it and
        the narration's top three (no other sync)."""
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
        token = next_token_on_device(row, self.sampling, self.generator)
        self.pending = token.view(1, 1)
        scores = row[0].float() if self.sampling.greedy else row[0].float() / self.sampling.temperature
        top = torch.topk(scores, 3)
        probs = torch.exp(top.values - torch.logsumexp(scores, 0))
        read = torch.cat([token.view(1).double(), top.indices.double(), probs.double()]).tolist()
        token_id = int(read[0])
        record = self._emit([token_id], [SOURCE_AR], n_in, timer.stop())
        record.alternatives = [{"id": int(i), "text": self._text(int(i)), "p": round(float(p), 5)}
                               for i, p in zip(read[1:4], read[4:7])]
        return record

    def close(self) -> None:
        self.forward = None
        self.pending = None
        release(self.session)
        self.session = None
