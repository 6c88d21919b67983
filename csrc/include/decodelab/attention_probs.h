// Attention probabilities of one sequence as a matrix per head (Model.forward(attentions=True)).
#pragma once

#include "decodelab/attention.h"

namespace decodelab {

// q (T, n_heads * head_dim) and k (T, n_kv_heads * head_dim), post-RoPE, positions 0 .. T-1; out
// (n_heads, T, T): row t holds head h's softmax over the positions t reads (causal, within
// opt.window where set), zero elsewhere. Query head h reads key head h / (n_heads / n_kv_heads).
void attention_probabilities(const float* q, const float* k, int T, int n_heads, int n_kv_heads, int head_dim,
                             const AttentionOptions& opt, float* out);

}  // namespace decodelab
