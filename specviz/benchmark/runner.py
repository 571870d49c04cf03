"""`python -m specviz bench`: every prompt through every method, in one process.

Models are loaded once, every method is warmed up, and methods are interleaved
per prompt (in a rotating order) so that machine noise (the machines are
shared) hits all of them alike. Every method is timed the same way: wall time
around the whole call, building the decoder included for ours and `generate`
for transformers' peers (`hf-*`), whose target forwards are counted by a
forward hook on the target.

Methods are method specs (`specviz.methodspec`): a name may carry fixed sizes,
`sequoia@32x6` (tree budget x depth), `lookahead@5x4x5` (window x n-gram x guesses) or
`sequoia@adaptive` (`=0.03`: its threshold); `--sweep` adds a few of each, for the
tokens/s-against-size figure of the report. Sizes never change the draft.

A spec may also name another draft for the same target after a `+`:
`sequoia+independent` runs Sequoia with the offline default's independent
(layer-pruned, distilled) draft while plain `sequoia` (and `sequoia@32x6`) uses the
command's draft (the feature draft on the offline default), so one run compares both
drafts; the second draft shares the loaded target. Every record names the draft it ran.
`hf-assisted` needs a transformers model as its assistant, so with a feature draft it
uses the independent draft (and its records say so). `hf-static` is `generate` with a
static cache, which transformers compiles on CUDA and runs uncompiled on a CPU.

Graphs (`--graphs auto|on|off`, docs/graphs.md): our decoders get the setting; each record
keeps the run's `trace.graphs` (whether the static step ran, whether CUDA graphs replayed it,
shapes captured, capture ms). Capture is a one-off cost, so tokens/s is the steady rate
(wall time less this run's capture) and the capture is reported beside it: each method's
rows say which path ran (`graphs`) and what its capture cost (`capture_ms`, the warm-up's
included, where most shapes are captured).
"""

from __future__ import annotations

import copy
import statistics
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from ..engine.lean import attention_kernels
from ..engine.methods import decoder_class, make_decoder
from ..engine.models import ModelPair
from ..engine.profiler import load_cached, save_cached
from ..engine.sampling import SamplingConfig
from ..engine.text import encode_prompt
from ..errors import InvalidInput
from ..methods import args_module, baseline, sized
from ..methodspec import HF_METHODS, LLAMA_METHODS, MethodSpec, parse_spec
from ..runtime.race import graphs_path

# The peers' knobs when no tuning has been run (`--tune` measures and caches better ones).
# num_assistant_tokens: transformers' own default is 20 with a 0.4 confidence cut; a
# constant short draft without the cut is the fair baseline for a small draft.
HF_DEFAULTS = {"assistant_tokens": 5, "assistant_confidence": 0.0, "prompt_lookup_tokens": 10}
TUNE_ASSISTANT_TOKENS = (2, 3, 4, 6, 8)
TUNE_ASSISTANT_CONFIDENCE = (0.0, 0.4)
TUNE_PROMPT_LOOKUP_TOKENS = (2, 3, 5, 10)


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
    forward_sizes: list[int] = field(default_factory=list)  # tokens the target took per forward, after prefill
    draft: str | None = None        # the draft model that ran (its display name); None for a method with no draft
    draft_kind: str | None = None   # its short name: feature / independent / self / the model id
    graphs: dict | None = None      # our decoders' `trace.graphs` (`GraphStats.to_dict`); None for transformers'
    capture_ms: float = 0.0         # graph capture during this run (left out of tokens_per_second)
    agreement_with_ar: int | None = None   # greedy: leading tokens equal to ar's (None: not compared)

    @property
    def tokens_per_forward(self) -> float:
        return len(self.token_ids) / self.target_forwards if self.target_forwards else 0.0

    @property
    def accepted_length(self) -> float:
        """Mean tokens committed per decoding forward (the prefill forward yields one token)."""
        if self.target_forwards <= 1:
            return float(len(self.token_ids))
        return (len(self.token_ids) - 1) / (self.target_forwards - 1)

    @property
    def forward_size(self) -> float:
        """Median tokens the target processed per decoding forward (1 for plain decoding)."""
        return statistics.median(self.forward_sizes) if self.forward_sizes else 1.0

    def to_dict(self) -> dict:
        return {**self.__dict__, "new_tokens": len(self.token_ids), "tokens_per_forward": self.tokens_per_forward,
                "accepted_length": self.accepted_length, "forward_size": self.forward_size}


