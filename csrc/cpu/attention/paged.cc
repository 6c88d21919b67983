// attention_paged() chooses prompt or decode attention by the query count and the cache dtype;
// store_kv() writes new keys and values into their blocks (int8 rows with their scales).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/attention/kernels.h"
#include "decodelab/bf16.h"

namespace decodelab {
namespace DECODELAB_ISA {

void attention_paged(const float* q, const BlockPool& pool, const int* block_table, int layer, int T, int p0,
                     int n_heads, float* out, int n_threads, const AttentionOptions& options) {
  // Eight or more queries: items of a few queries each; fewer: items of a chunk of the context each.
  auto run = [&](auto elem) {
    using E = decltype(elem);
    if (T >= 8) attention_prefill<E>(q, pool, block_table, layer, T, p0, n_heads, out, n_threads, options);
    else attention_decode<E>(q, pool, block_table, layer, T, p0, n_heads, out, n_threads, options);
  };
  switch (pool.dtype()) {
    case KVDType::F32: run(float{}); break;
    case KVDType::BF16: run(uint16_t{}); break;
    case KVDType::I8: run(int8_t{}); break;
  }
}

// One row of an int8 cache: q[i] = round(x[i] / scale) in [-127, 127], scale = max |x| / 127
// (returned; 0 for a row of zeros). A row holding NaN or inf gets scale NaN and zero values, so
// that the attention reading it gives NaN, as an fp32 cache would.
static float quantize_kv_row(const float* x, int n, int8_t* q) {
  float mx = 0.0f;
  bool finite = true;
  for (int i = 0; i < n; ++i) {
    finite = finite && std::isfinite(x[i]);
    mx = std::max(mx, std::fabs(x[i]));
  }
  if (!finite || mx == 0.0f) {
    std::memset(q, 0, n);
    return finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
  const float inv = 127.0f / mx;
  for (int i = 0; i < n; ++i) q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(x[i] * inv), -127.0f, 127.0f));
  return mx / 127.0f;
}

void store_kv(const float* k, const float* v, BlockPool& pool, const int* table, int layer, int T, int p0) {
  const int n_kv = pool.n_kv_heads(), hd = pool.head_dim(), bs = pool.block_size();
  const KVDType dtype = pool.dtype();
  for (int t = 0; t < T; ++t) {
    const int pos = p0 + t;
    uint8_t* blk = pool.data(table[pos / bs]);
    for (int kind = 0; kind < 2; ++kind) {
      const float* src_all = kind == 0 ? k : v;
      for (int kh = 0; kh < n_kv; ++kh) {
        const float* src = src_all + (static_cast<size_t>(t) * n_kv + kh) * hd;
        const size_t off = pool.slab(layer, kind, kh) + static_cast<size_t>(pos % bs) * hd;
        if (dtype == KVDType::F32) {
          std::memcpy(reinterpret_cast<float*>(blk) + off, src, hd * sizeof(float));
        } else if (dtype == KVDType::I8) {
          pool.row_scales(blk, layer, kind, kh)[pos % bs] = quantize_kv_row(src, hd, reinterpret_cast<int8_t*>(blk) + off);
        } else {
          uint16_t* dst = reinterpret_cast<uint16_t*>(blk) + off;
          for (int i = 0; i < hd; ++i) dst[i] = f32_to_bf16(src[i]);
        }
      }
    }
  }
}

}  // namespace DECODELAB_ISA
}  // namespace decodelab
