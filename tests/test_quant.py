"""`--dtype q4`: the offline default's Q4_1 blocks, read into torch's int4 CPU layout, are the weights the
GGUF defines (gguf's own dequantisation), in the row order of the converted model (transformers'
un-permuted q/k), and the kernel reads them as such. Each check has a control it must catch: a wrong
zero point, rows left in llama.cpp's order."""

from __future__ import annotations

import gguf
import pytest
import torch
from safetensors.torch import load_file

from specviz.engine import kernels, quant
from specviz.engine.lean import LeanLlama, decoder_layers
from specviz.engine.llama import layer_stack
from specviz.engine.models import load_pair, offline_default_dir, offline_default_gguf
from specviz.engine.profiler import forward_kind
from specviz.errors import InvalidInput

pytestmark = pytest.mark.skipif(not kernels.int4_kernel_available(), reason="no CPU int4 kernel in this torch")

BF16_ROUNDING = 2.0 ** -8   # relative; the converted model stores transformers' dequantisation in bf16


@pytest.fixture(scope="module")
def reader():
    return gguf.GGUFReader(str(offline_default_gguf()))


@pytest.fixture(scope="module")
def file_weights(reader):
    """name -> (the file's tensor, our decoding of it, rows as the file holds them)."""
    out = {}
    for tensor in reader.tensors:
        if tensor.tensor_type == gguf.GGMLQuantizationType.Q4_1:
            cols, rows = (int(n) for n in tensor.shape)
            out[tensor.name] = (tensor, quant.q4_1_from_blocks(tensor.data, rows, cols))
    return out


def _hf_name(gguf_name: str) -> str:
    _, layer, kind, _ = gguf_name.split(".")
    return f"model.layers.{layer}.{quant.LINEARS[kind]}.weight"


def _heads(reader, kind: str) -> int:
    key = "llama.attention.head_count" if kind == "attn_q" else "llama.attention.head_count_kv"
    return int(reader.fields[key].parts[-1][0])


