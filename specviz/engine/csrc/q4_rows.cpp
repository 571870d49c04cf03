// Q4_1 weights times a few rows of activations, on an AVX-512 VNNI CPU: llama.cpp's recipe
// (`ggml_vec_dot_q4_1_q8_1`) as one torch op, `specviz::q4_rows`, that TorchScript calls.
//
// Why: torch's own int4 CPU kernel (`_weight_int4pack_mm_for_cpu`) dequantises the 4-bit codes to
// floats and multiplies in floats, reading the weights again for every block of four rows, so a
// decoding tree's 8 rows cost 2.6x one row. Here the activations are rounded to int8 once per call,
// in blocks of 32 with one scale each (an outlier dimension stays inside its block), and each
// weight block is unpacked once and multiplied into every row with one VNNI instruction
// (`vpdpbusd`: 64 u8 x s8 products summed in fours).
//
// Layout (made by `specviz.engine.quant.Q4Rows`): output rows in tiles of 16, as llama.cpp's repacked
// kernels hold them, so that one vpdpbusd multiplies four codes of sixteen rows by one broadcast group of
// four activations and the sums land one output row per lane: no horizontal sums, and per block and
// activation row eight instructions for 512 products. For tile t, block b and group pair j (codes
// 8j .. 8j + 7 of the block), 64 bytes: byte 4i + k holds row 16t + i's code 8j + k in its low nibble and
// code 8j + 4 + k in its high one. d and m (Q4_1's, weight = d * q + m) are fp16 (out / 16, in / 32, 16).
//
// y[r][n] = sum_b d_nb * s_rb * sum_i q_nbi a_rbi  +  sum_b m_nb * s_rb * sum_i a_rbi   (a: row r's int8 codes)

#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && defined(__F16C__)
#define SPECVIZ_Q4_VNNI 1
#include <immintrin.h>
#endif

namespace {

constexpr int64_t kBlock = 32;

#ifdef SPECVIZ_Q4_VNNI

// Row r's activations as int8 codes (rows, in), per block the scale (rows, in / 32), and per block the scale
// times the codes' sum, which the min term multiplies. Buffers kept per thread and reused: at one decoding
// row three allocations a call cost as much as a small product.
struct QuantizedRows {
  std::vector<int8_t> codes;
  std::vector<float> scales, sums, outlier_values;
};

// The rows RMS-normalised (x * rsqrt(mean(x^2) + eps) * weight, the layer's norm in fp32) into `staged`:
// fused here, the norm's seven small ops a layer input cost more than the product at one row.
void normed_rows(const float* src, int64_t rows, int64_t in, const float* norm, float eps, float* staged) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = src + r * in;
    __m512 squares = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= in; i += 16) {
      const __m512 v = _mm512_loadu_ps(x + i);
      squares = _mm512_fmadd_ps(v, v, squares);
    }
    float total = _mm512_reduce_add_ps(squares);
    for (; i < in; ++i) total += x[i] * x[i];
    const float inv = 1.0f / std::sqrt(total / static_cast<float>(in) + eps);
    float* out = staged + r * in;
    for (i = 0; i < in; ++i) out[i] = x[i] * inv * norm[i];
  }
}

// e^x for 16 floats: Cephes' expf (x = n ln 2 + r, a degree-6 polynomial in r, then 2^n), ~1 ulp.
inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.0f)), _mm512_set1_ps(-88.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// SwiGLU's silu(gate) * up from rows (rows, 2 in) = [gate | up], the MLP's input to its down product, into
// `staged`: fused here, as the norm is, its four small ops (split, silu, product) cost more than a one-row product.
void glu_rows(const float* src, int64_t rows, int64_t in, float* staged) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = src + r * 2 * in;
    const float* up = gate + in;
    float* out = staged + r * in;
    int64_t i = 0;
    for (; i + 16 <= in; i += 16) {
      const __m512 g = _mm512_loadu_ps(gate + i);
      const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), g))));
      _mm512_storeu_ps(out + i, _mm512_mul_ps(silu, _mm512_loadu_ps(up + i)));
    }
    for (; i < in; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  }
}

// `outliers` (n_outliers input positions) are taken out of the rows before they are rounded: their values
// are kept in fp32 (`outlier_values`, rows x n_outliers) for the kernel to multiply exactly, and zeros go to
// int8 (`src` is the caller's staged copy, written here). SmolLM2's inputs carry a few dimensions tens of
// times larger than the rest, which would set their block's scale and leave the other 31 values two or three
// levels.
const QuantizedRows& quantize_rows(float* src, int64_t rows, int64_t in, const int32_t* outliers,
                                   int64_t n_outliers) {
  thread_local QuantizedRows q;
  const int64_t blocks = in / kBlock;
  q.codes.resize(rows * in);
  q.scales.resize(rows * blocks);
  q.sums.resize(rows * blocks);
  q.outlier_values.resize(rows * n_outliers);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < n_outliers; ++k) {
      q.outlier_values[r * n_outliers + k] = src[r * in + outliers[k]];
      src[r * in + outliers[k]] = 0.0f;
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const float* a = src + r * in + b * kBlock;
      const __m512 lo = _mm512_loadu_ps(a), hi = _mm512_loadu_ps(a + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
      const float scale = amax / 127.0f;
      const __m512 inv = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
      // Round to nearest even, as llama.cpp's AVX path does (`_mm256_cvtps_epi32`).
      const __m512i ilo = _mm512_cvtps_epi32(_mm512_mul_ps(lo, inv));
      const __m512i ihi = _mm512_cvtps_epi32(_mm512_mul_ps(hi, inv));
      int8_t* out = q.codes.data() + r * in + b * kBlock;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtsepi32_epi8(ilo));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16), _mm512_cvtsepi32_epi8(ihi));
      q.scales[r * blocks + b] = scale;
      q.sums[r * blocks + b] = scale * static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(ilo, ihi)));
    }
  }
  return q;
}

