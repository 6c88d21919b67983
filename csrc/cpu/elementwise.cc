// Elementwise activations and residual adds, on Eigen, in chunks spread over the threads.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cpu/eigen_maps.h"
#include "cpu/kernels.h"
#include "decodelab/aligned.h"

namespace decodelab {
namespace DECODELAB_ISA {

// Elementwise activations through Eigen's vectorised tanh / exp, in chunks spread over threads.
void gelu_tanh_inplace(float* x, size_t n) {
  const float c = std::sqrt(2.0f / static_cast<float>(M_PI));
  constexpr size_t kChunk = 16384;
  const long n_chunks = static_cast<long>((n + kChunk - 1) / kChunk);
  for_each_index(n_chunks, n_chunks > 1, [&](int64_t ch) {
    const size_t lo = static_cast<size_t>(ch) * kChunk, len = std::min(kChunk, n - lo);
    Eigen::Map<Eigen::ArrayXf> v(x + lo, static_cast<Eigen::Index>(len));
    v = 0.5f * v * (1.0f + (c * (v + 0.044715f * v * v * v)).tanh());
  });
}

void gelu_erf_inplace(float* x, size_t n) {
  constexpr size_t kChunk = 16384;
  const long n_chunks = static_cast<long>((n + kChunk - 1) / kChunk);
  for_each_index(n_chunks, n_chunks > 1, [&](int64_t ch) {
    const size_t lo = static_cast<size_t>(ch) * kChunk, hi = std::min(n, lo + kChunk);
    for (size_t i = lo; i < hi; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * static_cast<float>(M_SQRT1_2)));
  });
}

void silu_mul(const float* gate, const float* up, float* out, size_t n) {
  constexpr size_t kChunk = 16384;
  const long n_chunks = static_cast<long>((n + kChunk - 1) / kChunk);
  for_each_index(n_chunks, n_chunks > 1, [&](int64_t ch) {
    const size_t lo = static_cast<size_t>(ch) * kChunk, len = std::min(kChunk, n - lo);
    const auto L = static_cast<Eigen::Index>(len);
    Eigen::Map<const Eigen::ArrayXf> g(gate + lo, L), u(up + lo, L);
    Eigen::Map<Eigen::ArrayXf> o(out + lo, L);
    o = g / (1.0f + (-g).exp()) * u;
  });
}

void add_inplace(float* x, const float* y, size_t n) {
  constexpr size_t kChunk = 16384;
  const long n_chunks = static_cast<long>((n + kChunk - 1) / kChunk);
  for_each_index(n_chunks, n_chunks > 2, [&](int64_t ch) {
    const size_t lo = static_cast<size_t>(ch) * kChunk, len = std::min(kChunk, n - lo);
    Vec(x + lo, static_cast<Eigen::Index>(len)) += ConstVec(y + lo, static_cast<Eigen::Index>(len));
  });
}

// cap tanh(x / cap). Eigen takes the elements before x's first vector boundary and after its last
// with scalar std::tanh, which rounds unlike its vector tanh, so the bits would follow the
// caller's address (the logits: a fresh array each step). So the aligned middle runs in place and
// each end (under one 64-byte vector) through a zero-padded aligned vector: every element takes
// the vector path.
void softcap_inplace(float* x, size_t n, float cap) {
  constexpr size_t kChunk = 16384, kPad = kAlign / sizeof(float);
  auto vectors = [cap](float* p, size_t len) {  // p aligned, len a multiple of kPad
    Eigen::Map<Eigen::ArrayXf, Eigen::Aligned64> v(p, static_cast<Eigen::Index>(len));
    v = (v / cap).tanh() * cap;
  };
  auto padded = [&](float* p, size_t len) {  // len < kPad
    alignas(kAlign) float v[kPad] = {};
    std::copy(p, p + len, v);
    vectors(v, kPad);
    std::copy(v, v + len, p);
  };
  const size_t head = std::min(n, (kAlign - reinterpret_cast<uintptr_t>(x) % kAlign) % kAlign / sizeof(float));
  if (head) padded(x, head);
  float* body = x + head;
  const size_t whole = (n - head) / kPad * kPad;
  const long n_chunks = static_cast<long>((whole + kChunk - 1) / kChunk);
  for_each_index(n_chunks, n_chunks > 1, [&](int64_t ch) {
    const size_t lo = static_cast<size_t>(ch) * kChunk;
    vectors(body + lo, std::min(kChunk, whole - lo));
  });
  if (n - head > whole) padded(body + whole, n - head - whole);
}

void gelu_tanh_mul(const float* gate, const float* up, float* out, size_t n) {
  const float c = std::sqrt(2.0f / static_cast<float>(M_PI));
  constexpr size_t kChunk = 16384;
  const long n_chunks = static_cast<long>((n + kChunk - 1) / kChunk);
  for_each_index(n_chunks, n_chunks > 1, [&](int64_t ch) {
    const size_t lo = static_cast<size_t>(ch) * kChunk, len = std::min(kChunk, n - lo);
    Eigen::Map<const Eigen::ArrayXf> g(gate + lo, static_cast<Eigen::Index>(len));
    Eigen::Map<const Eigen::ArrayXf> u(up + lo, static_cast<Eigen::Index>(len));
    Eigen::Map<Eigen::ArrayXf>(out + lo, static_cast<Eigen::Index>(len)) =
        (0.5f * g * (1.0f + (c * (g + 0.044715f * g * g * g)).tanh())) * u;
  });
}

}  // namespace DECODELAB_ISA
}  // namespace decodelab
