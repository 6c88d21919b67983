// AVX2 helpers shared by the kernels: horizontal sums and bf16 loads. Empty without AVX2.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "cpu/isa.h"

#if defined(__AVX2__)
static inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 8 bf16 values widened to fp32: the bits become the upper half of each fp32 lane.
static inline __m256 load8_bf16(const uint16_t* p) {
  const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}

// 16 bf16 values loaded as eight 32-bit lanes v: the even-indexed ones as fp32 (each lane shifted
// left 16) and the odd-indexed ones (each lane's low half masked off). Two cheap ALU operations
// instead of two widening shuffles, against fp32 operands in even/odd order (split_even_odd).
static inline __m256 bf16_even(__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }
static inline __m256 bf16_odd(__m256i v) {
  return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
// bf16_odd by two shifts instead of the mask, the same bits: for kernels whose registers are all
// taken, where the mask constant would be one too many and push accumulators onto the stack.
static inline __m256 bf16_odd_shifted(__m256i v) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_srli_epi32(v, 16), 16));
}
static inline __m256i load16_bf16(const uint16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
#endif
