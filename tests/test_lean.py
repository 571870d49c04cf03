"""The lean Llama forward computes what transformers' forward does, and a draft head over part of the
vocabulary keeps speculation exact."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from helpers import chi_square_pvalue, exact_distribution, tiny_pair, tree_attention
from transformers import DynamicCache

from specviz.engine.lean import (LeanLlama, ModelForward, VocabSubsetHead, dense_parts, attention_backends,
                                 attention_kernels, decoder_layers, keep_positions, lean_llama_supported,
                                 rows_together)
from specviz.engine.kernels import Dense
from specviz.engine.llama import layer_stack
from specviz.engine.methods import make_decoder
from specviz.engine.models import ModelPair
from specviz.engine.sampling import SamplingConfig
from specviz.sequoia.tree import TreeShape

TREE = [-1, 0, 0, 1, 1, 2, 3]


def _hf_tree_logits(model, prompt: torch.Tensor, tokens: torch.Tensor, shape: TreeShape):
    cache = DynamicCache(config=model.config)
    model(input_ids=prompt, past_key_values=cache, use_cache=True)
    mask, positions = tree_attention(shape, prompt.shape[1])
    logits = model(input_ids=tokens, attention_mask=mask, position_ids=positions[None],
                   past_key_values=cache, use_cache=True).logits[0]
    return logits, cache


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_rolled_rotation_is_transformers_bit_for_bit(dtype):
    """`rotate` with the signed sin table computes transformers' `x * cos + rotate_half(x) * sin` to the bit
    (the lean forward's fp32 exactness rests on it); control: the unsigned table rotates the other way."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    from specviz.engine.llama import rotary_tables, rotate

    gen = torch.Generator().manual_seed(0)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 64, 2).float() / 64))
    positions = torch.tensor([0, 3, 17, 400, 2047])
    cos, signed_sin = rotary_tables(positions, inv_freq, 1.0, dtype)
    freqs = torch.cat([positions.float()[:, None] * inv_freq] * 2, -1)
    hf_cos, hf_sin = freqs.cos().to(dtype), freqs.sin().to(dtype)
    assert torch.equal(cos, hf_cos) and torch.equal(signed_sin.abs(), hf_sin.abs())
    q = torch.randn(1, 9, len(positions), 64, generator=gen).to(dtype)
    k = torch.randn(1, 3, len(positions), 64, generator=gen).to(dtype)
    want_q, want_k = apply_rotary_pos_emb(q, k, hf_cos[None], hf_sin[None])
    assert torch.equal(rotate(q, cos, signed_sin), want_q) and torch.equal(rotate(k, cos, signed_sin), want_k)
    assert not torch.allclose(rotate(q, cos, hf_sin), want_q, atol=1e-2)


@torch.inference_mode()
def test_tree_forward_and_keep_match_transformers(pair_fp32):
    model = pair_fp32.target
    assert lean_llama_supported(model)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, 49152, (1, 20), generator=gen)
    tokens = torch.randint(0, 49152, (1, len(TREE)), generator=gen)
    shape = TreeShape.from_parents(TREE)
    expected, cache = _hf_tree_logits(model, prompt, tokens, shape)
    mask, positions = tree_attention(shape, 20)

    lean = LeanLlama(model, 64)
    prefill = lean(prompt, 0)
    torch.testing.assert_close(prefill, model(input_ids=prompt).logits[0, -1:], atol=2e-4, rtol=1e-4)
    got = lean(tokens, 20, positions=positions, mask=mask, rows=len(TREE))
    torch.testing.assert_close(got, expected, atol=2e-4, rtol=1e-4)
    rows = torch.tensor([0, 3, 6])
    torch.testing.assert_close(lean(tokens, 20, positions=positions, mask=mask,
                                    rows=rows), expected[rows], atol=2e-4, rtol=1e-4)

    # Keep the path 0 -> 1 -> 3, then read one more token: the same as transformers' cache after the same move.
    path = torch.tensor([0, 1, 3]) + 20
    lean.keep(20, path)
    keep_positions(cache, 20, path)
    nxt = torch.tensor([[42]])
    want = model(input_ids=nxt, past_key_values=cache, use_cache=True).logits[0, -1:]
    torch.testing.assert_close(lean(nxt, 23), want, atol=2e-4, rtol=1e-4)


