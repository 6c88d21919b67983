// Prompt attention (8 or more queries) as matrix products over the keys and values gathered from
// their cache blocks: register tiles with AVX2 / AVX-512, Eigen otherwise.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "cpu/attention/kernels.h"
#include "cpu/convert.h"
#include "cpu/eigen_maps.h"
#include "decodelab/aligned.h"

namespace decodelab {
namespace DECODELAB_ISA {

namespace {
// Rows [0, nb) of one slab (layer, K or V, KV head) of a cache block as fp32, hd values each: a
// copy, bf16 widened, or int8 times each row's scale.
template <typename E>
void widen_slab(const BlockPool& pool, const uint8_t* blk, int layer, int kind, int kh, int nb, float* dst) {
  const int hd = pool.head_dim();
  const E* src = reinterpret_cast<const E*>(blk) + pool.slab(layer, kind, kh);
  if constexpr (std::is_same<E, int8_t>::value) {
    const float* rs = pool.row_scales(blk, layer, kind, kh);
    for (int r = 0; r < nb; ++r) {
      const int8_t* row = src + static_cast<size_t>(r) * hd;
      float* d = dst + static_cast<size_t>(r) * hd;
      const float sc = rs[r];
#pragma omp simd
      for (int i = 0; i < hd; ++i) d[i] = sc * static_cast<float>(row[i]);
    }
  } else {
    widen(src, static_cast<size_t>(nb) * hd, dst);
  }
}

using StridedRows = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;
using StridedRowsOut = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;

#if defined(__AVX2__) && defined(__FMA__)
// Register tiles for prefill attention (hd a multiple of 16): both of its products as one kernel.
// out (NR rows, stride ldo; 16 columns) = a (NR rows of K values, stride lda) b, where b is K rows
// of 16 values, contiguous. NR x 16 outputs stay in 2 NR accumulators; each step broadcasts NR
// values against two 8-wide loads: an outer product, so no horizontal sums and nothing packed.
// The unroll pragmas keep the accumulators in registers: without them GCC 12 at -O3 kept the arrays
// on the stack, storing every accumulator back after each FMA.
template <int NR>
void panel_tile(const float* a, int64_t lda, const float* b, int K, float* out, int64_t ldo) {
  __m256 a0[NR], a1[NR];
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
  for (int k = 0; k < K; ++k) {
    const float* bk = b + 16 * static_cast<size_t>(k);
    const __m256 b0 = _mm256_loadu_ps(bk), b1 = _mm256_loadu_ps(bk + 8);
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      const __m256 ab = _mm256_broadcast_ss(a + r * lda + k);
      a0[r] = _mm256_fmadd_ps(ab, b0, a0[r]);
      a1[r] = _mm256_fmadd_ps(ab, b1, a1[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r) {
    _mm256_storeu_ps(out + r * ldo, a0[r]);
    _mm256_storeu_ps(out + r * ldo + 8, a1[r]);
  }
}

#if defined(DECODELAB_AVX512)
// The AVX-512 tile: NR rows against NP (1 or 2) panels, one 16-wide vector per row and panel, so
// 8 rows by 2 panels keep 16 accumulators and each step makes 16 FMAs from 2 loads and 8
// broadcasts. Each output is the same sum in the same order as in the AVX2 tile.
template <int NR, int NP>
void panel_tile512(const float* a, int64_t lda, const float* b, size_t panel_stride, int K, float* out,
                   int64_t ldo) {
  __m512 acc[NR][NP];
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 2
    for (int j = 0; j < NP; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int k = 0; k < K; ++k) {
    __m512 bk[NP];
#pragma GCC unroll 2
    for (int j = 0; j < NP; ++j) bk[j] = _mm512_loadu_ps(b + j * panel_stride + 16 * static_cast<size_t>(k));
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      const __m512 ab = _mm512_set1_ps(a[r * lda + k]);
#pragma GCC unroll 2
      for (int j = 0; j < NP; ++j) acc[r][j] = _mm512_fmadd_ps(ab, bk[j], acc[r][j]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 2
    for (int j = 0; j < NP; ++j) _mm512_storeu_ps(out + r * ldo + 16 * j, acc[r][j]);
}

template <int NP>
void panel_rows512(const float* a, int64_t lda, int rows, const float* b, size_t panel_stride, int K, float* out,
                   int64_t ldo) {
  for (int r = 0; r < rows; r += 8) {
    const float* ar = a + r * lda;
    float* o = out + r * ldo;
    switch (std::min(8, rows - r)) {
      case 8: panel_tile512<8, NP>(ar, lda, b, panel_stride, K, o, ldo); break;
      case 7: panel_tile512<7, NP>(ar, lda, b, panel_stride, K, o, ldo); break;
      case 6: panel_tile512<6, NP>(ar, lda, b, panel_stride, K, o, ldo); break;
      case 5: panel_tile512<5, NP>(ar, lda, b, panel_stride, K, o, ldo); break;
      case 4: panel_tile512<4, NP>(ar, lda, b, panel_stride, K, o, ldo); break;
      case 3: panel_tile512<3, NP>(ar, lda, b, panel_stride, K, o, ldo); break;
      case 2: panel_tile512<2, NP>(ar, lda, b, panel_stride, K, o, ldo); break;
      default: panel_tile512<1, NP>(ar, lda, b, panel_stride, K, o, ldo); break;
    }
  }
}
#endif

// out (rows x 16 n_panels, stride ldo) = a (rows x K, stride lda) times n_panels panels of b, each
// K rows of 16 values, panel_stride floats apart; in tiles of up to 6 rows (AVX-512: 8 rows by 2
// panels). Scores are Q K^T with the keys in panels of 16 keys (K = hd); outputs are P V with the
// values in panels of 16 columns (K = the keys).
void panel_product(const float* a, int64_t lda, int rows, const float* b, size_t panel_stride, int K, int n_panels,
                   float* out, int64_t ldo) {
#if defined(DECODELAB_AVX512)
  int p = 0;
  for (; p + 2 <= n_panels; p += 2)
    panel_rows512<2>(a, lda, rows, b + p * panel_stride, panel_stride, K, out + 16 * p, ldo);
  if (p < n_panels) panel_rows512<1>(a, lda, rows, b + p * panel_stride, panel_stride, K, out + 16 * p, ldo);
#else
  for (int r = 0; r < rows; r += 6)
    for (int p = 0; p < n_panels; ++p) {
      const float* ar = a + r * lda;
      const float* bp = b + p * panel_stride;
      float* o = out + r * ldo + 16 * p;
      switch (std::min(6, rows - r)) {
        case 6: panel_tile<6>(ar, lda, bp, K, o, ldo); break;
        case 5: panel_tile<5>(ar, lda, bp, K, o, ldo); break;
        case 4: panel_tile<4>(ar, lda, bp, K, o, ldo); break;
        case 3: panel_tile<3>(ar, lda, bp, K, o, ldo); break;
        case 2: panel_tile<2>(ar, lda, bp, K, o, ldo); break;
        default: panel_tile<1>(ar, lda, bp, K, o, ldo); break;
      }
    }
#endif
}
#endif
}  // namespace

// Prefill attention (fp32 or bf16 cache) as matrix products. The keys and values of positions
// [0, p0 + T) of every KV head are first gathered (and widened) from their blocks into one
// contiguous buffer, once for all query tiles; with AVX2 (or AVX-512) and hd a multiple of 16 they go in as
// the register tiles above read them (keys transposed in panels of 16 keys, values in panels of 16
// columns), otherwise the products run on Eigen. Then, for each KV head and tile of up to kTile
// queries, every query head of the group computes raw scores Q K^T over the keys up to the tile's
// last position and out = softmax(scale * scores) V; the scale is applied inside the softmax pass,
// with the row maximum taken on the raw scores (scale > 0 keeps it the maximum). The causal mask
// zeroes, per row, the columns after the row's own position (at most kTile - 1 of them inside the
// tile). Tiles run from the last (the most keys) to the first, so the largest tasks are handed out
// first and the team finishes together.
template <typename E>
void attention_prefill(const float* q, const BlockPool& pool, const int* table, int layer, int T, int p0,
                       int n_heads, float* out, float* kv_all, int n_threads, const AttentionOptions& options) {
  constexpr int kTile = 32;
  const int n_kv = pool.n_kv_heads(), hd = pool.head_dim(), bs = pool.block_size();
  const int group = n_heads / n_kv;
  const float scale = options.scale > 0.0f ? options.scale : 1.0f / std::sqrt(static_cast<float>(hd));
  const int window = options.window;
  const float cap = options.softcap;
  const int n_tiles = (T + kTile - 1) / kTile;
  const int64_t qstride = static_cast<int64_t>(n_heads) * hd;
  const int n_all = p0 + T, n_blocks = (n_all + bs - 1) / bs;
#if defined(__AVX2__) && defined(__FMA__)
  const bool tiles = hd % 16 == 0;
#else
  const bool tiles = false;
#endif
  const int ldk = (n_all + 15) / 16 * 16;  // keys in whole panels of 16
  const size_t head_elems = static_cast<size_t>(tiles ? ldk : n_all) * hd;
  // kv_all (the caller's, 2 n_kv head_elems floats): head kh's keys at 2 kh head_elems, values after
#pragma omp parallel num_threads(n_threads)
  {
    thread_local FloatBuffer rows_buf;
    grow(rows_buf, static_cast<size_t>(bs) * hd);
#pragma omp for collapse(2) schedule(static)
    for (int kh = 0; kh < n_kv; ++kh) {
      for (int b = 0; b < n_blocks; ++b) {
        const uint8_t* blk = pool.data(table[b]);
        const int nb = std::min(bs, n_all - b * bs);
        float* K = kv_all + 2 * static_cast<size_t>(kh) * head_elems;
        if (!tiles) {
          widen_slab<E>(pool, blk, layer, 0, kh, nb, K + static_cast<size_t>(b) * bs * hd);
          widen_slab<E>(pool, blk, layer, 1, kh, nb, K + head_elems + static_cast<size_t>(b) * bs * hd);
          continue;
        }
        float* rows = rows_buf.data();
        widen_slab<E>(pool, blk, layer, 1, kh, nb, rows);
        for (int c = 0; c < hd; c += 16)  // value j, columns [c, c + 16) at panel c / 16, row j
          for (int j = 0; j < nb; ++j)
            std::memcpy(K + head_elems + static_cast<size_t>(c) * ldk + 16 * static_cast<size_t>(b * bs + j),
                        rows + static_cast<size_t>(j) * hd + c, 16 * sizeof(float));
        widen_slab<E>(pool, blk, layer, 0, kh, nb, rows);
        for (int j = b * bs; j < b * bs + nb; ++j) {  // key j, dim d at panel j / 16, row d, lane j % 16
          float* dst = K + static_cast<size_t>(j / 16) * 16 * hd + j % 16;
          const float* src = rows + static_cast<size_t>(j - b * bs) * hd;
          for (int d = 0; d < hd; ++d) dst[16 * d] = src[d];
        }
        if (b == n_blocks - 1)  // zero keys in the padding lanes of the last panel
          for (int j = n_all; j < ldk; ++j)
            for (int d = 0; d < hd; ++d) K[static_cast<size_t>(j / 16) * 16 * hd + 16 * d + j % 16] = 0.0f;
      }
    }
#pragma omp for schedule(dynamic)
    for (int task = 0; task < n_tiles * n_kv; ++task) {
      const int tile = n_tiles - 1 - task / n_kv, kh = task % n_kv;
      thread_local FloatBuffer scores;
      const int t0 = tile * kTile, t1 = std::min(T, t0 + kTile), rows = t1 - t0;
      const int n_ctx = p0 + t1, n16 = (n_ctx + 15) / 16 * 16;
      grow(scores, static_cast<size_t>(kTile) * n16);
      const float* K = kv_all + 2 * static_cast<size_t>(kh) * head_elems;
      const float* V = K + head_elems;
      for (int g = 0; g < group; ++g) {
        const int h = kh * group + g;
        const float* qh = q + static_cast<size_t>(t0) * qstride + static_cast<size_t>(h) * hd;
        float* oh = out + static_cast<size_t>(t0) * qstride + static_cast<size_t>(h) * hd;
        const int lds = tiles ? n16 : n_ctx;
        Eigen::Map<RowMatrix> S(scores.data(), rows, lds);
#if defined(__AVX2__) && defined(__FMA__)
        if (tiles) panel_product(qh, qstride, rows, K, 16 * static_cast<size_t>(hd), hd, n16 / 16, scores.data(), lds);
#endif
        if (!tiles) {
          Eigen::Map<const RowMatrix> Km(K, n_ctx, hd);
          StridedRows Q(qh, rows, hd, Eigen::OuterStride<>(qstride));
          S.noalias() = Q * Km.transpose();
        }
        for (int r = 0; r < rows; ++r) {  // keys [lo, valid) of the row's query: its window
          const int valid = p0 + t0 + r + 1, lo = window > 0 ? std::max(0, valid - window) : 0;
          auto row = S.row(r);
          auto seen = row.segment(lo, valid - lo);
          if (cap > 0.0f) {  // soft-capped scores, as transformers: (s scale / cap).tanh() cap
            seen = ((seen.array() * scale) / cap).tanh() * cap;
            seen = (seen.array() - seen.maxCoeff()).exp();
          } else {
            const float mx = seen.maxCoeff();
            seen = ((seen.array() - mx) * scale).exp();
          }
          seen /= seen.sum();
          row.head(lo).setZero();
          row.segment(valid, n_ctx - valid).setZero();
        }
#if defined(__AVX2__) && defined(__FMA__)
        if (tiles)
          panel_product(scores.data(), lds, rows, V, 16 * static_cast<size_t>(ldk), n_ctx, hd / 16, oh, qstride);
#endif
        if (!tiles) {
          Eigen::Map<const RowMatrix> Vm(V, n_ctx, hd);
          StridedRowsOut O(oh, rows, hd, Eigen::OuterStride<>(qstride));
          O.noalias() = S.leftCols(n_ctx) * Vm;
        }
      }
    }
  }
}

template void attention_prefill<float>(const float*, const BlockPool&, const int*, int, int, int, int, float*, float*,
                                       int, const AttentionOptions&);
template void attention_prefill<uint16_t>(const float*, const BlockPool&, const int*, int, int, int, int, float*,
                                          float*, int, const AttentionOptions&);
template void attention_prefill<int8_t>(const float*, const BlockPool&, const int*, int, int, int, int, float*,
                                        float*, int, const AttentionOptions&);

}  // namespace DECODELAB_ISA
}  // namespace decodelab