def _kernel_table_weights(weight: quant.Q4Weight, scales_and_zeros: torch.Tensor) -> torch.Tensor:
    """What the kernel computes from codes and a (groups, out, 2) table: (q - 8) * scale + zero."""
    out, cols = weight.shape
    table = scales_and_zeros.float().transpose(0, 1)   # (out, groups, 2)
    codes = weight.codes.view(out, cols // kernels.GROUP, kernels.GROUP).float()
    return ((codes - quant.MIDPOINT) * table[..., :1] + table[..., 1:]).view(out, cols)


def test_the_file_holds_q4_1_linears_a_q8_0_embedding_and_f32_norms(reader, file_weights):
    kinds = {t.name: t.tensor_type.name for t in reader.tensors}
    assert len(file_weights) == 30 * len(quant.LINEARS)
    assert kinds["token_embd.weight"] == "Q8_0" and "output.weight" not in kinds   # the head is tied to it
    assert {k for n, k in kinds.items() if n.endswith("norm.weight")} == {"F32"}


def test_decoded_blocks_equal_ggufs_dequantisation_and_the_kernels_table(file_weights):
    worst_table = 0.0
    for tensor, weight in file_weights.values():
        expected = torch.from_numpy(gguf.quants.dequantize(tensor.data, tensor.tensor_type))
        assert torch.equal(weight.dequantize(), expected), tensor.name   # d * q + m, bit for bit
        table = _kernel_table_weights(weight, weight.scales_and_zeros(torch.float32))
        worst_table = max(worst_table, ((table - expected).abs() / expected.abs().clamp(min=1e-3)).max().item())
    assert worst_table < 1e-5   # (q - 8) d + (m + 8 d) = d q + m up to fp32 rounding
    # Control: the zero point without its 8 d (or with it subtracted) is off by several quant steps.
    _, weight = file_weights["blk.0.ffn_down.weight"]
    expected = weight.dequantize()
    for wrong in (torch.stack([weight.d.float(), weight.m.float()], -1),
                  torch.stack([weight.d.float(), weight.m.float() - 8 * weight.d.float()], -1)):
        table = wrong.transpose(0, 1).contiguous()
        assert (_kernel_table_weights(weight, table) - expected).abs().max() > 1e-2


def test_unpermuted_rows_equal_the_converted_models_weights(reader, file_weights):
    converted = load_file(str(offline_default_dir() / "model.safetensors"))
    for name, (_, weight) in file_weights.items():
        kind = name.split(".")[2]
        if kind in ("attn_q", "attn_k"):
            weight = quant.unpermute_rows(weight, _heads(reader, kind))
        ours, theirs = weight.dequantize(), converted[_hf_name(name)].float()
        assert ((ours - theirs).abs() <= BF16_ROUNDING * ours.abs()).all(), name
    # Control: q_proj left in llama.cpp's row order is not the converted model's q_proj.
    _, raw_q = file_weights["blk.0.attn_q.weight"]
    theirs = converted[_hf_name("blk.0.attn_q.weight")].float()
    assert not ((raw_q.dequantize() - theirs).abs() <= BF16_ROUNDING * theirs.abs()).all()


def test_the_int4_kernel_multiplies_by_the_files_weights(reader, file_weights):
    """Products with the identity read each packed matrix back through the kernel, for one layer's
    stacked q|k|v (q, k un-permuted), o, gate|up and down: in fp32 up to rounding; in bf16, the
    activations the forward runs, up to bf16's rounding of the output and of d and m + 8d."""
    def w(kind):
        weight = file_weights[f"blk.3.{kind}.weight"][1]
        return quant.unpermute_rows(weight, _heads(reader, kind)) if kind in ("attn_q", "attn_k") else weight

    for weight in (quant.Q4Weight.stacked([w("attn_q"), w("attn_k"), w("attn_v")]), w("attn_output"),
                   quant.Q4Weight.stacked([w("ffn_gate"), w("ffn_up")]), w("ffn_down")):
        expected = weight.dequantize()
        eye = torch.eye(weight.shape[1])
        got = kernels.Int4Linear.of(weight, torch.float32).rows(eye).t()
        assert torch.allclose(got, expected, rtol=1e-5, atol=1e-6)
        got16 = kernels.Int4Linear.of(weight, torch.bfloat16).rows(eye.bfloat16()).t().float()
        step = weight.d.float().repeat_interleave(kernels.GROUP, dim=1)   # one quantisation step
        assert ((got16 - expected).abs() <= 0.25 * step + BF16_ROUNDING * expected.abs()).all()
    # Control: the kernel given rows in the file's q order computes another q|k|v.
    raw = quant.Q4Weight.stacked([file_weights[f"blk.3.{k}.weight"][1] for k in ("attn_q", "attn_k", "attn_v")])
    stacked = quant.Q4Weight.stacked([w("attn_q"), w("attn_k"), w("attn_v")])
    got = kernels.Int4Linear.of(raw, torch.float32).rows(torch.eye(576)).t()
    assert not torch.allclose(got, stacked.dequantize(), rtol=1e-3, atol=1e-3)


@torch.inference_mode()
def test_q4_forward_predicts_what_fp32_does(pair_fp32):
    """The lean forward on 4-bit layers: every layer's products are the int4 kernel's, and its next-token
    logits over a prompt follow the fp32 model's (a wrong row order or zero point scrambles them)."""
    pair = load_pair("default", "self", dtype="q4")
    assert pair.precision == "q4" and pair.key.endswith("|q4")
    # SpecViz's own kernel where it is built here (AVX-512 VNNI), else torch's int4 one: each its own curves.
    native = quant.native.q4_rows_available() is None
    kind, product = ((f"lean-q4-vnni-{quant.native.source_digest()}-f32-ts", kernels.Q4Rows) if native
                     else ("lean-q4-f32-ts", kernels.Int4Linear))
    assert forward_kind(pair.target) == kind and forward_kind(pair_fp32.target) != kind   # own curves
    forward = LeanLlama(pair.target, 64)
    products = quant.WeightOnlyLayers.of(pair.target).layers
    assert forward.weight_only and all(isinstance(layer[0], product) for layer in products)
    assert forward.all_keys.dtype == torch.float32   # fp32 activations
    # The rows layers run as one stack that TorchScript compiled (eager Python dispatch is a third of a token).
    assert isinstance(forward.stack, torch.jit.ScriptModule)
    if native:   # and on SpecViz's kernel each layer is one op (`kernels.Q4Layer`)
        assert all(getattr(layer, "original_name", type(layer).__name__) == "Q4Layer" for layer in forward.stack.layers)
    prompt = pair.tokenizer("The capital of France is Paris. The capital of Italy is", return_tensors="pt").input_ids
    got = forward(prompt, 0, rows=prompt.shape[1]).float()
    want = LeanLlama(pair_fp32.target, 64)(prompt, 0, rows=prompt.shape[1])
    agree = (got.argmax(-1) == want.argmax(-1)).float().mean().item()
    cosine = torch.nn.functional.cosine_similarity(got, want, dim=-1).min().item()
    assert agree >= 0.8 and cosine > 0.95, (agree, cosine)
    # The compiled stack (on SpecViz's kernel, each layer one op) computes what the layers run eagerly op by op
    # do over the same products: the prompt's logits and, after it, a decoding row's against the cached K/V.
    through_layers = LeanLlama(pair.target, 64)
    through_layers.stack = layer_stack(decoder_layers(pair.target, [p for layer in products for p in layer],
                                                      torch.float32, _own_attention if native else None),
                                       script=False)
    n = prompt.shape[1]
    for start, ids, rows in ((0, prompt, n), (n, prompt[:, -1:], 1)):
        fast, plain = forward(ids, start, rows=rows).float(), through_layers(ids, start, rows=rows).float()
        same = (fast.argmax(-1) == plain.argmax(-1)).float().mean().item()
        # Our kernel's int8 rounding: a near-tie may go either way between the two paths (1 of 12 positions did).
        assert same == 1.0 or (native and same >= 0.9), same
        # Our kernel rounds the activations to int8: a last-bit difference between the two paths' fp32 ops may
        # move a code by one step, so the two differ by about what either differs from fp32 (measured 0.055x).
        bound = 0.1 if native else 0.05
        assert (fast - plain).abs().max() < bound * plain.abs().max(), (fast - plain).abs().max()


def _own_attention(head_dim: int):
    return quant.native.RowAttention()


def test_q4_is_refused_for_a_model_without_a_q4_1_gguf(tmp_path):
    with pytest.raises(InvalidInput, match="q4"):
        load_pair(str(tmp_path), "self", dtype="q4")


def test_the_q4_1_quantiser_is_llama_cpps(file_weights):
    """`quantize_q4_1` (for models that ship no GGUF: the sampling tests' tiny ones) applied to the file's own
    weights gives back the file's blocks bit for bit, codes, d and m: it is the quantiser that wrote them. On
    other numbers each weight moves by at most half a step."""
    for name in ("blk.0.attn_q.weight", "blk.17.ffn_down.weight"):
        _, weight = file_weights[name]
        again = quant.quantize_q4_1(weight.dequantize())
        assert torch.equal(again.codes, weight.codes) and torch.equal(again.d, weight.d) and torch.equal(again.m, weight.m)
    dense = torch.randn(64, 96, generator=torch.Generator().manual_seed(0))
    q = quant.quantize_q4_1(dense)
    step = q.d.float().repeat_interleave(kernels.GROUP, dim=1)
    error = (q.dequantize() - dense).abs()
    low = q.m.float().abs().repeat_interleave(kernels.GROUP, dim=1)
    assert (error <= 0.5 * step + 2.0 ** -10 * (low + 15 * step)).all()   # fp16's rounding of m and d on top
    assert (error > 0.25 * step).any()   # control: 4 bits cannot hold these numbers exactly
    with pytest.raises(ValueError, match="blocks of 32"):
        quant.quantize_q4_1(torch.zeros(4, 48))


@pytest.mark.skipif(quant.native.q4_rows_available() is not None, reason="q4 runs torch's int4 kernel here")
def test_greedy_speculation_on_4bit_weights_writes_ars_text():
    """On SpecViz's own kernel every row's bits are its own (products, fused norms, `attend_rows`): a token verified
    in a tree or a Jacobi window gets the bits it gets decoded alone, so greedy Sequoia (DP tree, adaptive tree)
    and Lookahead on q4 write `ar`'s q4 text token for token, as fp32 does. Control, run by hand: with torch's
    attention in its place the first prompt's DP tree left `ar`'s text at token 37 and the adaptive tree at 46
    (and 0-4 of the 12 bench prompts matched)."""
    from specviz.engine.methods import make_decoder

    pair = load_pair("default", dtype="q4")
    prompts = ["Write a Python function that checks whether a number is prime.",
               "List three facts about the Moon."]
    runs = {"sequoia dp": ("sequoia", {"tree_budget": 8, "tree_depth": 3}),
            "sequoia adaptive": ("sequoia", {"tree": "adaptive", "tree_budget": 6, "tree_depth": 3}),
            "lookahead": ("lookahead", {"window": 4, "ngram": 3, "guesses": 4})}
    for prompt in prompts:
        want = make_decoder("ar", pair, prompt, max_new_tokens=48).run().token_ids
        for name, (method, options) in runs.items():
            got = make_decoder(method, pair, prompt, max_new_tokens=48, **options).run()
            assert got.token_ids == want, (name, prompt)
            if method == "sequoia":   # it did speculate: trees were verified, not one token a forward
                assert got.tokens_per_forward > 1.2, (name, got.tokens_per_forward)


def test_vocabulary_subset_heads_on_4bit_weights_read_the_ggufs_head_on_the_kernel():
    """Deliver 1's vocabulary-subset head: on a q4 target the distilled draft's subset head (in the lean forward)
    and the feature draft's head are cut from the GGUF's Q8_0 codes (`kernels.Q8Rows.cut`), so their logits are the
    q4 target's own head's at those tokens, bit for bit, before and after the head widens. Control: the dense
    bf16 rows they were cut from before give other logits."""
    from specviz.engine.native import q4_rows_available

    if q4_rows_available() is not None:
        pytest.skip(f"SpecViz's q4 kernel is not built here: {q4_rows_available()}")
    pruned = load_pair("default", "independent", dtype="q4")
    full = quant.kernel_head(pruned.target)
    assert full is not None
    lean = LeanLlama(pruned.draft, 64)
    assert isinstance(lean.head, kernels.Q8Rows) and lean.head.out_features == lean.vocab_ids.numel()
    ids = torch.tensor([[1, 504, 3537, 28, 2]])
    logits, normed = lean(ids, 0, rows=5, hidden=True)
    assert torch.equal(logits, full(normed)[:, lean.vocab_ids])
    dense = normed.to(lean._full_head.dtype) @ lean._full_head.index_select(0, lean.vocab_ids).T
    assert not torch.equal(logits, dense.float())   # control: the bf16 copy's rows
    missing = torch.tensor([t for t in range(49152) if t not in set(lean.vocab_ids.tolist())][:3])
    lean.widen(missing)
    assert torch.equal(lean(ids, 0, rows=5), full(normed)[:, lean.vocab_ids])

    feature = load_pair("default", "feature", dtype="q4")
    forward = feature.draft.decoding_forward(64)
    assert "-q8head" in feature.draft.decoding_kind
    features = torch.randn(4, 576, generator=torch.Generator().manual_seed(4))
    full = quant.kernel_head(feature.target)
    assert torch.equal(forward.logits(features), full(features)[:, forward.vocab_ids])
    forward.widen(missing)
    assert torch.equal(forward.logits(features), full(features)[:, forward.vocab_ids])
