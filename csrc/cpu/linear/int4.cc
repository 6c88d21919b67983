// 4-bit weights (WeightType::I4) at every row count: w = step q + min per (row, block of 32), the
// step and minimum fp32 or halves (Linear::steps16), q in 0..15, in the panels of layout.h;
// activations rounded to int8 per block of 32 (scale max|x| / 127, as llama.cpp's Q8_1), so a
// block's dot product is
//   (step dx) sum(q xq) + min (dx sum(xq)),
// the integer sums exact and the fp32 sum over the blocks in order, the same for every row count.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "cpu/linear/block_tiles.h"
#include "cpu/linear/kernels.h"
#include "decodelab/f16.h"

namespace decodelab {
namespace DECODELAB_ISA {

void quantize_q8_blocks(const float* x, int T, int in, Q8Blocks& out) {
  const int nb = i4_blocks(in);
  out.blocks = nb;
  out.q.resize(static_cast<size_t>(T) * nb * kI4Block);
  out.d.resize(static_cast<size_t>(T) * nb);
  out.s.resize(static_cast<size_t>(T) * nb);
  out.sum16.resize(static_cast<size_t>(T) * nb * 2);
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < nb; ++b) {
      const float* xs = x + static_cast<size_t>(t) * in + b * kI4Block;
      const int n = std::min(kI4Block, in - b * kI4Block);
      int8_t* q = out.q.data() + (static_cast<size_t>(t) * nb + b) * kI4Block;
      float amax = 0.0f;
      int sum = 0;
#if defined(__AVX2__) && defined(__FMA__)
      if (n == kI4Block) {  // a whole block: the same values as the loop below, 8 at a time
        const __m256 sign = _mm256_set1_ps(-0.0f);
        __m256 v[4], m = _mm256_setzero_ps();
        for (int k = 0; k < 4; ++k) {
          v[k] = _mm256_loadu_ps(xs + 8 * k);
          m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[k]));
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        amax = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
        const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
        const __m256 vid = _mm256_set1_ps(id);
        __m256i i[4];  // x id rounded to nearest even, as lrint in the default rounding mode
        for (int k = 0; k < 4; ++k) i[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], vid));
        // |values| <= 127, so the saturating packs are exact; they work within 128-bit lanes, and
        // the permutation puts the 32 bytes back in order.
        const __m256i b8 = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
        const __m256i q8 = _mm256_permutevar8x32_epi32(b8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), q8);
        int32_t half[2];
        for (int hb = 0; hb < 2; ++hb) {
          const __m256i acc = _mm256_add_epi32(i[2 * hb], i[2 * hb + 1]);
          __m128i a = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
          a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0x4E));
          a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0xB1));
          half[hb] = _mm_cvtsi128_si32(a);
        }
        sum = half[0] + half[1];
        out.sum16[(static_cast<size_t>(t) * nb + b) * 2] = half[0];
        out.sum16[(static_cast<size_t>(t) * nb + b) * 2 + 1] = half[1];
        out.d[static_cast<size_t>(t) * nb + b] = d;
        out.s[static_cast<size_t>(t) * nb + b] = d * static_cast<float>(sum);
        continue;
      }
#endif
      for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(xs[i]));
      const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
      int32_t half[2] = {0, 0};
      for (int i = 0; i < n; ++i) {
        q[i] = static_cast<int8_t>(std::lrint(xs[i] * id));
        half[i / 16] += q[i];
      }
      sum = half[0] + half[1];
      out.sum16[(static_cast<size_t>(t) * nb + b) * 2] = half[0];
      out.sum16[(static_cast<size_t>(t) * nb + b) * 2 + 1] = half[1];
      std::fill(q + n, q + kI4Block, int8_t{0});
      out.d[static_cast<size_t>(t) * nb + b] = d;
      out.s[static_cast<size_t>(t) * nb + b] = d * static_cast<float>(sum);
    }
}

