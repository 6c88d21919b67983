// How reduced-precision weights lie in memory: bf16 groups of 4 rows, int8 and 4-bit panels of 16
// rows, and the blocks over which activations are rounded for the integer kernels.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cpu/isa.h"
#include "decodelab/linear.h"

namespace decodelab {
namespace DECODELAB_ISA {

// bf16 weights are stored in groups of 4 output rows (the rows a kernel call reads together): per
// 16 input columns, the 4 rows' 16 values side by side (128 bytes), columns zero-padded to a
// multiple of 16 and rows to a multiple of 4. A group is one contiguous stream instead of four rows
// far apart, which the hardware prefetcher follows as it follows fp32 rows.
// Element (o, i) is at (o / 4) * 4 * ld + (i / 16) * 64 + (o % 4) * 16 + i % 16, ld = bf16_ld(in).
static inline int bf16_ld(int in) { return (in + 15) / 16 * 16; }
static inline size_t bf16_group_elems(const Linear& L) { return static_cast<size_t>(4) * bf16_ld(L.in); }
static inline const uint16_t* bf16_group(const Linear& L, int g) { return L.w_bf16 + g * bf16_group_elems(L); }

// The R fp32 weight rows from group g (rows [4g, 4g + R), one or two groups): a short last group
// repeats its last row, so the kernels always run R. Returns how many rows are real.
template <int R = 4>
static int group_rows(const Linear& L, int g, const float* w[R]) {
  const int o0 = 4 * g, nr = std::min(R, L.out - o0);
  for (int r = 0; r < R; ++r) w[r] = L.w + static_cast<size_t>(o0 + std::min(r, nr - 1)) * L.in;
  return nr;
}

// Activations for int8 products (every row count) are rounded per block of kI8Block values: to
// 16-bit fixed point (block max |x| / 32767) against int8 weights, whose rounding error is two
// orders below the weights' own and whose products sum exactly in int32 with pmaddwd; or to 7-bit
// integers against w8a8 weights (see kA8Offset).
constexpr int kI8Block = 256;

// int8 weights (with 16-bit or 8-bit activations) are stored in panels of kPanel output rows, laid
// out for the integer products. The inputs go in steps of G = kI8Step (int8) or kA8Step (w8a8); per
// step, the G bytes of each of the panel's 16 rows, 16 * G bytes in all. One step of 8 rows then
// widens (int8) or loads (w8a8) into one vector, and the activation's G values, broadcast to every
// lane, multiply all 8 rows at once (pmaddwd on 16-bit pairs; pmaddubsw then pmaddwd against ones
// on byte quads). Each lane sums one output, so a result needs no horizontal sum, and a panel is
// one contiguous stream. Inputs are padded with zero weights to whole steps, outputs to whole panels.
constexpr int kPanel = 16;
constexpr int kI8Step = 2;
constexpr int kA8Step = 4;
static inline int panel_count(int out) { return (out + kPanel - 1) / kPanel; }
static inline int panel_steps(int in, int G) { return (in + G - 1) / G; }

// w8a8 activations: x rounded per block to q in [-63, 63] (scale = block max |x| / 63) and stored
// as u = q + 64 in [1, 127]. Seven bits, not eight, because AVX2 without VNNI multiplies bytes with
// pmaddubsw, which adds each pair of u8 x s8 products into a saturating int16: 2 * 127 * 127 fits,
// 2 * 255 * 127 does not. VNNI (vpdpbusd) would take 8 bits, but the format stays 7 so that a
// checkpoint gives the same logits on AVX2 and AVX-512 machines. Each panel's block sums start at
// -64 x the weights' block sums (Linear::wsums), which takes the offset back out.
constexpr int kA8Offset = 64;

// 4-bit weights (I4) are stored in panels of kPanel output rows too, per block of kI4Block inputs:
// 8 steps of 4 inputs, each step 32 bytes whose byte 4l + j holds input 4k + j of row l in its low
// nibble and of row 8 + l in its high one. One load, a mask and a shift give the step's bytes for
// rows 0-7 and 8-15, each lane one row's 4 values, against the 4 activations broadcast (pmaddubsw).
// Each (row, block) has a step and minimum at [(p * blocks + b) * 16 + row % 16] of `scales` and
// `mins` (fp32), or of `steps16` and `mins16` (halves, where every one of the layer's is a half;
// mins16 null where every minimum is -8 steps, as in Q4_0).
// Inputs are padded with zero values to whole blocks, outputs with zero rows to panels.
constexpr int kI4Block = 32;
constexpr int kI4BlockBytes = kPanel * kI4Block / 2;
static inline int i4_blocks(int in) { return (in + kI4Block - 1) / kI4Block; }
static inline size_t i4_panel_bytes(int in) { return static_cast<size_t>(i4_blocks(in)) * kI4BlockBytes; }
// Where value (row r of the panel, input j of the block) lies: byte offset in the block, and shift.
static inline int i4_byte(int r, int j) { return (j / 4) * 32 + (r % 8) * 4 + j % 4; }
static inline int i4_shift(int r) { return r < 8 ? 0 : 4; }

// 8-bit block weights (I8Blocks: a GGUF layer of 5 to 8 bits, or the head of a 4-bit file, kept
// exactly) lie in panels of kPanel rows per block of kI4Block inputs too: 8 steps of 4 inputs,
// each step 64 bytes, rows 0-7 in the first 32 and rows 8-15 in the next, row l's 4 int8 codes at
// 4 (l % 8) + j. Each (row, group of 32 / groups inputs) has an fp32 step at
// [((p * blocks + b) * groups + g) * 16 + row % 16] of `scales`; formats with a minimum have one
// per (row, block) in `mins`, laid out as I4's. Inputs pad with zero codes, outputs with zero rows.
constexpr int kI8BlockBytes = kPanel * kI4Block;
static inline int i8b_byte(int r, int j) { return (j / 4) * 64 + (r / 8) * 32 + (r % 8) * 4 + j % 4; }

// 5- and 6-bit block weights (I5Blocks: a GGUF layer in Q5_0, Q5_1, Q5_K or Q6_K under int4, in
// the file's 5.5 or 6.6 bits a weight rather than I8Blocks' 8.5) hold unsigned codes u = q + offset
// in 0..31 (0..63) per panel of kPanel rows and block of kI4Block inputs: the low 4 bits as I4's
// kI4BlockBytes, then per step of 4 inputs 8 bytes per plane of higher bits (bit 4, then bit 5),
// whose bit i5_bit(r, j) is that of I4's byte i4_byte(r, j) % 32 in the half (rows 0-7 or 8-15)
// it unpacks to. Steps and minima lie as I8Blocks' (Q6_K: two groups).
static inline int i5_block_bytes(int planes) { return kI4BlockBytes + kI4Block / 4 * 8 * planes; }
static inline int i5_bit(int r, int j) { return (r / 8) * 32 + (r % 8) * 4 + j % 4; }

}  // namespace DECODELAB_ISA
}  // namespace decodelab