// Activation rows [0, R) times the output tiles [t0, t1): R accumulators of 16 output rows in registers.
// Bits 4: Q4_1 (codes as above, d and m per block). Bits 8: Q8_0, the tied head's (weight = d * q, q in
// -128..127), its codes stored as q + 128 in 0..255 (vpdpbusd's unsigned side) and m = -128 d.
// acc + the 16 rows' codes in w times four activation codes at p, broadcast: vpdpbusd with its memory operand
// broadcast ({1to16}), which GCC 12 does not fold from `_mm512_set1_epi32` (it emits a vpbroadcastd before each).
inline __m512i dot_broadcast(__m512i acc, __m512i w, const int32_t* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*p));
  return acc;
}

// Three things keep the rows' arithmetic under the weights' reading. The next tile's codes and tables are
// prefetched a block at a time while this tile computes: without it a tile's reads waited on its arithmetic and
// its arithmetic on its reads, so a 28 MB head cost the two added (8 rows: 1.5 ms where either alone is ~0.7).
// A product that streams (the 4-bit layers, a head past 16M weights: a target read once a forward, bigger than
// the L3) is prefetched non-temporal, so it does not push a draft's weights and the K/V out of the cache (paired,
// 8 prompts: ar 1.06x, Sequoia 1.04x, Lookahead 1.06x against the temporal prefetch).
// And the rows' eight-step vpdpbusd chains are interleaved (step g of every row, then step g + 1), so each row's
// chain waits on its own latency no longer: integer sums, the same bits in any order.
template <int R, int Bits>
void q4_rows_tiles(const uint8_t* codes, const uint16_t* d, const uint16_t* m, const int8_t* a,
                   const float* scales, const float* sums, const float* outlier_weights,
                   const float* outlier_values, int64_t n_outliers, float* y, int64_t in, int64_t out,
                   int64_t t0, int64_t t1, bool stream, int64_t prefetch_end) {
  const int64_t blocks = in / kBlock;
  constexpr int64_t kBlockBytes = Bits == 4 ? 256 : 512;
  const __m512i low_nibbles = _mm512_set1_epi8(0x0F);
  for (int64_t t = t0; t < t1; ++t) {
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    const bool ahead = t + 1 < prefetch_end;
    for (int64_t b = 0; b < blocks; ++b) {
      if (ahead) {
        const char* next = reinterpret_cast<const char*>(codes + ((t + 1) * blocks + b) * kBlockBytes);
        if (stream) {
          for (int64_t line = 0; line < kBlockBytes; line += 64) _mm_prefetch(next + line, _MM_HINT_NTA);
        } else {
          for (int64_t line = 0; line < kBlockBytes; line += 64) _mm_prefetch(next + line, _MM_HINT_T0);
        }
        if (b % 2 == 0) {   // a block's 16 fp16 d (and m) are 32 bytes: one line covers two blocks
          _mm_prefetch(reinterpret_cast<const char*>(d + ((t + 1) * blocks + b) * 16), _MM_HINT_T0);
          if constexpr (Bits == 4) _mm_prefetch(reinterpret_cast<const char*>(m + ((t + 1) * blocks + b) * 16), _MM_HINT_T0);
        }
      }
      __m512i w[8];
      if constexpr (Bits == 4) {
        const uint8_t* block = codes + (t * blocks + b) * 256;
        for (int j = 0; j < 4; ++j) {
          const __m512i packed = _mm512_loadu_si512(block + 64 * j);
          w[2 * j] = _mm512_and_si512(packed, low_nibbles);
          w[2 * j + 1] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low_nibbles);
        }
      } else {
        const uint8_t* block = codes + (t * blocks + b) * 512;
        for (int g = 0; g < 8; ++g) w[g] = _mm512_loadu_si512(block + 64 * g);
      }
      const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + (t * blocks + b) * 16)));
      const __m512 mv = Bits == 4
          ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + (t * blocks + b) * 16)))
          : _mm512_mul_ps(dv, _mm512_set1_ps(-128.0f));
      // w[g] holds codes 4g .. 4g + 3 of the block for the tile's 16 rows; a row's groups[g] its same four.
      __m512i dot[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) dot[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r)
          dot[r] = dot_broadcast(dot[r], w[g], reinterpret_cast<const int32_t*>(a + r * in + b * kBlock) + g);
      }
      // Unrolled, so that the R accumulators stay in registers (GCC kept them in memory: 1.3x at eight rows).
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512 scaled = _mm512_mul_ps(dv, _mm512_set1_ps(scales[r * blocks + b]));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r]), scaled, acc[r]);
        acc[r] = _mm512_fmadd_ps(mv, _mm512_set1_ps(sums[r * blocks + b]), acc[r]);
      }
    }
    // The outlier positions, exactly: the tile's 16 weights of each (fp32, the codes dequantised) times the row's value.
    for (int64_t k = 0; k < n_outliers; ++k) {
      const __m512 w = _mm512_loadu_ps(outlier_weights + (t * n_outliers + k) * 16);
      for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(w, _mm512_set1_ps(outlier_values[r * n_outliers + k]), acc[r]);
    }
    for (int r = 0; r < R; ++r) _mm512_storeu_ps(y + r * out + t * 16, acc[r]);
  }
}

// Rows [row0, row0 + R) times the output tiles [t0, t1); the tiles before `prefetch_end` prefetch their next one.
template <int R, int Bits>
void q4_rows_chunk(const uint8_t* codes, const uint16_t* d, const uint16_t* m, const QuantizedRows& q,
                   const float* outlier_weights, int64_t n_outliers, int64_t row0, float* y, int64_t in, int64_t out,
                   int64_t t0, int64_t t1, bool stream, int64_t prefetch_end) {
  q4_rows_tiles<R, Bits>(codes, d, m, q.codes.data() + row0 * in, q.scales.data() + row0 * (in / kBlock),
                         q.sums.data() + row0 * (in / kBlock), outlier_weights,
                         q.outlier_values.data() + row0 * n_outliers, n_outliers, y + row0 * out, in, out, t0, t1,
                         stream, prefetch_end);
}

