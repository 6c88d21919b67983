// The kernels of this file's instruction set (see isa.h) behind the public entry points of
// decodelab/kernels.h, which cpu/dispatch.cc forwards to.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/isa.h"
#include "decodelab/kernels.h"

namespace decodelab {
namespace DECODELAB_ISA {

void linear_many(const float* x, int T, const Linear* const* layers, float* const* ys, int n);
size_t quantized_size(const Linear& L, WeightType type);
bool linear_row_view(const Linear& L, int first, int count, Linear* view);
void quantize_linear(Linear& L, WeightType type, QuantizedWeights& q, uint8_t* dst, const RowSource* source,
                     const RowsDone* done);
void pack_i4_blocks(Linear& L, const BlockFormat& f, const uint8_t* src, QuantizedWeights& q, uint8_t* dst,
                    const RowsDone* done);
void pack_i8_blocks(Linear& L, const BlockFormat& f, const uint8_t* src, QuantizedWeights& q, uint8_t* dst,
                    const RowsDone* done);
void pack_i5_blocks(Linear& L, const BlockFormat& f, const uint8_t* src, QuantizedWeights& q, uint8_t* dst,
                    const RowsDone* done);

void rmsnorm(const float* x, const float* w, int T, int dim, float eps, float* y);
void layernorm(const float* x, const float* w, const float* b, int T, int dim, float eps, float* y);
void gelu_tanh_inplace(float* x, size_t n);
void gelu_erf_inplace(float* x, size_t n);
void gelu_tanh_mul(const float* gate, const float* up, float* out, size_t n);
void softcap_inplace(float* x, size_t n, float cap);
void silu_mul(const float* gate, const float* up, float* out, size_t n);
void add_inplace(float* x, const float* y, size_t n);
void rope(float* x, int T, int n_heads, int head_dim, int p0, const float* cos_table, const float* sin_table,
          bool interleaved, int rot_dim);

void attention_paged(const float* q, const BlockPool& pool, const int* block_table, int layer, int T, int p0,
                     int n_heads, float* out, int n_threads, const AttentionOptions& options);
void store_kv(const float* k, const float* v, BlockPool& pool, const int* block_table, int layer, int T, int p0);

}  // namespace DECODELAB_ISA
}  // namespace decodelab
