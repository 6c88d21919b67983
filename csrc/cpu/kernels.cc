#include "decodelab/kernels.h"

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "decodelab/bf16.h"

namespace decodelab {

namespace {
using ConstVec = Eigen::Map<const Eigen::VectorXf>;
using Vec = Eigen::Map<Eigen::VectorXf>;

float dot(const float* a, const float* b, int n) { return ConstVec(a, n).dot(ConstVec(b, n)); }

// y (out) = W x for W (out, in): each thread owns a range of output rows, reading its weight
// rows once, contiguously.
void matvec_out_major(const float* x, const Linear& L, float* y) {
#pragma omp parallel for schedule(static)
  for (int o = 0; o < L.out; ++o) y[o] = dot(L.w + static_cast<size_t>(o) * L.in, x, L.in);
}

// y (out) = x W for W (in, out): each thread owns a block of output columns and streams the
// weight rows' slices of that block.
void matvec_in_major(const float* x, const Linear& L, float* y) {
  constexpr int kBlock = 64;
  const int n_blocks = (L.out + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < n_blocks; ++blk) {
    const int j0 = blk * kBlock;
    const int len = std::min(kBlock, L.out - j0);
    float acc[kBlock] = {0};
    for (int i = 0; i < L.in; ++i) {
      const float xi = x[i];
      const float* row = L.w + static_cast<size_t>(i) * L.out + j0;
#pragma omp simd
      for (int j = 0; j < len; ++j) acc[j] += xi * row[j];
    }
    std::copy(acc, acc + len, y + j0);
  }
}
}  // namespace

void linear(const float* x, int T, const Linear& L, float* y) {
  if (T == 1) {
    if (L.in_major)
      matvec_in_major(x, L, y);
    else
      matvec_out_major(x, L, y);
  } else {
    matmul_onednn(x, T, L.in, L.w, L.out, L.in_major, y);
  }
  if (L.b) {
    for (int t = 0; t < T; ++t) Vec(y + static_cast<size_t>(t) * L.out, L.out) += ConstVec(L.b, L.out);
  }
}

void rmsnorm(const float* x, const float* w, int T, int dim, float eps, float* y) {
  for (int t = 0; t < T; ++t) {
    const float* xt = x + static_cast<size_t>(t) * dim;
    float* yt = y + static_cast<size_t>(t) * dim;
    const float ms = ConstVec(xt, dim).squaredNorm() / dim;
    const float inv = 1.0f / std::sqrt(ms + eps);
    for (int i = 0; i < dim; ++i) yt[i] = w[i] * (xt[i] * inv);
  }
}

void layernorm(const float* x, const float* w, const float* b, int T, int dim, float eps, float* y) {
  for (int t = 0; t < T; ++t) {
    const float* xt = x + static_cast<size_t>(t) * dim;
    float* yt = y + static_cast<size_t>(t) * dim;
    const float mean = ConstVec(xt, dim).sum() / dim;
    float var = 0.0f;
    for (int i = 0; i < dim; ++i) var += (xt[i] - mean) * (xt[i] - mean);
    var /= dim;
    const float inv = 1.0f / std::sqrt(var + eps);
    for (int i = 0; i < dim; ++i) yt[i] = (xt[i] - mean) * inv * w[i] + b[i];
  }
}

void gelu_tanh_inplace(float* x, size_t n) {
  const float c = std::sqrt(2.0f / static_cast<float>(M_PI));
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.0f + std::tanh(c * (v + 0.044715f * v * v * v)));
  }
}

void silu_mul(const float* gate, const float* up, float* out, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add_inplace(float* x, const float* y, size_t n) { Vec(x, n) += ConstVec(y, n); }

void rope(float* x, int T, int n_heads, int head_dim, int p0, const float* cos_table,
          const float* sin_table, bool interleaved) {
  const int half = head_dim / 2;
  for (int t = 0; t < T; ++t) {
    const float* c = cos_table + static_cast<size_t>(p0 + t) * half;
    const float* s = sin_table + static_cast<size_t>(p0 + t) * half;
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + (static_cast<size_t>(t) * n_heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const int a = interleaved ? 2 * i : i;
        const int b = interleaved ? 2 * i + 1 : i + half;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c[i] - x1 * s[i];
        v[b] = x1 * c[i] + x0 * s[i];
      }
    }
  }
}

