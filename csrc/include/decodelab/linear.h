// Linear layers: the weight types and their layouts, conversion from fp32, and y = x W^T + b.
// Shapes are row-major; comments give them as (rows, cols).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "decodelab/aligned.h"

namespace decodelab {

// A linear layer y = x W^T + b. The kernels read weights (out, in), as torch.nn.Linear stores
// them. GPT-2's Conv1D stores (in, out): its fp32 weights are transposed once at load, and the
// quantizers read that layout directly; `in_major` marks such a source until then.
// I8A8 keeps the int8 weights of I8 and also rounds the activations to 8-bit integers. I4 keeps
// 4-bit values per block of 32 inputs with a scale and a minimum each (GGUF's Q4_1 values), and
// rounds the activations to int8 per block of 32 (as llama.cpp's Q8_1). I8Blocks is a layer's
// storage, not a model dtype: a GGUF file's 5- to 8-bit layers (and a 4-bit file's head) under
// int4, their int8 codes kept exactly with a step per 32 or 16 inputs (and a minimum per 32 where
// the format has one), against the same activations as I4. I5Blocks stores a 5-bit format's layer
// (Q5_0, Q5_1, Q5_K) the same way in 5 bits a code instead of 8: the same integers and results.
enum class WeightType { F32, BF16, I8, I8A8, I4, I8Blocks, I5Blocks };

// Reduced-precision weights are always (out, in): bf16 in groups of 4 rows interleaved per 16
// columns, or int8 with one fp32 scale per output row (symmetric, scale = max|w| / 127), stored in
// panels of 16 rows (both layouts: csrc/cpu/linear/layout.h). Activations stay fp32 with fp32 and
// bf16 weights; the int8 kernel rounds them to 16-bit fixed point per block of 256 values, the
// I8A8 kernel to 7-bit integers per block of 256, at every row count (cpu/linear/rounded_rows.h).
struct Linear {
  const float* w = nullptr;
  const float* b = nullptr;  // (out) or null
  int in = 0;
  int out = 0;
  bool in_major = false;     // true: w is (in, out); only before quantize_linear
  WeightType type = WeightType::F32;
  const uint16_t* w_bf16 = nullptr;  // in groups of 4 rows
  const int8_t* w_i8 = nullptr;  // in panels of 16 rows
  const float* scales = nullptr;  // (out), int8 and w8a8; I4: see mins
  const int32_t* wsums = nullptr; // I8A8 only: each panel's offset sums per block of 256 inputs
  const uint8_t* w_i4 = nullptr;  // I4: in panels of 16 rows, per block of 32 inputs (cpu/linear/layout.h)
  const float* mins = nullptr;    // I4: per panel, block and row, the minimum; `scales` the step, likewise
  // I4 from a file whose steps and minima are all halves (Q4_0, Q4_1): the same values as IEEE
  // half bits, laid out as scales and mins (both null then), a sixth fewer bytes per decode step;
  // mins16 null too where every minimum is -8 steps (Q4_0): the kernels form it from the step.
  const uint16_t* steps16 = nullptr;
  const uint16_t* mins16 = nullptr;
  // I4 from Q4_K: the file's own scale codes instead (scales, mins and the halves above null): the
  // 6-bit step and minimum codes per panel, block and row (k_sc, k_m), and the half d and -dmin per
  // panel, super-block of 8 blocks and row (k_d, k_dmin); step = d sc and minimum = -dmin m, the
  // same fp32 values in 4.625 bits a weight instead of 6.
  const uint8_t* k_sc = nullptr;
  const uint8_t* k_m = nullptr;
  const uint16_t* k_d = nullptr;
  const uint16_t* k_dmin = nullptr;
  // I8Blocks keeps its steps (and minima) like I4: fp32 in scales and mins; or as halves in steps16
  // and mins16 where the file's are halves (Q8_0, Q5_0, Q5_1); or, for Q6_K, the file's signed
  // 8-bit scale per panel, block, group and row (k_sc8) and half d per panel, super-block and row
  // (k_d): step = d sc, exact in fp32.
  const int8_t* k_sc8 = nullptr;
  const int8_t* w_i8b = nullptr;  // I8Blocks: in panels of 16 rows per block of 32 inputs; mins may be null
  int i8b_groups = 1;             // I8Blocks: steps per block of 32 inputs (Q6_K: 2)
  // I5Blocks: unsigned 5- or 6-bit codes in panels (cpu/linear/layout.h), steps and minima as
  // I8Blocks'; the code is q + i5_offset (Q5_0's centred q - 16 is kept as q, offset 16; Q6_K's
  // q - 32 as q, offset 32). i5_planes: the bits above the low nibble, 1 (5-bit) or 2 (6-bit).
  const uint8_t* w_i5 = nullptr;
  int i5_offset = 0;
  int i5_planes = 1;
  // BF16 and I8: from gemm_min_rows rows the matmul rounds its input to bf16 and multiplies bf16 by
  // bf16 (fp32 sums) instead of widening bf16 weights to fp32 or running the int8 panels on 16-bit
  // fixed-point inputs (see linear).
  bool bf16_activations = false;
};

// Owned reduced-precision copy of a linear layer's weights.
struct QuantizedWeights {
  HugeBytes own;  // the converted weights, unless quantize_linear was given a place for them
  size_t bytes = 0;  // of the converted weights, wherever they are
  std::vector<float> scales;
  std::vector<int32_t> wsums;
  std::vector<uint16_t> halves;  // I4's steps then minima as halves (Linear::steps16), or Q4_K's d then -dmin
  std::vector<uint8_t> codes;    // I4 from Q4_K: the step codes, then the minimum codes
};
// Bytes of the converted weights of `layer` as `type` (bf16 rows or int8 panels; 0 for F32).
size_t quantized_size(const Linear& layer, WeightType type);
// Converts `layer` (fp32, either layout) to `type` and points the layer at the result: the weights
// go to `dst` (quantized_size bytes, 64-byte aligned) when given, else to store.own; scales and
// sums go to `store`.
// `source`, where given, supplies the fp32 rows instead of layer.w (rows of a file's blocks decoded
// a panel at a time): it fills dst with rows [o0, o0 + n), (n, in), and runs on several threads.
using RowSource = std::function<void(int o0, int n, float* dst)>;
// `done`, where given, hears (from worker threads, in runs of rows) that source rows [o0, o0 + n)
// will not be read again, so that their file pages can leave the resident set while the rest of
// a large layer is still being converted.
using RowsDone = std::function<void(int o0, int n)>;
void quantize_linear(Linear& layer, WeightType type, QuantizedWeights& store, uint8_t* dst = nullptr,
                     const RowSource* source = nullptr, const RowsDone* done = nullptr);
// An I4 layer straight from a 4-bit GGUF format's blocks (Q4_0, Q4_1, Q4_K; src: `out` rows of
// in / f.elems blocks): the file's own values, each 32 with its step and minimum, repacked.
struct BlockFormat;
void pack_i4_blocks(Linear& layer, const BlockFormat& f, const uint8_t* src, QuantizedWeights& store,
                    uint8_t* dst = nullptr, const RowsDone* done = nullptr);
// An I8Blocks layer from any of the formats' blocks, likewise: the file's codes and steps as they
// are (quantized_size(layer, I8Blocks) bytes at dst).
void pack_i8_blocks(Linear& layer, const BlockFormat& f, const uint8_t* src, QuantizedWeights& store,
                    uint8_t* dst = nullptr, const RowsDone* done = nullptr);
// An I5Blocks layer from a 5-bit format's blocks with a step per 32 (Q5_0, Q5_1, Q5_K) or from
// Q6_K's, likewise.
void pack_i5_blocks(Linear& layer, const BlockFormat& f, const uint8_t* src, QuantizedWeights& store,
                    uint8_t* dst = nullptr, const RowsDone* done = nullptr);

// Points *view at output rows [first, first + count) of L, in place (the weights, scales and
// sums of those rows, whatever the type), so that part of a fused layer can be computed into its
// own output. False, leaving *view alone, where the rows do not start on a unit of the layout (4
// rows of bf16, a panel of 16 of int8 and w8a8) or L is still (in, out).
bool linear_row_view(const Linear& L, int first, int count, Linear* view);

// The fewest rows for which fp32 and bf16 layers run the oneDNN matmul (bf16 on weights widened
// per call, or with bf16_activations a bf16 matmul) rather than the register tiles that read the
// weights once per call; where the two cross on Llama 110M and GPT-2 124M prompts (the sweep is in
// benchmarks/results/kernel_tuning.md).
constexpr int kGemmMinRowsF32 = 56;
constexpr int kGemmMinRowsBf16 = 80;
// int8 layers with bf16_activations take the bf16 matmul from this many rows: below it the
// matmul's fixed cost of unpacking the weights outweighs its faster products.
constexpr int kGemmMinRowsI8 = 80;
// The threshold above for a weight type (w8a8 never takes the matmul: INT_MAX).
int gemm_min_rows(WeightType type);

// While one lives, linear() on this thread gives every row of up to kFixedRowsMax rows the same
// arithmetic whatever the row count: fp32 and bf16 layers run the register tiles from one row on
// instead of the one-row kernels, whose sums run in another order, bf16 always read in place
// (never widened past kBf16DirectRows); int8 and w8a8 panels already do. A batch scheduler decodes under it, so that a sequence's logits do not depend
// on the batch it shares a step with (Transformer::decode_batch with fixed_rows).
class FixedRowArithmetic {
 public:
  FixedRowArithmetic();
  ~FixedRowArithmetic();
  FixedRowArithmetic(const FixedRowArithmetic&) = delete;
  FixedRowArithmetic& operator=(const FixedRowArithmetic&) = delete;
  static bool on();

