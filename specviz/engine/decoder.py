"""The one interface all decoders implement.

A decoder is made for one prompt and advances one *step* at a time, where a step
is exactly one target forward (plus any drafting before it). Each step returns a
`StepRecord`; the decoder also keeps the whole `RunTrace`. Subclasses implement
`_step()` and report what they produced through `_emit()`, which applies the
stopping rules (EOS, max_new_tokens) uniformly, so no method can overshoot.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Callable

import torch

from ..errors import InvalidInput
from ..trace import RunTrace, StepRecord
from .graphs import capture_wanted, check_graphs, graphs_off_stats
from .models import ModelPair
from .sampling import SamplingConfig, make_generator
from .static import cache_capacity, checkout, release
from .text import Detokenizer


def validate_max_new_tokens(max_new_tokens, prompt_len: int, max_context: int) -> int:
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, float)) or (
            isinstance(max_new_tokens, float) and not max_new_tokens.is_integer()):
        raise InvalidInput(f"max new tokens must be a whole number, got {max_new_tokens!r}")
    max_new_tokens = int(max_new_tokens)
    if max_new_tokens <= 0:
        raise InvalidInput(f"max new tokens must be at least 1, got {max_new_tokens}")
    if prompt_len >= max_context:
        raise InvalidInput(
            f"the prompt is {prompt_len} tokens long, which fills the model's context of {max_context}")
    if prompt_len + max_new_tokens > max_context:
        raise InvalidInput(
            f"the prompt ({prompt_len} tokens) plus {max_new_tokens} new tokens exceeds the model's "
            f"context of {max_context}; ask for at most {max_context - prompt_len} new tokens")
    return max_new_tokens


class PhaseTimer:
    """Wall time per phase of one step.

    On a CPU, host clock readings. On CUDA, events recorded on the stream at each phase boundary and read
    once at `stop()`, which a step calls after its own host read (so the GPU has caught up and nothing
    waits): synchronising at every boundary instead would add three host syncs to every step and stop the
    host from queueing the next phase while the GPU runs this one.
    """

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.times: dict[str, float] = {}
        self._marks: list[tuple[str, object]] = []

    def _mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def start(self, phase: str) -> None:
        self._marks.append((phase, self._mark()))

    def stop(self) -> dict[str, float]:
        end = self._mark()
        if self.cuda:
            end.synchronize()
        for (phase, begin), (_, finish) in zip(self._marks, self._marks[1:] + [("__end__", end)]):
            elapsed = begin.elapsed_time(finish) if self.cuda else (finish - begin) * 1000
            self.times[phase] = self.times.get(phase, 0.0) + elapsed
        self._marks = []
        return self.times


class Decoder(ABC):
    method: str = "base"

    def __init__(self, pair: ModelPair, prompt: str, prompt_ids: list[int],
                 sampling: SamplingConfig, max_new_tokens: int, settings: dict | None = None,
                 graphs: str = "auto"):
        self.pair = pair
        self.device = pair.device
        # On a CPU nothing is captured and reading a tensor costs no sync: a step may follow its greedy verification
        # on the host (a handful of list operations where the device form runs ~20 small tensor ops), and a sampled
        # walk may skip the work it can see is moot.
        self.host_reads_free = self.device.type == "cpu"
        self.sampling = sampling.validated()
        self.prompt_ids = list(prompt_ids)
        self.max_new_tokens = validate_max_new_tokens(max_new_tokens, len(prompt_ids), pair.max_context)
        self.eos_ids = pair.eos_token_ids
        self.generator = None if self.sampling.greedy else make_generator(self.sampling.seed, pair.device)
        self.generated: list[int] = []
        self.done = False
        self.detok = Detokenizer(pair.tokenizer, self.prompt_ids)
        self._texts: dict[int, str] = {}
        self.trace = RunTrace(
            method=self.method, prompt=prompt, prompt_token_ids=self.prompt_ids,
            settings={"max_new_tokens": self.max_new_tokens, **self.sampling.to_dict(), **(settings or {}),
                      "graphs": check_graphs(graphs)},
            target_name=pair.target_name, draft_name=pair.draft_name,
            device=str(pair.device), dtype=pair.precision, graphs=graphs_off_stats())
        # Whether the step's shapes are captured as CUDA graphs (`graphs.capture_wanted`, the one place
        # that decides): a decoder checks out its static session with it and sets `self.graph_stats` to
        # the session's record.
        self.capture = capture_wanted(graphs, pair.device)
        self.graph_stats = self.session = None

    # -- the interface ---------------------------------------------------------------

    def step(self) -> StepRecord:
        """Advance by one target forward and return what happened."""
        if self.done:
            raise RuntimeError(f"{self.method}: step() called after the run finished")
        with torch.inference_mode():
            record = self._step()
        self.trace.steps.append(record)
        if self.graph_stats is not None:
            self.trace.graphs = self.graph_stats.to_dict()
        if record.finished:
            self.done = True
            self.trace.finish_reason = record.finish_reason
            self.close()
        return record

    def run(self, on_step: Callable[[StepRecord], None] | None = None) -> RunTrace:
        while not self.done:
            record = self.step()
            if on_step is not None:
                on_step(record)
        return self.trace

    def close(self) -> None:
        """Give the static session back (its graphs stay for the next run); a decoder drops its own per-run
        tensors first, so their memory is freed at once."""
        release(self.session)
        self.session = None

    @abstractmethod
    def _step(self) -> StepRecord:
        ...

    # -- helpers for subclasses ----------------------------------------------------------

    def _checkout(self, max_len: int):
        """This run's static session, for `max_len` slots (graphs an earlier run captured, where one is free),
        and the target's forward in it; the trace's graphs record is the session's."""
        self.session = checkout(self.pair.target, self.method, cache_capacity(max_len), self.capture)
        self.graph_stats = self.session.runner.stats
        return self.session.forward("target", self.pair.target)

    def _text(self, token_id: int) -> str:
        """One token's text for payloads (tree nodes, window cells); decoded once per run."""
        text = self._texts.get(token_id)
        if text is None:
            text = self._texts[token_id] = self.pair.tokenizer.decode([token_id])
        return text

    def _accept(self, candidate_ids: list[int]) -> tuple[list[int], str | None]:
        """Cut new tokens at EOS (kept, like `generate`) and at max_new_tokens."""
        room = self.max_new_tokens - len(self.generated)
        kept: list[int] = []
        reason = None
        for tok in candidate_ids[:room]:
            kept.append(tok)
            if tok in self.eos_ids:
                reason = "eos"
                break
        if reason is None and len(self.generated) + len(kept) >= self.max_new_tokens:
            reason = "length"
        return kept, reason

    def _emit(self, new_ids: list[int], sources: list[str], tokens_processed: int,
              time_ms: dict[str, float], payload=None) -> StepRecord:
        """Commit already-accepted tokens (after `_accept`) and build the step record."""
        kept, reason = self._accept(new_ids)
        self.generated.extend(kept)
        texts = self.detok.push_many(kept)
        return StepRecord(
            step=len(self.trace.steps), new_token_ids=kept, new_token_texts=texts,
            token_sources=list(sources[:len(kept)]), tokens_processed=tokens_processed,
            cumulative_tokens=len(self.generated), time_ms={k: round(v, 4) for k, v in time_ms.items()},
            payload=payload, finished=reason is not None, finish_reason=reason)