template <int Bits>
void q4_rows_chunk_of(int64_t take, const uint8_t* codes, const uint16_t* d, const uint16_t* m, const QuantizedRows& q,
                      const float* ow, int64_t n_outliers, int64_t row, float* y, int64_t in, int64_t out,
                      int64_t t0, int64_t t1, bool stream, int64_t prefetch_end) {
  switch (take) {
    case 8: q4_rows_chunk<8, Bits>(codes, d, m, q, ow, n_outliers, row, y, in, out, t0, t1, stream, prefetch_end); break;
    case 7: q4_rows_chunk<7, Bits>(codes, d, m, q, ow, n_outliers, row, y, in, out, t0, t1, stream, prefetch_end); break;
    case 6: q4_rows_chunk<6, Bits>(codes, d, m, q, ow, n_outliers, row, y, in, out, t0, t1, stream, prefetch_end); break;
    case 5: q4_rows_chunk<5, Bits>(codes, d, m, q, ow, n_outliers, row, y, in, out, t0, t1, stream, prefetch_end); break;
    case 4: q4_rows_chunk<4, Bits>(codes, d, m, q, ow, n_outliers, row, y, in, out, t0, t1, stream, prefetch_end); break;
    case 3: q4_rows_chunk<3, Bits>(codes, d, m, q, ow, n_outliers, row, y, in, out, t0, t1, stream, prefetch_end); break;
    case 2: q4_rows_chunk<2, Bits>(codes, d, m, q, ow, n_outliers, row, y, in, out, t0, t1, stream, prefetch_end); break;
    default: q4_rows_chunk<1, Bits>(codes, d, m, q, ow, n_outliers, row, y, in, out, t0, t1, stream, prefetch_end); break;
  }
}

// Every row times the output tiles, in one pass over the weights. Up to eight rows (a register tile) run as one
// chunk over the thread's tiles. More rows run a tile at a time, chunk after chunk of eight, so a tile's weights
// (4.6 KB of Q4_1 codes for 576 inputs, 12 KB for 1536) come from memory for the first chunk and from the L1 for
// the others: in passes of eight over the whole matrix, 16 rows read the target's 100 MB twice.
template <int Bits>
void q4_rows_all(const uint8_t* codes, const uint16_t* d, const uint16_t* m, const QuantizedRows& q,
                 const float* ow, int64_t n_outliers, int64_t rows, float* y, int64_t in, int64_t out) {
  const bool stream = Bits == 4 || out * in > (int64_t{16} << 20);
  at::parallel_for(0, out / 16, 1, [&](int64_t t0, int64_t t1) {
    if (rows <= 8) {
      q4_rows_chunk_of<Bits>(rows, codes, d, m, q, ow, n_outliers, 0, y, in, out, t0, t1, stream, t1);
      return;
    }
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t row = 0; row < rows; row += 8) {   // the first chunk prefetches the next tile, the others find this one
        q4_rows_chunk_of<Bits>(std::min<int64_t>(rows - row, 8), codes, d, m, q, ow, n_outliers, row, y, in, out,
                               t, t + 1, stream, row == 0 ? t1 : 0);
      }
    }
  });
}

