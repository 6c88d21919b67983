// Attention in one fixed order for prompts and decoding alike: every query's context splits into
// chunks of 256 positions counted from 0; each chunk gives a partial (its largest score, softmax
// sum and weighted values) computed the same way whatever else shares the call, and the partials
// merge in chunk order. A query's output is thus the same bits in a prompt, decoded alone, batched,
// on any thread count and at every instruction set (sums and exp from cpu/fixed_math.h).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "cpu/attention/kernels.h"
#include "cpu/attention/fixed_vectors.h"
#include "cpu/fixed_math.h"
#include "decodelab/aligned.h"

namespace decodelab {
namespace DECODELAB_ISA {

namespace {

constexpr int kChunk = 256;         // positions per chunk
constexpr int kMaxRows = 32;        // query rows (tokens x heads of one KV head) per call
constexpr int kKeyBlock = 16;       // keys whose rows every query row takes while they are in L1
constexpr int kAhead = 2;           // key blocks between a prefetch and its use
constexpr int kTransposeRows = 6;   // query rows from which a block of keys is transposed first
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The first position a query at `pos` sees: a sliding window's start, or 0.
inline int window_start(int pos, int window) { return window > 0 ? std::max(0, pos + 1 - window) : 0; }
inline int first_chunk(int pos, int window) { return window_start(pos, window) / kChunk; }
inline int end_chunk(int pos) { return pos / kChunk + 1; }

// One layer's rows of one KV head, by position, through the block table.
template <typename E>
struct HeadRows {
  const BlockPool& pool;
  const int* table;
  int layer, kh, bs, hd;
  const E* row(int kind, int pos) const {
    return reinterpret_cast<const E*>(pool.data(table[pos / bs])) + pool.slab(layer, kind, kh) +
           static_cast<size_t>(pos % bs) * hd;
  }
  const float* scales(int kind, int pos) const {  // an int8 row's scale, then the rest of its block's
    return pool.row_scales(pool.data(table[pos / bs]), layer, kind, kh) + pos % bs;
  }
};

// A query row: its vector, position, and where its chunk partial goes (o: hd floats).
struct Row {
  const float* q;
  int pos;
  float* o;
  float* m;
  float* l;
};

// One row's scores s[0 .. len) become its weights, in two passes: s = (s x ks) x scale (I8: the
// key rows' scales), soft-capped (Cap), and their largest m; then p = exp(s - m), summed in 16
// lanes from s[0] and tree16 into l, and stored as p x vs (I8: the value rows' scales).
template <bool I8, bool Cap>
void softmax_row(float* s, int len, const float* ks, const float* vs, float scale, float softcap, float* m,
                 float* l) {
  float mx[fixed::kLanes], acc[fixed::kLanes] = {};
  for (int x = 0; x < fixed::kLanes; ++x) mx[x] = kNegInf;
  const int whole = len / fixed::kLanes * fixed::kLanes;
  for (int j = 0; j < len; j += fixed::kLanes) {
    const int w = j < whole ? fixed::kLanes : len - j;
    for (int x = 0; x < w; ++x) {
      float v = s[j + x];
      if (I8) v = v * ks[j + x];
      v = v * scale;
      if (Cap) v = fixed::tanh(v / softcap) * softcap;
      s[j + x] = v;
      mx[x] = v > mx[x] ? v : mx[x];
    }
  }
  float top = mx[0];
  for (int x = 1; x < fixed::kLanes; ++x) top = mx[x] > top ? mx[x] : top;
  for (int j = 0; j < len; j += fixed::kLanes) {
    const int w = j < whole ? fixed::kLanes : len - j;
    for (int x = 0; x < w; ++x) {
      const float p = fixed::exp(s[j + x] - top);
      acc[x] = acc[x] + p;
      s[j + x] = I8 ? p * vs[j + x] : p;
    }
  }
  *m = top;
  *l = fixed::tree16(acc);
}

// The partials of chunk c for `n` query rows of one KV head, each over its own positions
// [max(window start, c * kChunk), min(pos + 1, (c + 1) * kChunk)), which must not be empty.
// Scores q.k (fixed::dot_fma) times the row scale (int8) times the attention scale, soft-capped;
// weights exp(s - m) summed by fixed::sum from the row's first position; values added in
// position order (fixed_vectors.h). s: kMaxRows * kChunk floats.
template <typename E>
void chunk_partials(const HeadRows<E>& kv, Row* rows, int n, int c, const AttentionOptions& opt, float scale,
                    float* s) {
  constexpr bool i8 = std::is_same<E, int8_t>::value;
  const int hd = kv.hd, base = c * kChunk;
  int a[kMaxRows], e[kMaxRows], lo = kChunk * (c + 1), hi = base;
  for (int r = 0; r < n; ++r) {
    a[r] = std::max(window_start(rows[r].pos, opt.window), base);
    e[r] = std::min(rows[r].pos + 1, base + kChunk);
    lo = std::min(lo, a[r]);
    hi = std::max(hi, e[r]);
  }
  // Each position's key and value rows (and int8 scales), looked up once for all the rows.
  const E* kp[kChunk];
  const E* vp[kChunk];
  float ks[kChunk], vs[kChunk];
  for (int j = lo; j < hi;) {
    const int b = j / kv.bs, end = std::min(hi, (b + 1) * kv.bs);
    const E* k = kv.row(0, j);
    const E* v = kv.row(1, j);
    for (int x = j; x < end; ++x) {
      kp[x - lo] = k + static_cast<size_t>(x - j) * hd;
      vp[x - lo] = v + static_cast<size_t>(x - j) * hd;
    }
    if (i8) {
      const float* kss = kv.scales(0, j);
      const float* vss = kv.scales(1, j);
      std::copy(kss, kss + (end - j), ks + (j - lo));
      std::copy(vss, vss + (end - j), vs + (j - lo));
    }
    j = end;
  }
  // The rows' ranges in [lo, hi) clipped to keys [k0, k1): [*b, *e), empty when *b >= *e.
  auto clip = [&](int r, int k0, int k1, int* b, int* e_) {
    *b = std::max(a[r], k0);
    *e_ = std::min(e[r], k1);
  };
  // Scores, a block of keys at a time for every row, while the block's keys are in L1 (bf16 and
  // int8 keys widened to fp32 once for all the rows: exact, so the same bits); the rows two
  // blocks on asked for meanwhile, as cache blocks lie apart where the hardware prefetcher stops.
  const size_t row_bytes = static_cast<size_t>(hd) * sizeof(E);
  auto prefetch = [&](const E* const* p, int k0) {
    for (int j = k0; j < std::min(hi, k0 + kKeyBlock); ++j)
      for (size_t x = 0; x < row_bytes; x += 64) __builtin_prefetch(reinterpret_cast<const char*>(p[j - lo]) + x);
  };
  thread_local FloatBuffer wide, kt;
  grow(wide, static_cast<size_t>(kKeyBlock) * hd);
  grow(kt, static_cast<size_t>(kKeyBlock) * hd);
  auto block_rows = [&](const E* const* p, int k0, int cnt, const float** f) {
    if constexpr (std::is_same<E, float>::value) {
      for (int j = 0; j < cnt; ++j) f[j] = p[k0 - lo + j];
    } else {
      for (int j = 0; j < cnt; ++j) {
        float* d = wide.data() + static_cast<size_t>(j) * hd;
        const E* src = p[k0 - lo + j];
        for (int i = 0; i < hd; ++i) d[i] = fixed::widen(src[i]);
        f[j] = d;
      }
    }
  };
  const float* fk[kKeyBlock];
  const int span = (hi - lo + kKeyBlock - 1) / kKeyBlock * kKeyBlock;  // the keys in whole blocks
  for (int k0 = lo; k0 < hi; k0 += kKeyBlock) {
    // Two blocks on: keys, or past the last key the first values.
    const int ahead = k0 + kAhead * kKeyBlock;
    if (ahead < hi) prefetch(kp, ahead);
    else if (ahead - span >= lo && ahead - span < hi) prefetch(vp, ahead - span);
    const int cnt = std::min(kKeyBlock, hi - k0);
    block_rows(kp, k0, cnt, fk);
#if defined(DECODELAB_AVX512)
    if (hd % 16 == 0 && n >= kTransposeRows) {  // the block transposed once for many rows
      fixed::transpose_keys(fk, cnt, hd, kt.data());
      for (int r = 0; r < n; ++r) {
        int b, x;
        clip(r, k0, k0 + cnt, &b, &x);
        if (b >= x) continue;
        float* dst = s + r * kChunk + (b - a[r]);
        if (b == k0 && x == k0 + 16) {  // the whole block: straight into the row's scores
          fixed::scores_transposed(rows[r].q, kt.data(), hd, dst);
          continue;
        }
        alignas(64) float s16[16];
        fixed::scores_transposed(rows[r].q, kt.data(), hd, s16);
        for (int j = b; j < x; ++j) dst[j - b] = s16[j - k0];
      }
      continue;
    }
#endif
    for (int r = 0; r < n; ++r) {
      int b, x;
      clip(r, k0, k0 + cnt, &b, &x);
      if (b < x) fixed::scores(rows[r].q, fk + (b - k0), x - b, hd, s + r * kChunk + (b - a[r]));
    }
  }
  for (int r = 0; r < n; ++r) {
    const int len = e[r] - a[r], off = a[r] - lo;
    float* sr = s + r * kChunk;
    if (opt.softcap > 0.0f)
      softmax_row<i8, true>(sr, len, ks + off, vs + off, scale, opt.softcap, rows[r].m, rows[r].l);
    else
      softmax_row<i8, false>(sr, len, ks + off, vs + off, scale, opt.softcap, rows[r].m, rows[r].l);
    std::fill(rows[r].o, rows[r].o + hd, 0.0f);
  }
  // The weighted values, a block of keys at a time for every row; rows that take the whole block
  // go up to 4 at a time, the block's values loaded once for them.
  for (int k0 = lo; k0 < hi; k0 += kKeyBlock) {
    if (k0 + kAhead * kKeyBlock < hi) prefetch(vp, k0 + kAhead * kKeyBlock);
    const int cnt = std::min(kKeyBlock, hi - k0);
    block_rows(vp, k0, cnt, fk);
    const float* ws[4];
    float* os[4];
    int g = 0;
    auto flush = [&] {
      switch (g) {
        case 4: fixed::add_weighted_values<4>(ws, fk, cnt, hd, os); break;
        case 3: fixed::add_weighted_values<3>(ws, fk, cnt, hd, os); break;
        case 2: fixed::add_weighted_values<2>(ws, fk, cnt, hd, os); break;
        case 1: fixed::add_weighted_values<1>(ws, fk, cnt, hd, os); break;
        default: break;
      }
      g = 0;
    };
    for (int r = 0; r < n; ++r) {
      int b, x;
      clip(r, k0, k0 + cnt, &b, &x);
      if (b >= x) continue;
      if (b == k0 && x == k0 + cnt) {
        ws[g] = s + r * kChunk + (b - a[r]);
        os[g++] = rows[r].o;
        if (g == 4) flush();
      } else {
        const float* w = s + r * kChunk + (b - a[r]);
        fixed::add_weighted_values<1>(&w, fk + (b - k0), x - b, hd, &rows[r].o);
      }
    }
    flush();
  }
}

// out = sum_c o_c exp(m_c - M) / L over chunks [0, nc), in chunk order, with M the largest m_c and
// L = sum_c exp(m_c - M) l_c. Chunk c's partial: o + c * o_stride, m[c * ml_stride], l[...].
void merge(int nc, const float* o, size_t o_stride, const float* m, const float* l, size_t ml_stride, int hd,
           float* out) {
  float mx = kNegInf;
  for (int c = 0; c < nc; ++c) mx = m[c * ml_stride] > mx ? m[c * ml_stride] : mx;
  float sum = 0.0f;
  for (int c = 0; c < nc; ++c) sum = sum + fixed::exp(m[c * ml_stride] - mx) * l[c * ml_stride];
  const float inv = 1.0f / sum;
  std::fill(out, out + hd, 0.0f);
  for (int c = 0; c < nc; ++c) {
    const float w = fixed::exp(m[c * ml_stride] - mx) * inv;
    const float* oc = o + c * o_stride;
    for (int i = 0; i < hd; ++i) out[i] = out[i] + oc[i] * w;
  }
}

inline float scale_of(const AttentionOptions& opt, int hd) {
  return opt.scale > 0.0f ? opt.scale : 1.0f / std::sqrt(static_cast<float>(hd));
}

}  // namespace

// Prompts: items (tile of up to kTokens queries, KV head), each running its chunks in turn for the
// tile's query heads of that KV head, then merging each row's chunks.
template <typename E>
void attention_prefill(const float* q, const BlockPool& pool, const int* table, int layer, int T, int p0,
                       int n_heads, float* out, int n_threads, const AttentionOptions& options) {
  const int n_kv = pool.n_kv_heads(), hd = pool.head_dim(), group = n_heads / n_kv;
  const int tokens = std::max(1, std::min(8, kMaxRows / group));  // queries per tile
  const int n_tiles = (T + tokens - 1) / tokens, items = n_tiles * n_kv;
  const float scale = scale_of(options, hd);
  const int max_chunks = end_chunk(p0 + T - 1);
#pragma omp parallel for schedule(dynamic) num_threads(n_threads) if (n_threads > 1)
  for (int item = 0; item < items; ++item) {
    const int tile = item / n_kv, kh = item % n_kv;
    const int t0 = tile * tokens, t1 = std::min(T, t0 + tokens);
    thread_local FloatBuffer scores, parts;
    grow(scores, static_cast<size_t>(kMaxRows) * kChunk);
    // Per row and chunk: o (hd floats), m, l.
    const size_t per_row = static_cast<size_t>(max_chunks) * (hd + 2);
    grow(parts, per_row * (t1 - t0) * group);
    const HeadRows<E> kv{pool, table, layer, kh, pool.block_size(), hd};
    const int c_first = first_chunk(p0 + t0, options.window), c_end = end_chunk(p0 + t1 - 1);
    for (int c = c_first; c < c_end; ++c) {
      thread_local std::vector<Row> rows;
      rows.clear();
      for (int t = t0; t < t1; ++t) {
        const int pos = p0 + t;
        if (c < first_chunk(pos, options.window) || c >= end_chunk(pos)) continue;
        for (int g = 0; g < group; ++g) {
          float* part = parts.data() + static_cast<size_t>((t - t0) * group + g) * per_row;
          rows.push_back({q + (static_cast<size_t>(t) * n_heads + kh * group + g) * hd, pos,
                          part + static_cast<size_t>(c) * hd, part + static_cast<size_t>(max_chunks) * hd + c,
                          part + static_cast<size_t>(max_chunks) * (hd + 1) + c});
        }
      }
      for (size_t r0 = 0; r0 < rows.size(); r0 += kMaxRows)
        chunk_partials<E>(kv, rows.data() + r0, static_cast<int>(std::min<size_t>(kMaxRows, rows.size() - r0)), c,
                          options, scale, scores.data());
    }
    for (int t = t0; t < t1; ++t) {
      const int pos = p0 + t, c0 = first_chunk(pos, options.window), c1 = end_chunk(pos);
      for (int g = 0; g < group; ++g) {
        const float* part = parts.data() + static_cast<size_t>((t - t0) * group + g) * per_row;
        merge(c1 - c0, part + static_cast<size_t>(c0) * hd, hd, part + static_cast<size_t>(max_chunks) * hd + c0,
              part + static_cast<size_t>(max_chunks) * (hd + 1) + c0, 1, hd,
              out + (static_cast<size_t>(t) * n_heads + kh * group + g) * hd);
      }
    }
  }
}

// Decoding (T < 8 queries): items (query, chunk, KV head) split into one contiguous run per thread,
// then each query head's chunks merged.
template <typename E>
void attention_decode(const float* q, const BlockPool& pool, const int* table, int layer, int T, int p0,
                      int n_heads, float* out, int n_threads, const AttentionOptions& options) {
  const int n_kv = pool.n_kv_heads(), hd = pool.head_dim(), group = n_heads / n_kv;
  const float scale = scale_of(options, hd);
  const int n_chunks = end_chunk(p0 + T - 1);
  int first[9] = {0};
  for (int t = 0; t < T; ++t)
    first[t + 1] = first[t] + (end_chunk(p0 + t) - first_chunk(p0 + t, options.window)) * n_kv;
  const int items = first[T];
  // Per (query, chunk, head): o, then all m, then all l.
  thread_local FloatBuffer parts;
  const size_t n_part = static_cast<size_t>(T) * n_chunks * n_heads;
  grow(parts, n_part * (hd + 2));
  float* po = parts.data();
  float* pm = po + n_part * hd;
  float* pl = pm + n_part;
  auto at = [&](int t, int c, int h) { return (static_cast<size_t>(t) * n_chunks + c) * n_heads + h; };
  const int64_t work = static_cast<int64_t>(T) * n_heads * (p0 + T) * hd;
  auto run = [&](int nth, int id) {
    thread_local FloatBuffer scores;
    grow(scores, static_cast<size_t>(kMaxRows) * kChunk);
    const int i1 = static_cast<int>(static_cast<int64_t>(items) * (id + 1) / nth);
    for (int i = static_cast<int>(static_cast<int64_t>(items) * id / nth); i < i1; ++i) {
      int t = 0;
      while (i >= first[t + 1]) ++t;
      const int pos = p0 + t, k = i - first[t];
      const int c = first_chunk(pos, options.window) + k / n_kv, kh = k % n_kv;
      const HeadRows<E> kv{pool, table, layer, kh, pool.block_size(), hd};
      for (int g0 = 0; g0 < group; g0 += kMaxRows) {
        Row rows[kMaxRows];
        const int nr = std::min(kMaxRows, group - g0);
        for (int g = 0; g < nr; ++g) {
          const int h = kh * group + g0 + g;
          const size_t j = at(t, c, h);
          rows[g] = {q + (static_cast<size_t>(t) * n_heads + h) * hd, pos, po + j * hd, pm + j, pl + j};
        }
        chunk_partials<E>(kv, rows, nr, c, options, scale, scores.data());
      }
    }
  };
  if (n_threads > 1 && work >= (int64_t(1) << 12) && items > 1) {
#pragma omp parallel num_threads(n_threads)
    run(omp_get_num_threads(), omp_get_thread_num());
  } else {
    run(1, 0);
  }
  for (int t = 0; t < T; ++t) {
    const int c0 = first_chunk(p0 + t, options.window), c1 = end_chunk(p0 + t);
    for (int h = 0; h < n_heads; ++h) {
      const size_t j = at(t, c0, h), step = static_cast<size_t>(n_heads);
      merge(c1 - c0, po + j * hd, step * hd, pm + j, pl + j, step, hd, out + (static_cast<size_t>(t) * n_heads + h) * hd);
    }
  }
}

#define DECODELAB_ATTENTION(E)                                                                                    \
  template void attention_prefill<E>(const float*, const BlockPool&, const int*, int, int, int, int, float*, int, \
                                     const AttentionOptions&);                                                   \
  template void attention_decode<E>(const float*, const BlockPool&, const int*, int, int, int, int, float*, int,  \
                                    const AttentionOptions&);
DECODELAB_ATTENTION(float)
DECODELAB_ATTENTION(uint16_t)
DECODELAB_ATTENTION(int8_t)
#undef DECODELAB_ATTENTION

}  // namespace DECODELAB_ISA
}  // namespace decodelab
