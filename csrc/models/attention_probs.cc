// Attention probabilities made visible: for one sequence read from position 0, each query head's
// softmax over the positions it reads, as transformers' eager attention returns them with
// output_attentions=True. Computed apart from the fused attention kernels (which never hold the
// whole matrix), in fp32 from the same post-RoPE queries and keys, with the same scale, soft cap
// and sliding window.
#include "decodelab/attention_probs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "decodelab/parallel.h"

namespace decodelab {

void attention_probabilities(const float* q, const float* k, int T, int n_heads, int n_kv_heads, int head_dim,
                             const AttentionOptions& opt, float* out) {
  const float scale = opt.scale > 0.0f ? opt.scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int group = n_heads / n_kv_heads;
  const int QD = n_heads * head_dim, KVD = n_kv_heads * head_dim;
  for_each_index(static_cast<int64_t>(n_heads) * T, T >= 32, [&](int64_t i) {
    const int h = static_cast<int>(i / T), t = static_cast<int>(i % T);
    float* row = out + (static_cast<size_t>(h) * T + t) * T;
    std::fill(row, row + T, 0.0f);
    const int first = opt.window > 0 ? std::max(0, t - opt.window + 1) : 0;  // positions t reads
    const float* qt = q + static_cast<size_t>(t) * QD + static_cast<size_t>(h) * head_dim;
    float mx = -std::numeric_limits<float>::infinity();
    for (int j = first; j <= t; ++j) {
      const float* kj = k + static_cast<size_t>(j) * KVD + static_cast<size_t>(h / group) * head_dim;
      float s = 0.0f;
      for (int d = 0; d < head_dim; ++d) s += qt[d] * kj[d];
      s *= scale;
      if (opt.softcap > 0.0f) s = opt.softcap * std::tanh(s / opt.softcap);
      row[j] = s;
      mx = std::max(mx, s);
    }
    float sum = 0.0f;
    for (int j = first; j <= t; ++j) sum += row[j] = std::exp(row[j] - mx);
    for (int j = first; j <= t; ++j) row[j] /= sum;
  });
}

}  // namespace decodelab
