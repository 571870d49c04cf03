"""Qwen2-family targets (the Space's Qwen2.5 pair) on the lean forward and the static step.

Qwen2's layer is Llama's with biases on q, k and v. Tiny random models built from transformers' own
`Qwen2Config` (no Hub), with random biases (transformers initialises them to zero, which would hide a
forward that drops them), stand in for the real ones.
"""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import tiny_tokenizer, tree_attention
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from specviz.engine.lean import (LeanLlama, ModelForward, dense_parts, decoder_layers, keep_positions,
                                 lean_llama_supported, make_forward)
from specviz.engine.kernels import Dense
from specviz.engine.llama import layer_stack
from specviz.engine.methods import make_decoder
from specviz.engine.models import ModelPair, load_model
from specviz.engine.static import static_supported
from specviz.sequoia.tree import TreeShape

VOCAB = 12
TREE = [-1, 0, 0, 1, 1, 2, 3]
PROMPTS = ([1, 2, 3], [4, 4, 1, 4, 4, 1, 7])


def tiny_qwen2(seed: int = 0, layers: int = 2, tied: bool = False, **config) -> Qwen2ForCausalLM:
    """A random Qwen2 with random q/k/v biases. Weights 10x transformers' initial scale give greedy text that
    varies (at its own scale, or with tied embeddings as Qwen2.5-0.5B and -1.5B have, it repeats one token)."""
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.2,
                      tie_word_embeddings=tied, bos_token_id=None, eos_token_id=None, pad_token_id=None, **config)
    model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0.0, 0.5)
    model.generation_config.eos_token_id = None
    return model.float().eval()


