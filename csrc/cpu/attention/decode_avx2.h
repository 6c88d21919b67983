// The AVX2 kernels of decode attention: one query head's scores and weighted values over a slab of
// keys or values, or up to 4 grouped-query heads' in one pass; fp32, bf16 and int8 rows. Without
// AVX2, stubs that decode.cc never calls (kVectorAttention is false).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "cpu/attention/prefetch.h"
#include "cpu/simd_avx2.h"

namespace decodelab {
namespace DECODELAB_ISA {

#if defined(__AVX2__) && defined(__FMA__)
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return load8_bf16(p); }
inline __m256 load8(const int8_t* p) {  // an int8 cache row's values, before the row's scale
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// How the attention kernels read a row of keys or values, kStep values at a time. InOrder: 8
// values as they lie (fp32; bf16 widened by shuffles; int8 widened, the row's scale applied by the
// caller). EvenOdd: 16 bf16 values split by
// bf16_even / bf16_odd, against a query and an output kept in even/odd order (bf16 caches with head
// sizes a multiple of 16).
template <typename E>
struct InOrder {
  using Elem = E;
  static constexpr int kStep = 8;
  // a + row . q, lane by lane, over the step's values
  static __m256 dot(const E* row, const float* q, __m256 a) {
    return _mm256_fmadd_ps(load8(row), _mm256_loadu_ps(q), a);
  }
  // a[g] += row . q[g] + i, lane by lane, for G queries: the row's values loaded once
  template <int G>
  static void dots(const E* row, const float* const* q, int i, __m256* a) {
    const __m256 w = load8(row);
    for (int g = 0; g < G; ++g) a[g] = _mm256_fmadd_ps(w, _mm256_loadu_ps(q[g] + i), a[g]);
  }
  // o[g] += p[g] * row, lane by lane, for G outputs held in registers (kStep values: one vector each)
  template <int G>
  static void adds(const E* row, const float* p, __m256* o) {
    const __m256 w = load8(row);
    for (int g = 0; g < G; ++g) o[g] = _mm256_fmadd_ps(_mm256_set1_ps(p[g]), w, o[g]);
  }
  static constexpr int kVecs = 1;  // fp32 vectors per step
  // o += p[0] row0 + ... + p[n - 1] row(n - 1), the rows hd apart, over the step's values
  template <int N>
  static void add(const E* v, int hd, const __m256* p, float* o) {
    __m256 a = _mm256_loadu_ps(o);
    for (int j = 0; j < N; ++j) a = _mm256_fmadd_ps(p[j], load8(v + static_cast<size_t>(j) * hd), a);
    _mm256_storeu_ps(o, a);
  }
};
struct EvenOdd {
  using Elem = uint16_t;
  static constexpr int kStep = 16;
  static __m256 dot(const uint16_t* row, const float* qd, __m256 a) {
    const __m256i v = load16_bf16(row);
    a = _mm256_fmadd_ps(bf16_even(v), _mm256_loadu_ps(qd), a);
    return _mm256_fmadd_ps(bf16_odd(v), _mm256_loadu_ps(qd + 8), a);
  }
  template <int G>
  static void dots(const uint16_t* row, const float* const* qd, int i, __m256* a) {
    const __m256i v = load16_bf16(row);
    const __m256 e = bf16_even(v), o = bf16_odd(v);
    for (int g = 0; g < G; ++g) {
      a[g] = _mm256_fmadd_ps(e, _mm256_loadu_ps(qd[g] + i), a[g]);
      a[g] = _mm256_fmadd_ps(o, _mm256_loadu_ps(qd[g] + i + 8), a[g]);
    }
  }
  template <int G>
  static void adds(const uint16_t* row, const float* p, __m256* od) {  // od[2g], od[2g + 1]: even, odd
    const __m256i v = load16_bf16(row);
    const __m256 e = bf16_even(v), o = bf16_odd(v);
    for (int g = 0; g < G; ++g) {
      const __m256 pg = _mm256_set1_ps(p[g]);
      od[2 * g] = _mm256_fmadd_ps(pg, e, od[2 * g]);
      od[2 * g + 1] = _mm256_fmadd_ps(pg, o, od[2 * g + 1]);
    }
  }
  static constexpr int kVecs = 2;
  template <int N>
  static void add(const uint16_t* v, int hd, const __m256* p, float* od) {
    __m256 e = _mm256_loadu_ps(od), o = _mm256_loadu_ps(od + 8);
    for (int j = 0; j < N; ++j) {
      const __m256i w = load16_bf16(v + static_cast<size_t>(j) * hd);
      e = _mm256_fmadd_ps(p[j], bf16_even(w), e);
      o = _mm256_fmadd_ps(p[j], bf16_odd(w), o);
    }
    _mm256_storeu_ps(od, e);
    _mm256_storeu_ps(od + 8, o);
  }
};

// s[r] = scale * dot(key row r, q) for `rows` rows of hd values (hd % Read::kStep == 0); returns
// the largest. Eight rows share one reduction tree instead of a horizontal sum each. Along the way
// asks for the pf_bytes at pf (the next slab; none when pf is null).
template <typename Read>
float key_scores(const typename Read::Elem* k, const float* q, int rows, int hd, float scale, float* s,
                 const void* pf, size_t pf_bytes) {
  constexpr int kStep = Read::kStep;
  float mx = -std::numeric_limits<float>::infinity();
  Trickle ahead(pf, pf_bytes, rows / 8 * (hd / kStep) + rows % 8);
  int r = 0;
  for (; r + 8 <= rows; r += 8) {
    // Across the eight rows first, so the eight sums advance side by side, not one chain at a time.
    const auto* kr = k + static_cast<size_t>(r) * hd;
    __m256 a[8];
    for (int j = 0; j < 8; ++j) a[j] = _mm256_setzero_ps();
    for (int i = 0; i < hd; i += kStep) {
      ahead.next();
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) a[j] = Read::dot(kr + static_cast<size_t>(j) * hd + i, q + i, a[j]);
    }
    const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    __m256 s8 = _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
    s8 = _mm256_mul_ps(s8, _mm256_set1_ps(scale));
    _mm256_storeu_ps(s + r, s8);
    for (int j = 0; j < 8; ++j) mx = std::max(mx, s[r + j]);
  }
  for (; r < rows; ++r) {
    ahead.next();
    const auto* kr = k + static_cast<size_t>(r) * hd;
    __m256 a = _mm256_setzero_ps();
    for (int i = 0; i < hd; i += kStep) a = Read::dot(kr + i, q + i, a);
    s[r] = hsum256(a) * scale;
    mx = std::max(mx, s[r]);
  }
  ahead.rest();
  return mx;
}

// o (hd) += sum_r p[r] * value row r (hd % Read::kStep == 0): four rows per pass over o. Asks for
// the next slab along the way, as key_scores does.
template <typename Read>
void add_weighted_values(const typename Read::Elem* v, const float* p, int rows, int hd, float* o, const void* pf,
                         size_t pf_bytes) {
  constexpr int kStep = Read::kStep;
  Trickle ahead(pf, pf_bytes, rows / 4 * (hd / kStep) + rows % 4);
  int r = 0;
  for (; r + 4 <= rows; r += 4) {
    const auto* v0 = v + static_cast<size_t>(r) * hd;
    const __m256 pr[4] = {_mm256_set1_ps(p[r]), _mm256_set1_ps(p[r + 1]), _mm256_set1_ps(p[r + 2]),
                          _mm256_set1_ps(p[r + 3])};
    for (int i = 0; i < hd; i += kStep) {
      ahead.next();
      Read::template add<4>(v0 + i, hd, pr, o + i);
    }
  }
  for (; r < rows; ++r) {
    ahead.next();
    const __m256 pr = _mm256_set1_ps(p[r]);
    for (int i = 0; i < hd; i += kStep) Read::template add<1>(v + static_cast<size_t>(r) * hd + i, hd, &pr, o + i);
  }
  ahead.rest();
}
// Grouped-query attention: G (1 to 4) of the query heads that share a key/value head, in one pass
// over its slab instead of one pass each, so each key and value is loaded once for all of them.
// Heads that have a key/value head to themselves (GPT-2) keep key_scores / add_weighted_values
// above, which ran faster for them than these with G = 1 (the same results bit for bit).
// key_scores for G queries q[g] into s[g]; m[g] = max(m[g], the largest of s[g]).
template <typename Read, int G>
void key_scores_group(const typename Read::Elem* k, const float* const* q, int rows, int hd, float scale,
                      float* const* s, float* m, const void* pf, size_t pf_bytes) {
  constexpr int kStep = Read::kStep;
  Trickle ahead(pf, pf_bytes, rows / 4 * (hd / kStep) + rows % 4);
  int r = 0;
  for (; r + 4 <= rows; r += 4) {
    const auto* kr = k + static_cast<size_t>(r) * hd;
    __m256 a[4][G];
    for (int j = 0; j < 4; ++j)
      for (int g = 0; g < G; ++g) a[j][g] = _mm256_setzero_ps();
    for (int i = 0; i < hd; i += kStep) {
      ahead.next();
      for (int j = 0; j < 4; ++j) Read::template dots<G>(kr + static_cast<size_t>(j) * hd + i, q, i, a[j]);
    }
    for (int g = 0; g < G; ++g) {
      const __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(a[0][g], a[1][g]), _mm256_hadd_ps(a[2][g], a[3][g]));
      const __m128 s4 = _mm_mul_ps(_mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1)),
                                   _mm_set1_ps(scale));
      _mm_storeu_ps(s[g] + r, s4);
      for (int j = 0; j < 4; ++j) m[g] = std::max(m[g], s[g][r + j]);
    }
  }
  for (; r < rows; ++r) {
    ahead.next();
    const auto* kr = k + static_cast<size_t>(r) * hd;
    __m256 a[G];
    for (int g = 0; g < G; ++g) a[g] = _mm256_setzero_ps();
    for (int i = 0; i < hd; i += kStep) Read::template dots<G>(kr + i, q, i, a);
    for (int g = 0; g < G; ++g) {
      s[g][r] = hsum256(a[g]) * scale;
      m[g] = std::max(m[g], s[g][r]);
    }
  }
  ahead.rest();
}

