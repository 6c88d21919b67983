// fp32 and bf16 weights against a few activation rows (batched decode, beams, short prompts):
// register tiles that read the weights once for the whole batch.
#include <immintrin.h>

#include <algorithm>

#include "cpu/linear/kernels.h"
#include "cpu/simd_avx512.h"
#include "decodelab/bf16.h"

namespace decodelab {
namespace DECODELAB_ISA {

// y[t][o + r] = dot(w[r], x[t]) for R weight rows (4, or 8 with AVX-512) and NT activation rows:
// R x NT accumulators in registers, so each loaded weight vector serves NT rows and each activation
// vector R weight rows. Along the way it asks memory for the `npf` rows `pf` (elements of `esize`
// bytes, `in` per row), one cache line per row as the loop passes that line's offset: the
// prefetches ride inside the arithmetic instead of arriving as one burst. Each result is the same
// sum in the same order for either R.
template <int R, int NT>
static void dot_RxN(const float* const* w, const float* x, int in, int ldx, float out[][3], const char* const* pf,
                    int npf, size_t esize) {
  int i = 0;
#if defined(DECODELAB_AVX512)
  // 16 columns per step; with 8 weight rows 24 accumulators, 3 rows and a weight vector fit the 32
  // registers.
  __m512 acc[R][NT];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_ps();
  auto step = [&](int i0, __mmask16 m) {
    __m512 xv[NT];
    for (int t = 0; t < NT; ++t) xv[t] = _mm512_maskz_loadu_ps(m, x + static_cast<size_t>(t) * ldx + i0);
    // The lines of the prefetched rows that start within this step's 16 columns.
    for (size_t off = (i0 * esize + 63) & ~static_cast<size_t>(63); npf > 0 && off < (i0 + 16) * esize; off += 64)
      for (int r = 0; r < npf; ++r) _mm_prefetch(pf[r] + off, _MM_HINT_T0);
    for (int r = 0; r < R; ++r) {
      __m512 wv = _mm512_maskz_loadu_ps(m, w[r] + i0);
      // In a register, loaded once for the NT rows: left alone, GCC folds the load into each of
      // the NT FMAs (15 loads per step instead of 7 at 3 rows).
      __asm__("" : "+v"(wv));
      for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  };
  for (; i + 16 <= in; i += 16) step(i, static_cast<__mmask16>(0xFFFF));
  if (i < in) {
    step(i, static_cast<__mmask16>((1u << (in - i)) - 1));
    i = in;
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < NT; ++t) out[r][t] = _mm512_reduce_add_ps(acc[r][t]);
#elif defined(__AVX2__) && defined(__FMA__)
  static_assert(R == 4, "the AVX2 tile has registers for 4 weight rows");
  __m256 acc[4][NT];
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_setzero_ps();
  for (; i + 8 <= in; i += 8) {
    __m256 xv[NT];
    for (int t = 0; t < NT; ++t) xv[t] = _mm256_loadu_ps(x + static_cast<size_t>(t) * ldx + i);
    if constexpr (NT == 3) {
      // Pins the three activation vectors to registers: left alone, GCC folds a load into every
      // FMA (12 + 4 loads per step instead of 3 + 4) and the loop waits on loads, not on FMAs.
      __m256 x0 = xv[0], x1 = xv[1], x2 = xv[2];
      __asm__("" : "+x"(x0), "+x"(x1), "+x"(x2));
      xv[0] = x0, xv[1] = x1, xv[2] = x2;
    }
    if (npf > 0 && ((i * esize) & 63) == 0)
      for (int r = 0; r < npf; ++r) _mm_prefetch(pf[r] + i * esize, _MM_HINT_T0);
    for (int r = 0; r < 4; ++r) {
      __m256 wv = _mm256_loadu_ps(w[r] + i);
      if constexpr (NT == 3) __asm__("" : "+x"(wv));
      for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t < NT; ++t) out[r][t] = hsum256(acc[r][t]);
#else
  (void)pf, (void)npf, (void)esize;
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < NT; ++t) out[r][t] = 0.0f;
#endif
  for (; i < in; ++i)
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < NT; ++t) out[r][t] += w[r][i] * x[static_cast<size_t>(t) * ldx + i];
}

// As dot_RxN for a group of 4 bf16 weight rows read in place (the group layout at `p`), without
// widening them first: 16 weights loaded as 32-bit lanes give the even-indexed ones by a shift and
// the odd-indexed ones by two shifts (bf16_odd_shifted), against activation rows in even/odd order
// (split_even_odd) `ldx` apart. The even and odd halves take turns in the same accumulators, which
// leaves registers for 3 rows. Covers ld (a multiple of 16) values, zero padding included.
template <int NT>
static void dot_4xN_bf16(const uint16_t* p, const float* xd, int ld, int ldx, float out[4][3],
                         const char* const* pf, int npf) {
#if defined(DECODELAB_AVX512)
  // Rows 2k and 2k + 1 in the two halves of one 512-bit vector, as in bf16_row_group: the same
  // products in the same lane order as the AVX2 loop, in half the instructions.
  __m512 acc[2][NT];
  for (int k = 0; k < 2; ++k)
    for (int t = 0; t < NT; ++t) acc[k][t] = _mm512_setzero_ps();
  for (int i = 0; i < ld; i += 16) {
    if (npf > 0 && (i & 31) == 0)  // 32 values = 64 bytes of a quarter
      for (int r = 0; r < npf; ++r) _mm_prefetch(pf[r] + 2 * static_cast<size_t>(i), _MM_HINT_T0);
    for (int half = 0; half < 2; ++half) {
      __m512 xv[NT];
      for (int t = 0; t < NT; ++t)
        xv[t] = _mm512_broadcast_f32x8(_mm256_load_ps(xd + static_cast<size_t>(t) * ldx + i + 8 * half));
      for (int k = 0; k < 2; ++k) {
        const __m512i v = _mm512_loadu_si512(p + 4 * i + 32 * k);
        const __m512 wv = half == 0 ? bf16_even512(v) : bf16_odd512(v);
        for (int t = 0; t < NT; ++t) acc[k][t] = _mm512_fmadd_ps(wv, xv[t], acc[k][t]);
      }
    }
  }
  for (int k = 0; k < 2; ++k)
    for (int t = 0; t < NT; ++t) hsum_halves(acc[k][t], &out[2 * k][t], &out[2 * k + 1][t]);
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 acc[4][NT];
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_setzero_ps();
  for (int i = 0; i < ld; i += 16) {
    if (npf > 0 && (i & 31) == 0)  // 32 values = 64 bytes of a quarter
      for (int r = 0; r < npf; ++r) _mm_prefetch(pf[r] + 2 * static_cast<size_t>(i), _MM_HINT_T0);
    for (int half = 0; half < 2; ++half) {
      __m256 xv[NT];
      for (int t = 0; t < NT; ++t) {
        xv[t] = _mm256_load_ps(xd + static_cast<size_t>(t) * ldx + i + 8 * half);
        // In a register, not folded into each of the 4 rows' FMAs; but with 3 rows the 12
        // accumulators, 3 pinned rows and the weights need 17 registers, and GCC spilled
        // accumulators: there the rows are loaded inside the FMAs.
        if (NT < 3) __asm__("" : "+x"(xv[t]));
      }
      for (int r = 0; r < 4; ++r) {
        const __m256i v = load16_bf16(p + 4 * i + 16 * r);
        // Not bf16_odd: its mask would hold a 17th register, and with 3 rows GCC then kept 3
        // accumulators on the stack.
        const __m256 wv = half == 0 ? bf16_even(v) : bf16_odd_shifted(v);
        for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
      }
    }
  }
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t < NT; ++t) out[r][t] = hsum256(acc[r][t]);
#else
  (void)pf, (void)npf;
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t < NT; ++t) {
      float a = 0.0f;
      for (int i = 0; i < ld; i += 16)
        for (int j = 0; j < 8; ++j)
          a += bf16_to_f32(p[4 * i + 16 * r + 2 * j]) * xd[static_cast<size_t>(t) * ldx + i + j] +
               bf16_to_f32(p[4 * i + 16 * r + 2 * j + 1]) * xd[static_cast<size_t>(t) * ldx + i + 8 + j];
      out[r][t] = a;
    }
#endif
}

