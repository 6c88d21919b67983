// What the block kernels (int4.cc, int8_blocks.cc) share around their arithmetic: activation rows
// in tiles of up to kBlockTile (each step's unpacked weights serve a whole tile), and a tile's
// panel outputs written out with the bias.
#pragma once

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "cpu/linear/layout.h"
#include "decodelab/linear.h"

namespace decodelab {
namespace DECODELAB_ISA {

constexpr int kBlockTile = 4;

// tile(std::integral_constant<int, NT>, t0) for rows [t_lo, t_hi): tiles of kBlockTile, then the rest.
template <class Tile>
inline void for_each_tile(int t_lo, int t_hi, Tile&& tile) {
  int t = t_lo;
  for (; t + kBlockTile <= t_hi; t += kBlockTile) tile(std::integral_constant<int, kBlockTile>{}, t);
  switch (t_hi - t) {
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