def draft_kind(pair: ModelPair) -> str:
    """A pair's draft in a word: self, feature, independent, or (a draft model of its own) its name."""
    from ..engine.models import offline_default_draft_dir

    if pair.draft_is_target:
        return "self"
    if getattr(pair.draft, "is_feature_draft", False):
        return "feature"
    independent = offline_default_draft_dir()
    if pair.draft_dir is not None and independent is not None and Path(pair.draft_dir) == Path(independent):
        return "independent"
    return pair.draft_name


def pair_with_draft(pair: ModelPair, draft: str | None) -> ModelPair:
    """The pair with the draft a spec names (same target object), cached on the pair; None: the pair itself."""
    if draft is None or draft_kind(pair) == draft:
        return pair
    key = ("draft", draft)
    if key not in pair.loaded_beside:
        pair.loaded_beside[key] = _load_named_draft(pair, draft)
    return pair.loaded_beside[key]


def _load_named_draft(pair: ModelPair, draft: str) -> ModelPair:
    from ..engine.drafts import draft_format
    from ..engine.models import DEFAULT_DISPLAY_NAME, offline_default_draft_dir, offline_feature_draft_dir

    if draft == "self":
        return ModelPair(pair.target, pair.target, pair.tokenizer, pair.target_name, pair.target_name + " (self)",
                         pair.device, pair.dtype)
    if pair.target_name != DEFAULT_DISPLAY_NAME:
        raise InvalidInput(f"the {draft} draft is trained for the offline default, not {pair.target_name}")
    where = offline_default_draft_dir() if draft == "independent" else offline_feature_draft_dir()
    if where is None:
        shipped = "draft-smollm2-135m" if draft == "independent" else "draft-feature-smollm2-135m"
        raise InvalidInput(f"no {draft} draft is shipped (assets/{shipped})")
    fmt = draft_format(draft)
    return ModelPair(pair.target, fmt.load(pair.target, where), pair.tokenizer, pair.target_name,
                     fmt.display_name(where), pair.device, pair.dtype, where)


def check_methods(methods: list[str]) -> None:
    for m in methods:
        base = parse_spec(m).method
        if base in LLAMA_METHODS:
            from .peers import llama_cpp_module

            llama_cpp_module()   # an extra not installed fails here, before models load
        elif base not in HF_METHODS:
            decoder_class(base)  # a method not written yet fails here, before models load


def sweep_methods(methods: list[str]) -> list[str]:
    """The fixed-size variants `--sweep` adds for the methods asked for (each method's options' `SWEEP`)."""
    extra = [f"{m}@{sizes}" for m in methods for sizes in getattr(args_module(m), "SWEEP", ())]
    return [m for m in extra if m not in methods]


# -- transformers' own decoders, for comparison ------------------------------------------


class _ForwardCounter:
    """Counts target forwards and the tokens each one processed."""

    def __init__(self, model):
        self.sizes: list[int] = []
        self._handle = model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, _module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.sizes.append(int(ids.shape[-1]) if ids is not None else 0)

    def close(self):
        self._handle.remove()


def assisted_pair(pair: ModelPair) -> ModelPair:
    """The pair whose draft assisted generation runs: a feature draft is no transformers model, so the
    offline default's independent draft stands in for it (and the records name that one)."""
    return pair_with_draft(pair, "independent") if getattr(pair.draft, "is_feature_draft", False) else pair


def _assistant(pair: ModelPair):
    """The draft for assisted generation, as a module distinct from the target.

    With the target as its own draft, the forward hook on the target would count the
    draft's forwards too, so the draft becomes a second module sharing the same weights.
    """
    pair = assisted_pair(pair)
    if not pair.draft_is_target:
        return pair.draft
    clone = getattr(pair, "_bench_assistant", None)
    if clone is None:
        # A shallow copy shares every submodule (and so every weight and buffer); only the
        # top-level hook tables and generation_config are its own.
        clone = copy.copy(pair.target)
        for name in ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
                     "_forward_hooks_with_kwargs", "_forward_hooks_always_called"):
            setattr(clone, name, OrderedDict())
        clone.generation_config = copy.deepcopy(pair.target.generation_config)
        pair._bench_assistant = clone  # noqa: SLF001 - one clone per loaded pair
    return clone


