// The two inner loops of fixed-order attention with AVX2 / AVX-512, each the same sums in the same
// order as the plain C++ in cpu/fixed_math.h (a multiply and an add per lane, no FMA), so every
// level gives the same bits: scores of one query against 8 or 16 keys at a time (each key's 16
// lanes over the head size, then summed in tree16's order for all keys at once), and one query's
// weighted values added (one output per lane, keys in order). Without AVX2 the plain loops run.
#pragma once

#include <cstdint>

#include "cpu/fixed_math.h"
#include "cpu/simd_avx512.h"

namespace decodelab {
namespace DECODELAB_ISA {
namespace fixed {

#if defined(__AVX2__)
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return load8_bf16(p); }
inline __m256 load8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
// Lane k: the sum of t[k]'s 8 lanes in hsum256's order (l + (l + 4), then + 2, then + 1), which is
// tree16's order after its first step.
inline __m256 reduce8(const __m256 t[8]) {
  __m256 z[4], w[2];
  for (int p = 0; p < 4; ++p)  // [t[2p] lanes j + (j + 4) | t[2p + 1] the same], j < 4
    z[p] = _mm256_add_ps(_mm256_permute2f128_ps(t[2 * p], t[2 * p + 1], 0x20),
                         _mm256_permute2f128_ps(t[2 * p], t[2 * p + 1], 0x31));
  for (int p = 0; p < 2; ++p)  // per 128-bit half: two sums j + (j + 2) of z[2p]'s key, two of z[2p + 1]'s
    w[p] = _mm256_add_ps(_mm256_shuffle_ps(z[2 * p], z[2 * p + 1], 0x44), _mm256_shuffle_ps(z[2 * p], z[2 * p + 1], 0xEE));
  // j + (j + 1): keys 0 2 4 6 | 1 3 5 7, put back in order
  const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(w[0], w[1], 0x88), _mm256_shuffle_ps(w[0], w[1], 0xDD));
  return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
#endif
#if defined(DECODELAB_AVX512)
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
inline __m512 load16(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
#endif

// s[j] = dot(q, k[j], hd) for j < n.
template <typename E>
void scores(const float* q, const E* const* k, int n, int hd, float* s) {
  int j = 0;
#if defined(DECODELAB_AVX512)
  if (hd % kLanes == 0)
    for (; j + 16 <= n; j += 16) {
      __m512 acc[16];
      for (int c = 0; c < 16; ++c) acc[c] = _mm512_setzero_ps();
      for (int i = 0; i < hd; i += 16) {
        const __m512 qv = _mm512_loadu_ps(q + i);
#pragma GCC unroll 16
        for (int c = 0; c < 16; ++c) acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(qv, load16(k[j + c] + i)));
      }
      _mm512_storeu_ps(s + j, reduce16(acc));
    }
#elif defined(__AVX2__)
  if (hd % kLanes == 0)
    for (; j + 8 <= n; j += 8) {
      __m256 lo[8], hi[8];
      for (int c = 0; c < 8; ++c) lo[c] = hi[c] = _mm256_setzero_ps();
      for (int i = 0; i < hd; i += 16) {
        const __m256 q0 = _mm256_loadu_ps(q + i), q1 = _mm256_loadu_ps(q + i + 8);
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
          lo[c] = _mm256_add_ps(lo[c], _mm256_mul_ps(q0, load8(k[j + c] + i)));
          hi[c] = _mm256_add_ps(hi[c], _mm256_mul_ps(q1, load8(k[j + c] + i + 8)));
        }
      }
      for (int c = 0; c < 8; ++c) lo[c] = _mm256_add_ps(lo[c], hi[c]);  // lane l + lane l + 8
      _mm256_storeu_ps(s + j, reduce8(lo));
    }
#endif
  for (; j < n; ++j) s[j] = dot(q, k[j], hd);
}

// o[i] = o[i] + w[j] v[j][i] for i < hd, for each j in order (from o = 0, the weighted values).
template <typename E>
void add_weighted_values(const float* w, const E* const* v, int n, int hd, float* o) {
  int i0 = 0;
#if defined(DECODELAB_AVX512)
  for (; i0 + 64 <= hd; i0 += 64) {
    __m512 acc[4];
    for (int c = 0; c < 4; ++c) acc[c] = _mm512_loadu_ps(o + i0 + 16 * c);
    for (int j = 0; j < n; ++j) {
      const __m512 wj = _mm512_set1_ps(w[j]);
      for (int c = 0; c < 4; ++c) acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(wj, load16(v[j] + i0 + 16 * c)));
    }
    for (int c = 0; c < 4; ++c) _mm512_storeu_ps(o + i0 + 16 * c, acc[c]);
  }
#endif
#if defined(__AVX2__)
  for (; i0 + 32 <= hd; i0 += 32) {
    __m256 acc[4];
    for (int c = 0; c < 4; ++c) acc[c] = _mm256_loadu_ps(o + i0 + 8 * c);
    for (int j = 0; j < n; ++j) {
      const __m256 wj = _mm256_set1_ps(w[j]);
      for (int c = 0; c < 4; ++c) acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(wj, load8(v[j] + i0 + 8 * c)));
    }
    for (int c = 0; c < 4; ++c) _mm256_storeu_ps(o + i0 + 8 * c, acc[c]);
  }
#endif
  for (int j = 0; j < n && i0 < hd; ++j)
    for (int i = i0; i < hd; ++i) o[i] = o[i] + w[j] * widen(v[j][i]);
}

// add_weighted_values for R rows at once over the same keys (R <= 4): each key's values loaded once
// for all the rows; each row's sums exactly as add_weighted_values makes them.
template <typename E, int R>
void add_weighted_values_rows(const float* const* w, const E* const* v, int n, int hd, float* const* o) {
  int i0 = 0;
#if defined(DECODELAB_AVX512)
  for (; i0 + 64 <= hd; i0 += 64) {
    __m512 acc[R][4];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_loadu_ps(o[r] + i0 + 16 * c);
    for (int j = 0; j < n; ++j) {
      __m512 x[4];
      for (int c = 0; c < 4; ++c) x[c] = load16(v[j] + i0 + 16 * c);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512 wj = _mm512_set1_ps(w[r][j]);
        for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_add_ps(acc[r][c], _mm512_mul_ps(wj, x[c]));
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) _mm512_storeu_ps(o[r] + i0 + 16 * c, acc[r][c]);
  }
#elif defined(__AVX2__)
  for (; i0 + 32 <= hd; i0 += 32) {
    __m256 acc[R][4];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) acc[r][c] = _mm256_loadu_ps(o[r] + i0 + 8 * c);
    for (int j = 0; j < n; ++j) {
      __m256 x[4];
      for (int c = 0; c < 4; ++c) x[c] = load8(v[j] + i0 + 8 * c);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256 wj = _mm256_set1_ps(w[r][j]);
        for (int c = 0; c < 4; ++c) acc[r][c] = _mm256_add_ps(acc[r][c], _mm256_mul_ps(wj, x[c]));
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) _mm256_storeu_ps(o[r] + i0 + 8 * c, acc[r][c]);
  }
#endif
  if (i0 < hd)  // the rest of each row's outputs (all of them without AVX2), row by row
    for (int r = 0; r < R; ++r) {
      const float* wr = w[r];
      float* orow = o[r];
      for (int j = 0; j < n; ++j)
        for (int i = i0; i < hd; ++i) orow[i] = orow[i] + wr[j] * widen(v[j][i]);
    }
}

}  // namespace fixed
}  // namespace DECODELAB_ISA
}  // namespace decodelab
