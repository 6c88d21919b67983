// int8 and w8a8 weights at every row count: integer panel kernels on rounded activations (AVX2,
// AVX-512 VNNI, or plain C++), and oneDNN's bf16 matmul for int8 prompts with bf16_activations.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/linear/kernels.h"
#include "decodelab/bf16.h"

namespace decodelab {
namespace DECODELAB_ISA {

// The first tile of each block asks for the panel bytes this far ahead, a cache line per 64 bytes
// it reads: one stream per thread is not always enough for the hardware prefetcher to keep memory
// busy (the sweep is in benchmarks/results/kernel_tuning.md).
constexpr int kPanelPrefetch = 2048;

#if defined(__AVX2__) && defined(__FMA__)
// One panel step on AVX2 without VNNI: the weights of the step, loaded once for every activation
// row (rows 0-7 in w[0], 8-15 in w[1]), then one row's products added into its sums a0, a1;
// xb is the row's activation unit broadcast. int8 (I8Weights): 32 bytes, 16 rows x 2 values,
// widened to int16 for pmaddwd against an int16 pair. w8a8 (A8Weights): 64 bytes, 16 rows x 4
// values, pmaddubsw against a u8 quad, then pmaddwd by ones to sum the pairs.
struct I8Weights {
  __m256i w[2];
  explicit I8Weights(const int8_t* ws)
      : w{_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ws))),
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ws + 16)))} {}
  void add(__m256i xb, __m256i& a0, __m256i& a1) const {
    a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(xb, w[0]));
    a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(xb, w[1]));
  }
};
struct A8Weights {
  __m256i w[2];
  explicit A8Weights(const int8_t* ws)
      : w{_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ws)),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ws + 32))} {}
  void add(__m256i xb, __m256i& a0, __m256i& a1) const {
    const __m256i ones = _mm256_set1_epi16(1);
    a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_maddubs_epi16(xb, w[0]), ones));
    a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_maddubs_epi16(xb, w[1]), ones));
  }
};

// f[t][0..16) += the 16 lanes of a0[t], a1[t] (integer block sums) times row t's block-b scale.
template <int NT, typename Rows>
static inline void add_block(const __m256i* a0, const __m256i* a1, const Rows& xr, int t0, int b, float (*f)[kPanel]) {
  for (int t = 0; t < NT; ++t) {
    const __m256 sb = _mm256_set1_ps(xr.scale[static_cast<size_t>(t0 + t) * xr.blocks + b]);
    _mm256_storeu_ps(f[t], _mm256_fmadd_ps(_mm256_cvtepi32_ps(a0[t]), sb, _mm256_loadu_ps(f[t])));
    _mm256_storeu_ps(f[t] + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(a1[t]), sb, _mm256_loadu_ps(f[t] + 8)));
  }
}
#endif

// AVX-512 with VNNI (vpdpwssd, vpdpbusd): a panel step of 16 rows is one 512-bit vector, and one
// instruction multiplies it by the broadcast activations and adds the products into the 16 row sums,
// where AVX2 needs two vectors and two or three instructions each. The sums are the same integers.
#if defined(DECODELAB_VNNI512)
// The VNNI products through inline assembly: with the intrinsics GCC 12 copied every accumulator
// to another register and back on each step and spilled the row pointers to vector registers.
// acc += per 32-bit lane, w's two 16-bit values times the pair at p (broadcast from memory).
using i32_alias = int32_t __attribute__((may_alias));
static inline __m512i dpwssd_bcast(__m512i acc, __m512i w, const void* p) {
  __asm__("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*static_cast<const i32_alias*>(p)));
  return acc;
}
// acc += per 32-bit lane, the four u8 values of x times the four s8 values of w.
static inline __m512i dpbusd(__m512i acc, __m512i x, __m512i w) {
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w));
  return acc;
}
template <int NT, typename Rows>
static inline void add_block(const __m512i* a, const Rows& xr, int t0, int b, float (*f)[kPanel]) {
  for (int t = 0; t < NT; ++t) {
    const __m512 sb = _mm512_set1_ps(xr.scale[static_cast<size_t>(t0 + t) * xr.blocks + b]);
    _mm512_storeu_ps(f[t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[t]), sb, _mm512_loadu_ps(f[t])));
  }
}
#endif

