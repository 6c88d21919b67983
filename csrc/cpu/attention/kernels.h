// Prompt and decode attention for one cache element type E (float, bf16 bits as uint16_t, int8),
// which attention_paged (paged.cc) chooses between; both in fixed_order.cc, in one fixed order: a
// query's output is the same bits in a prompt or decoded, batched or alone, on any thread count and
// at every instruction set.
#pragma once

#include <cstdint>

#include "cpu/kernels.h"

namespace decodelab {
namespace DECODELAB_ISA {

// Both take the layer's AttentionOptions (window, scale, softcap: decodelab/attention.h).
// T >= 8 queries: items of (a few queries, KV head) spread over the threads.
template <typename E>
void attention_prefill(const float* q, const BlockPool& pool, const int* table, int layer, int T, int p0,
                       int n_heads, float* out, int n_threads, const AttentionOptions& options);
// T < 8 queries: items of (query, chunk of the context, KV head), the chunks then merged.
template <typename E>
void attention_decode(const float* q, const BlockPool& pool, const int* table, int layer, int T, int p0,
                      int n_heads, float* out, int n_threads, const AttentionOptions& options);

}  // namespace DECODELAB_ISA
}  // namespace decodelab