 private:
  bool was_;
};
// Below every weight type's gemm_min_rows, so no row count up to it reaches a matmul.
constexpr int kFixedRowsMax = 48;
// Whether this CPU multiplies bf16 in hardware (AVX512_BF16, which AMX machines also have): bf16
// and int8 layers take the bf16 matmul only then. Without it oneDNN emulates the bf16 products,
// far below the fp32 matmul on the widened weights.
bool bf16_matmul_native();
// Whether layers of this weight type take the bf16 matmul when asked to (Linear::bf16_activations):
// bf16 and int8 where bf16_matmul_native(), fp32 and w8a8 never.
inline bool bf16_matmul_applies(WeightType type) {
  return (type == WeightType::BF16 || type == WeightType::I8) && bf16_matmul_native();
}

// y (T, out) = x (T, in) W^T + b. fp32 and bf16: one row runs a matrix-vector kernel that reads
// the weights once; from 2 rows up to gemm_min_rows a register-tiled kernel that also reads them
// once; more a oneDNN matmul (bf16: on the weights widened to fp32, or with bf16_activations on
// bf16 x and W with fp32 sums, about twice the speed). int8 and w8a8: integer panel kernels at
// every row count, except int8 with bf16_activations from gemm_min_rows rows: oneDNN's bf16 matmul
// on bf16 x and the int8 values as bf16, scaled after.
void linear(const float* x, int T, const Linear& layer, float* y);
// ys[i] = linear(x, T, *layers[i]) for up to 4 layers reading the same input (a Llama layer's q, k
// and v; gate and up): below gemm_min_rows rows (int8 and w8a8: any T) they share one parallel
// region and one conversion of x.
void linear_many(const float* x, int T, const Linear* const* layers, float* const* ys, int n);

// y (M, N) = x (M, K) W^T + b with W (N, K) and b (N) or null. oneDNN.
void matmul_onednn(const float* x, int M, int K, const float* w, int N, float* y, const float* b = nullptr);
// The same with bf16 x (M, K) and W (N, K), or W^T (K, N) with w_in_major: products of bf16 values
// summed in fp32 (vdpbf16ps, or AMX tiles where the CPU has them).
void matmul_onednn_bf16(const uint16_t* x, int M, int K, const uint16_t* w, int N, float* y, const float* b = nullptr,
                        bool w_in_major = false);
// y = (x W^T) * scales + b, one scale per output column, applied inside the matmul. False, leaving
// y alone, where oneDNN has no such kernel on this CPU.
bool matmul_onednn_bf16_scaled(const uint16_t* x, int M, int K, const uint16_t* w, int N, const float* scales,
                               float* y, const float* b = nullptr, bool w_in_major = false);
// Creates the primitive for a weight shape (with or without a bias) and runs it once on any K x N
// floats at `w`, ahead of the first prompt.
void matmul_onednn_prepare(const float* w, int K, int N, const float* b = nullptr);

}  // namespace decodelab