namespace {

// How a layer keeps its steps and minima: fp32, halves (Linear::steps16), halves of the steps
// alone where every minimum is -8 steps (Q4_0's centred codes: mins16 null, the minimum formed
// as -8 x step, an exact product, so the same values), or Q4_K's codes (Linear::k_sc: step =
// d sc, minimum = -dmin m, products exact in fp32, so the same values).
enum class Steps { F32, Half, Centred, Q4K };

// A panel's 16 steps and minima of block b (rows r, or 8 rows h * 8 .. h * 8 + 7 at once).
template <Steps K>
struct PanelSteps {
  const float *st = nullptr, *mn = nullptr;       // F32
  const uint16_t *st16 = nullptr, *mn16 = nullptr;  // Half
  const uint8_t *sc = nullptr, *m = nullptr;       // Q4K: per block and row
  const uint16_t *d = nullptr, *nd = nullptr;      // Q4K: per super-block and row

  PanelSteps(const Linear& L, int p, int nb) {
    const size_t s0 = static_cast<size_t>(p) * nb * kPanel;
    if constexpr (K == Steps::F32) st = L.scales + s0, mn = L.mins + s0;
    if constexpr (K == Steps::Half) st16 = L.steps16 + s0, mn16 = L.mins16 + s0;
    if constexpr (K == Steps::Centred) st16 = L.steps16 + s0;
    if constexpr (K == Steps::Q4K) sc = L.k_sc + s0, m = L.k_m + s0, d = L.k_d + s0 / 8, nd = L.k_dmin + s0 / 8;
  }
  float step(int b, int r) const {
    const size_t i = static_cast<size_t>(b) * kPanel + r;
    if constexpr (K == Steps::F32) return st[i];
    if constexpr (K == Steps::Half || K == Steps::Centred) return f16_to_f32(st16[i]);
    return f16_to_f32(d[static_cast<size_t>(b / 8) * kPanel + r]) * static_cast<float>(sc[i]);
  }
  float min(int b, int r) const {
    const size_t i = static_cast<size_t>(b) * kPanel + r;
    if constexpr (K == Steps::F32) return mn[i];
    if constexpr (K == Steps::Half) return f16_to_f32(mn16[i]);
    if constexpr (K == Steps::Centred) return -8.0f * f16_to_f32(st16[i]);
    return f16_to_f32(nd[static_cast<size_t>(b / 8) * kPanel + r]) * static_cast<float>(m[i]);
  }
#if defined(__AVX2__) && defined(__FMA__)
  static __m256 halves8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static __m256 codes8(const uint8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  __m256 step8(int b, int h) const {
    const size_t i = static_cast<size_t>(b) * kPanel + 8 * h;
    if constexpr (K == Steps::F32) return _mm256_loadu_ps(st + i);
    if constexpr (K == Steps::Half || K == Steps::Centred) return halves8(st16 + i);
    return _mm256_mul_ps(halves8(d + static_cast<size_t>(b / 8) * kPanel + 8 * h), codes8(sc + i));
  }
  __m256 min8(int b, int h) const {
    const size_t i = static_cast<size_t>(b) * kPanel + 8 * h;
    if constexpr (K == Steps::F32) return _mm256_loadu_ps(mn + i);
    if constexpr (K == Steps::Half) return halves8(mn16 + i);
    if constexpr (K == Steps::Centred) return _mm256_mul_ps(halves8(st16 + i), _mm256_set1_ps(-8.0f));
    return _mm256_mul_ps(halves8(nd + static_cast<size_t>(b / 8) * kPanel + 8 * h), codes8(m + i));
  }
#endif
};

#if defined(__AVX2__) && defined(__FMA__)
// A block's integer sums of 8 rows per vector, a step of four codes (u8, 0..15) times four
// activations (s8) at a time. VNNI adds each step's quads into int32 lanes in one instruction;
// AVX2 adds pmaddubsw pairs into int16 lanes (eight steps of at most 2 x 15 x 127 fit: 30480)
// and widens them once per block. The same integers either way.
struct BlockSums {
#if defined(DECODELAB_VNNI512)
  static __m256i add(__m256i s, __m256i codes, __m256i x) { return add_quad_products(s, codes, x); }
  static __m256i widen(__m256i s) { return s; }
#else
  static __m256i add(__m256i s, __m256i codes, __m256i x) { return _mm256_add_epi16(s, _mm256_maddubs_epi16(codes, x)); }
  static __m256i widen(__m256i s) { return _mm256_madd_epi16(s, _mm256_set1_epi16(1)); }
#endif
};
#endif

// f[t][r] (panel rows r = 0..15) for activation rows [t0, t0 + NT) over all blocks, then y.
template <int NT, Steps K>
void i4_tile(const Q8Blocks& xb, int t0, const Linear& L, int p, float* y) {
  const int nb = xb.blocks;
  const uint8_t* w = L.w_i4 + static_cast<size_t>(p) * nb * kI4BlockBytes;
  const PanelSteps<K> steps(L, p, nb);
  alignas(32) float f[NT][kPanel];
#if defined(__AVX2__) && defined(__FMA__)
  const __m256i low = _mm256_set1_epi8(0x0F);
  __m256 acc[NT][2];
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  for (int b = 0; b < nb; ++b) {
    const uint8_t* wb = w + static_cast<size_t>(b) * kI4BlockBytes;
    _mm_prefetch(reinterpret_cast<const char*>(wb) + 2048, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(wb) + 2048 + 64, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(wb) + 2048 + 128, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(wb) + 2048 + 192, _MM_HINT_T0);
    __m256i s[NT][2];
    for (int t = 0; t < NT; ++t) s[t][0] = s[t][1] = _mm256_setzero_si256();
    const int8_t* xq = xb.q.data() + (static_cast<size_t>(t0) * nb + b) * kI4Block;
    for (int k = 0; k < kI4Block / 4; ++k) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 32 * k));
      const __m256i lo = _mm256_and_si256(raw, low), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
      for (int t = 0; t < NT; ++t) {
        int32_t quad;
        std::memcpy(&quad, xq + static_cast<size_t>(t) * nb * kI4Block + 4 * k, 4);
        const __m256i xv = _mm256_set1_epi32(quad);
        s[t][0] = BlockSums::add(s[t][0], lo, xv);
        s[t][1] = BlockSums::add(s[t][1], hi, xv);
      }
    }
    const __m256 st[2] = {steps.step8(b, 0), steps.step8(b, 1)}, mn[2] = {steps.min8(b, 0), steps.min8(b, 1)};
    for (int t = 0; t < NT; ++t) {
      const size_t xi = static_cast<size_t>(t0 + t) * nb + b;
      const __m256 dx = _mm256_set1_ps(xb.d[xi]), sx = _mm256_set1_ps(xb.s[xi]);
      for (int h = 0; h < 2; ++h) {
        const __m256 sums = _mm256_cvtepi32_ps(BlockSums::widen(s[t][h]));
        acc[t][h] = _mm256_fmadd_ps(sums, _mm256_mul_ps(st[h], dx), acc[t][h]);
        acc[t][h] = _mm256_fmadd_ps(mn[h], sx, acc[t][h]);
      }
    }
  }
  store_acc<NT>(acc, f);
