// Workspace::reserve: scratch sized for a pass's rows, context and threads; it only grows.
#include "decodelab/workspace.h"

namespace decodelab {

void Workspace::reserve(const ModelConfig& cfg, int T, int n_ctx, int n_threads) {
  const size_t need_scores = static_cast<size_t>(n_threads) * cfg.n_heads * n_ctx;
  if (scores.size() < need_scores) scores.resize(need_scores);
  // A prompt's keys and values, gathered from the cache blocks for prefill attention.
  const size_t need_gather = static_cast<size_t>(2) * cfg.n_kv_heads * aligned_stride(n_ctx) * cfg.head_dim;
  if (gather.size() < need_gather) gather.resize(need_gather);
  if (T <= rows) return;
  const size_t qd = static_cast<size_t>(cfg.n_heads) * cfg.head_dim;
  const size_t kvd = static_cast<size_t>(cfg.n_kv_heads) * cfg.head_dim;
  x.resize(static_cast<size_t>(T) * cfg.dim);
  h.resize(static_cast<size_t>(T) * cfg.dim);
  q.resize(T * qd);
  k.resize(T * kvd);
  v.resize(T * kvd);
  if (cfg.is_gpt2() || cfg.is_neox()) qkv.resize(T * (qd + 2 * kvd));
  att.resize(T * qd);
  ff_a.resize(static_cast<size_t>(T) * cfg.hidden_dim);
  ff_b.resize(static_cast<size_t>(T) * cfg.hidden_dim);
  rows = T;
}

}  // namespace decodelab
