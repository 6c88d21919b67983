// AVX-512 helpers shared by the kernels: bf16 pairs and sums across lanes, in the AVX2 order so
// both give the same bits. Empty without AVX-512.
#pragma once

#include "cpu/simd_avx2.h"

#if defined(DECODELAB_AVX512)
// bf16_even and bf16_odd on 32 values (two rows' 16 each, one per 256-bit half).
static inline __m512 bf16_even512(__m512i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)); }
static inline __m512 bf16_odd512(__m512i v) {
  return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
// The sum of v's 16 lanes: lane j plus lane j + 8, then j + 4, j + 2, j + 1, the order
// reduce16 below keeps for each of its sixteen vectors, so both give the same bits.
static inline float hsum512(__m512 v) {
  return hsum256(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

// reduce16 below from its second step: w[r] holds 8 partial sums of row r in lanes 0-7 and of
// row r + 8 in lanes 8-15, each added as hsum256 adds an AVX2 accumulator's lanes.
static inline __m512 reduce16_halves(const __m512 w[8]) {
  __m512 z[4], y[2];
  for (int r = 0; r < 4; ++r)  // 128-bit lanes: rows r, r + 8, r + 4, r + 12; each j + (j + 4)
    z[r] = _mm512_add_ps(_mm512_shuffle_f32x4(w[r], w[r + 4], 0x88), _mm512_shuffle_f32x4(w[r], w[r + 4], 0xDD));
  for (int r = 0; r < 2; ++r)  // per 128-bit lane: two lanes of z[r]'s row, two of z[r + 2]'s; j + (j + 2)
    y[r] = _mm512_add_ps(_mm512_shuffle_ps(z[r], z[r + 2], 0x44), _mm512_shuffle_ps(z[r], z[r + 2], 0xEE));
  // j + (j + 1): rows 0 2 1 3, 8 10 9 11, 4 6 5 7, 12 14 13 15, put back in order
  const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], 0x88), _mm512_shuffle_ps(y[0], y[1], 0xDD));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15), s);
}
// Lane r: the sum of a[r]'s 16 lanes, added in hsum512's order: each step adds the upper half of
// every partial sum to its lower half for two vectors at once, 15 shuffle pairs in all instead of
// the 16 x 4 steps of separate sums.
static inline __m512 reduce16(const __m512 a[16]) {
  __m512 w[8];
  for (int r = 0; r < 8; ++r)  // lanes 0-7: row r, 8-15: row r + 8; each lane j + lane j + 8
    w[r] = _mm512_add_ps(_mm512_shuffle_f32x4(a[r], a[r + 8], 0x44), _mm512_shuffle_f32x4(a[r], a[r + 8], 0xEE));
  return reduce16_halves(w);
}

// out[k] = column k of the 16 x 16 matrix of 32-bit values whose row j is r[j] (r is overwritten).
static inline void transpose16x16(__m512i r[16], __m512i out[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {  // per 128-bit lane L: rows 2i, 2i+1 at columns 4L, 4L+1 / 4L+2, 4L+3
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // r[4i + c], lane L: rows 4i .. 4i+3 at column 4L + c
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int c = 0; c < 4; ++c) {  // column 4L + c: lane L of r[c], r[4 + c], r[8 + c], r[12 + c]
    const __m512i x0 = _mm512_shuffle_i32x4(r[c], r[4 + c], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i x1 = _mm512_shuffle_i32x4(r[c], r[4 + c], _MM_SHUFFLE(3, 1, 3, 1));
    const __m512i y0 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i y1 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], _MM_SHUFFLE(3, 1, 3, 1));
    out[c] = _mm512_shuffle_i32x4(x0, y0, _MM_SHUFFLE(2, 0, 2, 0));
    out[4 + c] = _mm512_shuffle_i32x4(x1, y1, _MM_SHUFFLE(2, 0, 2, 0));
    out[8 + c] = _mm512_shuffle_i32x4(x0, y0, _MM_SHUFFLE(3, 1, 3, 1));
    out[12 + c] = _mm512_shuffle_i32x4(x1, y1, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

// The sums of the two 256-bit halves of v, each reduced as hsum256 reduces an AVX2 accumulator.
static inline void hsum_halves(__m512 v, float* lo, float* hi) {
  *lo = hsum256(_mm512_castps512_ps256(v));
  *hi = hsum256(_mm512_extractf32x8_ps(v, 1));
}
#endif