def llama_with_biases(seed: int = 0) -> LlamaForCausalLM:
    """A random Llama with `attention_bias` and `mlp_bias` (every projection biased, o_proj and the MLP's too)."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.2,
                      attention_bias=True, mlp_bias=True, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.normal_(0.0, 0.5)
    return model.float().eval()


def perturbed(model: Qwen2ForCausalLM, seed: int, noise: float = 0.05) -> Qwen2ForCausalLM:
    """A draft that agrees with the target often but not always: its weights plus noise."""
    draft = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(noise * torch.randn(p.shape, generator=gen))
    return draft


@pytest.fixture(scope="module")
def qwen2_pair() -> ModelPair:
    target = tiny_qwen2()
    return ModelPair(target, perturbed(target, 1), tiny_tokenizer(VOCAB), "tiny-qwen2", "tiny-qwen2-noisy",
                     torch.device("cpu"), torch.float32)


def _close(got, want):
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["qwen2", "qwen2-tied", "llama-biases"],
                         ids=["qwen2-own-head", "qwen2-tied-embeddings", "llama-all-biases"])
@torch.inference_mode()
def test_lean_forward_equals_transformers_with_biases(kind, one_thread):
    """Qwen2 (its own head, or tied as Qwen2.5-0.5B and -1.5B), and a Llama with every bias transformers allows."""
    model = llama_with_biases() if kind == "llama-biases" else tiny_qwen2(tied=kind == "qwen2-tied")
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == (kind == "qwen2-tied")
    assert lean_llama_supported(model)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, VOCAB, (1, 20), generator=gen)
    tokens = torch.randint(0, VOCAB, (1, len(TREE)), generator=gen)
    tree_mask, positions = tree_attention(TreeShape.from_parents(TREE), 20)
    cache = DynamicCache(config=model.config)
    want_prefill = model(input_ids=prompt, past_key_values=cache, use_cache=True).logits[0]
    want_tree = model(input_ids=tokens, attention_mask=tree_mask, position_ids=positions[None],
                      past_key_values=cache, use_cache=True).logits[0]

    lean = LeanLlama(model, 64)
    _close(lean(prompt, 0, rows=20), want_prefill)
    _close(lean(tokens, 20, positions=positions, mask=tree_mask, rows=len(TREE)), want_tree)
    # Keep the path 0 -> 1 -> 3, then cached single steps: the same as transformers' cache after the same move.
    path = torch.tensor([0, 1, 3]) + 20
    lean.keep(20, path)
    keep_positions(cache, 20, path)
    for start, token in ((23, 5), (24, 9)):
        nxt = torch.tensor([[token]])
        _close(lean(nxt, start), model(input_ids=nxt, past_key_values=cache, use_cache=True).logits[0, -1:])

    # The static (graph-ready) forward: K/V into named slots, attention over the whole zeroed cache.
    static = LeanLlama(model, 64)
    static.zero_cache()
    static.forward_static(prompt, torch.arange(20), torch.arange(20),
                          _over_cache(torch.zeros(1, 1, 20, 20).masked_fill_(
                              torch.ones(20, 20, dtype=torch.bool).triu(1), torch.finfo(torch.float32).min), 64),
                          torch.arange(20))
    got = static.forward_static(tokens, torch.arange(20, 27), positions, _over_cache(tree_mask, 64),
                                torch.arange(len(TREE)))
    _close(got, want_tree)

    # The biases matter here: a forward without them is far off (what the comparisons above would catch).
    matrices, _ = dense_parts(model.model.layers)
    lean.stack = layer_stack(decoder_layers(model, [Dense(w) for w in matrices], torch.float32), script=False)
    lean.zero_cache()
    assert (lean(prompt, 0, rows=20) - want_prefill).abs().max() > 1e-2


def _over_cache(mask: torch.Tensor, capacity: int) -> torch.Tensor:
    """An additive (1, 1, n, p + n) mask widened to the whole cache, the slots past it blocked."""
    n, width = mask.shape[-2:]
    wide = torch.full((1, 1, n, capacity), torch.finfo(mask.dtype).min, dtype=mask.dtype)
    wide[..., :width] = mask
    return wide


@pytest.mark.parametrize("graphs", ["off", "on"], ids=["eager", "static"])
def test_greedy_sequoia_and_lookahead_equal_ar_on_qwen2(qwen2_pair, graphs, one_thread):
    """Each method's one step (nothing captured on a CPU, whatever the setting) speculates on a Qwen2 target and
    draft over the lean forward, and emits exactly the target's greedy tokens."""
    pair = qwen2_pair
    runs = {"sequoia": {"tree_parents": [-1, 0, 0, 1, 1, 2, 3, 5]}, "lookahead": {"window": 4, "ngram": 3, "guesses": 3}}
    accepted = dict.fromkeys(runs, 0)
    for prompt_ids in PROMPTS:
        ar = make_decoder("ar", pair, "", prompt_ids=prompt_ids, max_new_tokens=24, graphs="off").run().token_ids
        for method, options in runs.items():
            dec = make_decoder(method, pair, "", prompt_ids=prompt_ids, max_new_tokens=24, graphs=graphs, **options)
            forward = dec.target if method == "sequoia" else dec.forward
            assert isinstance(forward.lean, LeanLlama), method
            if method == "sequoia":
                assert isinstance(dec.drafter.forward.lean, LeanLlama)
            trace = dec.run()
            assert trace.graphs["enabled"] and not trace.graphs["capturing"], method
            assert trace.token_ids == ar, (method, graphs, prompt_ids)
            accepted[method] += sum(s in ("draft", "ngram") for step in trace.steps[1:] for s in step.token_sources)
    assert all(accepted.values()), accepted   # speculation was tried and sometimes right, not only bonus tokens


def test_loading_a_qwen2_checkpoint_picks_the_lean_forward(tmp_path, one_thread):
    """What `load_pair` loads from a Qwen2 directory runs on the lean forward and the static step; a Qwen2 with its
    sliding window turned on does not (its layers see a band, not the whole prefix) and keeps transformers'."""
    tiny_qwen2().save_pretrained(tmp_path / "qwen2")
    model = load_model(str(tmp_path / "qwen2"), torch.device("cpu"), torch.float32)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert isinstance(make_forward(model, 32), LeanLlama) and static_supported(model)

    sliding = tiny_qwen2(use_sliding_window=True, sliding_window=8, max_window_layers=1)
    assert "sliding_attention" in sliding.config.layer_types
    assert not lean_llama_supported(sliding) and isinstance(make_forward(sliding, 32), ModelForward)
    assert not static_supported(sliding)
    prompt = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 1]])
    with torch.inference_mode():   # the fallback still computes the model's own forward
        _close(ModelForward(sliding, 32)(prompt, 0), sliding(input_ids=prompt).logits[0, -1:])

