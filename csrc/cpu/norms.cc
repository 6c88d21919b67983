// RMSNorm and LayerNorm over rows, their sums in the fixed order of cpu/fixed_math.h.
#include <cmath>

#include "cpu/fixed_math.h"
#include "cpu/kernels.h"
#include "decodelab/parallel.h"

namespace decodelab {
namespace DECODELAB_ISA {

// Row-wise work spreads over the threads only for a prompt's many rows: for a few rows waking the
// other thread costs more than it saves.
static bool rows_worth_threads(int T, int dim) { return static_cast<int64_t>(T) * dim >= (1 << 15); }

void rmsnorm(const float* x, const float* w, int T, int dim, float eps, float* y) {
  for_each_index(T, rows_worth_threads(T, dim), [&](int64_t t) {
    const float* xt = x + static_cast<size_t>(t) * dim;
    float* yt = y + static_cast<size_t>(t) * dim;
    const float ms = fixed::sum_squares(xt, dim) / static_cast<float>(dim);
    const float inv = 1.0f / std::sqrt(ms + eps);
    for (int i = 0; i < dim; ++i) yt[i] = w[i] * (xt[i] * inv);
  });
}

void layernorm(const float* x, const float* w, const float* b, int T, int dim, float eps, float* y) {
  for_each_index(T, rows_worth_threads(T, dim), [&](int64_t t) {
    const float* xt = x + static_cast<size_t>(t) * dim;
    float* yt = y + static_cast<size_t>(t) * dim;
    const float mean = fixed::sum(xt, dim) / static_cast<float>(dim);
    const float var = fixed::sum_squares_about(xt, mean, dim) / static_cast<float>(dim);
    const float inv = 1.0f / std::sqrt(var + eps);
    for (int i = 0; i < dim; ++i) yt[i] = (xt[i] - mean) * inv * w[i] + b[i];
  });
}

}  // namespace DECODELAB_ISA
}  // namespace decodelab
