"""Prompt lookup decoding: the draft is a copy of the text's own past, verified by the target in one forward.

Each step looks up where the text's last tokens occurred before (`match.NgramIndex`) and takes the tokens
that followed there as a chain of guesses c_1..c_L. The target reads [t0, c_1, .., c_L] in one forward
(t0 the last committed token, whose K/V are not yet cached, as `ar`'s pending token) under a causal mask,
so row j's logits are the target's distribution after c_j. Verification is Lookahead's, with one
candidate (`lookahead.verify`: a copy is a one-hot draft): greedy accepts the longest prefix equal to the
target's own choices; sampled accepts c_j with probability P(c_j) and, at the first rejection, draws from
P with c_j removed, so the output follows the target's distribution exactly at any temperature.

A chain keeps the cache contiguous: the accepted rows' K/V already sit at the slots the next step
continues from, and the rows past them are rewritten before anything reads them. So a step is a forward
and a verdict, with no draft model and no cache compaction. A step without a match is `ar`'s step.

How many copied tokens a step verifies follows the target's measured forward curve (`sizing`): a copy's
tokens are reached with the match's measured rates, updated by the run's own (`match.CopyRates`), and the step takes the length
whose expected tokens per millisecond are the best, so on a CPU, where a row costs, a weak match verifies
few tokens, and on a GPU, where rows are free, many.
"""

from __future__ import annotations

import torch

from ..draws import NO_MASS
from ..engine.curve import Curve
from ..engine.decoder import Decoder, PhaseTimer
from ..engine.native import logit_summary
from ..engine.sampling import draw_token, probs_from_logits
from ..errors import InvalidInput
from ..lookahead.verify import (NOT_TRIED, greedy_tries, greedy_verdict, greedy_verdict_on_host, sampled_verdict,
                               unpack, verdict_width)
from ..trace import (ORIGIN_COPY, PHASE_TARGET, PHASE_VERIFY, SOURCE_AR, SOURCE_BONUS, SOURCE_COPY,
                     StepRecord, TreeNode, TreePayload)
from .match import MAX_TOKENS, CopyRates, NgramIndex, best_length
from .sizing import check_tokens, step_overhead


