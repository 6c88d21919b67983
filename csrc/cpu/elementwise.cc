// Elementwise activations and residual adds in chunks spread over the threads; exp and tanh from
// cpu/fixed_math.h, so every level gives the same bits.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cpu/fixed_math.h"
#include "cpu/kernels.h"
#include "decodelab/parallel.h"

namespace decodelab {
namespace DECODELAB_ISA {

namespace {
constexpr size_t kChunk = 16384;

// fn(lo, hi) over [0, n) in chunks of kChunk, in parallel from `min_chunks` chunks on.
template <typename F>
void chunks(size_t n, long min_chunks, F&& fn) {
  const long n_chunks = static_cast<long>((n + kChunk - 1) / kChunk);
  for_each_index(n_chunks, n_chunks >= min_chunks, [&](int64_t ch) {
    const size_t lo = static_cast<size_t>(ch) * kChunk;
    fn(lo, std::min(n, lo + kChunk));
  });
}

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
inline float gelu_tanh(float g) { return 0.5f * g * (1.0f + fixed::tanh(kGeluC * (g + 0.044715f * g * g * g))); }
}  // namespace

void gelu_tanh_inplace(float* x, size_t n) {
  chunks(n, 2, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) x[i] = gelu_tanh(x[i]);
  });
}

void gelu_erf_inplace(float* x, size_t n) {
  chunks(n, 2, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * static_cast<float>(M_SQRT1_2)));
  });
}

void silu_mul(const float* gate, const float* up, float* out, size_t n) {
  chunks(n, 2, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) out[i] = gate[i] / (1.0f + fixed::exp(-gate[i])) * up[i];
  });
}

void add_inplace(float* x, const float* y, size_t n) {
  chunks(n, 3, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) x[i] += y[i];
  });
}

// cap tanh(x / cap).
void softcap_inplace(float* x, size_t n, float cap) {
  chunks(n, 2, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) x[i] = fixed::tanh(x[i] / cap) * cap;
  });
}

void gelu_tanh_mul(const float* gate, const float* up, float* out, size_t n) {
  chunks(n, 2, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) out[i] = gelu_tanh(gate[i]) * up[i];
  });
}

}  // namespace DECODELAB_ISA
}  // namespace decodelab