@torch.inference_mode()
def test_model_forward_fallback_has_the_same_interface(pair_fp32):
    model = pair_fp32.target
    prompt = torch.tensor([[1, 2, 3, 4, 5]])
    lean, plain = LeanLlama(model, 16), ModelForward(model, 16)
    torch.testing.assert_close(plain(prompt, 0), lean(prompt, 0), atol=2e-4, rtol=1e-4)
    more = torch.tensor([[6, 7, 8]])
    # A causal multi-token read after a cache (no mask given): both build the causal mask.
    torch.testing.assert_close(plain(more, 5, rows=3), lean(more, 5, rows=3), atol=2e-4, rtol=1e-4)
    # Reading again from slot 5 overwrites: the fallback crops its cache first.
    torch.testing.assert_close(plain(more[:, :1], 5), lean(more[:, :1], 5), atol=2e-4, rtol=1e-4)


@torch.inference_mode()
def test_vocab_subset_head():
    model = tiny_pair(vocab_size=6).target
    ids = torch.tensor([0, 2, 5])
    head = VocabSubsetHead(model.lm_head.weight, ids)
    hidden = torch.randn(1, 3, model.config.hidden_size)
    full = model.lm_head(hidden)
    out = head(hidden)
    torch.testing.assert_close(out[..., ids], full[..., ids])
    assert (out[..., [1, 3, 4]] == float("-inf")).all()


def test_stacked_projections_share_the_models_weights_and_leave_its_forward_unchanged():
    """LeanLlama multiplies by q|k|v and gate|up at once; the model's own linears become views of those
    stacks, so there is one copy of the weights and transformers computes exactly what it did before."""
    model = tiny_pair(vocab_size=6, draft_seed=None).target
    with torch.inference_mode():
        _check_stacked(model)
    # Linears that do not sit together (moved, or never stacked) are stacked anew.
    a, b = torch.nn.Linear(4, 3, bias=False), torch.nn.Linear(4, 2, bias=False)
    w_a, w_b = a.weight.detach().clone(), b.weight.detach().clone()
    both = rows_together(a, b)
    assert torch.equal(both, torch.cat([w_a, w_b])) and a.weight.data_ptr() == both.data_ptr()
    assert isinstance(a.weight, torch.nn.Parameter) and torch.equal(b.weight, w_b)
    with torch.inference_mode():   # weights made under inference_mode cannot be viewed: stacked as a copy
        frozen = tiny_pair(vocab_size=6, draft_seed=None).target
        lean = LeanLlama(frozen, 16)
    wq = frozen.model.layers[0].self_attn.q_proj.weight
    assert lean.stack.layers[0].qkv.weight.data_ptr() != wq.data_ptr()
    torch.testing.assert_close(lean.stack.layers[0].qkv.weight[:wq.shape[0]], wq, rtol=0, atol=0)


def _check_stacked(model):
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    before = model(input_ids=ids).logits
    attn = model.model.layers[0].self_attn
    q_before = attn.q_proj.weight.clone()
    lean = LeanLlama(model, 16)
    stacked = lean.stack.layers[0].qkv.weight
    assert stacked.shape[0] == attn.q_proj.weight.shape[0] + 2 * attn.k_proj.weight.shape[0]
    assert attn.q_proj.weight.data_ptr() == stacked.data_ptr()
    assert attn.k_proj.weight.data_ptr() == stacked[attn.q_proj.weight.shape[0]:].data_ptr()
    torch.testing.assert_close(attn.q_proj.weight, q_before, rtol=0, atol=0)
    assert torch.equal(model(input_ids=ids).logits, before)
    # A second forward finds the weights already stacked and makes no new copy.
    again = LeanLlama(model, 16)
    assert again.stack.layers[0].qkv.weight.data_ptr() == stacked.data_ptr()
    torch.testing.assert_close(again(ids, 0), lean(ids, 0), rtol=0, atol=0)


