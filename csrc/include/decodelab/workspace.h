// Scratch for the forward pass: activations and the RoPE rows past the model's table.
#pragma once

#include "decodelab/aligned.h"
#include "decodelab/config.h"

namespace decodelab {

// Scratch for a forward pass over up to `rows` tokens; grows, never shrinks, so decoding
// allocates nothing per token once warm.
struct Workspace {
  int rows = 0;
  FloatBuffer x, h, q, k, v, qkv, att, ff_a, ff_b;
  FloatBuffer rope_cos, rope_sin;  // RoPE rows of positions past the model's table, (rows, head_dim/2)
  void reserve(const ModelConfig& cfg, int T);
};

}  // namespace decodelab