// Attention for fp32 rows, one query row at a time: q (1, heads, n, d) over keys, values (1, kv heads, S, d)
// (kv head h / groups serves query head h), under an additive mask (1, 1, n, S) whose blocked entries
// (below -1e30: the forwards block with the dtype's lowest number) are skipped, or causal (row i sees keys
// 0 .. S - n + i), or over every key.
//
// Why not scaled_dot_product_attention: its CPU kernel rounds a row's sums in an order that depends on how
// many rows it is given and on the mask's shape, so a token verified in a tree of five came out a last bit
// apart from the same token decoded alone, and the 4-bit path's int8 rounding of the activations grows a
// last bit into a moved code. Here each row's result depends on its own allowed keys only, in slot order:
// the same token at the same position gets the same bits in `ar`, in a tree and in a Jacobi window, so a
// greedy speculative decode on 4-bit weights writes `ar`'s text token for token. It is also faster at
// decoding's few rows (one row over 150 keys: 9 heads in a few microseconds).
// Lane i of the result: the sum of v[i]'s sixteen lanes (sixteen horizontal sums as one transposing tree, 15
// adds and 24 shuffles where sixteen `_mm512_reduce_add_ps` take about 100 instructions).
inline __m512 sum_lanes16(const __m512* v) {
  __m512 pairs[8], quads[4];
  for (int i = 0; i < 8; ++i)   // per 128-bit block: [a0 + a2, b0 + b2, a1 + a3, b1 + b3]
    pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; ++i)   // per block: v[4i] .. v[4i + 3], each summed over the block's four lanes
    quads[i] = _mm512_add_ps(_mm512_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 low = _mm512_add_ps(_mm512_shuffle_f32x4(quads[0], quads[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(quads[0], quads[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 high = _mm512_add_ps(_mm512_shuffle_f32x4(quads[2], quads[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_f32x4(quads[2], quads[3], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(low, high, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(low, high, _MM_SHUFFLE(3, 1, 3, 1)));
}

// The query heads that share one kv head (GQA), for one row, at once: each key and value is read once for all G of
// them (one at a time, a tree of eight rows re-read a 400-token cache from L2 72 times a layer). V: head_dim / 16.
// Each head's arithmetic is its own and in slot order, as one head alone would compute it.
template <int G, int V>
void attend_group(const float* q, float* out, int64_t head_stride, const float* keys, const float* values,
                  int64_t key_stride, int64_t value_stride, const int32_t* slots, int64_t count, float scale,
                  const float* mask_row, float* scores /* G x (count + 16) */) {
  const int64_t width = count + 16;
  __m512 qv[G][V];
  for (int h = 0; h < G; ++h)
    for (int w = 0; w < V; ++w) qv[h][w] = _mm512_loadu_ps(q + h * head_stride + 16 * w);
  // The scores sixteen keys at a time: each key's q . k in sixteen lanes, then one tree for their sixteen sums.
  __m512 best16[G];
  for (int h = 0; h < G; ++h) best16[h] = _mm512_set1_ps(-INFINITY);
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  for (int64_t c = 0; c < count; c += 16) {
    const int64_t live = std::min<int64_t>(count - c, 16);
    __m512 part[G][16];
    alignas(64) float added[16];
    for (int64_t kk = 0; kk < 16; ++kk) {
      if (kk >= live) {
        for (int h = 0; h < G; ++h) part[h][kk] = _mm512_setzero_ps();
        added[kk] = 0.0f;
        continue;
      }
      const int32_t slot = slots[c + kk];
      const float* k = keys + slot * key_stride;
      __m512 kv[V];
      for (int w = 0; w < V; ++w) kv[w] = _mm512_loadu_ps(k + 16 * w);
      for (int h = 0; h < G; ++h) {
        __m512 acc = _mm512_setzero_ps();
        for (int w = 0; w < V; ++w) acc = _mm512_fmadd_ps(qv[h][w], kv[w], acc);
        part[h][kk] = acc;
      }
      added[kk] = mask_row == nullptr ? 0.0f : mask_row[slot];
    }
    const __mmask16 lanes = live == 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << live) - 1);
    for (int h = 0; h < G; ++h) {
      __m512 score = _mm512_mul_round_ps(sum_lanes16(part[h]), _mm512_set1_ps(scale), kRound);
      if (mask_row != nullptr) score = _mm512_add_round_ps(score, _mm512_load_ps(added), kRound);
      _mm512_mask_storeu_ps(scores + h * width + c, lanes, score);
      best16[h] = _mm512_mask_max_ps(best16[h], lanes, best16[h], score);
    }
  }
  // Softmax, sixteen at a time, the last chunk masked: every score takes the same path whatever the count.
  float inverse[G];
  for (int h = 0; h < G; ++h) {
    const __m512 best = _mm512_set1_ps(_mm512_reduce_max_ps(best16[h]));
    float* sc = scores + h * width;
    __m512 sums = _mm512_setzero_ps();
    for (int64_t c = 0; c < count; c += 16) {
      const __mmask16 live = count - c >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (count - c)) - 1);
      const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, sc + c), best));
      _mm512_mask_storeu_ps(sc + c, live, e);
      sums = _mm512_add_ps(sums, _mm512_maskz_mov_ps(live, e));
    }
    const float total = _mm512_reduce_add_ps(sums);
    inverse[h] = count > 0 ? 1.0f / total : 0.0f;
  }
  // The values, each read once for the G heads.
  __m512 acc[G][V];
  for (int h = 0; h < G; ++h)
    for (int w = 0; w < V; ++w) acc[h][w] = _mm512_setzero_ps();
  for (int64_t c = 0; c < count; ++c) {
    const float* v = values + slots[c] * value_stride;
    __m512 vv[V];
    for (int w = 0; w < V; ++w) vv[w] = _mm512_loadu_ps(v + 16 * w);
    for (int h = 0; h < G; ++h) {
      const __m512 p = _mm512_set1_ps(scores[h * width + c]);
      for (int w = 0; w < V; ++w) acc[h][w] = _mm512_fmadd_ps(p, vv[w], acc[h][w]);
    }
  }
  for (int h = 0; h < G; ++h) {
    const __m512 inv = _mm512_set1_ps(inverse[h]);
    for (int w = 0; w < V; ++w) _mm512_storeu_ps(out + h * head_stride + 16 * w, _mm512_mul_ps(acc[h][w], inv));
  }
}

template <int V>
void attend_heads(const float* q_row, float* out_row, int64_t head_stride, int64_t g_count, const float* keys,
                  const float* values, int64_t key_stride, int64_t value_stride, const int32_t* slots, int64_t count,
                  float scale, const float* mask_row, float* scores) {
  // Up to four heads a pass (a pass's accumulators stay in registers), the rest in further passes.
  for (int64_t h0 = 0; h0 < g_count; h0 += 4) {
    const float* q = q_row + h0 * head_stride;
    float* o = out_row + h0 * head_stride;
    switch (std::min<int64_t>(g_count - h0, 4)) {
      case 4: attend_group<4, V>(q, o, head_stride, keys, values, key_stride, value_stride, slots, count, scale, mask_row, scores); break;
      case 3: attend_group<3, V>(q, o, head_stride, keys, values, key_stride, value_stride, slots, count, scale, mask_row, scores); break;
      case 2: attend_group<2, V>(q, o, head_stride, keys, values, key_stride, value_stride, slots, count, scale, mask_row, scores); break;
      default: attend_group<1, V>(q, o, head_stride, keys, values, key_stride, value_stride, slots, count, scale, mask_row, scores); break;
    }
  }
}

// Attention for one row and one kv head: the `groups` query heads at q_row + h * head_stride that share it (GQA),
// over the row's allowed keys (blocked ones skipped, not added as -inf), in slot order, into out_row + h * head_stride.
void attend_row_group(const float* q_row, float* out_row, int64_t head_stride, int64_t groups, const float* keys,
                      const float* values, int64_t key_stride, int64_t value_stride, const float* mask_row,
                      int64_t allowed_end, int64_t S, int64_t d, float scale, std::vector<float>& scores,
                      std::vector<int32_t>& slots) {
  slots.resize(S + 16);
  int64_t count = 0;
  for (int64_t j = 0; j < allowed_end; ++j) {
    if (mask_row == nullptr || mask_row[j] >= -1e30f) slots[count++] = static_cast<int32_t>(j);
  }
  scores.resize(4 * (count + 16));
  // head_dim is 32, 64 or 128 (the callers check it): V = head_dim / 16.
  switch (d / 16) {
    case 8: attend_heads<8>(q_row, out_row, head_stride, groups, keys, values, key_stride, value_stride, slots.data(), count, scale, mask_row, scores.data()); break;
    case 4: attend_heads<4>(q_row, out_row, head_stride, groups, keys, values, key_stride, value_stride, slots.data(), count, scale, mask_row, scores.data()); break;
    default: attend_heads<2>(q_row, out_row, head_stride, groups, keys, values, key_stride, value_stride, slots.data(), count, scale, mask_row, scores.data()); break;
  }
}

// Every row's attention, a task per row and kv head (its query heads read each key and value once): row i's
// query head h at q + i * q_row + h * head_stride, its output at out + i * out_row + h * head_stride; causal (row
// i sees slots 0 .. S - n + i) or under mask rows (n, S).
void attend_all(const float* q, int64_t q_row, float* out, int64_t out_row, int64_t head_stride, const at::Tensor& keys,
                const at::Tensor& values, const float* mask, int64_t n, int64_t heads, int64_t kv, int64_t S,
                int64_t d, bool causal, float scale) {
  const int64_t groups = heads / kv;
  const float* kp = keys.data_ptr<float>();
  const float* vp = values.data_ptr<float>();
  at::parallel_for(0, kv * n, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores;
    thread_local std::vector<int32_t> slots;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t g = task / n, i = task % n;
      const int64_t allowed_end = causal ? S - n + i + 1 : S;
      attend_row_group(q + i * q_row + g * groups * head_stride, out + i * out_row + g * groups * head_stride,
                       head_stride, groups, kp + g * keys.stride(1), vp + g * values.stride(1), keys.stride(2),
                       values.stride(2), mask == nullptr ? nullptr : mask + i * S, allowed_end, S, d, scale, scores,
                       slots);
    }
  });
}