def _subset_draft(draft, ids: list[int]):
    draft = copy.deepcopy(draft)
    draft.lm_head = VocabSubsetHead(draft.lm_head.weight, torch.tensor(ids))
    return draft


def test_sampling_stays_exact_when_the_draft_cannot_propose_some_tokens(one_thread):
    pair = tiny_pair()
    pair = ModelPair(pair.target, _subset_draft(pair.draft, [0, 2, 3, 5]), pair.tokenizer, pair.target_name,
                     "tiny-subset", pair.device, pair.dtype)
    prompt_ids = [1, 3, 3]   # the prompt widens the head by token 1, never by 4
    sampling = SamplingConfig(0.9, 1.0)
    exact = exact_distribution(pair.target, prompt_ids, sampling, n_tokens=3)
    samples, drafted, drafted_unwritten = [], set(), set()
    for seed in range(2500):
        trace = make_decoder("sequoia", pair, "", prompt_ids=prompt_ids, max_new_tokens=5,
                             sampling=SamplingConfig(0.9, 1.0, seed=seed),
                             tree_parents=[-1, 0, 0, 1, 1]).run()
        samples.append(tuple(trace.token_ids[:3]))
        written = set(trace.steps[0].new_token_ids)
        for step in trace.steps[1:]:
            tokens = {n.token_id for n in step.payload.nodes[1:]}
            drafted |= tokens
            drafted_unwritten |= tokens - written
            written |= set(step.new_token_ids)
    assert chi_square_pvalue(samples, exact) > 1e-3
    # The head's rows, widened by the prompt, and by what the target wrote before (4, once written).
    assert 4 not in drafted_unwritten and 1 in drafted and 4 in drafted
    assert any(4 in s for s in samples)   # the target still writes what the draft could not propose


def test_greedy_with_a_subset_head_equals_autoregressive(pair_fp32):
    target = pair_fp32.target
    draft = copy.deepcopy(target)
    draft.model.layers = draft.model.layers[:6]
    draft.config.num_hidden_layers = 6
    if getattr(draft.config, "layer_types", None):
        draft.config.layer_types = draft.config.layer_types[:6]
    draft = _subset_draft(draft, list(range(8000)))
    pair = ModelPair(target, draft, pair_fp32.tokenizer, pair_fp32.target_name, "first-6-layers-8k",
                     pair_fp32.device, pair_fp32.dtype)
    prompt = "Write a Python function that reverses a string."
    ar = make_decoder("ar", pair, prompt, max_new_tokens=40).run().token_ids
    seq = make_decoder("sequoia", pair, prompt, max_new_tokens=40, tree_budget=8, tree_depth=3).run()
    assert seq.token_ids == ar
    assert any(step.payload.accepted_path for step in seq.steps[1:])


@pytest.mark.parametrize("method,options", [("sequoia", {"tree_parents": [-1, 0, 0, 1, 2]}),
                                            ("lookahead", {"window": 4, "ngram": 3, "guesses": 3})])
@pytest.mark.parametrize("lean", [True, False], ids=["lean", "transformers"])
def test_both_forward_paths_are_exact(method, options, lean, one_thread, monkeypatch):
    """Other architectures take transformers' forward behind the same interface: greedy stays equal to AR."""
    from specviz.engine import static

    pair = tiny_pair(vocab_size=6)
    ar_of = {p: make_decoder("ar", pair, "", prompt_ids=p, max_new_tokens=20).run().token_ids
             for p in ((1, 2, 3), (4, 4, 1, 4, 4, 1))}
    if not lean:   # as for an architecture the lean forward does not cover
        monkeypatch.setattr(static, "lean_llama_supported", lambda model: False)
    for prompt_ids, ar in ar_of.items():
        dec = make_decoder(method, pair, "", prompt_ids=list(prompt_ids), max_new_tokens=20, **options)
        assert isinstance((dec.target if method == "sequoia" else dec.forward).lean, LeanLlama if lean else ModelForward)
        assert dec.run().token_ids == ar


