"""`--dtype int8`: a Llama-family model's layer linears in weight-only int8 on a CPU (`kernels.Int8Rows`).

The products are checked against the codes and scales they hold, the forward against the fp32 model (the
offline default, and a tiny Qwen2 whose q/k/v biases the products must add), the refusals for models the
lean forward does not run, and `auto`'s candidates. Sampling on the int8 forward is in `test_sampling_q4.py`.
"""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_model, tiny_tokenizer
from test_qwen2 import VOCAB, tiny_qwen2
from transformers import GPT2Config, GPT2LMHeadModel

from specviz.engine.kernels import Int8Rows, int8_kernel_available, int8_per_channel
from specviz.engine.lean import LeanLlama, decoder_layers
from specviz.engine.llama import layer_stack
from specviz.engine.models import auto_candidates, check_weight_only, load_pair
from specviz.engine.profiler import forward_kind
from specviz.engine.quant import WeightOnlyLayers, attach_int8
from specviz.errors import InvalidInput

pytestmark = pytest.mark.skipif(not int8_kernel_available(), reason="this torch has no weight-only int8 kernel")
CPU = torch.device("cpu")


@torch.inference_mode()
def test_int8_rows_are_the_codes_times_their_scales_plus_the_bias():
    """One product over stacked linears (q|k|v with a bias on one part only, as a Llama with `attention_bias`
    off but Qwen2's pattern on): each output row is its own codes x its own bf16 scale, on bf16 inputs."""
    gen = torch.Generator().manual_seed(0)
    parts = [torch.nn.Linear(64, n, bias=b) for n, b in ((48, True), (16, False), (16, True))]
    for p in parts:
        p.weight.copy_(torch.randn(p.weight.shape, generator=gen) * 0.1)
        if p.bias is not None:
            p.bias.copy_(torch.randn(p.bias.shape, generator=gen))
    rows = Int8Rows.of(*parts)
    x = torch.randn(5, 64, generator=gen)
    codes, scales = int8_per_channel(torch.cat([p.weight for p in parts]))
    assert torch.equal(rows.codes, codes)
    dequantized = codes.float() * scales.bfloat16().float()[:, None]
    bias = torch.cat([parts[0].bias, torch.zeros(16), parts[2].bias])
    want = x.bfloat16().float() @ dequantized.t() + bias
    got = rows.rows(x)
    assert got.dtype == torch.float32   # the bias widened the kernel's bf16
    assert torch.allclose(got, want, rtol=2 ** -7, atol=1e-2), (got - want).abs().max()
    # Against the dense linears: within the quantisation's half step per weight (and bf16's rounding of x).
    dense = torch.cat([p(x) for p in parts], -1)
    bound = 0.5 * x.abs().sum(-1, keepdim=True) * scales[None, :] + 2 ** -7 * dense.abs() + 0.05
    assert ((got - dense).abs() <= bound).all()
    # Control: the same codes without the bias are measurably off.
    assert (Int8Rows(codes, scales, None).rows(x).float() - want).abs().max() > 0.5


@torch.inference_mode()
def test_int8_forward_predicts_what_fp32_does(pair_fp32):
    pair = load_pair("default", "self", dtype="int8")
    assert pair.precision == "int8" and pair.key.endswith("|int8")
    kind = "lean-int8-f32-ts"
    assert forward_kind(pair.target) == kind and forward_kind(pair_fp32.target) != kind   # own curves
    forward = LeanLlama(pair.target, 64)
    products = WeightOnlyLayers.of(pair.target).layers
    assert forward.weight_only and all(isinstance(layer[0], Int8Rows) for layer in products)
    assert isinstance(forward.stack, torch.jit.ScriptModule)
    prompt = pair.tokenizer("The capital of France is Paris. The capital of Italy is", return_tensors="pt").input_ids
    n = prompt.shape[1]
    got = forward(prompt, 0, rows=n).float()
    want = LeanLlama(pair_fp32.target, 64)(prompt, 0, rows=n)
    agree = (got.argmax(-1) == want.argmax(-1)).float().mean().item()
    cosine = torch.nn.functional.cosine_similarity(got, want, dim=-1).min().item()
    assert agree >= 0.9 and cosine > 0.98, (agree, cosine)
    # The compiled layers compute what the same layers run eagerly do over the same int8 products.
    through_layers = LeanLlama(pair.target, 64)
    through_layers.stack = layer_stack(decoder_layers(pair.target, [p for layer in products for p in layer],
                                                      torch.float32), script=False)
    for start, ids, rows in ((0, prompt, n), (n, prompt[:, -1:], 1)):
        fast, plain = forward(ids, start, rows=rows).float(), through_layers(ids, start, rows=rows).float()
        assert torch.equal(fast.argmax(-1), plain.argmax(-1))
        assert (fast - plain).abs().max() < 0.05 * plain.abs().max()


@torch.inference_mode()
def test_int8_runs_qwen2_with_its_biases(one_thread):
    """Qwen2's q|k|v biases go through the int8 products: the int8 forward follows the fp32 model, and the same
    forward with the biases dropped does not (the control)."""
    model = tiny_qwen2()
    prompt = torch.randint(0, VOCAB, (1, 24), generator=torch.Generator().manual_seed(0))
    want = model(prompt).logits[0]
    attach_int8(model)
    got = LeanLlama(model, 64)(prompt, 0, rows=24)
    error = (got - want).abs().max().item()
    assert error < 0.05 * want.abs().max().item()
    from specviz.engine.model_state import state_of

    state = state_of(model)
    for layer in state.weight_only.layers:
        layer[0].has_bias = False
    state.weight_only_stack = None   # compiled with the biases: build it again without them
    unbiased = LeanLlama(model, 64)(prompt, 0, rows=24)
    assert (unbiased - want).abs().max().item() > 5 * error


def gpt2_dir(path):
    GPT2LMHeadModel(GPT2Config(vocab_size=6, n_embd=32, n_layer=1, n_head=2, n_positions=64)).save_pretrained(path)
    tiny_tokenizer(6).save_pretrained(path)
    return str(path)


def test_int8_is_refused_where_the_lean_forward_does_not_run(tmp_path):
    with pytest.raises(InvalidInput, match="int8.*'gpt2'"):
        load_pair(gpt2_dir(tmp_path), "self", dtype="int8")
    with pytest.raises(InvalidInput, match="int8.*--device cpu"):
        check_weight_only("int8", None, torch.device("meta"))


def test_auto_offers_int8_to_llama_family_models_but_not_the_offline_default(tmp_path):
    llama = tmp_path / "llama"
    tiny_model(vocab_size=6).save_pretrained(llama)
    assert "int8" in auto_candidates(str(llama), CPU)
    assert "int8" not in auto_candidates(gpt2_dir(tmp_path / "gpt2"), CPU)
    assert "int8" not in auto_candidates("default", CPU)   # its weight-only path is q4, its own file's
    assert "int8" not in auto_candidates("someone/not-downloaded-here", CPU)   # auto asks no network
    assert auto_candidates(str(llama), torch.device("meta")) == []
