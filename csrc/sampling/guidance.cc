// Classifier-free guidance (Sanchez et al. 2023) as transformers' UnbatchedClassifierFreeGuidance-
// LogitsProcessor computes it: log_softmax of both sequences' logits, then
// scale x (conditional - unconditional) + unconditional, each operation rounded in float32.
#include <cmath>
#include <limits>

#include "sampling/internal.h"

namespace decodelab {

namespace {
// torch's log_softmax: x - max - log(sum(exp(x - max))), in float32 (-inf stays -inf).
void log_softmax(const float* x, int n, float* out) {
  const float mx = max_logit(x, n);
  if (!(mx > -std::numeric_limits<float>::infinity()) || std::isinf(mx)) {
    for (int i = 0; i < n; ++i) out[i] = x[i] == mx ? 0.0f : -std::numeric_limits<float>::infinity();
    return;
  }
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += std::exp(x[i] - mx);
  const float lse = std::log(sum);
  for (int i = 0; i < n; ++i) out[i] = (x[i] - mx) - lse;
}
}  // namespace

void classifier_free_guidance(const float* cond, const float* uncond, int n, float scale, float* out) {
  thread_local std::vector<float> u;
  u.resize(n);
  log_softmax(cond, n, out);
  if (scale == 1.0f) return;
  log_softmax(uncond, n, u.data());
  for (int i = 0; i < n; ++i) {
    const float d = out[i] - u[i];
    const float g = scale * d;
    out[i] = g + u[i];
  }
}

}  // namespace decodelab