namespace {
inline float load(const float* p, int i) { return p[i]; }
inline float load(const uint16_t* p, int i) { return bf16_to_f32(p[i]); }

inline float dot_kv(const float* q, const float* k, int n) { return dot(q, k, n); }
inline float dot_kv(const float* q, const uint16_t* k, int n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; ++i) s += q[i] * bf16_to_f32(k[i]);
  return s;
}

template <typename E>
void attention_paged_impl(const float* q, const BlockPool& pool, const int* table, int layer, int T, int p0,
                          int n_heads, float* out, float* scratch, int stride, int n_threads) {
  const int n_kv = pool.n_kv_heads(), hd = pool.head_dim(), bs = pool.block_size();
  const int group = n_heads / n_kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(n_threads)
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < n_heads; ++h) {
      float* sc = scratch + static_cast<size_t>(omp_get_thread_num()) * stride;
      const int n_ctx = p0 + t + 1;  // causal: positions 0 .. p0+t
      const int kh = h / group;
      const float* qh = q + (static_cast<size_t>(t) * n_heads + h) * hd;
      const int n_blocks = (n_ctx + bs - 1) / bs;
      float mx = -std::numeric_limits<float>::infinity();
      for (int b = 0; b < n_blocks; ++b) {
        const E* kb = reinterpret_cast<const E*>(pool.data(table[b])) + pool.slab(layer, 0, kh);
        const int rows = std::min(bs, n_ctx - b * bs);
        for (int r = 0; r < rows; ++r) {
          const float s = dot_kv(qh, kb + static_cast<size_t>(r) * hd, hd) * scale;
          sc[b * bs + r] = s;
          mx = std::max(mx, s);
        }
      }
      float sum = 0.0f;
      for (int j = 0; j < n_ctx; ++j) {
        sc[j] = std::exp(sc[j] - mx);
        sum += sc[j];
      }
      const float inv = 1.0f / sum;
      float* o = out + (static_cast<size_t>(t) * n_heads + h) * hd;
      std::fill(o, o + hd, 0.0f);
      for (int b = 0; b < n_blocks; ++b) {
        const E* vb = reinterpret_cast<const E*>(pool.data(table[b])) + pool.slab(layer, 1, kh);
        const int rows = std::min(bs, n_ctx - b * bs);
        for (int r = 0; r < rows; ++r) {
          const float p = sc[b * bs + r] * inv;
          const E* vr = vb + static_cast<size_t>(r) * hd;
#pragma omp simd
          for (int i = 0; i < hd; ++i) o[i] += p * load(vr, i);
        }
      }
    }
  }
}
}  // namespace

void attention_paged(const float* q, const BlockPool& pool, const int* block_table, int layer, int T, int p0,
                     int n_heads, float* out, float* scratch, int scratch_stride, int n_threads) {
  if (pool.dtype() == KVDType::F32)
    attention_paged_impl<float>(q, pool, block_table, layer, T, p0, n_heads, out, scratch, scratch_stride, n_threads);
  else
    attention_paged_impl<uint16_t>(q, pool, block_table, layer, T, p0, n_heads, out, scratch, scratch_stride,
                                   n_threads);
}

void store_kv(const float* k, const float* v, BlockPool& pool, const int* table, int layer, int T, int p0) {
  const int n_kv = pool.n_kv_heads(), hd = pool.head_dim(), bs = pool.block_size();
  const bool f32 = pool.dtype() == KVDType::F32;
  for (int t = 0; t < T; ++t) {
    const int pos = p0 + t;
    uint8_t* blk = pool.data(table[pos / bs]);
    for (int kind = 0; kind < 2; ++kind) {
      const float* src_all = kind == 0 ? k : v;
      for (int kh = 0; kh < n_kv; ++kh) {
        const float* src = src_all + (static_cast<size_t>(t) * n_kv + kh) * hd;
        const size_t off = pool.slab(layer, kind, kh) + static_cast<size_t>(pos % bs) * hd;
        if (f32) {
          std::memcpy(reinterpret_cast<float*>(blk) + off, src, hd * sizeof(float));
        } else {
          uint16_t* dst = reinterpret_cast<uint16_t*>(blk) + off;
          for (int i = 0; i < hd; ++i) dst[i] = f32_to_bf16(src[i]);
        }
      }
    }
  }
}

}  // namespace decodelab