#if !(defined(__AVX2__) && defined(__FMA__))
// The integer block sums of I8Block / A8Block below, without vectors (a build for CPUs without AVX2).
template <int G, int NT, typename Rows>
static void scalar_block(const int8_t* panel, const int32_t* start, const Rows& xr, int t0, int s0, int s1, int b,
                         float (*f)[kPanel]) {
  for (int t = 0; t < NT; ++t) {
    const auto* x = xr.q.data() + static_cast<size_t>(t0 + t) * xr.ld;
    const float sb = xr.scale[static_cast<size_t>(t0 + t) * xr.blocks + b];
    for (int r = 0; r < kPanel; ++r) {
      int32_t s = start ? start[r] : 0;
      for (int k = s0; k < s1; ++k)
        for (int j = 0; j < G; ++j)
          s += static_cast<int32_t>(panel[static_cast<size_t>(k) * kPanel * G + r * G + j]) * x[G * k + j];
      f[t][r] = std::fma(static_cast<float>(s), sb, f[t][r]);
    }
  }
}
#endif

// f[t][r] += (block b's integer sum of panel row r . activation row t) * the row's block scale, for
// NT activation rows from t0, over steps [s0, s1) of the block. The integer sum is exact (int8:
// at most 256 x 32767 x 127, below 2^31; w8a8: 256 x 127 x 127), so every tile shape gives it the
// same value, and the fp32 sum runs over the blocks in order: a row's result does not depend on how
// many rows share the call, prompts included. pf > 0: prefetch the panel that many bytes ahead.
template <int NT>
struct I8Block {  // 16-bit activations, steps of 2
  static constexpr int G = kI8Step;
  using Rows = Int16Rows;
  static void run(const int8_t* panel, const int32_t*, const Rows& xr, int t0, int s0, int s1, int b,
                  float (*f)[kPanel], int pf) {
#if defined(DECODELAB_VNNI512)
    __m512i a[NT];
    for (int t = 0; t < NT; ++t) a[t] = _mm512_setzero_si512();
    // The tile's rows 4 bytes apart (interleaved, see RoundedRows): one pointer for all of them.
    const char* xs = xr.unit(t0, s0);
    const size_t step = xr.step_stride(t0);
    int s = s0;
    // Few rows (decode, small batches): K sums per row over alternate steps, added at the end, so
    // that 4 to 8 products are in flight through vpdpwssd's latency instead of one chain of
    // dependent ones per row. The same integers.
    constexpr int K = NT == 1 ? 4 : NT <= 4 ? 2 : 1;
    if constexpr (K > 1) {
      __m512i ak[K][NT];
      for (int k = 0; k < K; ++k)
        for (int t = 0; t < NT; ++t) ak[k][t] = a[t];
      for (; s + K <= s1; s += K, xs += K * step) {
        const int8_t* ws = panel + 32 * static_cast<size_t>(s);
        if (pf)
          for (int line = 0; line < K / 2; ++line)
            _mm_prefetch(reinterpret_cast<const char*>(ws) + pf + 64 * line, _MM_HINT_T0);
        for (int k = 0; k < K; ++k) {
          const __m512i w = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ws + 32 * k)));
          for (int t = 0; t < NT; ++t) ak[k][t] = dpwssd_bcast(ak[k][t], w, xs + k * step + 4 * t);
        }
      }
      for (int t = 0; t < NT; ++t) {
        a[t] = ak[0][t];
        for (int k = 1; k < K; ++k) a[t] = _mm512_add_epi32(a[t], ak[k][t]);
      }
    }
    for (; s < s1; ++s, xs += step) {
      const int8_t* ws = panel + 32 * static_cast<size_t>(s);
      if (pf && (s & 1) == 0) _mm_prefetch(reinterpret_cast<const char*>(ws) + pf, _MM_HINT_T0);
      const __m512i w = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ws)));
      for (int t = 0; t < NT; ++t) a[t] = dpwssd_bcast(a[t], w, xs + 4 * t);
    }
    add_block<NT>(a, xr, t0, b, f);
