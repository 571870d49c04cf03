"""Measured forward costs: t(n), the time of one forward over n new tokens after a context.

Both speculative decoders size themselves from this curve (Sequoia's tree budget,
Lookahead's W, N, G), so it is measured once per (model, device, dtype, context)
and cached as JSON under the SpecViz cache directory.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

from ..paths import cache_dir
from .lean import lean_llama_supported, make_forward


def default_sizes(device: torch.device) -> list[int]:
    top = 1024 if device.type == "cuda" else 256
    sizes, n = [], 1
    while n <= top:
        sizes.append(n)
        n *= 2
    return sizes


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


@torch.inference_mode()
def measure_forward_times(model, sizes: list[int], context_len: int = 200, repeats: int = 5,
                          warmup: int = 2) -> dict[int, float]:
    """Median milliseconds of one forward over n new tokens (tree-style 4-D mask) after `context_len`.

    It times the forward the decoders run (`specviz.engine.lean.make_forward`: the lean
    Llama forward where it is exact, else transformers'), over every row's logits.
    """
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    context = torch.randint(0, vocab, (1, context_len), generator=gen).to(device)
    forward = make_forward(model, context_len + max(sizes))
    forward(context, 0)
    out: dict[int, float] = {}
    for n in sizes:
        tokens = torch.randint(0, vocab, (1, n), generator=gen).to(device)
        # The same kind of call the decoders make: explicit positions and an additive mask.
        mask = torch.zeros(1, 1, n, context_len + n, dtype=dtype, device=device)
        causal = torch.triu(torch.ones(n, n, dtype=torch.bool, device=device), diagonal=1)
        mask[0, 0, :, context_len:].masked_fill_(causal, torch.finfo(dtype).min)
        positions = torch.arange(context_len, context_len + n, device=device)
        times = []
        for i in range(warmup + repeats):
            _sync(device)
            start = time.perf_counter()
            forward(tokens, context_len, positions=positions, mask=mask, rows=n)
            _sync(device)
            if i >= warmup:
                times.append((time.perf_counter() - start) * 1000)
        out[n] = statistics.median(times)
    return out


def forward_kind(model) -> str:
    """Names what `measure_forward_times` times for this model, so a cached curve matches the code."""
    head = getattr(model, "lm_head", None)
    rows = getattr(head, "vocab_ids", None)
    kind = "lean" if lean_llama_supported(model) else "hf"
    return kind if rows is None else f"{kind}-head{int(rows.numel())}"


def _profile_path(kind: str, key: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in key)
    path = cache_dir() / "profiles"
    path.mkdir(parents=True, exist_ok=True)
    return path / f"{kind}-{safe}.json"


def load_cached(kind: str, key: str) -> dict | None:
    path = _profile_path(kind, key)
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None  # a damaged cache is re-measured, never fatal


def save_cached(kind: str, key: str, data: dict) -> None:
    path = _profile_path(kind, key)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def forward_curve(model, key: str, sizes: list[int] | None = None, context_len: int = 200,
                  refresh: bool = False) -> dict[int, float]:
    """t(n) in ms for `model`, cached under `key` (e.g. pair.key + ':target')."""
    device = next(model.parameters()).device
    sizes = sizes or default_sizes(device)
    cache_key = f"{key}-{forward_kind(model)}-ctx{context_len}"
    cached = None if refresh else load_cached("forward", cache_key)
    if cached and all(str(n) in cached["ms"] for n in sizes):
        return {n: float(cached["ms"][str(n)]) for n in sizes}
    curve = measure_forward_times(model, sizes, context_len)
    save_cached("forward", cache_key, {"key": key, "context_len": context_len,
                                       "ms": {str(n): v for n, v in curve.items()}})
    return curve