def hf_settings(method: str, options: dict) -> dict:
    """The peer's knobs: explicit options, else the cached tuning, else HF_DEFAULTS."""
    if method == "hf-assisted":
        return {"num_assistant_tokens": int(options.get("assistant_tokens", HF_DEFAULTS["assistant_tokens"])),
                "assistant_confidence_threshold": float(
                    options.get("assistant_confidence", HF_DEFAULTS["assistant_confidence"])),
                "num_assistant_tokens_schedule": "constant"}
    if method == "hf-prompt-lookup":
        return {"prompt_lookup_num_tokens": int(
            options.get("prompt_lookup_tokens", HF_DEFAULTS["prompt_lookup_tokens"]))}
    if method == "hf-static":
        # One cache length for every prompt of a run (run_bench sets it), so that on CUDA transformers
        # compiles once, in the warm-up, rather than again for each prompt length.
        return {"cache_implementation": "static", "max_cache_len": options.get("max_cache_len")}
    return {}


def run_hf(method: str, pair: ModelPair, prompt_ids: list[int], sampling: SamplingConfig,
           max_new_tokens: int, options: dict) -> tuple[list[int], list[int], float, dict]:
    settings = hf_settings(method, options)
    kwargs: dict = {"do_sample": not sampling.greedy}
    if not sampling.greedy:
        kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k or None)
    if method == "hf-assisted":
        kwargs["assistant_model"] = assistant = _assistant(pair)
        # The knobs of assisted generation live on the draft's generation_config.
        for name, value in settings.items():
            setattr(assistant.generation_config, name, value)
    else:
        kwargs.update({k: v for k, v in settings.items() if v is not None})
    ids = torch.tensor([prompt_ids], device=pair.device)
    if sampling.seed is not None:
        torch.manual_seed(sampling.seed)
    # No hook on hf-static's target: on CUDA transformers compiles the call, and a Python hook inside it
    # would be compiled too. Plain decoding's forwards are known anyway: the prefill, then one per token.
    counter = _ForwardCounter(pair.target) if method != "hf-static" else None
    try:
        # The peers run under the same attention kernels as our decoders, so a comparison on CUDA
        # is not skewed by cuDNN's per-shape plans (engine.lean.attention_backends).
        with torch.inference_mode(), attention_kernels(pair.device):
            if pair.device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            out = pair.target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                       pad_token_id=pair.tokenizer.eos_token_id, **kwargs)
            if pair.device.type == "cuda":
                torch.cuda.synchronize()
            wall = time.perf_counter() - start
    finally:
        if counter is not None:
            counter.close()
    tokens = out[0, len(prompt_ids):].tolist()
    settings = {**{k: v for k, v in kwargs.items() if k != "assistant_model"}, **settings}
    if "assistant_model" in kwargs:
        settings["assistant"] = assisted_pair(pair).draft_name
    if method == "hf-static":
        # transformers compiles the forward only on CUDA-like devices (GenerationMixin._valid_auto_compile_criteria)
        settings["compiled"] = "_compiled_call" in pair.target.__dict__ and pair.device.type != "cpu"
        return tokens, [len(prompt_ids)] + [1] * (len(tokens) - 1), wall, settings
    return tokens, counter.sizes, wall, settings


# -- the benchmark -----------------------------------------------------------------------