#elif defined(__AVX2__) && defined(__FMA__)
    __m256i a0[NT], a1[NT];
    const int16_t* x[NT];
    for (int t = 0; t < NT; ++t) {
      a0[t] = a1[t] = _mm256_setzero_si256();
      x[t] = xr.q.data() + static_cast<size_t>(t0 + t) * xr.ld;
    }
    for (int s = s0; s < s1; ++s) {
      const int8_t* ws = panel + 32 * static_cast<size_t>(s);
      if (pf && (s & 1) == 0) _mm_prefetch(reinterpret_cast<const char*>(ws) + pf, _MM_HINT_T0);
      const I8Weights w(ws);
      for (int t = 0; t < NT; ++t) {
        int32_t pair;
        std::memcpy(&pair, x[t] + 2 * s, 4);
        w.add(_mm256_set1_epi32(pair), a0[t], a1[t]);
      }
    }
    add_block<NT>(a0, a1, xr, t0, b, f);
#else
    (void)pf;
    scalar_block<G, NT>(panel, nullptr, xr, t0, s0, s1, b, f);
#endif
  }
};

template <int NT>
struct A8Block {  // 7-bit activations stored with an offset of 64, steps of 4
  static constexpr int G = kA8Step;
  using Rows = Int8Rows;
  static void run(const int8_t* panel, const int32_t* start, const Rows& xr, int t0, int s0, int s1, int b,
                  float (*f)[kPanel], int pf) {
#if defined(DECODELAB_VNNI512)
    const __m512i st = _mm512_loadu_si512(start);
    __m512i a[NT];
    for (int t = 0; t < NT; ++t) a[t] = st;
    const char* xs = xr.unit(t0, s0);
    const size_t step = xr.step_stride(t0);
    int s = s0;
    constexpr int K = NT <= 4 ? 2 : 1;  // sums in flight per row, as in I8Block
    if constexpr (K > 1) {
      __m512i ak[K][NT];
      for (int t = 0; t < NT; ++t) {
        ak[0][t] = st;
        for (int k = 1; k < K; ++k) ak[k][t] = _mm512_setzero_si512();
      }
      for (; s + K <= s1; s += K, xs += K * step) {
        const int8_t* ws = panel + 64 * static_cast<size_t>(s);
        if (pf)
          for (int line = 0; line < K; ++line)
            _mm_prefetch(reinterpret_cast<const char*>(ws) + pf + 64 * line, _MM_HINT_T0);
        for (int k = 0; k < K; ++k) {
          const __m512i w = _mm512_loadu_si512(ws + 64 * k);
          for (int t = 0; t < NT; ++t) {
            int32_t quad;
            std::memcpy(&quad, xs + k * step + 4 * t, 4);
            ak[k][t] = dpbusd(ak[k][t], _mm512_set1_epi32(quad), w);  // u8 activations x s8 weights
          }
        }
      }
      for (int t = 0; t < NT; ++t) {
        a[t] = ak[0][t];
        for (int k = 1; k < K; ++k) a[t] = _mm512_add_epi32(a[t], ak[k][t]);
      }
    }
    for (; s < s1; ++s, xs += step) {
      const int8_t* ws = panel + 64 * static_cast<size_t>(s);
      if (pf) _mm_prefetch(reinterpret_cast<const char*>(ws) + pf, _MM_HINT_T0);
      const __m512i w = _mm512_loadu_si512(ws);
      for (int t = 0; t < NT; ++t) {
        int32_t quad;
        std::memcpy(&quad, xs + 4 * t, 4);
        a[t] = dpbusd(a[t], _mm512_set1_epi32(quad), w);  // u8 activations x s8 weights
      }
    }
    add_block<NT>(a, xr, t0, b, f);
#elif defined(__AVX2__) && defined(__FMA__)
    const __m256i st0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(start));
    const __m256i st1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(start + 8));
    __m256i a0[NT], a1[NT];
    const uint8_t* x[NT];
    for (int t = 0; t < NT; ++t) {
      a0[t] = st0, a1[t] = st1;
      x[t] = xr.q.data() + static_cast<size_t>(t0 + t) * xr.ld;
    }
    for (int s = s0; s < s1; ++s) {
      const int8_t* ws = panel + 64 * static_cast<size_t>(s);
      if (pf) _mm_prefetch(reinterpret_cast<const char*>(ws) + pf, _MM_HINT_T0);
      const A8Weights w(ws);
      for (int t = 0; t < NT; ++t) {
        int32_t quad;
        std::memcpy(&quad, x[t] + 4 * s, 4);
        w.add(_mm256_set1_epi32(quad), a0[t], a1[t]);
      }
    }
    add_block<NT>(a0, a1, xr, t0, b, f);
