// RMSNorm and LayerNorm over rows, on Eigen.
#include <cmath>

#include "cpu/eigen_maps.h"
#include "cpu/kernels.h"

namespace decodelab {
namespace DECODELAB_ISA {

// Row-wise work spreads over the threads only for a prompt's many rows: for a few rows waking the
// other thread costs more than it saves.
static bool rows_worth_threads(int T, int dim) { return static_cast<int64_t>(T) * dim >= (1 << 15); }

void rmsnorm(const float* x, const float* w, int T, int dim, float eps, float* y) {
  for_each_index(T, rows_worth_threads(T, dim), [&](int64_t t) {
    const float* xt = x + static_cast<size_t>(t) * dim;
    float* yt = y + static_cast<size_t>(t) * dim;
    const float ms = ConstVec(xt, dim).squaredNorm() / dim;
    const float inv = 1.0f / std::sqrt(ms + eps);
    for (int i = 0; i < dim; ++i) yt[i] = w[i] * (xt[i] * inv);
  });
}

void layernorm(const float* x, const float* w, const float* b, int T, int dim, float eps, float* y) {
  for_each_index(T, rows_worth_threads(T, dim), [&](int64_t t) {
    const float* xt = x + static_cast<size_t>(t) * dim;
    float* yt = y + static_cast<size_t>(t) * dim;
    const auto xa = ConstVec(xt, dim).array();
    const float mean = xa.sum() / dim;
    // Through Eigen, vectorised: a plain loop's float sum stays scalar without -ffast-math.
    const float var = (xa - mean).square().sum() / dim;
    const float inv = 1.0f / std::sqrt(var + eps);
    for (int i = 0; i < dim; ++i) yt[i] = (xt[i] - mean) * inv * w[i] + b[i];
  });
}

}  // namespace DECODELAB_ISA
}  // namespace decodelab