#endif  // SPECVIZ_Q4_VNNI

at::Tensor attend_rows(const at::Tensor& q_in, const at::Tensor& keys_in, const at::Tensor& values_in,
                       const std::optional<at::Tensor>& mask_in, bool causal, double scale) {
  TORCH_CHECK(q_in.dim() == 4 && q_in.size(0) == 1 && keys_in.dim() == 4 && values_in.sizes() == keys_in.sizes()
              && q_in.scalar_type() == at::kFloat && keys_in.scalar_type() == at::kFloat
              && values_in.scalar_type() == at::kFloat, "attend_rows: fp32 q (1, heads, n, d), keys and values (1, kv, S, d)");
  const at::Tensor q = q_in.contiguous();
  const int64_t heads = q.size(1), n = q.size(2), d = q.size(3), kv = keys_in.size(1), S = keys_in.size(2);
  TORCH_CHECK((d == 32 || d == 64 || d == 128) && heads % kv == 0 && keys_in.size(3) == d,
              "attend_rows: head_dim 32, 64 or 128");
  const at::Tensor keys = keys_in.stride(3) == 1 ? keys_in : keys_in.contiguous();
  const at::Tensor values = values_in.stride(3) == 1 ? values_in : values_in.contiguous();
  at::Tensor mask;
  if (mask_in.has_value()) {
    mask = mask_in->to(at::kFloat);
    TORCH_CHECK(mask.dim() == 4 && mask.size(2) == n && mask.size(3) == S, "attend_rows: mask (1, 1, n, S)");
    mask = mask[0][0].contiguous();
  }
  at::Tensor out = at::empty({1, heads, n, d}, q.options());
#ifdef SPECVIZ_Q4_VNNI
  attend_all(q.data_ptr<float>(), d, out.data_ptr<float>(), d, n * d, keys, values,
             mask.defined() ? mask.data_ptr<float>() : nullptr, n, heads, kv, S, d, causal, static_cast<float>(scale));
  return out;
#else
  TORCH_CHECK(false, "attend_rows: built without AVX-512 VNNI");
#endif
}

// What the rows go through before they are rounded to int8: nothing, the layer's RMSNorm, or SwiGLU.
enum class Prologue { kNone, kNorm, kGlu };

template <int Bits>
at::Tensor rows_product(const at::Tensor& x_in, const at::Tensor& codes, const at::Tensor& d, const at::Tensor& m,
                        const at::Tensor& outliers, const at::Tensor& outlier_weights,
                        Prologue prologue = Prologue::kNone, const at::Tensor* norm = nullptr, double eps = 0.0) {
  TORCH_CHECK(x_in.dim() == 2 && x_in.scalar_type() == at::kFloat, "q4_rows: x must be (rows, in) fp32");
  TORCH_CHECK(codes.scalar_type() == at::kByte && d.scalar_type() == at::kHalf && m.scalar_type() == at::kHalf,
              "q4_rows: codes uint8, d and m fp16");
  const at::Tensor x = x_in.contiguous();
  const int64_t in = prologue == Prologue::kGlu ? x.size(1) / 2 : x.size(1);
  const int64_t out = d.dim() == 3 ? d.size(0) * 16 : 0;
  TORCH_CHECK(prologue != Prologue::kGlu || x.size(1) == 2 * in, "q4_rows: SwiGLU's rows are [gate | up]");
  const int64_t n_outliers = outliers.numel();
  TORCH_CHECK(outliers.scalar_type() == at::kInt && outliers.is_contiguous() && outlier_weights.scalar_type() == at::kFloat
              && outlier_weights.is_contiguous() && outlier_weights.numel() == n_outliers * out,
              "q4_rows: outliers int32 (k), their weights fp32 (out / 16, k, 16)");
  for (int64_t k = 0; k < n_outliers; ++k) {
    const int32_t at = outliers.data_ptr<int32_t>()[k];
    TORCH_CHECK(at >= 0 && at < in, "q4_rows: an outlier position outside the rows");
  }
  TORCH_CHECK(in % kBlock == 0 && out > 0 && codes.numel() * 8 == in * out * Bits && d.numel() * kBlock == in * out
              && codes.is_contiguous() && d.is_contiguous() && m.is_contiguous()
              && (Bits == 8 || m.numel() == d.numel()),
              "q4_rows: shapes do not match (in a multiple of 32, out of 16)");
#ifdef SPECVIZ_Q4_VNNI
  at::Tensor y = at::empty({x.size(0), out}, x.options());
  // The rows as they are rounded, in one buffer per thread: the prologue's output, or a copy of x (the outliers
  // are zeroed in it).
  thread_local std::vector<float> staged;
  staged.resize(x.size(0) * in);
  const float* src = x.data_ptr<float>();
  if (prologue == Prologue::kNorm) {
    const at::Tensor norm_weight = norm->to(at::kFloat).contiguous();
    TORCH_CHECK(norm_weight.numel() == in, "q4_rows: the norm's weight must have one number per input");
    normed_rows(src, x.size(0), in, norm_weight.data_ptr<float>(), static_cast<float>(eps), staged.data());
  } else if (prologue == Prologue::kGlu) {
    glu_rows(src, x.size(0), in, staged.data());
  } else {
    std::copy(src, src + x.size(0) * in, staged.begin());
  }
  const QuantizedRows& q = quantize_rows(staged.data(), x.size(0), in, outliers.data_ptr<int32_t>(), n_outliers);
  const float* ow = outlier_weights.data_ptr<float>();
  const auto* c = codes.data_ptr<uint8_t>();
  const auto* dp = reinterpret_cast<const uint16_t*>(d.data_ptr<at::Half>());
  const auto* mp = reinterpret_cast<const uint16_t*>(m.data_ptr<at::Half>());
  float* yp = y.data_ptr<float>();
  q4_rows_all<Bits>(c, dp, mp, q, ow, n_outliers, x.size(0), yp, in, out);
  return y;
#else
  TORCH_CHECK(false, "q4_rows: built without AVX-512 VNNI");
#endif
}