#else
    (void)pf;
    scalar_block<G, NT>(panel, start, xr, t0, s0, s1, b, f);
#endif
  }
};

// y rows [t_lo, t_hi), panel p's outputs = f[t - t_lo] x the output rows' scales + bias.
static void store_panel(const float (*f)[kPanel], int t_lo, int t_hi, const Linear& L, int p, float* y) {
  const int o0 = p * kPanel, nr = std::min(kPanel, L.out - o0);
  for (int t = t_lo; t < t_hi; ++t)
    for (int r = 0; r < nr; ++r) {
      float v = f[t - t_lo][r] * L.scales[o0 + r];
      if (L.b) v += L.b[o0 + r];
      y[static_cast<size_t>(t) * L.out + o0 + r] = v;
    }
}

// y (rows [t_lo, t_hi), out) = scale * (x W^T) + b for panel p of an int8 layer, block by block,
// so a block of the panel (16 x 256 bytes) and of the rows stays in L1 while tiles of kPanelTile
// rows pass over it; at most kPanelRows rows per call.
template <template <int> class Block>
static void panel_rows(const typename Block<1>::Rows& xr, int t_lo, int t_hi, const Linear& L, int p, float* y) {
  constexpr int G = Block<1>::G, kBlockSteps = kI8Block / G;
  const int steps = panel_steps(L.in, G);
  const int8_t* panel = L.w_i8 + static_cast<size_t>(p) * kPanel * steps * G;
  alignas(32) float f[kPanelRows][kPanel];
  const int T = t_hi - t_lo;
  for (int t = 0; t < T; ++t) std::fill(f[t], f[t] + kPanel, 0.0f);
  for (int b = 0; b < xr.blocks; ++b) {
    const int s0 = b * kBlockSteps, s1 = std::min(steps, s0 + kBlockSteps);
    const int32_t* start = L.wsums ? L.wsums + (static_cast<size_t>(p) * xr.blocks + b) * kPanel : nullptr;
    for (int t = 0; t < T; t += kPanelTile) {
      const int pf = t == 0 ? kPanelPrefetch : 0;
      switch (std::min(kPanelTile, T - t)) {
#if defined(DECODELAB_VNNI512)
        case 16: Block<16>::run(panel, start, xr, t_lo + t, s0, s1, b, f + t, pf); break;
        case 15: Block<15>::run(panel, start, xr, t_lo + t, s0, s1, b, f + t, pf); break;
        case 14: Block<14>::run(panel, start, xr, t_lo + t, s0, s1, b, f + t, pf); break;
        case 13: Block<13>::run(panel, start, xr, t_lo + t, s0, s1, b, f + t, pf); break;
        case 12: Block<12>::run(panel, start, xr, t_lo + t, s0, s1, b, f + t, pf); break;
        case 11: Block<11>::run(panel, start, xr, t_lo + t, s0, s1, b, f + t, pf); break;
        case 10: Block<10>::run(panel, start, xr, t_lo + t, s0, s1, b, f + t, pf); break;
        case 9: Block<9>::run(panel, start, xr, t_lo + t, s0, s1, b, f + t, pf); break;
        case 8: Block<8>::run(panel, start, xr, t_lo + t, s0, s1, b, f + t, pf); break;
        case 7: Block<7>::run(panel, start, xr, t_lo + t, s0, s1, b, f + t, pf); break;
        case 6: Block<6>::run(panel, start, xr, t_lo + t, s0, s1, b, f + t, pf); break;
        case 5: Block<5>::run(panel, start, xr, t_lo + t, s0, s1, b, f + t, pf); break;
#endif
        case 4: Block<4>::run(panel, start, xr, t_lo + t, s0, s1, b, f + t, pf); break;
        case 3: Block<3>::run(panel, start, xr, t_lo + t, s0, s1, b, f + t, pf); break;
        case 2: Block<2>::run(panel, start, xr, t_lo + t, s0, s1, b, f + t, pf); break;
        default: Block<1>::run(panel, start, xr, t_lo + t, s0, s1, b, f + t, pf); break;
      }
    }
  }
  store_panel(f, t_lo, t_hi, L, p, y);
}