// add_weighted_values for G outputs o[g] with weights p[g]: each step of every output stays in
// registers while all the rows pass, each row's values loaded once for the G heads.
template <typename Read, int G>
void add_weighted_values_group(const typename Read::Elem* v, const float* const* p, int rows, int hd,
                               float* const* o, const void* pf, size_t pf_bytes) {
  constexpr int kStep = Read::kStep, kVecs = Read::kVecs;
  // The next slab's requests go out every 4 rows: once per step they left in bursts of 32 lines
  // (fp32, 64-row blocks), more than the core's miss buffers hold.
  Trickle ahead(pf, pf_bytes, hd / kStep * ((rows + 3) / 4));
  for (int i = 0; i < hd; i += kStep) {
    __m256 acc[G * kVecs];
    for (int g = 0; g < G; ++g)
      for (int e = 0; e < kVecs; ++e) acc[g * kVecs + e] = _mm256_loadu_ps(o[g] + i + 8 * e);
    for (int r = 0; r < rows; ++r) {
      if (r % 4 == 0) ahead.next();
      float pr[G];
      for (int g = 0; g < G; ++g) pr[g] = p[g][r];
      Read::template adds<G>(v + static_cast<size_t>(r) * hd + i, pr, acc);
    }
    for (int g = 0; g < G; ++g)
      for (int e = 0; e < kVecs; ++e) _mm256_storeu_ps(o[g] + i + 8 * e, acc[g * kVecs + e]);
  }
  ahead.rest();
}
constexpr bool kVectorAttention = true;
#else
template <typename E>
struct InOrder {
  using Elem = E;
};
struct EvenOdd {
  using Elem = uint16_t;
};
template <typename Read>
float key_scores(const typename Read::Elem*, const float*, int, int, float, float*, const void*, size_t) {
  return 0.0f;
}
template <typename Read>
void add_weighted_values(const typename Read::Elem*, const float*, int, int, float*, const void*, size_t) {}
template <typename Read, int G>
void key_scores_group(const typename Read::Elem*, const float* const*, int, int, float, float* const*, float*,
                      const void*, size_t) {}
template <typename Read, int G>
void add_weighted_values_group(const typename Read::Elem*, const float* const*, int, int, float* const*,
                               const void*, size_t) {}
constexpr bool kVectorAttention = false;
#endif

}  // namespace DECODELAB_ISA
}  // namespace decodelab