def run_one(method: str, pair: ModelPair, item: dict, prompt_ids: list[int], sampling: SamplingConfig,
            max_new_tokens: int, options: dict, graphs: str = "auto") -> BenchRecord:
    spec = parse_spec(method)
    base, sizes = spec.method, spec.sizes
    pair = pair_with_draft(pair, spec.draft)
    ran = _drafted_by(spec, pair)
    drafted = {"draft": ran.draft_name, "draft_kind": draft_kind(ran)} if ran is not None else {}
    if base in HF_METHODS or base in LLAMA_METHODS:   # the peers: (tokens, tokens per forward, wall, settings)
        if base in HF_METHODS:
            tokens, forward_sizes, wall, settings = run_hf(base, pair, prompt_ids, sampling, max_new_tokens,
                                                           options.get(base, {}))
        else:
            from .peers import run_llama

            tokens, forward_sizes, wall, settings = run_llama(base, pair, prompt_ids, max_new_tokens,
                                                              options.get(base, {}))
        text = pair.tokenizer.decode(tokens, skip_special_tokens=True)
        return BenchRecord(item["id"], item["suite"], method, tokens, text, len(forward_sizes), wall,
                           len(tokens) / wall if wall > 0 else 0.0, settings, forward_sizes=forward_sizes[1:],
                           **drafted)
    kwargs = {**options.get(base, {}), **sizes}
    if pair.device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    decoder = make_decoder(base, pair, item["prompt"], sampling=sampling, max_new_tokens=max_new_tokens,
                           prompt_ids=prompt_ids, graphs=graphs, **kwargs)
    trace = decoder.run()
    wall = time.perf_counter() - start
    n = len(trace.token_ids)
    capture_ms = float((trace.graphs or {}).get("capture_ms") or 0.0)
    steady = wall - capture_ms / 1000.0   # the steady rate: capture is a one-off, reported on its own
    return BenchRecord(item["id"], item["suite"], method, trace.token_ids, trace.text, trace.target_forwards,
                       wall, n / steady if steady > 0 else 0.0, trace.settings,
                       [s.to_dict() for s in trace.steps],
                       forward_sizes=[s.tokens_processed for s in trace.steps[1:]], **drafted,
                       graphs=trace.graphs, capture_ms=capture_ms)


def _drafted_by(spec: MethodSpec, pair: ModelPair) -> ModelPair | None:
    """The pair whose draft the spec runs on `pair` (None for a method that runs no draft)."""
    if not spec.drafts:
        return None
    return assisted_pair(pair) if spec.method == "hf-assisted" else pair


class PauseWatch:
    """Notices when this process was stopped or starved (a watchdog thread that wakes every 10 ms sees a gap).

    On a shared machine another job may SIGSTOP niced processes or take the cores for a
    while; a run that overlapped such a gap has a wall time that says nothing about the
    method, so `run_bench` runs it again.
    """

    GAP_S = 0.25

    def __init__(self):
        self.paused_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        last = time.perf_counter()
        while not self._stop.wait(0.01):
            now = time.perf_counter()
            if now - last > self.GAP_S:
                self.paused_s += now - last
            last = now

    def take(self) -> float:
        value, self.paused_s = self.paused_s, 0.0
        return value

    def close(self) -> None:
        self._stop.set()


