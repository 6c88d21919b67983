// Decode attention (1 to 7 queries) straight from the paged cache: each thread a run of (chunk of
// the context, KV head) items, block by block, the grouped-query heads of a KV head sharing each
// slab; then the chunks' partial results merged.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "cpu/attention/decode_avx2.h"
#include "cpu/attention/decode_int8_avx512.h"
#include "cpu/attention/kernels.h"
#include "cpu/convert.h"
#include "cpu/eigen_maps.h"
#include "decodelab/aligned.h"
#include "decodelab/bf16.h"

namespace decodelab {
namespace DECODELAB_ISA {

namespace {
inline float load(const float* p, int i) { return p[i]; }
inline float load(const uint16_t* p, int i) { return bf16_to_f32(p[i]); }
inline float load(const int8_t* p, int i) { return static_cast<float>(p[i]); }  // before its row's scale

inline float dot_kv(const float* q, const float* k, int n) { return ConstVec(q, n).dot(ConstVec(k, n)); }
inline float dot_kv(const float* q, const uint16_t* k, int n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; ++i) s += q[i] * bf16_to_f32(k[i]);
  return s;
}
inline float dot_kv(const float* q, const int8_t* k, int n) {  // before the row's scale
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; ++i) s += q[i] * static_cast<float>(k[i]);
  return s;
}

// Decode attention splits the context of grouped-query models into chunks of kChunkPositions
// (whole cache blocks, counted from position 0), so that the threads share a step evenly however
// few KV heads there are; each chunk leaves a partial result that merge_chunks combines. The chunks
// do not depend on the thread count, so neither do the results. Models with a KV head per query
// head (GPT-2) keep one chunk: their many heads already share evenly, and chunks ran slower there.
constexpr int kChunkPositions = 256;
// The first position a query at n_ctx - 1 sees: a sliding window's start, or 0.
inline int window_start(int n_ctx, int window) { return window > 0 ? std::max(0, n_ctx - window) : 0; }
inline int first_chunk(int n_ctx, int bs, int window, int cb) { return window_start(n_ctx, window) / bs / cb; }
inline int end_chunk(int n_ctx, int bs, int cb) { return ((n_ctx + bs - 1) / bs + cb - 1) / cb; }
// Chunk c's keys: blocks [b0, b1), of which positions [lo, ...) get weight.
struct ChunkSpan {
  int b0, b1, lo;
};
inline ChunkSpan chunk_span(int n_ctx, int bs, int window, int cb, int c) {
  const int lo = window_start(n_ctx, window);
  const int b0 = std::max(lo / bs, c * cb), b1 = std::min((n_ctx + bs - 1) / bs, (c + 1) * cb);
  return {b0, b1, std::max(lo, b0 * bs)};
}
// Per (query, chunk, query head): the unnormalised weighted values o (head_dim floats), the
// chunk's largest score m and its softmax sum l against m.
struct Partials {
  float* o = nullptr;
  float* m = nullptr;
  float* l = nullptr;
  int chunk_blocks = 1, n_chunks = 1, n_heads = 1;
  size_t index(int t, int c, int h) const { return (static_cast<size_t>(t) * n_chunks + c) * n_heads + h; }
};

// key_scores_group / add_weighted_values_group for a run-time count of 1 to 4 heads.
template <typename Read>
void key_scores_heads(int G, const typename Read::Elem* k, const float* const* q, int rows, int hd, float scale,
                      float* const* s, float* m, const void* pf, size_t pf_bytes) {
  switch (G) {
    case 4: key_scores_group<Read, 4>(k, q, rows, hd, scale, s, m, pf, pf_bytes); break;
    case 3: key_scores_group<Read, 3>(k, q, rows, hd, scale, s, m, pf, pf_bytes); break;
    case 2: key_scores_group<Read, 2>(k, q, rows, hd, scale, s, m, pf, pf_bytes); break;
    default: key_scores_group<Read, 1>(k, q, rows, hd, scale, s, m, pf, pf_bytes); break;
  }
}
template <typename Read>
void add_weighted_values_heads(int G, const typename Read::Elem* v, const float* const* p, int rows, int hd,
                               float* const* o, const void* pf, size_t pf_bytes) {
  switch (G) {
    case 4: add_weighted_values_group<Read, 4>(v, p, rows, hd, o, pf, pf_bytes); break;
    case 3: add_weighted_values_group<Read, 3>(v, p, rows, hd, o, pf, pf_bytes); break;
    case 2: add_weighted_values_group<Read, 2>(v, p, rows, hd, o, pf, pf_bytes); break;
    default: add_weighted_values_group<Read, 1>(v, p, rows, hd, o, pf, pf_bytes); break;
  }
}

// Decode-style attention (query t over one chunk of its causal prefix) straight from the paged
// cache into each head's partial, for a thread's run of KV heads [kh0, kh1): block by block,
// every head of the run in turn, so a thread reads its heads' slabs of one cache block (adjacent
// in memory) before the next block, and the query heads of a KV group share each key and value
// slab while it is in cache. Cache blocks live apart, where the hardware prefetcher stops, so each
// slab's kernel asks for the head's next slab as it goes. Scores for all the run's heads first,
// then softmax, then the weighted values; sc holds (kh1 - kh0) * group rows of `stride` scores.
// Head sizes that are a multiple of 8 take the vector kernels above (bf16 caches the even/odd
// ones when a multiple of 16); others a plain loop.
template <typename E>
void attend_heads(const float* q, const BlockPool& pool, const int* table, int layer, int t, int p0, int n_heads,
                  int kh0, int kh1, int chunk, const Partials& part, float* sc, int stride, bool vec,
                  const AttentionOptions& options) {
  const int n_kv = pool.n_kv_heads(), hd = pool.head_dim(), bs = pool.block_size();
  const int group = n_heads / n_kv, nh = (kh1 - kh0) * group;
  const float scale = options.scale > 0.0f ? options.scale : 1.0f / std::sqrt(static_cast<float>(hd));
  const int n_ctx = p0 + t + 1;
  // The chunk's blocks [b_lo, n_blocks): its share of the keys the query sees, [lo, n_ctx). Keys of
  // block b_lo before lo (a sliding window's edge) get no weight. Scores stay indexed by position.
  const ChunkSpan span = chunk_span(n_ctx, bs, options.window, part.chunk_blocks, chunk);
  const int lo = span.lo, b_lo = span.b0, n_blocks = span.b1, end = std::min(n_ctx, n_blocks * bs);
  auto slab = [&](int b, int kind, int kh) {
    return reinterpret_cast<const E*>(pool.data(table[b])) + pool.slab(layer, kind, kh);
  };
  auto rows_of = [&](int b) { return std::min(bs, n_ctx - b * bs); };
  // int8 caches: the kernels below see the rows' integers; each key row's scale multiplies its
  // scores afterwards, and each value row's its weights before the values are summed.
  constexpr bool i8 = std::is_same<E, int8_t>::value;
  auto scales_of = [&](int b, int kind, int kh) { return pool.row_scales(pool.data(table[b]), layer, kind, kh); };
  auto prefetch_scales = [&](int b, int kind, int kh) {
    if constexpr (i8) prefetch_range(scales_of(b, kind, kh), static_cast<size_t>(rows_of(b)) * sizeof(float));
  };
  thread_local FloatBuffer maxima;  // each head's largest score, then 1 / its softmax sum
  grow(maxima, nh);
  float* m = maxima.data();
  std::fill(m, m + nh, -std::numeric_limits<float>::infinity());
  // bf16 caches (head size a multiple of 16): the run's queries and outputs in even/odd order.
  constexpr bool bf16 = std::is_same<E, uint16_t>::value;
  const bool eo = bf16 && vec && hd % 16 == 0;
  // int8 caches with head sizes a multiple of 16, on AVX-512: the kernels that apply the row scales.
  const bool i8_512 = i8 && kInt8Attention512 && vec && hd % 16 == 0;
  thread_local FloatBuffer qd_buf, od_buf;
  if (eo) {  // the run's nh query heads lie together in q
    split_even_odd(q + (static_cast<size_t>(t) * n_heads + kh0 * group) * hd, nh, hd, qd_buf);
    grow(od_buf, static_cast<size_t>(nh) * hd);
    std::fill(od_buf.data(), od_buf.data() + static_cast<size_t>(nh) * hd, 0.0f);
  }
  const float* qd = qd_buf.data();
  float* od = od_buf.data();
  for (int b = b_lo; b < n_blocks; ++b) {
    const int rows = rows_of(b);
    for (int kh = kh0; kh < kh1; ++kh) {
      const E* kb = slab(b, 0, kh);
      // This head's next slab: its keys in the next block, or after the last its values' first.
      const E* next = b + 1 < n_blocks ? slab(b + 1, 0, kh) : slab(b_lo, 1, kh);
      const size_t next_bytes = static_cast<size_t>(rows_of(b + 1 < n_blocks ? b + 1 : b_lo)) * hd * sizeof(E);
      if (!vec) prefetch_range(next, next_bytes);
      if (b + 1 < n_blocks) prefetch_scales(b + 1, 0, kh);
      else prefetch_scales(b_lo, 1, kh);
      if constexpr (i8) {
        if (i8_512) {
          for (int g0 = 0; g0 < group; g0 += 4) {
            const int G = std::min(4, group - g0);
            const float* qs[4];
            float* ss[4];
            for (int g = 0; g < G; ++g) {
              const int j = (kh - kh0) * group + g0 + g;
              qs[g] = q + (static_cast<size_t>(t) * n_heads + kh * group + g0 + g) * hd;
              ss[g] = sc + static_cast<size_t>(j) * stride + b * bs;
            }
            key_scores_i8_heads(G, kb, scales_of(b, 0, kh), qs, rows, hd, scale, ss, m + (kh - kh0) * group + g0,
                                g0 == 0 ? next : nullptr, next_bytes);
          }
          continue;
        }
      }
      // Grouped-query heads, up to 4 at a time, in one pass over the keys (and below the values).
      for (int g0 = 0; g0 < group && vec && group > 1; g0 += 4) {
        const int G = std::min(4, group - g0);
        const float* qs[4];
        float* ss[4];
        float mm[4];
        for (int g = 0; g < G; ++g) {
          const int j = (kh - kh0) * group + g0 + g, h = kh * group + g0 + g;
          qs[g] = eo ? qd + static_cast<size_t>(j) * hd : q + (static_cast<size_t>(t) * n_heads + h) * hd;
          ss[g] = sc + static_cast<size_t>(j) * stride + b * bs;
          mm[g] = m[j];
        }
        const void* pf = g0 == 0 ? next : nullptr;
        if constexpr (bf16) {
          if (eo) key_scores_heads<EvenOdd>(G, kb, qs, rows, hd, scale, ss, mm, pf, next_bytes);
          else key_scores_heads<InOrder<E>>(G, kb, qs, rows, hd, scale, ss, mm, pf, next_bytes);
        } else {
          key_scores_heads<InOrder<E>>(G, kb, qs, rows, hd, scale, ss, mm, pf, next_bytes);
        }
        for (int g = 0; g < G; ++g) m[(kh - kh0) * group + g0 + g] = mm[g];
      }
      for (int g = 0; g < group && !(vec && group > 1); ++g) {
        const int j = (kh - kh0) * group + g, h = kh * group + g;
        const float* qh = q + (static_cast<size_t>(t) * n_heads + h) * hd;
        float* s = sc + static_cast<size_t>(j) * stride + b * bs;
        const void* pf = g == 0 ? next : nullptr;
        if constexpr (bf16) {
          if (eo) {
            m[j] = std::max(m[j], key_scores<EvenOdd>(kb, qd + static_cast<size_t>(j) * hd, rows, hd, scale, s, pf,
                                                      next_bytes));
            continue;
          }
        }
        if (vec) {
          m[j] = std::max(m[j], key_scores<InOrder<E>>(kb, qh, rows, hd, scale, s, pf, next_bytes));
        } else {
          for (int r = 0; r < rows; ++r) {
            s[r] = dot_kv(qh, kb + static_cast<size_t>(r) * hd, hd) * scale;
            m[j] = std::max(m[j], s[r]);
          }
        }
      }
    }
  }
  if (i8 && !i8_512) {  // each key row's scale on its scores; each head's largest score again
    for (int j = 0; j < nh; ++j) {
      const int kh = kh0 + j / group;
      float* s = sc + static_cast<size_t>(j) * stride;
      float mx = -std::numeric_limits<float>::infinity();
      for (int b = b_lo; b < n_blocks; ++b) {
        Eigen::Map<Eigen::ArrayXf> sb(s + static_cast<size_t>(b) * bs, rows_of(b));
        sb *= Eigen::Map<const Eigen::ArrayXf>(scales_of(b, 0, kh), sb.size());  // vectorised, as is the max
        mx = std::max(mx, sb.maxCoeff());
      }
      m[j] = mx;
    }
  }
  // Soft-capped scores (cap tanh(s / cap)), and the first block's keys before a window: no weight;
  // then each head's largest score again.
  if (options.softcap > 0.0f || lo > b_lo * bs)
    for (int j = 0; j < nh; ++j) {
      float* s = sc + static_cast<size_t>(j) * stride;
      Eigen::Map<Eigen::ArrayXf> seen(s + lo, end - lo);
      if (options.softcap > 0.0f) seen = (seen / options.softcap).tanh() * options.softcap;
      std::fill(s + b_lo * bs, s + lo, -std::numeric_limits<float>::infinity());
      m[j] = seen.maxCoeff();
    }
  for (int j = 0; j < nh; ++j) {
    Eigen::Map<Eigen::ArrayXf> p(sc + static_cast<size_t>(j) * stride + b_lo * bs, end - b_lo * bs);
    p = (p - m[j]).exp();  // vectorised
    const size_t at = part.index(t, chunk, kh0 * group + j);
    part.m[at] = m[j];
    part.l[at] = p.sum();
    float* o = part.o + at * hd;
    std::fill(o, o + hd, 0.0f);
  }
  for (int b = b_lo; b < n_blocks; ++b) {
    const int rows = rows_of(b);
    for (int kh = kh0; kh < kh1; ++kh) {
      const E* vb = slab(b, 1, kh);
      const E* next = b + 1 < n_blocks ? slab(b + 1, 1, kh) : nullptr;
      const size_t next_bytes = next ? static_cast<size_t>(rows_of(b + 1)) * hd * sizeof(E) : 0;
      if (!vec && next) prefetch_range(next, next_bytes);
      if constexpr (i8) {
        if (next) prefetch_scales(b + 1, 1, kh);
        if (i8_512) {
          for (int g0 = 0; g0 < group; g0 += 4) {
            const int G = std::min(4, group - g0);
            const float* ps[4];
            float* os[4];
            for (int g = 0; g < G; ++g) {
              const int j = (kh - kh0) * group + g0 + g;
              ps[g] = sc + static_cast<size_t>(j) * stride + b * bs;
              os[g] = part.o + part.index(t, chunk, kh * group + g0 + g) * hd;
            }
            add_values_i8_heads(G, vb, scales_of(b, 1, kh), ps, rows, hd, os, g0 == 0 ? next : nullptr, next_bytes);
          }
          continue;
        }
        // each value row's scale on its weights (the softmax sum is taken)
        Eigen::Map<const Eigen::ArrayXf> rs(scales_of(b, 1, kh), rows);
        for (int g = 0; g < group; ++g)
          Eigen::Map<Eigen::ArrayXf>(sc + static_cast<size_t>((kh - kh0) * group + g) * stride + b * bs, rows) *= rs;
      }
      for (int g0 = 0; g0 < group && vec && group > 1; g0 += 4) {
        const int G = std::min(4, group - g0);
        const float* ps[4];
        float* os[4];
        for (int g = 0; g < G; ++g) {
          const int j = (kh - kh0) * group + g0 + g, h = kh * group + g0 + g;
          ps[g] = sc + static_cast<size_t>(j) * stride + b * bs;
          os[g] = eo ? od + static_cast<size_t>(j) * hd : part.o + part.index(t, chunk, h) * hd;
        }
        const void* pf = g0 == 0 ? next : nullptr;
        if constexpr (bf16) {
          if (eo) add_weighted_values_heads<EvenOdd>(G, vb, ps, rows, hd, os, pf, next_bytes);
          else add_weighted_values_heads<InOrder<E>>(G, vb, ps, rows, hd, os, pf, next_bytes);
        } else {
          add_weighted_values_heads<InOrder<E>>(G, vb, ps, rows, hd, os, pf, next_bytes);
        }
      }
      for (int g = 0; g < group && !(vec && group > 1); ++g) {
        const int j = (kh - kh0) * group + g, h = kh * group + g;
        const float* p = sc + static_cast<size_t>(j) * stride + b * bs;
        float* o = part.o + part.index(t, chunk, h) * hd;
        const void* pf = g == 0 ? next : nullptr;
        if constexpr (bf16) {
          if (eo) {
            add_weighted_values<EvenOdd>(vb, p, rows, hd, od + static_cast<size_t>(j) * hd, pf, next_bytes);
            continue;
          }
        }
        if (vec) {
          add_weighted_values<InOrder<E>>(vb, p, rows, hd, o, pf, next_bytes);
        } else {
          for (int r = 0; r < rows; ++r) {
            const E* vr = vb + static_cast<size_t>(r) * hd;
#pragma omp simd
            for (int i = 0; i < hd; ++i) o[i] += p[r] * load(vr, i);
          }
        }
      }
    }
  }
  if (eo)  // the even/odd outputs back in order
    for (int j = 0; j < nh; ++j) {
      float* o = part.o + part.index(t, chunk, kh0 * group + j) * hd;
      const float* d = od + static_cast<size_t>(j) * hd;
      for (int i = 0; i < hd; i += 16)
        for (int e = 0; e < 8; ++e) {
          o[i + 2 * e] = d[i + e];
          o[i + 2 * e + 1] = d[i + 8 + e];
        }
    }
}

// Each query head's output from its chunks' partials (query t's chunks: [c_lo[t], c_end[t])), in
// chunk order: with M the largest of the chunks' maxima and w_c = exp(m_c - M),
// out = sum_c (w_c / L) o_c where L = sum_c w_c l_c. One chunk gives w = 1 and out = o / l, the
// single pass's bits.
void merge_chunks(const Partials& part, int T, const int* c_lo, const int* c_end, int n_heads, int hd, float* out) {
  for (int t = 0; t < T; ++t) {
    const int c0 = c_lo[t], c1 = c_end[t];
    for (int h = 0; h < n_heads; ++h) {
      float mx = -std::numeric_limits<float>::infinity();
      for (int c = c0; c < c1; ++c) mx = std::max(mx, part.m[part.index(t, c, h)]);
      float L = 0.0f;
      for (int c = c0; c < c1; ++c) L += std::exp(part.m[part.index(t, c, h)] - mx) * part.l[part.index(t, c, h)];
      const float inv = 1.0f / L;
      Vec o(out + (static_cast<size_t>(t) * n_heads + h) * hd, hd);
      for (int c = c0; c < c1; ++c) {
        const size_t at = part.index(t, c, h);
        const float w = std::exp(part.m[at] - mx) * inv;
        if (c == c0) o = ConstVec(part.o + at * hd, hd) * w;
        else o += ConstVec(part.o + at * hd, hd) * w;
      }
    }
  }
}

// Multiply-adds (queries x heads x context x head size) from which decode attention spreads its
// heads over the threads.
constexpr int64_t kAttentionThreadsMinWork = int64_t(1) << 12;

// Decode attention for T < 8 queries: the (query, chunk, KV head) items split evenly into one
// contiguous run per thread (not handed out one at a time: a run reads adjacent slabs, and its GQA
// heads share them), then the chunks merged. Chunks are fixed spans of the context, so the result
// is the same on any thread count. scratch holds n_threads * n_heads * stride floats.
template <typename E>
void attention_runs(const float* q, const BlockPool& pool, const int* table, int layer, int T, int p0, int n_heads,
                    float* out, float* scratch, int stride, int n_threads, const AttentionOptions& options) {
  const int n_kv = pool.n_kv_heads(), hd = pool.head_dim(), bs = pool.block_size();
  const bool vec = kVectorAttention && hd % 8 == 0;
  Partials part;
  const int group = n_heads / n_kv, ctx_blocks = (p0 + T + bs - 1) / bs;
  part.chunk_blocks = group > 1 ? std::max(1, kChunkPositions / bs) : ctx_blocks;
  part.n_heads = n_heads;
  part.n_chunks = end_chunk(p0 + T, bs, part.chunk_blocks);
  // Items of query t: [first[t], first[t + 1]), chunk by chunk, each chunk's KV heads in order.
  int first[8] = {0}, c_lo[8] = {0}, c_end[8] = {0};  // T < 8
  for (int t = 0; t < T; ++t) {
    const int n_ctx = p0 + t + 1;
    c_lo[t] = first_chunk(n_ctx, bs, options.window, part.chunk_blocks);
    c_end[t] = end_chunk(n_ctx, bs, part.chunk_blocks);
    first[t + 1] = first[t] + (c_end[t] - c_lo[t]) * n_kv;
  }
  const int items = first[T];
  thread_local FloatBuffer partials;
  const size_t n_part = static_cast<size_t>(T) * part.n_chunks * n_heads;
  grow(partials, n_part * (hd + 2));
  part.o = partials.data();
  part.m = part.o + n_part * hd;
  part.l = part.m + n_part;
  const int64_t work = static_cast<int64_t>(T) * n_heads * (p0 + T) * hd;  // multiply-adds, roughly
  auto run = [&](int nth, int id) {
    float* sc = scratch + static_cast<size_t>(id) * n_heads * stride;
    const int i1 = static_cast<int>(static_cast<int64_t>(items) * (id + 1) / nth);
    for (int i = static_cast<int>(static_cast<int64_t>(items) * id / nth); i < i1;) {
      int t = 0;
      while (i >= first[t + 1]) ++t;
      const int k = i - first[t], chunk = c_lo[t] + k / n_kv, kh0 = k % n_kv, kh1 = std::min(n_kv, kh0 + (i1 - i));
      attend_heads<E>(q, pool, table, layer, t, p0, n_heads, kh0, kh1, chunk, part, sc, stride, vec, options);
      i += kh1 - kh0;
    }
  };
  // Small steps run on the calling thread, outside OpenMP: a parallel region that an if clause
  // makes serial still builds (mallocs) and frees a team of one.
  if (n_threads > 1 && work >= kAttentionThreadsMinWork) {
#pragma omp parallel num_threads(n_threads)
    run(omp_get_num_threads(), omp_get_thread_num());
  } else {
    run(1, 0);
  }
  merge_chunks(part, T, c_lo, c_end, n_heads, hd, out);
}
}  // namespace

template <typename E>
void attention_decode(const float* q, const BlockPool& pool, const int* table, int layer, int T, int p0,
                      int n_heads, float* out, float* scratch, int stride, int n_threads,
                      const AttentionOptions& options) {
  attention_runs<E>(q, pool, table, layer, T, p0, n_heads, out, scratch, stride, n_threads, options);
}
template void attention_decode<float>(const float*, const BlockPool&, const int*, int, int, int, int, float*, float*,
                                      int, int, const AttentionOptions&);
template void attention_decode<uint16_t>(const float*, const BlockPool&, const int*, int, int, int, int, float*,
                                         float*, int, int, const AttentionOptions&);
template void attention_decode<int8_t>(const float*, const BlockPool&, const int*, int, int, int, int, float*,
                                       float*, int, int, const AttentionOptions&);

}  // namespace DECODELAB_ISA
}  // namespace decodelab
