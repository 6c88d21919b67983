// Scratch for the forward pass: activations, attention scores and gathered keys and values.
#pragma once

#include "decodelab/aligned.h"
#include "decodelab/config.h"

namespace decodelab {

// Scratch for a forward pass over up to `rows` tokens; grows, never shrinks, so decoding
// allocates nothing per token once warm.
struct Workspace {
  int rows = 0;
  FloatBuffer x, h, q, k, v, qkv, att, ff_a, ff_b, scores, gather;
  FloatBuffer rope_cos, rope_sin;  // RoPE rows of positions past the model's table, (rows, head_dim/2)
  void reserve(const ModelConfig& cfg, int T, int n_ctx, int n_threads);
};

}  // namespace decodelab
