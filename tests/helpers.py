"""Shared test helpers: tiny random models with enumerable distributions, and the chi-square check.

Tiny models (vocabulary of a few tokens, two layers) make the exact
autoregressive distribution of the first few generated tokens computable by
enumeration, which is what the statistical exactness tests compare against.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager

import torch
from scipy import stats
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from specviz.engine.models import ModelPair
from specviz.engine.sampling import SamplingConfig, probs_from_logits


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


def tiny_pair(vocab_size: int = 6, target_seed: int = 0, draft_seed: int | None = 1) -> ModelPair:
    """Target and a deliberately different draft (draft_seed=None: the target drafts for itself)."""
    target = tiny_model(vocab_size, target_seed)
    draft = target if draft_seed is None else tiny_model(vocab_size, draft_seed, layers=1)
    return ModelPair(target, draft, tiny_tokenizer(vocab_size), f"tiny-{target_seed}",
                     f"tiny-{draft_seed}", torch.device("cpu"), torch.float32)


@torch.inference_mode()
def exact_distribution(model, prompt_ids: list[int], sampling: SamplingConfig, n_tokens: int = 3) -> dict:
    """P(first n generated tokens = s) for every sequence s, by enumerating the vocabulary."""
    vocab = model.config.vocab_size
    dist: dict[tuple, float] = {}
    for seq in itertools.product(range(vocab), repeat=n_tokens):
        ids = torch.tensor([prompt_ids + list(seq[:-1])])
        logits = model(ids).logits[0, len(prompt_ids) - 1:]
        probs = probs_from_logits(logits, sampling)
        p = 1.0
        for i, tok in enumerate(seq):
            p *= float(probs[i, tok])
        if p > 0:
            dist[seq] = p
    return dist


def chi_square_pvalue(samples: list[tuple], exact: dict, min_expected: float = 5.0) -> float:
    """Goodness of fit of `samples` to `exact`; rare outcomes are pooled so every cell expects >= 5."""
    n = len(samples)
    counts: dict[tuple, int] = {}
    for s in samples:
        counts[s] = counts.get(s, 0) + 1
    unexpected = [s for s in counts if s not in exact]
    assert not unexpected, f"sampled sequences with probability 0: {unexpected[:5]}"
    observed, expected = [], []
    pooled_obs, pooled_exp = 0, 0.0
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
    scale = sum(observed) / sum(expected)
    return float(stats.chisquare(observed, [e * scale for e in expected]).pvalue)


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
    from specviz.engine.profiler import _curve_key, default_sizes, save_cached
    from specviz.sequoia.sizing import DRAFT_SIZES, _model_key

    for model, name, sizes, ms in ((pair.target, pair.target_name, default_sizes(pair.device), target_ms),
                                   (pair.draft, pair.draft_name, DRAFT_SIZES, draft_ms)):
        key = _model_key(name, pair)
        curve = {str(n): ms for n in sizes}
        if model is pair.target:
            curve |= {str(n): t for at, t in sorted((target_from or {}).items()) for n in sizes if n >= at}
        save_cached("forward", _curve_key(model, key, 200), {"key": key, "ms": curve})