at::Tensor q4_rows(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& d, const at::Tensor& m,
                   const at::Tensor& outliers, const at::Tensor& outlier_weights) {
  return rows_product<4>(x, codes, d, m, outliers, outlier_weights);
}

at::Tensor q4_rows_normed(const at::Tensor& x, const at::Tensor& norm, double eps, const at::Tensor& codes,
                          const at::Tensor& d, const at::Tensor& m, const at::Tensor& outliers,
                          const at::Tensor& outlier_weights) {
  return rows_product<4>(x, codes, d, m, outliers, outlier_weights, Prologue::kNorm, &norm, eps);
}

at::Tensor q4_rows_glu(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& d, const at::Tensor& m,
                       const at::Tensor& outliers, const at::Tensor& outlier_weights) {
  return rows_product<4>(x, codes, d, m, outliers, outlier_weights, Prologue::kGlu);
}

at::Tensor q8_rows(const at::Tensor& x, const at::Tensor& codes, const at::Tensor& d, const at::Tensor& outliers,
                   const at::Tensor& outlier_weights) {
  return rows_product<8>(x, codes, d, d, outliers, outlier_weights);
}

#ifdef SPECVIZ_Q4_VNNI
// The rotary embedding of one head's row in place: x * cos + roll(x, d / 2) * signed_sin, as `llama.rotate` computes
// it in torch (two products and a sum, each rounded: the explicitly rounded intrinsics are never fused into an FMA).
void rotate_row(float* x, const float* cos, const float* sin, int64_t d, float* rolled) {
  const int64_t half = d / 2;
  std::copy(x + half, x + d, rolled);
  std::copy(x, x + half, rolled + half);
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  for (int64_t i = 0; i < d; i += 16) {
    const __m512 a = _mm512_mul_round_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(cos + i), kRound);
    const __m512 b = _mm512_mul_round_ps(_mm512_loadu_ps(rolled + i), _mm512_loadu_ps(sin + i), kRound);
    _mm512_storeu_ps(x + i, _mm512_add_round_ps(a, b, kRound));
  }
}
#endif

// One product's tensors as `Q4Rows` holds them: codes, d, m, outliers, outlier weights.
struct Q4Product {
  const at::Tensor &codes, &d, &m, &outliers, &outlier_weights;
  explicit Q4Product(const std::vector<at::Tensor>& t)
      : codes(t.at(0)), d(t.at(1)), m(t.at(2)), outliers(t.at(3)), outlier_weights(t.at(4)) {}
};