#if defined(__AVX2__) && defined(__FMA__) && !defined(DECODELAB_VNNI512)
// One activation row against kRowPanels panels: each step loads from every panel, and each panel's
// block sums are the same exact integers, scaled and added over the blocks in the same order as
// panel_rows, so every output is the same to the bit.
template <template <int> class Block>
static void panels_row(const typename Block<1>::Rows& xr, const Linear& L, int p0, float* y) {
  constexpr int G = Block<1>::G, kBlockSteps = kI8Block / G;
  const int steps = panel_steps(L.in, G);
  const int8_t* panel[kRowPanels];
  for (int k = 0; k < kRowPanels; ++k) panel[k] = L.w_i8 + static_cast<size_t>(p0 + k) * kPanel * steps * G;
  alignas(32) float f[kRowPanels][kPanel] = {};
  const auto* x = xr.q.data();
  for (int b = 0; b < xr.blocks; ++b) {
    const int s0 = b * kBlockSteps, s1 = std::min(steps, s0 + kBlockSteps);
    __m256i a0[kRowPanels], a1[kRowPanels];
    for (int k = 0; k < kRowPanels; ++k) {
      if constexpr (G == 4) {  // w8a8: the sums start at -64 x the weights' block sums (see pack_panels)
        const int32_t* st = L.wsums + (static_cast<size_t>(p0 + k) * xr.blocks + b) * kPanel;
        a0[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(st));
        a1[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(st + 8));
      } else {
        a0[k] = a1[k] = _mm256_setzero_si256();
      }
    }
    for (int s = s0; s < s1; ++s) {
      int32_t unit;  // an int16 pair (int8) or a u8 quad (w8a8)
      std::memcpy(&unit, x + G * s, 4);
      const __m256i xb = _mm256_set1_epi32(unit);
      for (int k = 0; k < kRowPanels; ++k) {
        const int8_t* ws = panel[k] + kPanel * G * static_cast<size_t>(s);
        if constexpr (G == 2) I8Weights(ws).add(xb, a0[k], a1[k]);
        else A8Weights(ws).add(xb, a0[k], a1[k]);
      }
    }
    for (int k = 0; k < kRowPanels; ++k) add_block<1>(&a0[k], &a1[k], xr, 0, b, &f[k]);
  }
  for (int k = 0; k < kRowPanels; ++k) store_panel(&f[k], 0, 1, L, p0 + k, y);
}
#endif

void panel_rows_i8(const Int16Rows& xr, int t_lo, int t_hi, const Linear& L, int p, float* y) {
  panel_rows<I8Block>(xr, t_lo, t_hi, L, p, y);
}
void panel_rows_a8(const Int8Rows& xr, int t_lo, int t_hi, const Linear& L, int p, float* y) {
  panel_rows<A8Block>(xr, t_lo, t_hi, L, p, y);
}
#if defined(__AVX2__) && defined(__FMA__) && !defined(DECODELAB_VNNI512)
void panels_row_i8(const Int16Rows& xr, const Linear& L, int p0, float* y) { panels_row<I8Block>(xr, L, p0, y); }
void panels_row_a8(const Int8Rows& xr, const Linear& L, int p0, float* y) { panels_row<A8Block>(xr, L, p0, y); }
#endif