class PromptLookupDecoder(Decoder):
    method = "prompt-lookup"

    def __init__(self, pair, prompt, prompt_ids, sampling, max_new_tokens, graphs="auto", tokens=None,
                 curve=None, curve_source=""):
        """`tokens`: the most copied tokens a step verifies (1..16); `curve`: the target's forward ms by rows,
        which prices each step's length (`sizing.decoder_options` fills both)."""
        self.max_tokens = check_tokens(MAX_TOKENS if tokens is None else tokens)
        if curve is not None and (not isinstance(curve, dict) or not curve):
            raise InvalidInput("a prompt lookup curve must map row counts to milliseconds")
        super().__init__(pair, prompt, prompt_ids, sampling, max_new_tokens,
                         settings={"copy_tokens": self.max_tokens, "curve_source": curve_source}, graphs=graphs)
        self.curve = Curve(curve or {1: 1.0})   # sorted once: each step prices its copy's lengths on it
        self.overhead = step_overhead(curve_source if curve else "prior")
        self.vocab = pair.vocab_size
        self.index = NgramIndex(self.prompt_ids)
        self.rates = CopyRates()
        max_len = len(self.prompt_ids) + self.max_new_tokens + self.max_tokens
        self.forward = self._checkout(max_len)
        self.chains: dict[int, object] = {}   # copied tokens L -> the target's shape over L + 1 rows

    def _chain(self, length: int):
        """The target's forward over t0 and `length` copied tokens, causal, every row's logits."""
        shape = self.chains.get(length)
        if shape is None:
            rows = length + 1
            shape = self.chains[length] = self.forward.shape(
                ("chain", rows), write_offsets=list(range(rows)), position_offsets=list(range(rows)),
                block=torch.ones(rows, rows, dtype=torch.bool).tril(), rows=list(range(rows)))
        return shape

    # -- the step -----------------------------------------------------------------------------

    def _step(self) -> StepRecord:
        if not self.trace.steps:
            return self._prefill()
        committed = len(self.prompt_ids) + len(self.generated)
        room = self.max_new_tokens - len(self.generated) - 1   # tokens past the one the target adds anyway
        found = self.index.copies(min(self.max_tokens, room), 1) if room > 0 else []
        copy = found[0] if found else None
        length = best_length(self.curve, self.rates.reaches(copy), self.overhead) if copy else 0
        chain = list(copy.tokens[:length]) if copy else []
        timer = PhaseTimer(self.device)
        timer.start(PHASE_TARGET)
        ids = torch.tensor([self.index.text[-1], *chain], dtype=torch.long, device=self.device)
        logits = self._chain(length)(ids, committed - 1)[:length + 1, :self.vocab]
        timer.start(PHASE_VERIFY)
        if not chain:
            return self._plain(logits, timer)
        verdict, tests, target_p = self._verify(logits, ids)
        self.rates.update(copy, length, verdict.n_accepted)
        new_ids = verdict.tokens
        sources = [SOURCE_COPY] * verdict.n_accepted + [SOURCE_BONUS]
        payload = self._payload(ids.tolist(), verdict, tests, target_p)
        times = timer.stop()
        payload.verify_ms = round(times.get(PHASE_TARGET, 0.0) + times.get(PHASE_VERIFY, 0.0), 4)
        record = self._emit(new_ids, sources, length + 1, times, payload)
        self.index.extend(record.new_token_ids)
        return record

    def _prefill(self) -> StepRecord:
        """Step 0: the target reads the prompt and yields the first token, like autoregressive."""
        timer = PhaseTimer(self.device)
        timer.start(PHASE_TARGET)
        ids = torch.tensor([self.prompt_ids], dtype=torch.long, device=self.device)
        logits = self.forward.prefill(ids)
        timer.start(PHASE_VERIFY)
        return self._plain(logits.reshape(-1, logits.shape[-1])[-1:, :self.vocab], timer, len(self.prompt_ids))

    def _plain(self, logits: torch.Tensor, timer: PhaseTimer, n_in: int = 1) -> StepRecord:
        """No copy to verify: the target's next token from its last row, as `ar` takes it."""
        token, has_mass = draw_token(logits[-1:], self.sampling, self.generator)
        read = torch.cat([token.view(1).double()] + ([has_mass.view(1).double()] if has_mass is not None else [])
                         ).tolist()
        if len(read) > 1 and not read[1]:
            raise ValueError(NO_MASS)
        record = self._emit([int(read[0])], [SOURCE_AR], n_in, timer.stop())
        self.index.extend(record.new_token_ids)
        return record

    def _verify(self, logits: torch.Tensor, ids: torch.Tensor):
        """Lookahead's verdict over the one copied candidate, its tests and the target's P of each copied token,
        in one read."""
        length = ids.numel() - 1
        # The target's own confidence (temperature 1) in each copied token, for the tree's labels.
        _, best, norms = logit_summary(logits, 1)
        target_p = (logits[:-1].gather(1, ids[1:].view(-1, 1)).view(-1).float() - norms[:-1]).exp()
        tries = None
        if self.sampling.greedy and self.host_reads_free:   # the same values, the rule followed on the host
            preds = best[:, 0].tolist()
            read = greedy_verdict_on_host([ids.tolist()[1:]], 1, preds[0], [preds[1:]], length) + target_p.tolist()
        else:
            candidate, valid = ids[1:].view(1, length), torch.ones(1, dtype=torch.bool, device=self.device)
            if self.sampling.greedy:
                preds = best[:, 0]
                verdict = greedy_verdict(candidate, valid, preds[0], preds[1:].view(1, length))
            else:
                probs = probs_from_logits(logits, self.sampling)
                uniforms = torch.rand(length, 1, generator=self.generator, device=self.device, dtype=torch.float64)
                verdict, tries = sampled_verdict(candidate, valid, probs, uniforms, self.generator,
                                                 prune=self.host_reads_free)
            parts = [verdict.double(), target_p.double()] + ([tries.flatten()] if tries is not None else [])
            read = torch.cat(parts).tolist()
        width = verdict_width(1, length)
        found = unpack([int(v) for v in read[:width]], 1, length)
        target_p = read[width:width + length]
        if tries is None:
            tests = [(p, None) for p in greedy_tries(found.match_lengths, length)[0]]
        else:
            probs_tried, draws = read[width + length:width + 2 * length], read[width + 2 * length:]
            tests = [(None, None) if p == NOT_TRIED else (p, u) for p, u in zip(probs_tried, draws)]
        return found, tests, target_p

    # -- the trace ---------------------------------------------------------------------------------

    def _payload(self, ids: list[int], verdict, tests, target_p: list[float]) -> TreePayload:
        """The step as a chain the tree view draws: the root (t0), then each copied token, accepted up to the
        verdict's count, the first rejected one after them, the rest never reached."""
        accepted = verdict.n_accepted
        nodes = [TreeNode(id=0, parent=-1, depth=0, token_id=ids[0], text=self._text(ids[0]), draft_prob=1.0,
                          target_prob=1.0, status="root", draft_input="", origin=ORIGIN_COPY)]
        for j, token in enumerate(ids[1:], 1):
            status = "accepted" if j <= accepted else "rejected" if j == accepted + 1 else "not_reached"
            accept_prob, uniform = tests[j - 1] if status != "not_reached" else (None, None)
            # A one-hot q: the test saw P'(x) = the target's P at the sampling temperature and q'(x) = 1.
            tested = {} if accept_prob is None or uniform is None else {"tested_p": accept_prob, "tested_q": 1.0}
            nodes.append(TreeNode(
                id=j, parent=j - 1, depth=j, token_id=token, text=self._text(token), draft_prob=1.0,
                target_prob=round(target_p[j - 1], 6), status=status, draft_input="", origin=ORIGIN_COPY,
                accept_prob=accept_prob, uniform=uniform, **tested))
        bonus = verdict.tokens[-1]
        return TreePayload(nodes=nodes, accepted_path=list(range(1, accepted + 1)), bonus_token_id=bonus,
                           bonus_text=self._text(bonus), budget=len(nodes), depth=len(nodes) - 1,
                           draft_ms=0.0, verify_ms=0.0)

    def close(self) -> None:
        self.forward = None
        self.chains.clear()
        super().close()
