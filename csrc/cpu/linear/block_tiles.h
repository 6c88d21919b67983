// What the block kernels (int4.cc, int8_blocks.cc) share around their arithmetic: activation rows
// in tiles of up to kBlockTile (each step's unpacked weights serve a whole tile), and a tile's
// panel outputs written out with the bias.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "cpu/linear/kernels.h"
#include "cpu/linear/layout.h"
#include "decodelab/linear.h"

namespace decodelab {
namespace DECODELAB_ISA {

// Rows per tile: a tile row keeps four 256-bit accumulators, so AVX-512's 32 vector registers hold
// six rows (a speculative draft of 4-5 tokens verified in one pass) and AVX2's 16 hold four.
#if defined(DECODELAB_AVX512)
constexpr int kBlockTile = 6;
#else
constexpr int kBlockTile = 4;
#endif

#if defined(__AVX2__) && defined(__FMA__)
// acc plus, per 32-bit lane, the four products of u's unsigned bytes and s's signed ones: one
// vpdpbusd with VNNI; without, pmaddubsw (pairs into a saturating int16, which every caller keeps
// in range) and pmaddwd against ones. The same integers either way.
static inline __m256i add_quad_products(__m256i acc, __m256i u, __m256i s) {
#if defined(DECODELAB_VNNI512)
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
// A tile's accumulators (per activation row, panel rows 0-7 and 8-15) into f.
template <int NT>
inline void store_acc(const __m256 (&acc)[NT][2], float (&f)[NT][kPanel]) {
  for (int t = 0; t < NT; ++t) {
    _mm256_store_ps(f[t], acc[t][0]);
    _mm256_store_ps(f[t] + 8, acc[t][1]);
  }
}

// acc plus block b's minima (panel rows 0-7 and 8-15) times dx sum(xq) of each of the tile's rows.
template <int NT>
inline void add_minima(const __m256 (&mn)[2], const Q8Blocks& xb, int t0, int b, __m256 (&acc)[NT][2]) {
  for (int t = 0; t < NT; ++t) {
    const __m256 sx = _mm256_set1_ps(xb.s[static_cast<size_t>(t0 + t) * xb.blocks + b]);
    for (int h = 0; h < 2; ++h) acc[t][h] = _mm256_fmadd_ps(mn[h], sx, acc[t][h]);
  }
}
#endif

// tile(std::integral_constant<int, NT>, t0) for rows [t_lo, t_hi): tiles of kBlockTile, then the rest.
template <class Tile>
inline void for_each_tile(int t_lo, int t_hi, Tile&& tile) {
  int t = t_lo;
  for (; t + kBlockTile <= t_hi; t += kBlockTile) tile(std::integral_constant<int, kBlockTile>{}, t);
  switch (t_hi - t) {
#if defined(DECODELAB_AVX512)
    case 5: tile(std::integral_constant<int, 5>{}, t); break;
    case 4: tile(std::integral_constant<int, 4>{}, t); break;
#endif
    case 3: tile(std::integral_constant<int, 3>{}, t); break;
    case 2: tile(std::integral_constant<int, 2>{}, t); break;
    case 1: tile(std::integral_constant<int, 1>{}, t); break;
    default: break;
  }
}

// f[t][r], panel p's outputs of rows t0 .. t0 + NT, into y with the bias (the panel's real rows only).
template <int NT>
inline void store_tile(const float (&f)[NT][kPanel], int t0, const Linear& L, int p, float* y) {
  const int o0 = p * kPanel, nr = std::min(kPanel, L.out - o0);
  for (int t = 0; t < NT; ++t) {
    float* yt = y + static_cast<size_t>(t0 + t) * L.out + o0;
    for (int r = 0; r < nr; ++r) yt[r] = L.b ? f[t][r] + L.b[o0 + r] : f[t][r];
  }
}

}  // namespace DECODELAB_ISA
}  // namespace decodelab
