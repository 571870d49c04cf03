"""SpecViz's own q4 kernel (`torch.ops.specviz.q4_rows`, `engine.native`): it computes llama.cpp's Q4_1 x Q8_1
arithmetic (activations rounded to int8 in blocks of 32, one scale each), checked against that arithmetic
written in torch, for every row count its register tiles split into; it reads the GGUF's own weights; and
a wrong nibble order, a dropped min term or a skipped row is caught. Skipped where the CPU has no AVX-512
VNNI (the 4-bit path then runs torch's int4 kernel, which tests/test_quant.py covers)."""

from __future__ import annotations

import pytest
import torch

from specviz.engine import kernels, native, quant

REASON = native.q4_rows_available()
needs_kernel = pytest.mark.skipif(REASON is not None, reason=f"q4 kernel not built here: {REASON}")


def test_the_kernel_is_built_wherever_the_cpu_runs_it():
    """A CPU with AVX-512 VNNI gets the kernel (scripts/setup.sh compiles it): a failed build would leave q4
    silently on torch's slower kernel. Runs everywhere; asserts only where the CPU has the instructions."""
    from specviz.engine.machine import all_cpu_flags

    if native.missing_flags(all_cpu_flags()) or REASON == "turned off by SPECVIZ_NO_NATIVE":
        pytest.skip(f"this CPU does not run the kernel ({REASON})")
    assert REASON is None, REASON


