#include "decodelab/kv_cache.h"

#include <stdexcept>
#include <string>

namespace decodelab {

void Workspace::reserve(const ModelConfig& cfg, int T, int capacity, int n_threads) {
  const size_t need_scores = static_cast<size_t>(n_threads) * capacity;
  if (T <= rows && scores.size() >= need_scores) return;
  const int R = std::max(T, rows);
  const size_t qd = static_cast<size_t>(cfg.n_heads) * cfg.head_dim;
  const size_t kvd = static_cast<size_t>(cfg.n_kv_heads) * cfg.head_dim;
  x.resize(static_cast<size_t>(R) * cfg.dim);
  h.resize(static_cast<size_t>(R) * cfg.dim);
  q.resize(R * qd);
  k.resize(R * kvd);
  v.resize(R * kvd);
  if (cfg.is_gpt2()) qkv.resize(R * (qd + 2 * kvd));
  att.resize(R * qd);
  ff_a.resize(static_cast<size_t>(R) * cfg.hidden_dim);
  ff_b.resize(static_cast<size_t>(R) * cfg.hidden_dim);
  if (scores.size() < need_scores) scores.resize(need_scores);
  rows = R;
}

KVCache::KVCache(const ModelConfig& cfg, int capacity)
    : n_layers_(cfg.n_layers), n_kv_heads_(cfg.n_kv_heads), head_dim_(cfg.head_dim), capacity_(capacity) {
  if (capacity <= 0 || capacity > cfg.max_position)
    throw std::invalid_argument("cache capacity must be in [1, " + std::to_string(cfg.max_position) +
                                "] (the model's context window), got " + std::to_string(capacity));
  const size_t n = static_cast<size_t>(n_layers_) * layer_stride();
  k_.assign(n, 0.0f);
  v_.assign(n, 0.0f);
  token_ids_.reserve(capacity);
}

void KVCache::append(const int32_t* tokens, int T) {
  token_ids_.insert(token_ids_.end(), tokens, tokens + T);
  length_ += T;
}

void KVCache::clear() {
  length_ = 0;
  token_ids_.clear();
}

void KVCache::check_compatible(const ModelConfig& cfg) const {
  if (cfg.n_layers != n_layers_ || cfg.n_kv_heads != n_kv_heads_ || cfg.head_dim != head_dim_)
    throw std::invalid_argument("this cache holds " + std::to_string(n_layers_) + " layers x " +
                                std::to_string(n_kv_heads_) + " kv heads x head_dim " + std::to_string(head_dim_) +
                                ", which does not match the model (" + std::to_string(cfg.n_layers) + " x " +
                                std::to_string(cfg.n_kv_heads) + " x " + std::to_string(cfg.head_dim) + ")");
}

}  // namespace decodelab