// y = x W^T + b for an int8 layer with bf16_activations, W = scale * q: every int8 q is exactly
// a bf16 value (8 significant bits at most), so q unpacked from its panels into bf16 and x rounded
// to bf16 go through oneDNN's bf16 matmul, which applies the scales and bias to its fp32 sums
// (in the output tiles; a pass afterwards where it cannot). The only rounding beyond the int8
// weights' own is x to bf16, in place of the 16-bit fixed point of the int8 panel kernel. A
// panel's step holds inputs 2k and 2k + 1 of 16 consecutive outputs, so q unpacks to W^T (in,
// out): two 32-byte stores per 32 weights (a work-sharing loop, no barrier at its end).
static void unpack_i8_in_major(const Linear& L, uint16_t* w) {
  constexpr int G = kI8Step;
  const int steps = panel_steps(L.in, G), out = L.out, in = L.in;
#pragma omp for schedule(static) nowait
  for (int p = 0; p < panel_count(out); ++p) {
    const int n0 = p * kPanel, nn = std::min(kPanel, out - n0);
    const int8_t* src = L.w_i8 + static_cast<size_t>(p) * kPanel * steps * G;
#if defined(DECODELAB_AVX512) && defined(__AVX512BF16__)
    // Even bytes (input 2k) to the low 16 words, odd (2k + 1) to the high 16.
    alignas(64) static const uint16_t order[32] = {0,  2,  4,  6,  8,  10, 12, 14, 16, 18, 20,
                                                   22, 24, 26, 28, 30, 1,  3,  5,  7,  9,  11,
                                                   13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
    const __m512i idx = _mm512_load_si512(order);
    const __mmask16 m = static_cast<__mmask16>((1u << nn) - 1);
    for (int k = 0; k < steps; ++k, src += kPanel * G) {
      const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))));
      const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16))));
      const __m512i h = _mm512_permutexvar_epi16(idx, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
      _mm256_mask_storeu_epi16(w + static_cast<size_t>(2 * k) * out + n0, m, _mm512_castsi512_si256(h));
      if (2 * k + 1 < in) _mm256_mask_storeu_epi16(w + static_cast<size_t>(2 * k + 1) * out + n0, m, _mm512_extracti64x4_epi64(h, 1));
    }
#else
    for (int k = 0; k < steps; ++k, src += kPanel * G)
      for (int j = 0; j < G && G * k + j < in; ++j)
        for (int r = 0; r < nn; ++r)
          w[static_cast<size_t>(G * k + j) * out + n0 + r] = f32_to_bf16(static_cast<float>(src[r * G + j]));
#endif
  }
}

void matmul_i8_bf16(const float* x, int T, const Linear& L, float* y) {
  const Bf16Operands op = bf16_operands(x, T, L, unpack_i8_in_major);
  const uint16_t* w = op.w;
  const uint16_t* xq = op.x;
  if (matmul_onednn_bf16_scaled(xq, T, L.in, w, L.out, L.scales, y, L.b, true)) return;
  // No scaled kernel on this CPU: the scales and bias in a pass over the output.
  matmul_onednn_bf16(xq, T, L.in, w, L.out, y, nullptr, true);
  const float* sc = L.scales;
  const float* b = L.b;
  const int out = L.out;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; ++t) {
    float* yt = y + static_cast<size_t>(t) * out;
    if (b) for (int o = 0; o < out; ++o) yt[o] = yt[o] * sc[o] + b[o];
    else for (int o = 0; o < out; ++o) yt[o] *= sc[o];
  }
}

}  // namespace DECODELAB_ISA
}  // namespace decodelab
