// The kernels behind linear() for each weight type and row count, which linear.cc chooses from.
// Each reads Linear's layouts (layout.h); y is (T, out) unless said otherwise.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/convert.h"
#include "cpu/kernels.h"
#include "cpu/linear/layout.h"
#include "cpu/linear/rounded_rows.h"
#include "decodelab/linear.h"

namespace decodelab {
namespace DECODELAB_ISA {

// --- one activation row (a decode step), fp32 and bf16: matrix-vector kernels (f32.cc, bf16.cc)

// Groups of 4 fp32 rows that f32_row_group<kF32RowGroups> computes at once: without AVX-512 two
// groups (eight row streams per thread, one load of x for eight rows) decode faster than one.
#if defined(DECODELAB_AVX512)
constexpr int kF32RowGroups = 1;
#else
constexpr int kF32RowGroups = 2;
#endif
// y[o] = W[o] . x for fp32 W, rows [4g, 4g + 4 NG) (NG groups, NG = 1 or kF32RowGroups). A row's
// sum does not depend on NG.
template <int NG>
void f32_row_group(const float* x, const Linear& L, int g, float* y);
// y[4g, 4g + 4) = W x for bf16 W, against x in even/odd order (split_even_odd).
void bf16_row_group(const float* xd, const Linear& L, int g, float* y);
#if defined(DECODELAB_AVX512)
// The two above for rows [o0, o0 + 16) at once on one thread, the same sums to the bit: a small
// layer decoded on one thread spends less on the sums across lanes, done sixteen rows at a time.
void f32_rows16(const float* x, const Linear& L, int o0, float* y);
void bf16_rows16(const float* xd, const Linear& L, int o0, float* y);
#endif

// --- a few rows (batched decode, beams, short prompts), fp32 and bf16: register tiles (tiles.cc)

// bf16 weights are read in place for up to this many activation rows (two passes over them) and
// widened to fp32 once per group for more: the shift and mask in every pass cost more than one
// widening from three passes on.
constexpr int kBf16DirectRows = 6;
// Whether small_group runs two groups of 4 weight rows together (8-row register tiles: AVX-512's
// 32 registers hold their 24 accumulators; AVX2's 16 do not), from kPairMinRows activation rows:
// the activation rows, which every group streams from L2, then serve 8 weight rows per load. At 2
// and 3 rows the weights stream from memory, and eight row streams per thread ran slower than four.
#if defined(DECODELAB_AVX512)
constexpr bool kPairGroups = true;
#else
constexpr bool kPairGroups = false;
#endif
constexpr int kPairMinRows = 4;
// Output rows [4g, 4g + R) (R = 4, or 8 with kPairGroups) of T activation rows x: fp32 read in
// place; bf16 read in place when `direct` (R = 4, xd the rows in even/odd order) or widened once
// into `scratch` (R * in floats, the calling thread's). The weights are read once for the batch.
template <int R>
void small_group(const float* x, const float* xd, bool direct, int T, const Linear& L, int g, float* y,
                 float* scratch);
// Widens bf16 group g (rows [4g, 4g + 4), padding rows included) into 4 fp32 rows of L.in values,
// row r at dst[r * L.in ...]: one pass over the group's contiguous block.
void widen_group(const Linear& L, int g, float* dst);

// --- many rows (prompts): oneDNN matmuls (bf16.cc, int8.cc)

// The two operands of a bf16 matmul, in scratch of the calling thread: the layer's weights as
// unpack(L, w) writes them (a work-sharing loop of the team, no barrier at its end) and x (T, in)
// rounded to bf16 (nearest even), both in one parallel region.
struct Bf16Operands {
  const uint16_t* w;
  const uint16_t* x;
};
Bf16Operands bf16_operands(const float* x, int T, const Linear& L, void (*unpack)(const Linear&, uint16_t*));
// bf16 weights widened to fp32 in a reused scratch, then the fp32 matmul, bias included.
void matmul_widened(const float* x, int T, const Linear& L, float* y);
// bf16 weights and x rounded to bf16, oneDNN's bf16 matmul (Linear::bf16_activations).
void matmul_bf16(const float* x, int T, const Linear& L, float* y);
// int8 weights as bf16 (every int8 value is one exactly) and x rounded to bf16, oneDNN's bf16
// matmul with the row scales applied to its fp32 sums (Linear::bf16_activations).
void matmul_i8_bf16(const float* x, int T, const Linear& L, float* y);

// --- int8 and w8a8 at every row count: integer panel kernels (int8.cc)

// Rows per call of the panel kernels: a block of the panel and of these rows stays in L1 while
// tiles of kPanelTile rows pass over it.
constexpr int kPanelRows = 48;
static_assert(kPanelRows % kPanelTile == 0, "chunks of rows start on a tile (and interleaved group)");
// y rows [t_lo, t_hi) (at most kPanelRows), panel p's outputs = scale * (x W^T) + b, block by block,
// from activations rounded by quantize_int16 (int8) or quantize_u7 (w8a8). The integer block sums
// are exact and the fp32 sum runs over the blocks in order: a row's result does not depend on how
// many rows share the call.
void panel_rows_i8(const Int16Rows& xr, int t_lo, int t_hi, const Linear& L, int p, float* y);
void panel_rows_a8(const Int8Rows& xr, int t_lo, int t_hi, const Linear& L, int p, float* y);
#if defined(__AVX2__) && defined(__FMA__) && !defined(DECODELAB_VNNI512)
// One activation row against kRowPanels panels at once, [p0, p0 + kRowPanels): a thread reads
// that many streams side by side, and the hardware prefetcher keeps more lines in flight. The same
// outputs to the bit as panel_rows.
constexpr int kRowPanels = 4;
void panels_row_i8(const Int16Rows& xr, const Linear& L, int p0, float* y);
void panels_row_a8(const Int8Rows& xr, const Linear& L, int p0, float* y);
#endif

// --- 4-bit weights (int4.cc): panels of blocks of kI4Block inputs, int8 activations per block

// Activation rows rounded to int8 per block of 32 (scale d = max |x| / 127, as llama.cpp's Q8_1):
// q (T, blocks x 32; zero past `in`), each block's d and d x sum(q) in s (T, blocks).
struct Q8Blocks {
  int blocks = 0;
  std::vector<int8_t> q;
  std::vector<float> d, s;
  std::vector<int32_t> sum16;  // the integer sum of each half block (16 values), two per block
};
void quantize_q8_blocks(const float* x, int T, int in, Q8Blocks& out);
// y rows [t_lo, t_hi), panel p's outputs of an I4 layer, bias included. Each block adds
// (its integer sum) x (step x d) and then min x s to the row's fp32 sum, blocks in order: a row's
// result does not depend on how many rows share the call.
void i4_panel_rows(const Q8Blocks& xb, int t_lo, int t_hi, const Linear& L, int p, float* y);

// --- 8-bit block weights (int8_blocks.cc): the same blocks and activations as I4, signed codes

// y rows [t_lo, t_hi), panel p's outputs of an I8Blocks or I5Blocks layer, bias included: per group its
// integer sum x (step x d), per block min x s where the layer has minima; blocks in order.
void i8b_panel_rows(const Q8Blocks& xb, int t_lo, int t_hi, const Linear& L, int p, float* y);

// The layer as a whole (linear.cc, quantize_weights.cc), what the public functions call, is
// declared with the other kernels of an instruction set in cpu/kernels.h.

}  // namespace DECODELAB_ISA
}  // namespace decodelab
