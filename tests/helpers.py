"""Shared test helpers: tiny random models with enumerable distributions, and the chi-square check.

Tiny models (vocabulary of a few tokens, two layers) make the exact
autoregressive distribution of the first few generated tokens computable by
enumeration, which is what the statistical exactness tests compare against.
That reference is independent of the package's own sampling code: float64
logits through transformers' temperature / top-k / top-p warpers, so a
decoder and its reference never share a bug in `probs_from_logits`.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager

import torch
from scipy import stats
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, TemperatureLogitsWarper,
                          TopKLogitsWarper, TopPLogitsWarper)

from specviz.engine.models import ModelPair
from specviz.engine.sampling import SamplingConfig


@contextmanager
def target_forward_rows():
    """The rows of every fixed-shape target forward run meanwhile (the static step's, the prefill aside), in
    order: what ran, read from the forward itself, to hold a trace's `tokens_processed` against."""
    from specviz.engine.static import StaticShape

    rows, run = [], StaticShape.__call__

    def recording(self, ids, origin):
        if self.key[0] == "target":
            rows.append(self.n)
        return run(self, ids, origin)

    StaticShape.__call__ = recording
    try:
        yield rows
    finally:
        StaticShape.__call__ = run


def tiny_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    vocab = {f"t{i}": i for i in range(vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def tiny_model(vocab_size: int = 6, seed: int = 0, layers: int = 2, logit_scale: float = 3.0) -> LlamaForCausalLM:
    """A random Llama whose next-token distributions are far from uniform (scaled logits)."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)
    model.generation_config.eos_token_id = None
    model.generation_config.bos_token_id = None
    model.generation_config.pad_token_id = None
    return model.float().eval()


def tiny_pair(vocab_size: int = 6, target_seed: int = 0, draft_seed: int | None = 1,
              logit_scale: float = 3.0) -> ModelPair:
    """Target and a deliberately different draft (draft_seed=None: the target drafts for itself)."""
    target = tiny_model(vocab_size, target_seed, logit_scale=logit_scale)
    draft = target if draft_seed is None else tiny_model(vocab_size, draft_seed, layers=1, logit_scale=logit_scale)
    return ModelPair(target, draft, tiny_tokenizer(vocab_size), f"tiny-{target_seed}",
                     f"tiny-{draft_seed}", torch.device("cpu"), torch.float32)


def tiny_feature_pair(taps: tuple[int, ...] = (), logit_scale: float = 3.0, noise: float = 0.3) -> ModelPair:
    """A tiny target with a feature (EAGLE-style) draft built from it and perturbed (weights + noise x N(0, 1)),
    so it disagrees often."""
    from specviz.draft.feature import FeatureDraft

    pair = tiny_pair(draft_seed=None, logit_scale=logit_scale)
    torch.manual_seed(3)
    draft = FeatureDraft(pair.target, torch.arange(pair.target.config.vocab_size), torch.float32, taps)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(noise * torch.randn_like(p))
    draft.eval().requires_grad_(False)
    return ModelPair(pair.target, draft, pair.tokenizer, pair.target_name, "tiny-feature", pair.device, pair.dtype)


def reference_probs(logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """The sampling distribution in float64, by transformers' warpers (temperature, then top-k, then top-p),
    written apart from `specviz.engine.sampling`."""
    scores = logits.double().reshape(-1, logits.shape[-1])
    scores = TemperatureLogitsWarper(float(sampling.temperature))(None, scores)
    if sampling.top_k > 0:
        scores = TopKLogitsWarper(int(sampling.top_k))(None, scores)
    if sampling.top_p < 1.0:
        scores = TopPLogitsWarper(float(sampling.top_p))(None, scores)
    return scores.softmax(dim=-1).reshape(logits.shape)


@torch.inference_mode()
def sample(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """`draws.sample_unchecked`'s draws (the engine's stream), a row with no mass an error: the references'
    sampler."""
    from specviz.draws import NO_MASS, sample_unchecked

    draws, has_mass = sample_unchecked(probs, generator)
    if not bool(has_mass):
        raise ValueError(NO_MASS)
    return draws


@torch.inference_mode()
def exact_distribution(model, prompt_ids: list[int], sampling: SamplingConfig, n_tokens: int = 4) -> dict:
    """P(first n generated tokens = s) for every sequence s, by enumerating the vocabulary.

    One batched forward over every (n-1)-token continuation of the prompt gives each position's logits;
    `reference_probs` turns them into distributions.
    """
    vocab = model.config.vocab_size
    heads = list(itertools.product(range(vocab), repeat=n_tokens - 1))
    ids = torch.tensor([prompt_ids + list(h) for h in heads])
    logits = _logits(model, ids)[:, len(prompt_ids) - 1:]
    probs = reference_probs(logits, sampling)           # (len(heads), n_tokens, vocab), float64
    dist: dict[tuple, float] = {}
    for row, head in enumerate(heads):
        prefix = 1.0
        for i, tok in enumerate(head):
            prefix *= float(probs[row, i, tok])
        if prefix == 0.0:   # a head no sampler can emit
            continue
        for last in range(vocab):
            p = prefix * float(probs[row, n_tokens - 1, last])
            if p > 0:
                dist[head + (last,)] = p
    return dist


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    """Every position's logits. A model with 4-bit layers attached (`helpers.attach_quantized`) is what its
    decoders run only through the lean forward, which reads those layers; transformers' forward would
    read its dense weights. Each sequence is then one prefill of its own."""
    from specviz.engine.lean import LeanLlama
    from specviz.engine.quant import WeightOnlyLayers

    if WeightOnlyLayers.of(model) is None:
        return model(ids).logits
    forward = LeanLlama(model, ids.shape[1])
    return torch.stack([forward(row[None], 0, rows=ids.shape[1]) for row in ids]).float()


def chi_square_pvalue(samples: list[tuple], exact: dict, min_expected: float = 5.0, control: bool = False) -> float:
    """Goodness of fit of `samples` to `exact`; rare outcomes are pooled so every cell expects >= 5.

    A sample with probability 0 fails the test outright (control=True: the p-value is 0 instead, as a
    negative control's rejection)."""
    n = len(samples)
    counts: dict[tuple, int] = {}
    for s in samples:
        counts[s] = counts.get(s, 0) + 1
    unexpected = [s for s in counts if s not in exact]
    if unexpected and control:
        return 0.0
    assert not unexpected, f"sampled sequences with probability 0: {unexpected[:5]}"
    observed, expected = _pooled_cells(counts, exact, n, min_expected)
    scale = sum(observed) / sum(expected)
    return float(stats.chisquare(observed, [e * scale for e in expected]).pvalue)


def _pooled_cells(counts: dict, exact: dict, n: int, min_expected: float) -> tuple[list, list]:
    """Observed and expected counts per cell, the outcomes expected fewer than `min_expected` times pooled."""
    observed, expected = [], []
    pooled_obs, pooled_exp = 0.0, 0.0
    for seq, p in sorted(exact.items(), key=lambda kv: -kv[1]):
        if p * n >= min_expected:
            observed.append(counts.get(seq, 0))
            expected.append(p * n)
        else:
            pooled_obs += counts.get(seq, 0)
            pooled_exp += p * n
    if pooled_exp > 0:
        observed.append(pooled_obs)
        expected.append(pooled_exp)
    return observed, expected


def chi_square_power(exact: dict, alternative: dict, n: int, alpha: float = 1e-3) -> float:
    """Probability that `chi_square_pvalue` at n samples rejects (p < alpha) samples drawn from `alternative`:
    the noncentral chi-square with noncentrality n * sum((a - p)^2 / p) over the test's pooled cells.
    Mass the alternative puts where `exact` has none is rejected outright, so it counts as power."""
    outside = sum(p for s, p in alternative.items() if s not in exact)
    _, expected = _pooled_cells({}, exact, n, 5.0)
    alt_counts = {s: p * n for s, p in alternative.items() if s in exact}
    alt_cells, exp_cells = _pooled_cells(alt_counts, exact, n, 5.0)
    lam = sum((a - e) ** 2 / e for a, e in zip(alt_cells, exp_cells))
    df = len(exp_cells) - 1
    inside = float(stats.ncx2.sf(stats.chi2.isf(alpha, df), df, lam))
    return 1.0 - (1.0 - outside) ** n * (1.0 - inside)


def sample_sequences(method: str, pair: ModelPair, prompt_ids: list[int], sampling: SamplingConfig, n: int,
                     n_tokens: int = 4, on_trace=None, **options) -> list[tuple]:
    """The first `n_tokens` tokens of n seeded runs (seeds 0 .. n-1). The first comes from the prefill, so
    a speculative step drafts the 2nd to `n_tokens`-th; max_new_tokens leaves a depth-`n_tokens` tree room.
    `on_trace(trace)` sees every run's trace."""
    from specviz.engine.methods import make_decoder

    samples = []
    for seed in range(n):
        cfg = SamplingConfig(sampling.temperature, sampling.top_p, sampling.top_k, seed=seed)
        decoder = make_decoder(method, pair, "", prompt_ids=prompt_ids, max_new_tokens=n_tokens + 2, sampling=cfg,
                               **options)
        # Stopped once the tokens under test are out: a later step cannot change them (the length limit
        # stays n_tokens + 2, so every step drafts as in a full run), and it saves a quarter of the minutes.
        while not decoder.done and len(decoder.generated) < n_tokens:
            decoder.step()
        if not decoder.done:
            decoder.close()
        trace = decoder.trace
        samples.append(tuple(trace.token_ids[:n_tokens]))
        if on_trace is not None:
            on_trace(trace)
    return samples


def shifted_temperature(sampling: SamplingConfig, factor: float = 1.12) -> SamplingConfig:
    """The same settings at a temperature `factor` times too high: a negative control's wrong sampler."""
    return SamplingConfig(sampling.temperature * factor, sampling.top_p, sampling.top_k)


@contextmanager
def served(demo, **launch_kwargs):
    """`demo` launched on a free loopback port for the block; yields its URL and closes it afterwards."""
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True, **launch_kwargs)
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


def free_port() -> int:
    """A free TCP port on the loopback interface, for launching the app in a test."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cache_forward_curves(pair: ModelPair, target_ms: float = 10.0, draft_ms: float = 0.5,
                         target_from: dict[int, float] | None = None) -> None:
    """Flat forward curves in the profile cache ($SPECVIZ_CACHE), as `--tree auto` leaves them measured: an
    adaptive tree then weighs a draft level at draft_ms / target_ms of a target forward (tiny models' weights
    alone would make the draft half a target, and the tree shallow). target_from {n: ms}: the target's
    curve rises to these times from size n on."""
    from specviz.engine.profiler import SMALL_SIZES, _curve_key, curve_key, default_sizes, save_cached

    for model, role, sizes, ms in ((pair.target, "target", default_sizes(pair.device), target_ms),
                                   (pair.draft, "draft", SMALL_SIZES, draft_ms)):
        key = curve_key(pair, role)
        curve = {str(n): ms for n in sizes}
        if model is pair.target:
            curve |= {str(n): t for at, t in sorted((target_from or {}).items()) for n in sizes if n >= at}
        save_cached("forward", _curve_key(model, key, 200), {"key": key, "ms": curve})


def package_source(base):
    """A copy of what `pip install .` builds from (pyproject, the package, its runtime assets) under
    `base/src`, so a build or install leaves the checkout itself clean."""
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    src = Path(base) / "src"
    src.mkdir()
    shutil.copy2(root / "pyproject.toml", src)
    shutil.copytree(root / "specviz", src / "specviz", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copytree(root / "assets", src / "assets", ignore=shutil.ignore_patterns("bench"))
    return src


def empty_profile_cache(path):
    """A SPECVIZ_CACHE folder at `path` that holds the run's converted model and wheel (links) but no
    measurement at all: what a fresh machine has once the model is fetched."""
    import os
    from pathlib import Path

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    models = Path(os.environ.get("SPECVIZ_CACHE") or Path.home() / ".cache" / "specviz")
    for entry in models.iterdir():
        if entry.name != "profiles" and not (path / entry.name).exists():
            (path / entry.name).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
    return path


def tree_attention(shape, prefix_len: int, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """A tree's target forward as transformers takes it, from a `sequoia.tree.TreeShape`: the additive
    mask (1, 1, n, prefix_len + n) (every committed slot, then each node's ancestors and itself) and the
    positions (prefix_len + depth)."""
    allowed = torch.cat([torch.ones(shape.size, prefix_len, dtype=torch.bool), shape.ancestor_matrix()], dim=1)
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask.view(1, 1, *allowed.shape), torch.tensor(shape.depths) + prefix_len


def slow_steps(monkeypatch, delay: float = 0.2) -> None:
    """Autoregressive decoding's steps slowed by `delay` seconds in this process, so a race is still running
    when a test stops it, cancels it or leaves it."""
    import time

    from specviz.autoregressive.decoder import AutoregressiveDecoder

    original = AutoregressiveDecoder._step

    def slow_step(self):
        time.sleep(delay)
        return original(self)

    monkeypatch.setattr(AutoregressiveDecoder, "_step", slow_step)


def attach_quantized(model, dtype: torch.dtype = torch.bfloat16):
    """`model`'s own layer linears quantised to Q4_1 (`quant.quantize_q4_1`), packed and kept on it, as
    `quant.attach_q4` does with a GGUF's: every product of the lean forward then runs 4-bit weights, for the
    sampling tests' tiny models, which ship no GGUF. The dense weights stay (transformers' forward reads them)."""
    from specviz.engine import quant

    weights = {f"model.layers.{i}.{name}": quant.quantize_q4_1(layer.get_submodule(name).weight)
               for i, layer in enumerate(model.model.layers) for name in quant.LINEARS.values()}
    kernel = quant.q4_kernel([w.shape for w in weights.values()])
    layers = quant.WeightOnlyLayers.build(weights, model.config.num_hidden_layers, dtype, "quantized in memory",
                                          kernel, quant.calibrate_outliers(model) if kernel else None)
    layers.attach(model)
    return layers


def ar_token_ids(pair: ModelPair, prompts: dict[str, str], max_new_tokens: int) -> dict[str, list[int]]:
    """Greedy `ar`'s tokens for each named prompt: what a method's exactness tests compare it against."""
    from specviz.engine.methods import make_decoder

    return {name: make_decoder("ar", pair, prompt, max_new_tokens=max_new_tokens).run().token_ids
            for name, prompt in prompts.items()}
