// 8-bit block weights (WeightType::I8Blocks) at every row count: w = step q + min with int8 codes
// q, a step per group of 32 or 16 inputs and a minimum per 32 where the format has one, in the
// panels of layout.h; activations as I4's (int8 per block of 32, int4.cc), so a group's product is
//   (step dx) sum(q xq)   and a block's minimum adds   min (dx sum(xq)),
// the integer sums exact and the fp32 sums over groups and blocks in order, for any row count.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/linear/block_tiles.h"
#include "cpu/linear/kernels.h"

namespace decodelab {
namespace DECODELAB_ISA {

namespace {

template <int NT, int G>
void i8b_tile(const Q8Blocks& xb, int t0, const Linear& L, int p, float* y) {
  constexpr int kSteps = kI4Block / 4 / G;  // steps of 4 inputs per group
  const int nb = xb.blocks;
  const int8_t* w = L.w_i8b + static_cast<size_t>(p) * nb * kI8BlockBytes;
  const float* steps = L.scales + static_cast<size_t>(p) * nb * G * kPanel;
  const float* mins = L.mins ? L.mins + static_cast<size_t>(p) * nb * kPanel : nullptr;
  alignas(32) float f[NT][kPanel];
#if defined(__AVX2__) && defined(__FMA__)
  __m256 acc[NT][2];
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  for (int b = 0; b < nb; ++b) {
    const int8_t* wb = w + static_cast<size_t>(b) * kI8BlockBytes;
    for (int l = 0; l < kI8BlockBytes; l += 64) _mm_prefetch(reinterpret_cast<const char*>(wb) + 4096 + l, _MM_HINT_T0);
    const int8_t* xq = xb.q.data() + (static_cast<size_t>(t0) * nb + b) * kI4Block;
    for (int g = 0; g < G; ++g) {
      __m256i s[NT][2];
      for (int t = 0; t < NT; ++t) s[t][0] = s[t][1] = _mm256_setzero_si256();
      for (int k = g * kSteps; k < (g + 1) * kSteps; ++k) {
        // The products take unsigned bytes on their left: |w| there and x with w's sign on the
        // right (a pmaddubsw pair at most 2 x 128 x 127), summed in int32 per step.
        const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 64 * k));
        const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 64 * k + 32));
        const __m256i a0 = _mm256_abs_epi8(w0), a1 = _mm256_abs_epi8(w1);
        for (int t = 0; t < NT; ++t) {
          int32_t quad;
          std::memcpy(&quad, xq + static_cast<size_t>(t) * nb * kI4Block + 4 * k, 4);
          const __m256i xv = _mm256_set1_epi32(quad);
          s[t][0] = add_quad_products(s[t][0], a0, _mm256_sign_epi8(xv, w0));
          s[t][1] = add_quad_products(s[t][1], a1, _mm256_sign_epi8(xv, w1));
        }
      }
      const float* st = steps + (static_cast<size_t>(b) * G + g) * kPanel;
      for (int t = 0; t < NT; ++t) {
        const __m256 dx = _mm256_set1_ps(xb.d[static_cast<size_t>(t0 + t) * nb + b]);
        for (int h = 0; h < 2; ++h)
          acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t][h]), _mm256_mul_ps(_mm256_loadu_ps(st + 8 * h), dx),
                                      acc[t][h]);
      }
    }
    if (mins) {
      const float* mn = mins + static_cast<size_t>(b) * kPanel;
      for (int t = 0; t < NT; ++t) {
        const __m256 sx = _mm256_set1_ps(xb.s[static_cast<size_t>(t0 + t) * nb + b]);
        for (int h = 0; h < 2; ++h) acc[t][h] = _mm256_fmadd_ps(_mm256_loadu_ps(mn + 8 * h), sx, acc[t][h]);
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    _mm256_store_ps(f[t], acc[t][0]);
    _mm256_store_ps(f[t] + 8, acc[t][1]);
  }
#else
  for (int t = 0; t < NT; ++t) std::fill(f[t], f[t] + kPanel, 0.0f);
  for (int b = 0; b < nb; ++b) {
    const int8_t* wb = w + static_cast<size_t>(b) * kI8BlockBytes;
    for (int t = 0; t < NT; ++t) {
      const size_t xi = static_cast<size_t>(t0 + t) * nb + b;
      const int8_t* xq = xb.q.data() + xi * kI4Block;
      for (int r = 0; r < kPanel; ++r) {
        for (int g = 0; g < G; ++g) {
          int32_t s = 0;
          for (int j = g * kI4Block / G; j < (g + 1) * kI4Block / G; ++j) s += wb[i8b_byte(r, j)] * xq[j];
          const float stdx = steps[(static_cast<size_t>(b) * G + g) * kPanel + r] * xb.d[xi];
          f[t][r] = std::fma(static_cast<float>(s), stdx, f[t][r]);
        }
        if (mins) f[t][r] = std::fma(mins[static_cast<size_t>(b) * kPanel + r], xb.s[xi], f[t][r]);
      }
    }
  }
#endif
  store_tile<NT>(f, t0, L, p, y);
}

}  // namespace

void i8b_panel_rows(const Q8Blocks& xb, int t_lo, int t_hi, const Linear& L, int p, float* y) {
  for_each_tile(t_lo, t_hi, [&](auto nt, int t0) {
    if (L.i8b_groups == 2) i8b_tile<decltype(nt)::value, 2>(xb, t0, L, p, y);
    else i8b_tile<decltype(nt)::value, 1>(xb, t0, L, p, y);
  });
}

}  // namespace DECODELAB_ISA
}  // namespace decodelab