// A few rows (batched decode, beams, short prompts; T < gemm_min_rows) with fp32 or bf16 weights
// (int8 has its panels): output rows [4g, 4g + R), R / 4 groups, are read in place (fp32; bf16 when
// `direct`, R = 4, with `xd` the activation rows in even/odd order) or widened to fp32 once (bf16,
// into the thread's `scratch` of R * in values), and multiplied with all T activation rows in
// register tiles. The weights are read once for the whole batch and the activations stay in cache.
// With AVX-512 two groups go together where they can (kPairGroups): the activation rows, which
// every group streams in full from L2, then serve 8 weight rows per load instead of 4.
template <int R>
void small_group(const float* x, const float* xd, bool direct, int T, const Linear& L, int g, float* y,
                        float* scratch) {
  static_assert(R == 4 || R == 8, "one or two groups of 4 rows");
  const bool wide = L.type != WeightType::F32;
  const size_t esize = wide ? 2 : 4;
  const int o0 = 4 * g, nr = std::min(R, L.out - o0);
  const int ld = bf16_ld(L.in);
  const int n_groups = (L.out + 3) / 4;
  // The next R rows' weights as R pieces to prefetch: their rows (fp32), or the quarters of their
  // groups' contiguous blocks (bf16 group layout, 4 * ld values a group), each `in` (fp32) or `ld`
  // (bf16) long.
  auto next_piece = [&](int r) {
    const size_t off = wide ? (g + R / 4) * bf16_group_elems(L) + static_cast<size_t>(r) * ld
                            : static_cast<size_t>(o0 + R + r) * L.in;
    return wide ? reinterpret_cast<const char*>(L.w_bf16 + off) : reinterpret_cast<const char*>(L.w + off);
  };
  auto piece_exists = [&](int r) { return wide ? g + R / 4 + r / 4 < n_groups : o0 + R + r < L.out; };
  const float* w[R];
  if (!wide) {
    group_rows<R>(L, g, w);
  } else if (!direct) {
    for (int k = 0; k < R / 4; ++k)  // a short last group's padding rows are zero
      widen_group(L, g + k, scratch + static_cast<size_t>(4 * k) * L.in);
    for (int r = 0; r < R; ++r) w[r] = scratch + static_cast<size_t>(r) * L.in;
  }
  // While these rows compute from cache, memory is asked for the next ones: with P passes over the
  // activation rows (three at a time), pass k prefetches the next pieces r with r % P == k, so the
  // weight stream overlaps the arithmetic and is spread over the whole group.
  const int passes = (T + 2) / 3;
  for (int t0 = 0, k = 0, nt = 0; t0 < T; t0 += nt, ++k) {
    nt = std::min(3, T - t0);
    const char* pf[R];
    int npf = 0;
    for (int r = k; r < R; r += passes)
      if (piece_exists(r)) pf[npf++] = next_piece(r);
    float res[R][3];
    if constexpr (R == 4) {
      if (direct) {
        const uint16_t* p = bf16_group(L, g);
        const float* xdt = xd + static_cast<size_t>(t0) * ld;
        switch (nt) {
          case 3: dot_4xN_bf16<3>(p, xdt, ld, ld, res, pf, npf); break;
          case 2: dot_4xN_bf16<2>(p, xdt, ld, ld, res, pf, npf); break;
          default: dot_4xN_bf16<1>(p, xdt, ld, ld, res, pf, npf); break;
        }
      }
    }
    if (!direct) {
      const float* xt = x + static_cast<size_t>(t0) * L.in;
      switch (nt) {
        case 3: dot_RxN<R, 3>(w, xt, L.in, L.in, res, pf, npf, esize); break;
        case 2: dot_RxN<R, 2>(w, xt, L.in, L.in, res, pf, npf, esize); break;
        default: dot_RxN<R, 1>(w, xt, L.in, L.in, res, pf, npf, esize); break;
      }
    }
    for (int t = 0; t < nt; ++t)
      for (int r = 0; r < nr; ++r) y[static_cast<size_t>(t0 + t) * L.out + o0 + r] = res[r][t];
  }
}

template void small_group<4>(const float*, const float*, bool, int, const Linear&, int, float*, float*);
#if defined(DECODELAB_AVX512)
template void small_group<8>(const float*, const float*, bool, int, const Linear&, int, float*, float*);
#endif

}  // namespace DECODELAB_ISA
}  // namespace decodelab