def run_bench(pair: ModelPair, prompts: list[dict], methods: list[str], sampling: SamplingConfig,
              max_new_tokens: int, options: dict | None = None,
              progress: Callable[[str], None] = print, warmup_tokens: int | None = None,
              repeats: int = 1, graphs: str = "auto") -> list[BenchRecord]:
    """Every prompt through every method; with `repeats` > 1 each (prompt, method) runs that many
    times, the methods interleaved round after round, and the run of median speed is kept (a
    shared machine's slow spell then moves one of a method's runs, not its figure). `graphs` goes to
    our decoders; the warm-up's capture is kept in each method's first record (`warmup_capture_ms`)."""
    options = options or {}
    check_methods(methods)
    if repeats < 1:
        raise InvalidInput(f"--repeats must be at least 1, got {repeats}")
    encoded = [encode_prompt(pair.tokenizer, p["prompt"]) for p in prompts]
    if any(parse_spec(m).method == "hf-static" for m in methods):
        longest = max(len(ids) for ids in encoded) + max_new_tokens
        options = {**options, "hf-static": {**options.get("hf-static", {}), "max_cache_len": longest}}
    peers = [m for m in methods if parse_spec(m).method in LLAMA_METHODS]
    if peers:
        from .peers import check_peer, context_length

        check_peer(pair, sampling, progress)
        # One context for every prompt, so each peer's model is loaded once (in the warm-up, not timed).
        n_ctx = context_length(max(len(ids) for ids in encoded), max_new_tokens)
        options = {**options, **{m: {**options.get(m, {}), "n_ctx": n_ctx} for m in peers}}
    # Warm up on a full-length run: the first forwards at each new cache length are
    # slower (allocator, kernel choice), and that must not be charged to one method.
    warm = min(max_new_tokens, warmup_tokens if warmup_tokens is not None else 32)
    progress(f"warm-up ({warm} tokens): {', '.join(methods)}")
    warmups = {method: run_one(method, pair, prompts[0], encoded[0], sampling, warm, options, graphs)
               for method in methods}
    records: list[BenchRecord] = []
    watch = PauseWatch()
    for i, (item, ids) in enumerate(zip(prompts, encoded)):
        runs: dict[str, list[BenchRecord]] = {m: [] for m in methods}
        for r in range(repeats):
            # Rotate the order per prompt and round so no method always runs first (or last) after a pause.
            k = (i + r) % len(methods)
            for method in methods[k:] + methods[:k]:
                runs[method].append(_unstalled_run(method, pair, item, ids, sampling, max_new_tokens, options,
                                                   watch, progress, graphs))
        by_method = {m: _median_run(runs[m]) for m in methods}
        if i == 0:
            for m, rec in by_method.items():
                rec.settings = {**rec.settings, "warmup_capture_ms": warmups[m].capture_ms,
                                "warmup_graphs": warmups[m].graphs}
        if baseline() in by_method and sampling.greedy:
            # Every repeat counts: an output that differs from ar's in one run of several is not the same.
            for m, rec in by_method.items():
                rec.same_as_ar = all(r.token_ids == by_method[baseline()].token_ids for r in runs[m])
                rec.agreement_with_ar = min(leading_agreement(r.token_ids, by_method[baseline()].token_ids)
                                            for r in runs[m])
        records += [by_method[m] for m in methods]
        progress(f"[{i + 1}/{len(prompts)}] {item['id']}: " + "  ".join(
            f"{m} {by_method[m].tokens_per_second:.1f}" for m in methods) + " tokens/s")
    watch.close()
    return records


def leading_agreement(tokens: list[int], ar_tokens: list[int]) -> int:
    """How many leading tokens equal ar's, up to the first that differs (greedy agreement)."""
    return next((n for n, (mine, theirs) in enumerate(zip(tokens, ar_tokens)) if mine != theirs),
                min(len(tokens), len(ar_tokens)))


def format_agreement(records: list[BenchRecord], methods: list[str]) -> str:
    """Per prompt, each method's leading tokens equal to ar's out of ar's tokens ('' when none was compared,
    or when every method wrote ar's output)."""
    compared = [r for r in records if r.agreement_with_ar is not None and r.method != baseline()]
    if not compared or all(r.same_as_ar for r in compared):
        return ""
    others = [m for m in methods if m != baseline()]
    ar_len = {r.prompt_id: len(r.token_ids) for r in records if r.method == baseline()}
    cell = {(r.prompt_id, r.method): r.agreement_with_ar for r in compared}
    width = max(len(m) for m in others) + 1
    lines = ["agreement with ar (leading tokens equal to ar's / ar's tokens), per prompt:",
             f"{'prompt':<24}" + "".join(f"{m:>{max(width, 9)}}" for m in others)]
    for pid in ar_len:
        lines.append(f"{pid:<24}" + "".join(
            f"{(f'{cell[(pid, m)]}/{ar_len[pid]}' if (pid, m) in cell else '-'):>{max(width, 9)}}" for m in others))
    return "\n".join(lines)


def _unstalled_run(method: str, pair: ModelPair, item: dict, ids: list[int], sampling: SamplingConfig,
                   max_new_tokens: int, options: dict, watch: "PauseWatch",
                   progress: Callable[[str], None], graphs: str = "auto") -> BenchRecord:
    """One timed run; a run the process was stopped or starved during is run again (up to 3 times)."""
    for attempt in range(4):
        watch.take()
        rec = run_one(method, pair, item, ids, sampling, max_new_tokens, options, graphs)
        paused = watch.take()
        if paused == 0.0:
            break
        progress(f"  {item['id']} {method}: the process stalled {paused:.1f} s during the run; again")
    rec.settings = {**rec.settings, "stalled_reruns": attempt, "stalled_s_last": round(paused, 3)}
    return rec


