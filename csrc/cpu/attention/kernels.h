// Prompt and decode attention for one cache element type E (float, bf16 bits as uint16_t, int8),
// which attention_paged (paged.cc) chooses between.
#pragma once

#include <cstdint>

#include "cpu/kernels.h"

namespace decodelab {
namespace DECODELAB_ISA {

// Both take the layer's AttentionOptions (window, scale, softcap: decodelab/attention.h).
// T >= 8 queries: keys and values of positions [0, p0 + T) gathered into kv_all (2 n_kv_heads
// aligned_stride(p0 + T) head_dim floats), then matrix products per KV head and tile of queries.
template <typename E>
void attention_prefill(const float* q, const BlockPool& pool, const int* table, int layer, int T, int p0,
                       int n_heads, float* out, float* kv_all, int n_threads, const AttentionOptions& options);
// T < 8 queries straight from the blocks; scratch holds n_threads * n_heads * stride floats.
template <typename E>
void attention_decode(const float* q, const BlockPool& pool, const int* table, int layer, int T, int p0,
                      int n_heads, float* out, float* scratch, int stride, int n_threads,
                      const AttentionOptions& options);

}  // namespace DECODELAB_ISA
}  // namespace decodelab
