// Activation rows rounded for the integer panel kernels (int16 against int8 weights, u8 against
// w8a8), and the functions that round them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu/linear/layout.h"
#include "decodelab/aligned.h"

namespace decodelab {
namespace DECODELAB_ISA {

// Activation rows per register tile of the int8 and w8a8 panel kernels: each weight vector loaded
// (and, for int8, widened) serves this many rows. With VNNI one instruction per row and step, and
// 32 registers hold 16 rows' sums: 16 independent sums keep both VNNI units busy through the
// instruction's latency, where 8 just cover it.
#if defined(DECODELAB_VNNI512)
constexpr int kPanelTile = 16;
#else
constexpr int kPanelTile = 4;
#endif

// Rounded activation rows (int16 for int8 weights, u8 for w8a8): ld values per row (padded), the
// block scales of row t at scale[t * blocks ...]. The panel kernels read them one 4-byte unit (an
// int16 pair or a u8 quad: one step) per row at a time. Without VNNI the rows lie one after
// another, ld values apart (ld a multiple of 16: each row on a 32-byte boundary). With VNNI they
// are interleaved: rows in groups of kPanelTile (the last group holds the rest), and per step the
// group's units side by side, so one tile's units for a step are contiguous, at fixed offsets from
// one pointer. The tile then addresses its rows by displacement alone: with a row stride GCC 12
// kept the offsets in vector registers and moved them back on every step, and tiles of more than 8
// rows ran out of general registers.
template <typename E>
struct RoundedRows {
#if defined(DECODELAB_VNNI512)
  static constexpr bool kInterleaved = true;
#else
  static constexpr bool kInterleaved = false;
#endif
  std::vector<E, AlignedAllocator<E>> q;
  std::vector<float> scale;
  int ld = 0, blocks = 0, rows = 0;
  int units() const { return ld * static_cast<int>(sizeof(E)) / 4; }
  // Rows in row t's group (interleaved).
  int group_width(int t) const { return std::min(kPanelTile, rows - t / kPanelTile * kPanelTile); }
  // Bytes from row t's unit for one step to its unit for the next (interleaved: the next row's
  // unit is 4 bytes on, and a tile starts on a group).
  size_t step_stride(int t) const { return kInterleaved ? 4 * static_cast<size_t>(group_width(t)) : 4; }
  const char* unit(int t, int s) const { return const_cast<RoundedRows*>(this)->unit(t, s); }
  char* unit(int t, int s) {
    char* base = reinterpret_cast<char*>(q.data());
    if (!kInterleaved) return base + static_cast<size_t>(t) * ld * sizeof(E) + 4 * static_cast<size_t>(s);
    const int g = t / kPanelTile;
    return base + static_cast<size_t>(g) * kPanelTile * ld * sizeof(E) + step_stride(t) * s + 4 * (t % kPanelTile);
  }
};
using Int16Rows = RoundedRows<int16_t>;
using Int8Rows = RoundedRows<uint8_t>;

// x (T, n) rounded per block of kI8Block values into v: to 16-bit fixed point (against int8
// weights), or to 7-bit integers stored with an offset of kA8Offset (against w8a8 weights). A block
// holding NaN or inf gets a NaN scale, so it reaches the output as NaN, as fp32 arithmetic would.
void quantize_int16(const float* x, int T, int n, Int16Rows& v);
void quantize_u7(const float* x, int T, int n, Int8Rows& v);

}  // namespace DECODELAB_ISA
}  // namespace decodelab