def _median_run(runs: list[BenchRecord]) -> BenchRecord:
    """The run of median tokens/s (the lower middle of an even count), with every run's speed beside it."""
    ranked = sorted(runs, key=lambda r: r.tokens_per_second)
    rec = ranked[(len(ranked) - 1) // 2]
    if len(runs) > 1:
        rec.settings = {**rec.settings, "repeat_tokens_per_second": [round(r.tokens_per_second, 2) for r in runs],
                        "repeat_stalled_reruns": [r.settings["stalled_reruns"] for r in runs]}
    return rec


# -- tuning the peers --------------------------------------------------------------------


def tune_key(pair: ModelPair, sampling: SamplingConfig) -> str:
    return f"{pair.key}|{'greedy' if sampling.greedy else 'sampled'}"


def tuned_options(pair: ModelPair, sampling: SamplingConfig) -> dict:
    """The peers' knobs chosen by an earlier `--tune` for this pair, or {}."""
    cached = load_cached("hf-tuning", tune_key(pair, sampling))
    return cached["options"] if cached else {}


def tune_hf(pair: ModelPair, prompts: list[dict], sampling: SamplingConfig, max_new_tokens: int,
            methods: list[str], progress: Callable[[str], None] = print) -> dict:
    """Grid-search the peers' knobs on `prompts` (median tokens/s) and cache the winners."""
    encoded = [encode_prompt(pair.tokenizer, p["prompt"]) for p in prompts]
    grids = {}
    if "hf-assisted" in methods:
        grids["hf-assisted"] = [{"assistant_tokens": k, "assistant_confidence": c}
                                for k in TUNE_ASSISTANT_TOKENS for c in TUNE_ASSISTANT_CONFIDENCE]
    if "hf-prompt-lookup" in methods:
        grids["hf-prompt-lookup"] = [{"prompt_lookup_tokens": k} for k in TUNE_PROMPT_LOOKUP_TOKENS]
    chosen, results = {}, {}
    for method, grid in grids.items():
        run_one(method, pair, prompts[0], encoded[0], sampling, min(16, max_new_tokens),
                {method: grid[0]})
        scores = []
        for opts in grid:
            tps = [run_one(method, pair, item, ids, sampling, max_new_tokens, {method: opts}).tokens_per_second
                   for item, ids in zip(prompts, encoded)]
            scores.append((statistics.median(tps), opts))
            progress(f"tune {method} {opts}: {scores[-1][0]:.1f} tokens/s")
        chosen[method] = max(scores, key=lambda s: s[0])[1]
        results[method] = [{"options": o, "tokens_per_second": t} for t, o in scores]
    merged = {**tuned_options(pair, sampling), **chosen}
    save_cached("hf-tuning", tune_key(pair, sampling),
                {"options": merged, "results": results, "prompts": [p["id"] for p in prompts],
                 "max_new_tokens": max_new_tokens})
    return merged


# -- summary -----------------------------------------------------------------------------


def _spread(values: list[float]) -> tuple[float, float, float]:
    """Median and the 25th/75th percentiles (min/max below four values)."""
    values = sorted(values)
    if len(values) < 4:
        return statistics.median(values), values[0], values[-1]
    q = statistics.quantiles(values, n=4)
    return q[1], q[0], q[2]


def summarise(records: list[BenchRecord], methods: list[str]) -> list[dict]:
    """Per suite and method: tokens/s, speedup over ar (per prompt), tokens per forward, acceptance."""
    rows = []
    suites = sorted({r.suite for r in records}) + ["all"]
    for suite in suites:
        chosen = [r for r in records if suite == "all" or r.suite == suite]
        ar_tps = {r.prompt_id: r.tokens_per_second for r in chosen if r.method == baseline()}
        for method in methods:
            recs = [r for r in chosen if r.method == method]
            if not recs:
                continue
            tps, tps_lo, tps_hi = _spread([r.tokens_per_second for r in recs])
            speedups = [r.tokens_per_second / ar_tps[r.prompt_id] for r in recs if ar_tps.get(r.prompt_id)]
            speed = _spread(speedups) if speedups else (None, None, None)
            same = [r.same_as_ar for r in recs if r.same_as_ar is not None]
            rows.append({
                "suite": suite, "method": method, "prompts": len(recs),
                "tokens_per_second": tps, "tokens_per_second_q1": tps_lo, "tokens_per_second_q3": tps_hi,
                "speedup_vs_ar": speed[0], "speedup_q1": speed[1], "speedup_q3": speed[2],
                "tokens_per_forward": statistics.median(r.tokens_per_forward for r in recs),
                "accepted_length": statistics.mean(r.accepted_length for r in recs),
                "forward_size": statistics.median(r.forward_size for r in recs),
                "same_as_ar": f"{sum(same)}/{len(same)}" if same else None,
                "draft": _one_draft(recs), "note": _note(recs), **graphs_summary(recs),
                **_tree_summary(recs),
            })
    return rows


def _one_draft(recs: list[BenchRecord]) -> str | None:
    """The draft a method's records ran (one per spec; several would be a bug, so they are all shown)."""
    kinds = list(dict.fromkeys(r.draft_kind for r in recs if r.draft_kind))
    return "/".join(kinds) if kinds else None


def _note(recs: list[BenchRecord]) -> str | None:
    if parse_spec(recs[0].method).method != "hf-static":
        return None
    compiled = any((r.settings or {}).get("compiled") for r in recs)
    return "compiled by transformers" if compiled else "uncompiled (transformers compiles only on CUDA)"


def graphs_summary(recs: list[BenchRecord]) -> dict:
    """Which path a method's runs took ("graphs": replayed / static-eager / off / compiled / -: the race's
    `graphs_path`, a failed capture and the static step alike static-eager) and what graph capture cost them
    ("capture_ms": these runs' and their warm-up's, kept out of tokens/s)."""
    stats = [r.graphs for r in recs if r.graphs]
    if not stats:
        compiled = any((r.settings or {}).get("compiled") for r in recs)
        return {"graphs": "compiled" if compiled else "-", "capture_ms": None, "graph_shapes": None}
    label = {"replayed": "replayed", "off": "off"}.get(graphs_path(stats), "static-eager")
    capture = sum(r.capture_ms + float((r.settings or {}).get("warmup_capture_ms") or 0.0) for r in recs)
    shapes = max(g.get("shapes_captured", 0) + g.get("reused", 0) for g in stats)
    return {"graphs": label, "capture_ms": capture, "graph_shapes": shapes, "host_ms_per_step": _host_share(recs)}


def _host_share(recs: list[BenchRecord]) -> float | None:
    """Median ms per step outside the replays (wall less capture less the replays' GPU time, per target
    forward): the host's loop and the eager ops between graphs, which replays cannot hide. None unless
    graphs replayed."""
    shares = [(r.wall_seconds * 1000 - r.capture_ms - r.graphs["replay_ms"]) / max(1, r.target_forwards)
              for r in recs if r.graphs and r.graphs.get("replays") and "replay_ms" in r.graphs]
    return statistics.median(shares) if shares else None


def _tree_summary(recs: list[BenchRecord]) -> dict:
    """Which tree ran (Sequoia's `auto` may run its DP tree or the adaptive one) and its mean depth per step; {}
    for a method that sizes no tree."""
    settings = recs[0].settings or {}
    if "tree_budget" not in settings:
        return {}
    chosen = " (auto)" if settings.get("tree") == "auto" or settings.get("tree_sizing") == "auto" else ""
    label = (f"adaptive<={settings.get('tree_budget')}" if settings.get("tree") == "adaptive"
             else f"{settings.get('tree_budget')}x{settings.get('tree_depth')}") + chosen
    depths = [max((n["depth"] for n in (step.get("payload") or {}).get("nodes") or []), default=0)
              for r in recs for step in r.steps[1:]]
    return {"tree": label, "tree_depth_mean": statistics.mean(depths) if depths else None}


# The printed table's columns and their widths, in the glossary's words (specviz.glossary; `bench` prints their
# definitions under the table, and a test checks each is defined).
TEXT_LAYOUT = (("suite", "<8"), ("method", "<20"), ("draft", "<11"), ("tokens/s", ">8"), ("IQR", ">13"),
               ("speedup", ">8"), ("IQR", ">11"), ("tokens per forward", ">18"), ("accepted length", ">15"),
               ("identical to ar", ">15"), ("graphs", ">12"), ("capture", ">9"))
TEXT_COLUMNS = tuple(name for name, _ in TEXT_LAYOUT)


def format_table(rows: list[dict]) -> str:
    header = " ".join(f"{name:{spec}}" for name, spec in TEXT_LAYOUT)
    lines = [header, "-" * len(header)]
    for r in rows:
        speed = f"{r['speedup_vs_ar']:.2f}x" if r["speedup_vs_ar"] is not None else "-"
        speed_iqr = (f"{r['speedup_q1']:.2f}-{r['speedup_q3']:.2f}" if r["speedup_vs_ar"] is not None else "-")
        capture = "-" if r.get("capture_ms") is None else f"{r['capture_ms']:.0f} ms"
        lines.append(f"{r['suite']:<8} {r['method']:<20} {r.get('draft') or '-':<11} {r['tokens_per_second']:>8.1f} "
                     f"{r['tokens_per_second_q1']:>6.1f}-{r['tokens_per_second_q3']:<6.1f} {speed:>8} "
                     f"{speed_iqr:>11} {r['tokens_per_forward']:>18.2f} {r['accepted_length']:>15.2f} "
                     f"{r['same_as_ar'] or '-':>15} {r.get('graphs') or '-':>12} {capture:>9}"
                     + (f"  {r['tree']}, depth {r['tree_depth_mean']:.1f}" if r.get("tree_depth_mean") else "")
                     + (f"  host {r['host_ms_per_step']:.2f} ms/step" if r.get("host_ms_per_step") is not None
                        else "")
                     + (f"  {r['note']}" if r.get("note") else ""))
    return "\n".join(lines)


# -- what ran where ----------------------------------------------------------------------


def machine_info(device: torch.device) -> dict:
    import platform

    import transformers

    from ..engine.machine import cpu_flags, cpu_model, cpu_words

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "threads": torch.get_num_threads(),
            "cpu": cpu_model(), "cpu_flags": cpu_flags(),
            # Figures differ by CPU (AMD EPYC vs Intel Xeon with AMX), so the model and flags print beside them.
            "machine": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_words()}


