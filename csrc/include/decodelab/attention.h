// Attention over a paged KV cache, and writing new keys and values into it.
#pragma once

#include "decodelab/kv_cache.h"

namespace decodelab {

// How one layer attends, beyond causal softmax(q k / sqrt(head_dim)) v:
struct AttentionOptions {
  int window = 0;       // > 0: the query at position p sees keys at positions (p - window, p] only
  float scale = 0.0f;   // > 0: scores are q k x scale (Gemma's query_pre_attn_scalar^-0.5)
  float softcap = 0.0f; // > 0: scaled scores become softcap tanh(score / softcap) (Gemma 2)
};

// Causal attention for T queries at positions p0 .. p0+T-1 over one layer of a paged cache
// that holds positions 0 .. p0+T-1. q (T, n_heads, head_dim); out (T, n_heads, head_dim). Each
// query's output is the same bits however it is called (see cpu/attention/fixed_order.cc).
void attention_paged(const float* q, const BlockPool& pool, const int* block_table, int layer, int T, int p0,
                     int n_heads, float* out, int n_threads, const AttentionOptions& options = {});

// Write k, v (T, n_kv_heads, head_dim) into one layer of a paged cache at positions p0 .. p0+T-1.
void store_kv(const float* k, const float* v, BlockPool& pool, const int* block_table, int layer, int T, int p0);

}  // namespace decodelab
