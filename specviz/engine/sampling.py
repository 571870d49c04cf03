"""Sampling settings and the target distribution they define.

Every decoder turns logits into probabilities with `probs_from_logits`, so that
"the distribution autoregressive sampling draws from" means one thing
everywhere. The order (temperature, then top-k, then top-p) and the tie rules
follow transformers' logits warpers, so our samplers and `model.generate`
agree on what is being sampled.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from ..draws import first_argmax, race_sample, sample_unchecked
from ..errors import InvalidInput

# Below this a temperature is greedy. logits / 1e-39 overflow float32 to inf and the softmax turns them to
# NaN, which the graphed sampler (`draws.race_sample`, no host read) would draw from unchecked. At 1e-4 two
# logits 0.01 apart already differ by e^100 in probability: the draw is the argmax but for exact ties.
MIN_TEMPERATURE = 1e-4


def floored_temperature(temperature: float) -> float:
    """The temperature decoders use: 0 (greedy) below `MIN_TEMPERATURE`, else as given."""
    return 0.0 if temperature < MIN_TEMPERATURE else temperature


@dataclass(frozen=True)
class SamplingConfig:
    """Temperature 0 (or below `MIN_TEMPERATURE`) means greedy (argmax); top_k 0 and top_p 1.0 mean no
    filtering."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        # The floor here too, so every sampling path (eager, graphed, a config never validated) agrees.
        return self.temperature < MIN_TEMPERATURE

    @property
    def mode(self) -> str:
        """What a step pays for and what sizing measures apart: 'greedy', 'sampled', or 'filtered'
        (top-p / top-k: a sort or a top-k over the vocabulary). The floats themselves do not change it."""
        if self.greedy:
            return "greedy"
        return "sampled" if self.top_p >= 1.0 and not self.top_k else "filtered"

    def to_dict(self) -> dict:
        return asdict(self)

    def validated(self) -> "SamplingConfig":
        temperature = _number("temperature", self.temperature)
        top_p = _number("top-p", self.top_p)
        if temperature < 0 or temperature > 100:
            raise InvalidInput(f"temperature must be between 0 (greedy) and 100, got {self.temperature}")
        if not (0 < top_p <= 1):
            raise InvalidInput(f"top-p must be in (0, 1], got {self.top_p}")
        top_k = _integer("top-k", self.top_k)
        if top_k < 0:
            raise InvalidInput(f"top-k must be 0 (off) or a positive integer, got {self.top_k}")
        seed = self.seed
        if seed is not None:
            seed = _integer("seed", seed)
            if not (0 <= seed < 2**63):
                raise InvalidInput(f"seed must be a non-negative integer below 2**63, got {self.seed}")
        return SamplingConfig(floored_temperature(float(temperature)), float(top_p), int(top_k), seed)


def _number(name: str, value) -> float:
    if isinstance(value, bool):
        raise InvalidInput(f"{name} must be a number, got {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"{name} must be a number, got {value!r}") from None
    if math.isnan(out) or math.isinf(out):
        raise InvalidInput(f"{name} must be a finite number, got {value!r}")
    return out


def _integer(name: str, value) -> int:
    if isinstance(value, bool):
        raise InvalidInput(f"{name} must be an integer, got {value!r}")
    if isinstance(value, float) and not value.is_integer():   # nan and inf too
        raise InvalidInput(f"{name} must be an integer, got {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"{name} must be an integer, got {value!r}") from None


def probs_from_logits(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Probabilities (float32) over the last dimension for non-greedy sampling."""
    scores = logits.float() / cfg.temperature
    vocab = scores.shape[-1]
    if 0 < cfg.top_k < vocab:
        kth = torch.topk(scores, cfg.top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if cfg.top_p < 1.0:
        sorted_scores, sorted_idx = torch.sort(scores, dim=-1, descending=False)
        cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
        remove_sorted = cumulative <= (1 - cfg.top_p)
        remove_sorted[..., -1:] = False  # always keep the most likely token
        remove = remove_sorted.scatter(-1, sorted_idx, remove_sorted)
        scores = scores.masked_fill(remove, float("-inf"))
    return scores.softmax(dim=-1)


def make_generator(seed: int | None, device: torch.device) -> torch.Generator:
    """A private random stream: runs with the same seed repeat, and runs never share state."""
    gen = torch.Generator(device=device)
    if seed is None:
        gen.seed()
    else:
        gen.manual_seed(seed)
    return gen


def next_token_on_device(logits: torch.Tensor, cfg: SamplingConfig,
                         generator: torch.Generator | None) -> torch.Tensor:
    """The next token from logits (..., V) with no host sync, for the static (graph) steps: greedy argmax, or
    `race_sample`, which is exact too but takes the random stream differently from `draws.sample_unchecked` (and
    skips the mass check, which would read the device)."""
    if cfg.greedy:
        return first_argmax(logits)
    return race_sample(probs_from_logits(logits, cfg), generator)


def draw_token(logits: torch.Tensor, cfg: SamplingConfig,
               generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`next_token`'s token (the same draw from the same stream) with no host read, and the sampler's
    mass check as a 0-d bool tensor (None when greedy) for the caller's one read to bring back."""
    if cfg.greedy:
        return first_argmax(logits), None
    return sample_unchecked(probs_from_logits(logits, cfg), generator)