def method_drafts(pair: ModelPair, methods: list[str]) -> dict[str, str]:
    """Each drafting method's draft, by name, as its records name it."""
    drafts = {}
    for method in methods:
        spec = parse_spec(method)
        ran = _drafted_by(spec, pair_with_draft(pair, spec.draft))
        if ran is not None:
            drafts[method] = ran.draft_name
    return drafts


def run_info(pair: ModelPair, methods: list[str], sampling: SamplingConfig, max_new_tokens: int,
             options: dict, argv: list[str] | None = None, repeats: int = 1, graphs: str = "auto") -> dict:
    peers = {m: hf_settings(m, options.get(m, {})) for m in HF_METHODS if m in methods}
    if any(m in methods for m in LLAMA_METHODS):
        from .peers import run_info as llama_info

        peers.update({m: llama_info(m, options.get(m, {})) for m in LLAMA_METHODS if m in methods})
    return {"methods": methods, "max_new_tokens": max_new_tokens, "repeats": repeats, "sampling": sampling.to_dict(),
            "graphs": graphs,
            "target": pair.target_name, "draft": pair.draft_name, "drafts": method_drafts(pair, methods),
            "device": str(pair.device),
            "dtype": pair.precision, "precision_choice": getattr(pair, "precision_choice", ""),
            **machine_info(pair.device), "peer_settings": peers,
            "options": {m: o for m, o in options.items() if m in sized()},
            "command": " ".join(["python -m specviz", *(argv or [])[1:]]) if argv else None,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