#else
  for (int t = 0; t < NT; ++t) std::fill(f[t], f[t] + kPanel, 0.0f);
  for (int b = 0; b < nb; ++b) {
    const uint8_t* wb = w + static_cast<size_t>(b) * kI4BlockBytes;
    for (int t = 0; t < NT; ++t) {
      const size_t xi = static_cast<size_t>(t0 + t) * nb + b;
      const int8_t* xq = xb.q.data() + xi * kI4Block;
      for (int r = 0; r < kPanel; ++r) {
        int32_t s = 0;
        for (int j = 0; j < kI4Block; ++j) s += ((wb[i4_byte(r, j)] >> i4_shift(r)) & 0x0F) * xq[j];
        const float stdx = steps.step(b, r) * xb.d[xi];
        f[t][r] = std::fma(static_cast<float>(s), stdx, f[t][r]);
        f[t][r] = std::fma(steps.min(b, r), xb.s[xi], f[t][r]);
      }
    }
  }
#endif
  store_tile<NT>(f, t0, L, p, y);
}

}  // namespace

void i4_panel_rows(const Q8Blocks& xb, int t_lo, int t_hi, const Linear& L, int p, float* y) {
  for_each_tile(t_lo, t_hi, [&](auto nt, int t0) {
    if (L.k_sc) i4_tile<decltype(nt)::value, Steps::Q4K>(xb, t0, L, p, y);
    else if (L.steps16 && !L.mins16) i4_tile<decltype(nt)::value, Steps::Centred>(xb, t0, L, p, y);
    else if (L.steps16) i4_tile<decltype(nt)::value, Steps::Half>(xb, t0, L, p, y);
    else i4_tile<decltype(nt)::value, Steps::F32>(xb, t0, L, p, y);
  });
}

}  // namespace DECODELAB_ISA
}  // namespace decodelab