def q8_blocks(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """llama.cpp's quantize_row_q8_1 in torch: per block of 32, scale = max|x| / 127, codes rounded half to even."""
    rows, cols = x.shape
    blocks = x.view(rows, cols // 32, 32)
    amax = blocks.abs().amax(-1)
    scale = amax / 127
    inverse = torch.where(amax > 0, 127 / amax, torch.zeros_like(amax))
    return (blocks * inverse[..., None]).round(), scale


def reference(x: torch.Tensor, weight: quant.Q4Weight) -> torch.Tensor:
    """sum_b d_b s_b (q . a) + m_b s_b (sum a), in fp64 from the same int8 codes."""
    a, s = q8_blocks(x)
    out, cols = weight.shape
    q = weight.codes.view(out, cols // 32, 32).double()
    dots = torch.einsum("rbi,nbi->rnb", a.double(), q)
    sums = a.double().sum(-1)                                        # (rows, blocks)
    d, m = weight.d.double(), weight.m.double()                      # (out, blocks)
    return (torch.einsum("rnb,nb,rb->rn", dots, d, s.double()) + torch.einsum("nb,rb->rn", m, s.double() * sums))


def random_q4(out: int, cols: int, seed: int) -> quant.Q4Weight:
    return quant.quantize_q4_1(torch.randn(out, cols, generator=torch.Generator().manual_seed(seed)) * 0.05)


@needs_kernel
@pytest.mark.parametrize("out,cols", [(960, 576), (112, 1536), (3072, 32)])
def test_the_kernel_computes_q4_1_times_q8_1(out, cols):
    weight = random_q4(out, cols, out)
    linear = kernels.Q4Rows.of(weight)
    generator = torch.Generator().manual_seed(cols)
    for rows in (1, 2, 3, 5, 8, 13, 17):   # the tiles of 8, 4, 2 and 1 rows, and what is left over
        x = torch.randn(rows, cols, generator=generator)
        x[:, 7] *= 40                       # an outlier dimension, as SmolLM2's
        got, want = linear.rows(x).double(), reference(x, weight)
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item()), (rows, (got - want).abs().max())
        # Each row's bits are its own whatever rides with it (past eight rows, a tile's chunks of eight): a token
        # verified in a tree or a window of 17 is computed as `ar` computes it alone.
        assert torch.equal(got, torch.cat([linear.rows(x[r:r + 1]) for r in range(rows)]).double()), rows
    # Controls: the rows come back in order (a skipped or repeated row is caught) and each row's outlier stays
    # in its own block (the product of the dequantised weights differs by the activations' rounding only).
    x = torch.randn(5, cols, generator=generator)
    assert not torch.allclose(linear.rows(x).double(), reference(x.flip(0), weight), rtol=1e-3)
    exact = x.double() @ weight.dequantize().double().T
    assert ((linear.rows(x).double() - exact).abs().max() <= 0.02 * exact.abs().max())


@needs_kernel
def test_the_kernel_reads_the_ggufs_weights():
    """Each row of the identity rounds to int8 exactly (127 / 127), so the kernel gives the weights back: the
    file's d * q + m, up to fp32 rounding, for a stacked q|k|v from the offline default's own GGUF."""
    weights = quant.read_q4_1(quant_file())
    stacked = quant.Q4Weight.stacked([weights[f"model.layers.3.self_attn.{p}_proj"] for p in "qkv"])
    got = kernels.Q4Rows.of(stacked).rows(torch.eye(stacked.shape[1])).t()
    assert torch.allclose(got, stacked.dequantize(), rtol=1e-6, atol=1e-6)   # weights reach 2.8
    # Controls: codes laid out in Q4_1's own byte order (byte j: weights j and j + 16 of a block) read other
    # weights, and a kernel without the min term gives d * q alone.
    out, cols = stacked.shape
    file_order = stacked.codes.view(out, cols // 32, 2, 16).transpose(2, 3).reshape(out, cols)
    misread = kernels.Q4Rows.of(quant.Q4Weight(file_order, stacked.d, stacked.m))
    assert not torch.allclose(misread.rows(torch.eye(cols)).t(), stacked.dequantize(), atol=1e-3)
    no_min = kernels.Q4Rows.of(stacked).rows(torch.eye(stacked.shape[1])).t() - stacked.m.float().repeat_interleave(32, 1)
    assert not torch.allclose(no_min, stacked.dequantize(), atol=1e-3)


@needs_kernel
def test_zero_rows_give_zero_and_strided_rows_are_read_as_rows():
    weight = random_q4(64, 128, 1)
    linear = kernels.Q4Rows.of(weight)
    assert torch.equal(linear.rows(torch.zeros(3, 128)), torch.zeros(3, 64))
    wide = torch.randn(4, 256)
    strided = wide[:, ::2]   # not contiguous
    assert torch.allclose(linear.rows(strided), linear.rows(strided.contiguous()))


@needs_kernel
def test_mismatched_shapes_are_refused_with_a_message():
    weight = random_q4(64, 128, 2)
    linear = kernels.Q4Rows.of(weight)
    with pytest.raises(RuntimeError, match="shapes do not match"):
        linear.rows(torch.randn(2, 64))
    with pytest.raises(RuntimeError, match="fp32"):
        linear.rows(torch.randn(2, 128).bfloat16())
    assert not kernels.Q4Rows.fits(random_q4(8, 96, 3).shape) and kernels.Q4Rows.fits(weight.shape)   # tiles of 16 output rows


def quant_file():
    from specviz.engine.models import offline_default_gguf

    return offline_default_gguf()


@needs_kernel
def test_the_head_kernel_computes_q8_0_times_q8_1_and_reads_the_ggufs_embedding():
    """The tied head (Q8_0: weight = d * q) through the same kernel, codes stored as q + 128 and m = -128 d:
    against the same arithmetic in fp64, and through the identity the file's own embedding rows (gguf's
    dequantisation). Control: the codes left signed (no + 128) read other weights."""
    weights = quant.read_q4_1(quant_file())
    head = weights[quant.HEAD]
    assert head.shape == (49152, 576)
    rows = head.codes[:4096]
    part = quant.Q8Weight(rows, head.d[:4096])
    kernel = kernels.Q8Rows.of(part)
    x = torch.randn(5, 576, generator=torch.Generator().manual_seed(5))
    as_q4_1 = quant.Q4Weight(rows.to(torch.int16).add(128).to(torch.uint8), part.d, (-128 * part.d.float()).half())
    assert torch.allclose(kernel(x).double(), reference(x, as_q4_1), rtol=1e-4, atol=1e-4)
    got = kernel(torch.eye(576)).t()
    assert torch.allclose(got, part.dequantize(), rtol=1e-6, atol=1e-6)
    import gguf

    reader = gguf.GGUFReader(str(quant_file()))
    embedding = next(t for t in reader.tensors if t.name == "token_embd.weight")
    file_rows = torch.from_numpy(gguf.quants.dequantize(embedding.data, embedding.tensor_type))[:4096]
    assert torch.equal(part.dequantize(), file_rows)
    signed = kernels.Q8Rows(kernel.codes ^ 0x80, kernel.d)   # flips the +128 back: codes read as unsigned q
    assert not torch.allclose(signed(torch.eye(576)).t(), part.dequantize(), atol=1e-3)


@needs_kernel
def test_the_fused_norm_and_swiglu_are_the_layers_own():
    """`normed_rows` and `glu_rows` round the RMS-normalised rows and SwiGLU's silu(gate) * up inside the kernel:
    the same products as `rows` over `llama.rms_norm` and `llama.glu` (up to a code moved by the fp32 ops'
    last bit). Controls: the norm's weight and SwiGLU's halves matter."""
    from specviz.engine.llama import glu, rms_norm

    weight = random_q4(96, 192, 4)
    linear = kernels.Q4Rows.of(weight)
    generator = torch.Generator().manual_seed(6)
    x = torch.randn(5, 192, generator=generator) * 3
    norm = torch.rand(192, generator=generator) + 0.5
    want = reference(rms_norm(x, norm, 1e-5), weight)
    got = linear.normed_rows(x, norm, 1e-5).double()
    assert torch.allclose(got, want, rtol=1e-3, atol=1e-3 * want.abs().max().item())
    assert not torch.allclose(linear.normed_rows(x, torch.ones(192), 1e-5).double(), want, rtol=1e-2)
    gate_up = torch.randn(5, 384, generator=generator) * 4
    want = reference(glu(gate_up), weight)
    got = linear.glu_rows(gate_up).double()
    assert torch.allclose(got, want, rtol=1e-3, atol=1e-3 * want.abs().max().item())
    assert not torch.allclose(linear.glu_rows(gate_up.flip(-1)).double(), want, rtol=1e-2)
    with pytest.raises(RuntimeError, match="one number per input"):
        linear.normed_rows(x, torch.ones(10), 1e-5)


@needs_kernel
@pytest.mark.parametrize("heads,kv,d", [(9, 3, 64), (14, 2, 64), (4, 4, 128), (8, 2, 32)])
def test_row_attention_is_sdpas_and_each_rows_bits_are_its_own(heads, kv, d):
    """`attend_rows` computes scaled_dot_product_attention's result (GQA, additive mask, causal, every key), and a
    row's output is bit for bit the same whether it comes alone or among other rows, under a mask that blocks
    slots or over exactly its keys: what makes greedy speculation on 4-bit weights write `ar`'s text. The query
    heads that share a kv head run together, up to four a pass (SmolLM2's 3, Qwen2.5's 7 in two passes, one, and
    head sizes 32 to 128). Control: torch's own kernel is not so (its bits move with the rows beside)."""
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(7)
    S, n = 150, 5
    q = torch.randn(1, heads, n, d, generator=generator)
    keys, values = torch.randn(1, kv, S, d, generator=generator), torch.randn(1, kv, S, d, generator=generator)
    blocked = torch.finfo(torch.float32).min
    mask = torch.zeros(1, 1, n, S)
    for i in range(n):   # a tree's rows: the prefix, then some of the new slots
        mask[0, 0, i, S - n:] = blocked
        mask[0, 0, i, S - n + i] = 0
        mask[0, 0, i, S - n] = 0
    want = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=0.125, enable_gqa=True)
    got = torch.ops.specviz.attend_rows(q, keys, values, mask, False, 0.125)
    assert torch.allclose(got, want, atol=1e-5)
    causal = torch.ops.specviz.attend_rows(q, keys[:, :, :n], values[:, :, :n], None, True, 0.125)
    assert torch.allclose(causal, F.scaled_dot_product_attention(q, keys[:, :, :n], values[:, :, :n], is_causal=True,
                                                                 scale=0.125, enable_gqa=True), atol=1e-5)
    for i in range(n):   # row i alone, over exactly the keys its mask allows, in slot order
        allowed = (mask[0, 0, i] == 0).nonzero().flatten()
        alone = torch.ops.specviz.attend_rows(q[:, :, i:i + 1], keys[:, :, allowed], values[:, :, allowed], None,
                                              False, 0.125)
        assert torch.equal(alone[:, :, 0], got[:, :, i]), i
    # The control: torch's kernel, given row 4 alone over its keys, differs in the last bits from its tree result.
    allowed = (mask[0, 0, 4] == 0).nonzero().flatten()
    alone = F.scaled_dot_product_attention(q[:, :, 4:], keys[:, :, allowed], values[:, :, allowed], scale=0.125,
                                           enable_gqa=True)
    assert not torch.equal(alone[:, :, 0], want[:, :, 4])


@needs_kernel
def test_outlier_inputs_are_multiplied_exactly():
    """Positions named as outliers (`quant.calibrate_outliers`: SmolLM2's few large dimensions) stay out of the
    int8 rounding: the kernel gives the rounding of the other positions plus the outliers' exact products, and
    a row whose outlier is 50x the rest comes out far closer to the exact product than without. The calibration
    finds the offline default's large dimensions, the same for every layer's input that carries them."""
    weight = random_q4(64, 256, 8)
    outliers = torch.tensor([3, 77, 200], dtype=torch.int32)
    plain, kept = kernels.Q4Rows.of(weight), kernels.Q4Rows.of(weight, outliers)
    generator = torch.Generator().manual_seed(9)
    x = torch.randn(6, 256, generator=generator)
    x[:, 77] *= 50
    others = x.clone()
    others[:, outliers.long()] = 0
    exact_part = x[:, outliers.long()].double() @ weight.dequantize()[:, outliers.long()].double().T
    want = reference(others, weight) + exact_part
    assert torch.allclose(kept.rows(x).double(), want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
    exact = x.double() @ weight.dequantize().double().T
    error_kept = (kept.rows(x).double() - exact).abs().mean()
    error_plain = (plain.rows(x).double() - exact).abs().mean()
    assert error_kept < 0.3 * error_plain, (error_kept, error_plain)   # control: without them, the outlier's block rounds coarsely
    with pytest.raises(RuntimeError, match="outside the rows"):
        kernels.Q4Rows(kept.codes, kept.d, kept.m, torch.tensor([300, 1, 2], dtype=torch.int32), kept.outlier_weights).rows(x)


@needs_kernel
def test_a_cut_head_gives_the_whole_heads_logits_at_its_rows():
    """`Q8Rows.cut` (a head over a vocabulary subset): the rows gathered from the tiles and tiled anew, the last
    tile padded with rows that never show, give bit for bit the whole head's logits at those tokens, in the order
    asked, repeats included, outliers and all. Control: a cut one row off gives other logits."""
    generator = torch.Generator().manual_seed(11)
    codes = torch.randint(-127, 128, (96, 64), dtype=torch.int8, generator=generator)
    d = (torch.rand(96, 2, generator=generator) * 0.01).half()
    head = kernels.Q8Rows.of(quant.Q8Weight(codes, d), torch.tensor([3, 40], dtype=torch.int32))
    x = torch.randn(3, 64, generator=generator)
    x[:, 40] *= 30
    whole = head(x)
    for ids in (torch.tensor([95, 0, 17, 17, 50]), torch.arange(0, 96, 3), torch.arange(96)):
        cut = head.cut(ids)
        assert cut.out_features == ids.numel() and cut(x).shape == (3, ids.numel())
        assert torch.equal(cut(x), whole[:, ids])
    assert not torch.equal(head.cut(torch.arange(1, 33))(x), whole[:, :32])


@needs_kernel
def test_a_layer_as_one_op_is_the_decoder_layer_bit_for_bit():
    """`kernels.Q4Layer` runs a whole `DecoderLayer` (q4 products, `attend_rows`) as one op: the same kernels in the same
    order, so its output and the K/V it writes are the torch-ops layer's bit for bit, causal or under a tree mask,
    into slots start.. or scattered `slots`, attending to [0, end) or to every slot."""
    from specviz.engine.llama import DecoderLayer, rotary_tables

    heads, kv, d, hidden, inter = 4, 2, 64, 256, 512
    products = [kernels.Q4Rows.of(random_q4(out, cols, seed), torch.tensor([5, 100], dtype=torch.int32))
                for seed, (out, cols) in enumerate([((heads + 2 * kv) * d, hidden), (hidden, heads * d),
                                                    (2 * inter, hidden), (hidden, inter)])]
    generator = torch.Generator().manual_seed(3)
    norms = [1 + 0.1 * torch.randn(hidden, generator=generator) for _ in range(2)]
    layer = DecoderLayer(*norms, *products, heads, kv, d, 1e-5, d ** -0.5, native.RowAttention())
    fused = kernels.Q4Layer(layer)
    assert kernels.Q4Layer.fits(layer) and not kernels.Q4Layer.fits(DecoderLayer(*norms, *products, heads, kv, d, 1e-5, 0.1))
    cos, sin = rotary_tables(torch.arange(64), 1.0 / 10000 ** (torch.arange(0, d, 2).float() / d), 1.0, torch.float32)
    cache = [torch.zeros(1, kv, 64, d) for _ in range(4)]

    def both(n, start, slots, end, mask, causal, positions):
        x = torch.randn(n, hidden, generator=generator)
        x[:, 7] *= 40
        c, s = cos[positions].unsqueeze(1), sin[positions].unsqueeze(1)
        want = layer(x, c, s, cache[0], cache[1], start, slots, end, mask, causal)
        got = fused(x, c, s, cache[2], cache[3], start, slots, end, mask, causal)
        assert torch.equal(got, want), (n, start, slots)
        assert torch.equal(cache[0], cache[2]) and torch.equal(cache[1], cache[3])

    both(20, 0, None, 20, None, True, torch.arange(20))                    # a prompt, causal
    both(1, 20, None, 21, None, False, torch.tensor([20]))                 # one decoding row
    tree = torch.zeros(1, 1, 5, 26)
    tree[..., 21:] = torch.full((5, 5), float("-inf")).triu(1)
    tree[0, 0, 3, 22] = torch.finfo(torch.float32).min                     # a sibling blocked
    both(5, 21, None, 26, tree, False, torch.tensor([21, 22, 22, 23, 23]))
    scattered = torch.full((1, 1, 3, 64), torch.finfo(torch.float32).min)
    scattered[..., :21] = 0
    scattered[0, 0, torch.arange(3), torch.tensor([40, 41, 42])] = 0
    both(3, 0, torch.tensor([40, 41, 42]), -1, scattered, False, torch.tensor([21, 21, 22]))   # a static shape's slots