// A whole decoder layer over fp32 rows x (n, hidden), as `llama.RowsLayer.forward` computes it with `Q4Rows`
// products and `attend_rows`, op for op and bit for bit, in one call: at one decoding row the layer's ~20 small
// torch ops between the products (views, the rotation, cache writes, residual sums) cost about what its
// products do, each op its dispatch. cos, sin: (n, d) rotary tables (sin signed, `llama.rotary_tables`). The
// new rows' K/V go to slots start.. (or `slots`); attention reads slots [0, end) (every slot with end -1).
template <int Bits>
at::Tensor kernel_layer(const at::Tensor& x_in, const at::Tensor& cos_in, const at::Tensor& sin_in, const at::Tensor& keys,
                    const at::Tensor& values, int64_t start, const std::optional<at::Tensor>& slots, int64_t end,
                    const std::optional<at::Tensor>& mask_in, bool causal, const at::Tensor& input_norm,
                    const at::Tensor& post_norm, double eps, double scale, int64_t heads, int64_t kv,
                    const std::vector<at::Tensor>& qkv_t, const std::vector<at::Tensor>& o_t,
                    const std::vector<at::Tensor>& gate_up_t, const std::vector<at::Tensor>& down_t) {
  TORCH_CHECK(qkv_t.size() == 5 && o_t.size() == 5 && gate_up_t.size() == 5 && down_t.size() == 5,
              "q4_layer: each product is [codes, d, m, outliers, outlier_weights]");
  const Q4Product qkv_p(qkv_t), o_p(o_t), gate_up_p(gate_up_t), down_p(down_t);
  const at::Tensor x = x_in.contiguous();
  const int64_t n = x.size(0), d = keys.size(3), S = end >= 0 ? end : keys.size(2);
  TORCH_CHECK(keys.scalar_type() == at::kFloat && values.scalar_type() == at::kFloat && keys.stride(3) == 1
              && values.stride(3) == 1 && keys.sizes() == values.sizes() && keys.size(1) == kv
              && (d == 32 || d == 64 || d == 128) && heads % kv == 0 && S <= keys.size(2),
              "q4_layer: fp32 K/V (1, kv heads, slots, d), d 32, 64 or 128");
  const at::Tensor cos = cos_in.contiguous(), sin = sin_in.contiguous();
  TORCH_CHECK(cos.numel() == n * d && sin.numel() == n * d, "q4_layer: cos and sin (n, d)");
  at::Tensor mask;
  if (mask_in.has_value()) {
    mask = mask_in->to(at::kFloat);
    TORCH_CHECK(mask.dim() == 4 && mask.size(2) == n && mask.size(3) == S, "q4_layer: mask (1, 1, n, S)");
    mask = mask[0][0].contiguous();
  }
  at::Tensor slot_index;
  if (slots.has_value()) {
    slot_index = slots->to(at::kLong).contiguous();
    TORCH_CHECK(slot_index.numel() == n, "q4_layer: one slot per row");
  }
#ifdef SPECVIZ_Q4_VNNI
  // q|k|v of the normed rows, then q and k rotated in place, row by row and head by head.
  at::Tensor qkv = rows_product<Bits>(x, qkv_p.codes, qkv_p.d, qkv_p.m, qkv_p.outliers, qkv_p.outlier_weights,
                                   Prologue::kNorm, &input_norm, eps);
  const int64_t width = (heads + 2 * kv) * d;
  TORCH_CHECK(qkv.size(1) == width, "q4_layer: q|k|v has (heads + 2 kv heads) x d outputs");
  float* qp = qkv.data_ptr<float>();
  std::vector<float> rolled(d);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t h = 0; h < heads + kv; ++h) rotate_row(qp + r * width + h * d, cos.data_ptr<float>() + r * d,
                                                        sin.data_ptr<float>() + r * d, d, rolled.data());
  }
  // The new rows' keys and values into their slots.
  float* kp = keys.data_ptr<float>();
  float* vp = values.data_ptr<float>();
  for (int64_t r = 0; r < n; ++r) {
    const int64_t slot = slots.has_value() ? slot_index.data_ptr<int64_t>()[r] : start + r;
    TORCH_CHECK(slot >= 0 && slot < keys.size(2), "q4_layer: a slot outside the cache");
    for (int64_t g = 0; g < kv; ++g) {
      const float* k = qp + r * width + (heads + g) * d;
      std::copy(k, k + d, kp + g * keys.stride(1) + slot * keys.stride(2));
      std::copy(k + kv * d, k + kv * d + d, vp + g * values.stride(1) + slot * values.stride(2));
    }
  }
  // Attention into (n, heads, d): the o product's rows as they are.
  at::Tensor attn = at::empty({n, heads * d}, x.options());
  attend_all(qp, width, attn.data_ptr<float>(), heads * d, d, keys, values,
             mask.defined() ? mask.data_ptr<float>() : nullptr, n, heads, kv, S, d, causal, static_cast<float>(scale));
  // The two residual sums around the products (plain fp32 sums, as torch's).
  at::Tensor hidden = x + rows_product<Bits>(attn, o_p.codes, o_p.d, o_p.m, o_p.outliers, o_p.outlier_weights);
  at::Tensor gate_up = rows_product<Bits>(hidden, gate_up_p.codes, gate_up_p.d, gate_up_p.m, gate_up_p.outliers,
                                       gate_up_p.outlier_weights, Prologue::kNorm, &post_norm, eps);
  hidden.add_(rows_product<Bits>(gate_up, down_p.codes, down_p.d, down_p.m, down_p.outliers, down_p.outlier_weights,
                              Prologue::kGlu));
  return hidden;
#else
  TORCH_CHECK(false, "q4_layer, q8_layer: built without AVX-512 VNNI");
#endif
}


// Per row of fp32 logits (n, V): the k largest of scale * logits in descending order (ties: the lower index first,
// so index 0 is the first maximum, as `max(dim).indices` picks the greedy token), their indices, and
// logsumexp(scale * logits). One pass finds the top k (a chunk of sixteen is looked at lane by lane only where
// one beats the k-th best so far), one more sums the exponentials: a decoding step's greedy token, the
// narration's top three and its probabilities from one op, where torch's max, topk and logsumexp each read
// the 49k logits again (0.4-0.6 ms a step at one row).
#ifdef SPECVIZ_Q4_VNNI
void summarise_row(const float* x, int64_t V, int64_t k, float scale, float* values, int64_t* indices, float* lse) {
  for (int64_t j = 0; j < k; ++j) { values[j] = -INFINITY; indices[j] = -1; }
  const __m512 sv = _mm512_set1_ps(scale);
  auto offer = [&](float v, int64_t i) {
    if (!(v > values[k - 1])) return;   // NaN never enters
    int64_t at = k - 1;
    while (at > 0 && v > values[at - 1]) { values[at] = values[at - 1]; indices[at] = indices[at - 1]; --at; }
    values[at] = v; indices[at] = i;
  };
  int64_t i = 0;
  for (; i + 16 <= V; i += 16) {
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), sv);
    __mmask16 over = _mm512_cmp_ps_mask(v, _mm512_set1_ps(values[k - 1]), _CMP_GT_OQ);
    if (!over) continue;
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, v);
    while (over) {
      const int lane = __builtin_ctz(over);
      offer(lanes[lane], i + lane);
      over &= over - 1;
    }
  }
  for (; i < V; ++i) offer(x[i] * scale, i);
  for (int64_t j = 0; j < k; ++j) if (indices[j] < 0) indices[j] = j;   // a row of -inf or NaN: torch's first indices
  const float top = values[0];
  if (!std::isfinite(top)) { *lse = top; return; }
  const __m512 best = _mm512_set1_ps(top);
  __m512 sums = _mm512_setzero_ps();
  for (i = 0; i + 16 <= V; i += 16)
    sums = _mm512_add_ps(sums, exp16(_mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), sv), best)));
  float total = _mm512_reduce_add_ps(sums);
  for (; i < V; ++i) total += std::exp(x[i] * scale - top);
  *lse = top + std::log(total);
}
#endif

