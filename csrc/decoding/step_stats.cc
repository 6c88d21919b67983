// Per-stage statistics of a step's distribution: kept tokens, entropy, removed mass, top tokens.
#include "decodelab/step_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "decodelab/sampling.h"

namespace decodelab {

void top_of(const std::vector<float>& p, int top, std::vector<int32_t>& ids) {
  const int n = static_cast<int>(p.size());
  const int k = std::min(top, n);
  ids.resize(n);
  for (int i = 0; i < n; ++i) ids[i] = i;
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  ids.resize(k);
}

int rank_of(const std::vector<float>& p, int token) {
  int r = 1;
  for (float v : p) r += v > p[token];
  return r;
}

float log_of(float p) { return p > 0.0f ? std::log(p) : -std::numeric_limits<float>::infinity(); }

void stage_stats(const float* before, const float* after, int n, int top, StageStats& out,
                 std::vector<float>& pb, std::vector<float>& pa) {
  if (top < 0) throw std::invalid_argument("top must be >= 0, got " + std::to_string(top));
  pb.resize(n);
  pa.resize(n);
  softmax(before, n, pb.data());
  softmax(after, n, pa.data());
  out.n_kept = 0;
  out.mass_removed = 0.0;
  for (int i = 0; i < n; ++i) {
    const bool kept = !is_removed(after[i]);
    out.n_kept += kept;
    if (!kept && !is_removed(before[i])) out.mass_removed += pb[i];
  }
  out.entropy = entropy_of(pa.data(), n);
  top_of(pa, top, out.top_ids);
  out.top_probs.resize(out.top_ids.size());
  for (size_t j = 0; j < out.top_ids.size(); ++j) out.top_probs[j] = pa[out.top_ids[j]];
}

}  // namespace decodelab