def test_cuda_attention_stays_off_cudnn():
    """cuDNN's per-shape plans made every decoding step on an H100 4-7x slower: CUDA keeps to
    flash / memory-efficient / math attention; the CPU is left alone."""
    from torch.nn.attention import SDPBackend

    cuda = attention_backends(torch.device("cuda"))
    assert cuda and SDPBackend.CUDNN_ATTENTION not in cuda and SDPBackend.MATH in cuda
    assert attention_backends(torch.device("cpu")) is None
    with attention_kernels(torch.device("cpu")):   # a no-op context on the CPU
        q = torch.randn(1, 2, 3, 4)
        assert F.scaled_dot_product_attention(q, q, q).shape == q.shape


def test_prepacked_bf16_forward_equals_the_dense_one_bit_for_bit():
    # On a CPU in bf16 LeanLlama multiplies by oneDNN-prepacked weights: the same kernel F.linear
    # reaches after reordering the weight each call, so every logit and feature must be the same bits.
    from specviz.engine.kernels import packed_matmul_supported
    from specviz.engine.models import load_model

    if not packed_matmul_supported(torch.device("cpu"), torch.bfloat16):
        pytest.skip("this torch has no oneDNN bf16 prepacking")
    model = load_model(None, torch.device("cpu"), torch.bfloat16)
    packed = LeanLlama(model, 64)
    dense = LeanLlama(model, 64)
    if not packed.packed:
        # Packing is refused where this CPU's oneDNN has no bf16 kernel (an AVX2-only EPYC raises) or its
        # prepacked product is not F.linear's bit for bit; then every forward is the dense one, which is
        # exact. Anything else that left the weights unpacked is a failure.
        from specviz.engine.kernels import _same_bits, pack

        first = packed.stack.layers[0].qkv.weight   # the matrix `packed_weights` checks
        try:
            refused = not _same_bits(first, pack(first))
        except RuntimeError as exc:
            refused = f"{type(exc).__name__}: {str(exc)[:80]}"
        assert refused, "bf16 prepacking works on this CPU, yet LeanLlama left its weights unpacked"
        pytest.skip(f"this CPU's oneDNN cannot prepack bf16 bit for bit ({refused}): LeanLlama stays dense")
    assert packed.head.packed is not None
    # The same layers over the plain matrices (what F.linear multiplies), run eagerly.
    matrices, biases = dense_parts(model.model.layers)
    dense.stack = layer_stack(decoder_layers(model, [Dense(w, None, b) for w, b in zip(matrices, biases)],
                                             torch.bfloat16), script=False)
    dense.head = Dense(dense.lm_head)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, 49152, (1, 20), generator=gen)
    assert torch.equal(packed(prompt, 0), dense(prompt, 0))
    assert torch.equal(packed(prompt[:, -1:], 20), dense(prompt[:, -1:], 20))   # one token, no mask
    # A Sequoia-sized step: 12 new tokens under an additive mask, every row's logits and features.
    tokens = torch.randint(0, 49152, (1, 12), generator=gen)
    mask = torch.zeros(1, 1, 12, 33, dtype=torch.bfloat16)
    mask[0, 0, :, 21:].masked_fill_(torch.ones(12, 12, dtype=torch.bool).triu(1), torch.finfo(torch.bfloat16).min)
    kwargs = dict(positions=torch.arange(21, 33), mask=mask, rows=12, hidden=True)
    (logits_p, feats_p), (logits_d, feats_d) = packed(tokens, 21, **kwargs), dense(tokens, 21, **kwargs)
    assert torch.equal(logits_p, logits_d) and torch.equal(feats_p, feats_d)
    # Packed once per model; weights that change are packed again.
    again = LeanLlama(model, 64)
    assert again.stack.layers[3].gate_up.packed is packed.stack.layers[3].gate_up.packed
    with torch.no_grad():
        model.model.layers[3].mlp.down_proj.weight.mul_(1.0)
    assert LeanLlama(model, 64).stack.layers[3].gate_up.packed is not packed.stack.layers[3].gate_up.packed