std::tuple<at::Tensor, at::Tensor, at::Tensor> logit_summary(const at::Tensor& logits_in, int64_t k, double scale) {
  TORCH_CHECK(logits_in.dim() == 2 && logits_in.scalar_type() == at::kFloat, "logit_summary: fp32 logits (n, V)");
  const at::Tensor logits = logits_in.contiguous();
  const int64_t n = logits.size(0), V = logits.size(1);
  TORCH_CHECK(k >= 1 && k <= V && k <= 64, "logit_summary: 1 <= k <= min(V, 64)");
  at::Tensor values = at::empty({n, k}, logits.options());
  at::Tensor indices = at::empty({n, k}, logits.options().dtype(at::kLong));
  at::Tensor lse = at::empty({n}, logits.options());
#ifdef SPECVIZ_Q4_VNNI
  const float* x = logits.data_ptr<float>();
  float* vp = values.data_ptr<float>();
  int64_t* ip = indices.data_ptr<int64_t>();
  float* lp = lse.data_ptr<float>();
  at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      summarise_row(x + r * V, V, k, static_cast<float>(scale), vp + r * k, ip + r * k, lp + r);
  });
  return {values, indices, lse};
#else
  TORCH_CHECK(false, "logit_summary: built without AVX-512 VNNI");
#endif
}

// The CPU's int8 multiply-accumulate peak, MACs per second: on each of torch's threads, twelve independent chains
// of vpdpbusd over registers (no memory traffic; 64 u8 x s8 products each), long enough to keep the units busy
// past their latency. The arithmetic floor under which no int8 product of rows can run (`engine.floors`).
double int8_peak(int64_t iters) {
#ifdef SPECVIZ_Q4_VNNI
  constexpr int kChains = 12;
  const int64_t threads = at::get_num_threads();
  std::vector<int32_t> sink(threads * 16, 0);
  volatile int8_t seed = 1;   // operands the compiler cannot fold
  const __m512i a = _mm512_set1_epi8(static_cast<char>(seed)), w = _mm512_set1_epi8(static_cast<char>(seed + 1));
  const auto start = std::chrono::steady_clock::now();
  at::parallel_for(0, threads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      __m512i acc[kChains];
      for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_epi32(c);
      for (int64_t i = 0; i < iters; ++i)
        for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbusd_epi32(acc[c], a, w);
      __m512i total = acc[0];
      for (int c = 1; c < kChains; ++c) total = _mm512_add_epi32(total, acc[c]);
      _mm512_storeu_si512(sink.data() + 16 * t, total);
    }
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  TORCH_CHECK(sink[0] != 0x7fffffff, "int8_peak: unreachable");   // keeps the sums alive
  return static_cast<double>(threads) * iters * kChains * 64 / seconds;
#else
  TORCH_CHECK(false, "int8_peak: built without AVX-512 VNNI");
#endif
}

bool q4_rows_built() {
#ifdef SPECVIZ_Q4_VNNI
  return true;
#else
  return false;
#endif
}

}  // namespace

TORCH_LIBRARY(specviz, lib) {
  lib.def("q4_rows(Tensor x, Tensor codes, Tensor d, Tensor m, Tensor outliers, Tensor outlier_weights) -> Tensor",
          &q4_rows);
  lib.def("q8_rows(Tensor x, Tensor codes, Tensor d, Tensor outliers, Tensor outlier_weights) -> Tensor", &q8_rows);
  lib.def("q4_rows_normed(Tensor x, Tensor norm, float eps, Tensor codes, Tensor d, Tensor m, Tensor outliers, "
          "Tensor outlier_weights) -> Tensor", &q4_rows_normed);
  lib.def("q4_rows_glu(Tensor x, Tensor codes, Tensor d, Tensor m, Tensor outliers, Tensor outlier_weights) -> Tensor",
          &q4_rows_glu);
  lib.def("attend_rows(Tensor q, Tensor keys, Tensor values, Tensor? mask, bool causal, float scale) -> Tensor",
          &attend_rows);
  lib.def("q4_layer(Tensor x, Tensor cos, Tensor sin, Tensor(a!) keys, Tensor(b!) values, int start, Tensor? slots, "
          "int end, Tensor? mask, bool causal, Tensor input_norm, Tensor post_norm, float eps, float scale, "
          "int heads, int kv, Tensor[] qkv, Tensor[] o, Tensor[] gate_up, Tensor[] down) -> Tensor", &kernel_layer<4>);
  // The layer over Q8_0 products (a feature draft's beside the 4-bit target, whose lists carry d where Q4_1's
  // carry m): the same function, so the two can never compute a layer differently.
  lib.def("q8_layer(Tensor x, Tensor cos, Tensor sin, Tensor(a!) keys, Tensor(b!) values, int start, Tensor? slots, "
          "int end, Tensor? mask, bool causal, Tensor input_norm, Tensor post_norm, float eps, float scale, "
          "int heads, int kv, Tensor[] qkv, Tensor[] o, Tensor[] gate_up, Tensor[] down) -> Tensor", &kernel_layer<8>);
  lib.def("logit_summary(Tensor logits, int k, float scale) -> (Tensor, Tensor, Tensor)", &logit_summary);
  lib.def("int8_peak(int iters) -> float", &int8_peak);
  lib.def("q4_rows_built() -> bool", &q4_rows_built);
}
