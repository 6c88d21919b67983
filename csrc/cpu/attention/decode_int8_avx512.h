// The AVX-512 kernels of decode attention over int8 caches (head sizes a multiple of 16): 16
// values per step, each row's scale applied here. Without AVX-512, stubs that decode.cc never
// calls (kInt8Attention512 is false).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "cpu/attention/prefetch.h"

namespace decodelab {
namespace DECODELAB_ISA {

#if defined(DECODELAB_AVX512)
// int8 caches on AVX-512 (head sizes a multiple of 16): 16 values per step, widened to fp32 by one
// vpmovsxbd and one convert, with each row's scale applied here. Through the AVX2 kernels above (8
// values per step, the scales applied by the caller) int8 reads were bound by the widening: the
// Llama 110M shape's decode attention at context 640 took longer than with a bf16 cache.
constexpr bool kInt8Attention512 = true;
inline __m512 load16_i8(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
// a[j][g] += key row j (of NR, hd apart) . q[g] lane by lane, over all hd values.
template <int NR, int G>
inline void key_rows_i8(const int8_t* kr, int hd, const float* const* q, __m512 (&a)[NR][G], Trickle& ahead) {
  for (int j = 0; j < NR; ++j)
    for (int g = 0; g < G; ++g) a[j][g] = _mm512_setzero_ps();
  for (int i = 0; i < hd; i += 16) {
    ahead.next();
    for (int j = 0; j < NR; ++j) {
      const __m512 w = load16_i8(kr + static_cast<size_t>(j) * hd + i);
      for (int g = 0; g < G; ++g) a[j][g] = _mm512_fmadd_ps(w, _mm512_loadu_ps(q[g] + i), a[j][g]);
    }
  }
}
// s[g][r] = scale * rs[r] * (key row r . q[g]) for G queries; m[g] = max(m[g], those).
template <int G>
void key_scores_i8(const int8_t* k, const float* rs, const float* const* q, int rows, int hd, float scale,
                   float* const* s, float* m, const void* pf, size_t pf_bytes) {
  Trickle ahead(pf, pf_bytes, rows / 4 * (hd / 16) + rows % 4 * (hd / 16));
  int r = 0;
  for (; r + 4 <= rows; r += 4) {
    __m512 a[4][G];
    key_rows_i8<4, G>(k + static_cast<size_t>(r) * hd, hd, q, a, ahead);
    const __m128 sc = _mm_mul_ps(_mm_loadu_ps(rs + r), _mm_set1_ps(scale));
    for (int g = 0; g < G; ++g) {
      __m256 h[4];
      for (int j = 0; j < 4; ++j)
        h[j] = _mm256_add_ps(_mm512_castps512_ps256(a[j][g]),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[j][g]), 1)));
      const __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(h[0], h[1]), _mm256_hadd_ps(h[2], h[3]));
      const __m128 s4 = _mm_mul_ps(_mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1)), sc);
      _mm_storeu_ps(s[g] + r, s4);
      for (int j = 0; j < 4; ++j) m[g] = std::max(m[g], s[g][r + j]);
    }
  }
  for (; r < rows; ++r) {
    __m512 a[1][G];
    key_rows_i8<1, G>(k + static_cast<size_t>(r) * hd, hd, q, a, ahead);
    for (int g = 0; g < G; ++g) {
      s[g][r] = _mm512_reduce_add_ps(a[0][g]) * scale * rs[r];
      m[g] = std::max(m[g], s[g][r]);
    }
  }
  ahead.rest();
}
// o[g][c0, c0 + 16 NV) += sum_r p[g][r] rs[r] value row r, the outputs in registers over all rows.
template <int G, int NV>
void values_chunk_i8(const int8_t* v, const float* rs, const float* const* p, int rows, int hd, int c0,
                     float* const* o, Trickle& ahead) {
  __m512 acc[G][NV];
  for (int g = 0; g < G; ++g)
    for (int e = 0; e < NV; ++e) acc[g][e] = _mm512_loadu_ps(o[g] + c0 + 16 * e);
  for (int r = 0; r < rows; ++r) {
    ahead.next();
    __m512 w[NV];
    for (int e = 0; e < NV; ++e) w[e] = load16_i8(v + static_cast<size_t>(r) * hd + c0 + 16 * e);
    for (int g = 0; g < G; ++g) {
      const __m512 pg = _mm512_set1_ps(p[g][r] * rs[r]);
      for (int e = 0; e < NV; ++e) acc[g][e] = _mm512_fmadd_ps(pg, w[e], acc[g][e]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int e = 0; e < NV; ++e) _mm512_storeu_ps(o[g] + c0 + 16 * e, acc[g][e]);
}
template <int G>
void add_values_i8(const int8_t* v, const float* rs, const float* const* p, int rows, int hd, float* const* o,
                   const void* pf, size_t pf_bytes) {
  Trickle ahead(pf, pf_bytes, rows * ((hd + 63) / 64));
  for (int c0 = 0; c0 < hd; c0 += 64) {  // up to 64 columns (4 vectors per output) per pass
    switch (std::min(64, hd - c0) / 16) {
      case 4: values_chunk_i8<G, 4>(v, rs, p, rows, hd, c0, o, ahead); break;
      case 3: values_chunk_i8<G, 3>(v, rs, p, rows, hd, c0, o, ahead); break;
      case 2: values_chunk_i8<G, 2>(v, rs, p, rows, hd, c0, o, ahead); break;
      default: values_chunk_i8<G, 1>(v, rs, p, rows, hd, c0, o, ahead); break;
    }
  }
  ahead.rest();
}
void key_scores_i8_heads(int G, const int8_t* k, const float* rs, const float* const* q, int rows, int hd,
                         float scale, float* const* s, float* m, const void* pf, size_t pf_bytes) {
  switch (G) {
    case 4: key_scores_i8<4>(k, rs, q, rows, hd, scale, s, m, pf, pf_bytes); break;
    case 3: key_scores_i8<3>(k, rs, q, rows, hd, scale, s, m, pf, pf_bytes); break;
    case 2: key_scores_i8<2>(k, rs, q, rows, hd, scale, s, m, pf, pf_bytes); break;
    default: key_scores_i8<1>(k, rs, q, rows, hd, scale, s, m, pf, pf_bytes); break;
  }
}
void add_values_i8_heads(int G, const int8_t* v, const float* rs, const float* const* p, int rows, int hd,
                         float* const* o, const void* pf, size_t pf_bytes) {
  switch (G) {
    case 4: add_values_i8<4>(v, rs, p, rows, hd, o, pf, pf_bytes); break;
    case 3: add_values_i8<3>(v, rs, p, rows, hd, o, pf, pf_bytes); break;
    case 2: add_values_i8<2>(v, rs, p, rows, hd, o, pf, pf_bytes); break;
    default: add_values_i8<1>(v, rs, p, rows, hd, o, pf, pf_bytes); break;
  }
}
#else
constexpr bool kInt8Attention512 = false;
inline void key_scores_i8_heads(int, const int8_t*, const float*, const float* const*, int, int, float, float* const*,
                                float*, const void*, size_t) {}
inline void add_values_i8_heads(int, const int8_t*, const float*, const float* const*, int, int, float* const*,
                                const void*, size_t) {}
#endif

}  // namespace DECODELAB_ISA
}  // namespace decodelab
