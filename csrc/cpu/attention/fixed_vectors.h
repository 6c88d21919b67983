// The two inner loops of fixed-order attention with AVX2 / AVX-512, each the same sums in the same
// order as the plain C++ in cpu/fixed_math.h (fixed::fma per lane), so every level gives the same
// bits: scores of one query against 8 or 16 keys at a time (each key's 16 lanes over the head
// size, then summed in tree16's order for all keys at once), and one query's weighted values
// added (one output per lane, keys in order); fp32 rows (a bf16 or int8 cache's are widened
// first). Without AVX2 the plain loops run.
#pragma once

#include "cpu/fixed_math.h"
#include "cpu/simd_avx512.h"

namespace decodelab {
namespace DECODELAB_ISA {
namespace fixed {

#if defined(__AVX2__)
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

// s[j] = dot_fma(q, k[j], hd) for j < n.
inline void scores(const float* q, const float* const* k, int n, int hd, float* s) {
  int j = 0;
#if defined(DECODELAB_AVX512)
  if (hd % kLanes == 0)
    for (; j + 16 <= n; j += 16) {
      __m512 acc[16];
      for (int c = 0; c < 16; ++c) acc[c] = _mm512_setzero_ps();
      for (int i = 0; i < hd; i += 16) {
        const __m512 qv = _mm512_loadu_ps(q + i);
#pragma GCC unroll 16
        for (int c = 0; c < 16; ++c) acc[c] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k[j + c] + i), acc[c]);
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
          lo[c] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(k[j + c] + i), lo[c]);
          hi[c] = _mm256_fmadd_ps(q1, _mm256_loadu_ps(k[j + c] + i + 8), hi[c]);
        }
      }
      for (int c = 0; c < 8; ++c) lo[c] = _mm256_add_ps(lo[c], hi[c]);  // lane l + lane l + 8
      _mm256_storeu_ps(s + j, reduce8(lo));
    }
#endif
  for (; j < n; ++j) s[j] = dot_fma(q, k[j], hd);
}

#if defined(DECODELAB_AVX512)
// kt[(d * 16) + j] = k[j][d] for d < hd (a multiple of 16) and j < 16, a zero row where j >= cnt:
// a block of keys with each dimension's 16 values side by side, by 16 x 16 transposes in registers.
inline void transpose_keys(const float* const* k, int cnt, int hd, float* kt) {
  alignas(64) static const float zeros[16] = {};
  for (int d0 = 0; d0 < hd; d0 += 16) {
    __m512i r[16], col[16];
    for (int j = 0; j < 16; ++j) r[j] = _mm512_castps_si512(j < cnt ? _mm512_loadu_ps(k[j] + d0) : _mm512_load_ps(zeros));
    transpose16x16(r, col);
    float* d = kt + static_cast<size_t>(d0) * 16;
    for (int c = 0; c < 16; ++c) _mm512_storeu_si512(d + 16 * c, col[c]);
  }
}

// s[j] = dot_fma(q, key j) for the 16 keys of a transposed block (transpose_keys): lane l of each
// key's sum kept in its own register, its 16 keys side by side, so tree16's steps are plain
// adds of those registers: the same bits as dot_fma() key by key, with no shuffles.
inline void scores_transposed(const float* q, const float* kt, int hd, float* s) {
  __m512 acc[16];
  for (int l = 0; l < 16; ++l) acc[l] = _mm512_setzero_ps();
  for (int d0 = 0; d0 < hd; d0 += 16) {
    const float* kd = kt + static_cast<size_t>(d0) * 16;
#pragma GCC unroll 16
    for (int l = 0; l < 16; ++l) acc[l] = _mm512_fmadd_ps(_mm512_set1_ps(q[d0 + l]), _mm512_loadu_ps(kd + 16 * l), acc[l]);
  }
  for (int l = 0; l < 8; ++l) acc[l] = _mm512_add_ps(acc[l], acc[l + 8]);
  for (int l = 0; l < 4; ++l) acc[l] = _mm512_add_ps(acc[l], acc[l + 4]);
  _mm512_storeu_ps(s, _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3])));
}

#endif

// o[r][i] = fma(w[r][j], v[j][i], o[r][i]) for i < hd, for each j in order (from o = 0: the
// weighted values), for R rows over the same keys (1 <= R <= 4): each key's values loaded once
// for all the rows.
template <int R>
void add_weighted_values(const float* const* w, const float* const* v, int n, int hd, float* const* o) {
  int i0 = 0;
#if defined(DECODELAB_AVX512)
  for (; i0 + 64 <= hd; i0 += 64) {
    __m512 acc[R][4];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_loadu_ps(o[r] + i0 + 16 * c);
    for (int j = 0; j < n; ++j) {
      __m512 x[4];
      for (int c = 0; c < 4; ++c) x[c] = _mm512_loadu_ps(v[j] + i0 + 16 * c);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512 wj = _mm512_set1_ps(w[r][j]);
        for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_fmadd_ps(wj, x[c], acc[r][c]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) _mm512_storeu_ps(o[r] + i0 + 16 * c, acc[r][c]);
  }
#endif
#if defined(__AVX2__)
  for (; i0 + 32 <= hd; i0 += 32) {
    __m256 acc[R][4];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < 4; ++c) acc[r][c] = _mm256_loadu_ps(o[r] + i0 + 8 * c);
    for (int j = 0; j < n; ++j) {
      __m256 x[4];
      for (int c = 0; c < 4; ++c) x[c] = _mm256_loadu_ps(v[j] + i0 + 8 * c);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256 wj = _mm256_set1_ps(w[r][j]);
        for (int c = 0; c < 4; ++c) acc[r][c] = _mm256_fmadd_ps(wj, x[c], acc[r][c]);
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
        for (int i = i0; i < hd; ++i) orow[i] = fma(wr[j], v[j][i], orow[i]);
    }
}

}  // namespace fixed
}  // namespace DECODELAB_ISA
}  // namespace decodelab
