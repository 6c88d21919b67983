// Workspace::reserve: scratch sized for a pass's rows; it only grows.
#include "decodelab/workspace.h"

namespace decodelab {

void Workspace::reserve(const ModelConfig& cfg, int T) {
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
