"""`python -m specviz bench`: every prompt through every method, in one process.

Models are loaded once, every method is warmed up, and methods are interleaved
per prompt so that machine noise (the machines are shared) hits all of them
alike. Our own decoders are timed by their step records; transformers' peers
(`hf-*`) by wall time around `generate`, with their target forwards counted by a
forward hook on the target.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from .decoders import METHODS, make_decoder
from .errors import InvalidInput
from .models import ModelPair
from .sampling import SamplingConfig
from .text import encode_prompt

HF_METHODS = ("hf-generate", "hf-assisted", "hf-prompt-lookup")
ALL_METHODS = tuple(METHODS) + HF_METHODS


@dataclass
class BenchRecord:
    prompt_id: str
    suite: str
    method: str
    token_ids: list[int]
    text: str
    target_forwards: int
    wall_seconds: float
    tokens_per_second: float
    settings: dict = field(default_factory=dict)
    steps: list[dict] = field(default_factory=list)
    same_as_ar: bool | None = None

    @property
    def tokens_per_forward(self) -> float:
        return len(self.token_ids) / self.target_forwards if self.target_forwards else 0.0

    def to_dict(self) -> dict:
        data = dict(self.__dict__)
        data["new_tokens"] = len(self.token_ids)
        data["tokens_per_forward"] = self.tokens_per_forward
        return data


def read_prompts(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        raise InvalidInput(f"prompt file '{path}' does not exist")
    prompts = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
        if not isinstance(item, dict) or not isinstance(item.get("prompt"), str) or not item["prompt"].strip():
            raise InvalidInput(f"{path}:{lineno}: each line must be an object with a non-empty \"prompt\"")
        item.setdefault("id", f"{path.stem}-{lineno}")
        item.setdefault("suite", path.stem)
        prompts.append(item)
    if not prompts:
        raise InvalidInput(f"prompt file '{path}' holds no prompts")
    return prompts


def check_methods(methods: list[str]) -> list[str]:
    for m in methods:
        if m not in ALL_METHODS:
            raise InvalidInput(f"unknown method '{m}' (choose from {', '.join(ALL_METHODS)})")
    return methods


# -- transformers' own decoders, for comparison ------------------------------------------


class _ForwardCounter:
    def __init__(self, model):
        self.count = 0
        self._handle = model.register_forward_pre_hook(self._hook)

    def _hook(self, *_):
        self.count += 1

    def close(self):
        self._handle.remove()


def _hf_kwargs(method: str, pair: ModelPair, sampling: SamplingConfig, options: dict) -> dict:
    kwargs: dict = {"do_sample": not sampling.greedy}
    if not sampling.greedy:
        kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k or None)
    if method == "hf-assisted":
        # The knobs of assisted generation live on the draft's generation_config.
        gen_cfg = pair.draft.generation_config
        gen_cfg.num_assistant_tokens = int(options.get("assistant_tokens", 5))
        gen_cfg.num_assistant_tokens_schedule = options.get("assistant_schedule", "constant")
        gen_cfg.assistant_confidence_threshold = float(options.get("assistant_confidence", 0.0))
        kwargs["assistant_model"] = pair.draft
    elif method == "hf-prompt-lookup":
        kwargs["prompt_lookup_num_tokens"] = int(options.get("prompt_lookup_tokens", 10))
    return kwargs


def run_hf(method: str, pair: ModelPair, prompt_ids: list[int], sampling: SamplingConfig,
           max_new_tokens: int, options: dict) -> tuple[list[int], int, float, dict]:
    kwargs = _hf_kwargs(method, pair, sampling, options)
    ids = torch.tensor([prompt_ids], device=pair.device)
    if sampling.seed is not None:
        torch.manual_seed(sampling.seed)
    counter = _ForwardCounter(pair.target)
    try:
        with torch.inference_mode():
            if pair.device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            out = pair.target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                       pad_token_id=pair.tokenizer.eos_token_id, **kwargs)
            if pair.device.type == "cuda":
                torch.cuda.synchronize()
            wall = time.perf_counter() - start
    finally:
        counter.close()
    settings = {k: v for k, v in kwargs.items() if k != "assistant_model"}
    if method == "hf-assisted":
        settings.update(num_assistant_tokens=pair.draft.generation_config.num_assistant_tokens,
                        assistant_confidence_threshold=pair.draft.generation_config.assistant_confidence_threshold)
    return out[0, len(prompt_ids):].tolist(), counter.count, wall, settings


# -- the benchmark -----------------------------------------------------------------------


def run_one(method: str, pair: ModelPair, item: dict, prompt_ids: list[int], sampling: SamplingConfig,
            max_new_tokens: int, options: dict) -> BenchRecord:
    if method in HF_METHODS:
        tokens, forwards, wall, settings = run_hf(method, pair, prompt_ids, sampling, max_new_tokens, options)
        text = pair.tokenizer.decode(tokens, skip_special_tokens=True)
        return BenchRecord(item["id"], item["suite"], method, tokens, text, forwards, wall,
                           len(tokens) / wall if wall > 0 else 0.0, settings)
    decoder = make_decoder(method, pair, item["prompt"], sampling=sampling, max_new_tokens=max_new_tokens,
                           prompt_ids=prompt_ids, **options.get(method, {}))
    trace = decoder.run()
    return BenchRecord(item["id"], item["suite"], method, trace.token_ids, trace.text, trace.target_forwards,
                       trace.wall_seconds, trace.tokens_per_second, trace.settings,
                       [s.to_dict() for s in trace.steps])


def run_bench(pair: ModelPair, prompts: list[dict], methods: list[str], sampling: SamplingConfig,
              max_new_tokens: int, options: dict | None = None,
              progress: Callable[[str], None] = print) -> list[BenchRecord]:
    options = options or {}
    check_methods(methods)
    encoded = [encode_prompt(pair.tokenizer, p["prompt"]) for p in prompts]
    progress(f"warm-up: {', '.join(methods)}")
    for method in methods:
        run_one(method, pair, prompts[0], encoded[0], sampling, min(8, max_new_tokens), options)
    records: list[BenchRecord] = []
    for i, (item, ids) in enumerate(zip(prompts, encoded)):
        by_method = {}
        # Rotate the order per prompt so no method always runs first (or last) after a pause.
        order = methods[i % len(methods):] + methods[:i % len(methods)]
        for method in order:
            by_method[method] = run_one(method, pair, item, ids, sampling, max_new_tokens, options)
        if "ar" in by_method and sampling.greedy:
            for rec in by_method.values():
                rec.same_as_ar = rec.token_ids == by_method["ar"].token_ids
        for method in methods:
            records.append(by_method[method])
        progress(f"[{i + 1}/{len(prompts)}] {item['id']}: " + "  ".join(
            f"{m} {by_method[m].tokens_per_second:.1f} tok/s" for m in methods))
    return records


def summarise(records: list[BenchRecord], methods: list[str]) -> list[dict]:
    """Per suite and method: median tokens/s, speedup over ar (per prompt), tokens per forward."""
    rows = []
    suites = sorted({r.suite for r in records}) + ["all"]
    for suite in suites:
        chosen = [r for r in records if suite == "all" or r.suite == suite]
        ar_tps = {r.prompt_id: r.tokens_per_second for r in chosen if r.method == "ar"}
        for method in methods:
            recs = [r for r in chosen if r.method == method]
            if not recs:
                continue
            tps = [r.tokens_per_second for r in recs]
            speedups = [r.tokens_per_second / ar_tps[r.prompt_id] for r in recs if ar_tps.get(r.prompt_id)]
            same = [r.same_as_ar for r in recs if r.same_as_ar is not None]
            rows.append({
                "suite": suite, "method": method, "prompts": len(recs),
                "tokens_per_second": statistics.median(tps),
                "tokens_per_second_min": min(tps), "tokens_per_second_max": max(tps),
                "speedup_vs_ar": statistics.median(speedups) if speedups else None,
                "speedup_min": min(speedups) if speedups else None,
                "speedup_max": max(speedups) if speedups else None,
                "tokens_per_forward": statistics.median(r.tokens_per_forward for r in recs),
                "same_as_ar": f"{sum(same)}/{len(same)}" if same else None,
            })
    return rows


def format_table(rows: list[dict]) -> str:
    header = f"{'suite':<10} {'method':<18} {'tok/s':>8} {'speedup':>8} {'tok/fwd':>8} {'same':>6}"
    lines = [header, "-" * len(header)]
    for r in rows:
        speed = f"{r['speedup_vs_ar']:.2f}x" if r["speedup_vs_ar"] is not None else "-"
        lines.append(f"{r['suite']:<10} {r['method']:<18} {r['tokens_per_second']:>8.1f} {speed:>8} "
                     f"{r['tokens_per_forward']:>8.2f} {r['same_as_ar'] or '-':>6}")
    return "\n".join(lines)
