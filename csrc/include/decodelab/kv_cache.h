// The key/value cache of one sequence, and the scratch buffers its forward passes reuse.
#pragma once

#include <cstdint>
#include <vector>

#include "decodelab/config.h"

namespace decodelab {

// Scratch for a forward pass over up to `rows` tokens; grows, never shrinks, so decoding
// allocates nothing per token once warm.
struct Workspace {
  int rows = 0;
  std::vector<float> x, h, q, k, v, qkv, att, ff_a, ff_b, logits_in, scores;
  void reserve(const ModelConfig& cfg, int T, int capacity, int n_threads);
};

class KVCache {
 public:
  KVCache(const ModelConfig& cfg, int capacity);

  int length() const { return length_; }
  int capacity() const { return capacity_; }
  int n_layers() const { return n_layers_; }
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return head_dim_; }
  uint64_t nbytes() const { return (k_.size() + v_.size()) * sizeof(float); }

  // (n_kv_heads, capacity, head_dim) for one layer.
  float* k(int layer) { return k_.data() + layer_stride() * layer; }
  float* v(int layer) { return v_.data() + layer_stride() * layer; }
  const float* k(int layer) const { return k_.data() + layer_stride() * layer; }
  const float* v(int layer) const { return v_.data() + layer_stride() * layer; }

  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  void append(const int32_t* tokens, int T);
  void clear();
  // Throws std::invalid_argument unless the cache was made for a model of this shape.
  void check_compatible(const ModelConfig& cfg) const;

  Workspace& workspace() { return ws_; }

 private:
  size_t layer_stride() const { return static_cast<size_t>(n_kv_heads_) * capacity_ * head_dim_; }
  int n_layers_, n_kv_heads_, head_dim_, capacity_;
  int length_ = 0;
  std::vector<float> k_, v_;  // (n_layers, n_kv_heads, capacity, head_dim) each
  std::vector<int32_t> token_ids_;
  Workspace ws_;
};

}  // namespace decodelab
