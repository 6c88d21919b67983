#include "decodelab/kernels.h"

#include <immintrin.h>
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "decodelab/aligned.h"
#include "decodelab/bf16.h"

namespace decodelab {

namespace {
using ConstVec = Eigen::Map<const Eigen::VectorXf>;
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::Map<Eigen::VectorXf>;

float dot(const float* a, const float* b, int n) { return ConstVec(a, n).dot(ConstVec(b, n)); }

}  // namespace

// AVX-512 (F, BW, DQ, VL): the 512-bit variants of the kernels below, where a machine has them.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__) && defined(__FMA__)
#define DECODELAB_AVX512 1
#endif
#if defined(DECODELAB_AVX512) && defined(__AVX512VNNI__)
#define DECODELAB_VNNI512 1
#endif

#if defined(__AVX2__)
static inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 8 bf16 values widened to fp32: the bits become the upper half of each fp32 lane.
static inline __m256 load8_bf16(const uint16_t* p) {
  const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}

// 16 bf16 values loaded as eight 32-bit lanes v: the even-indexed ones as fp32 (each lane shifted
// left 16) and the odd-indexed ones (each lane's low half masked off). Two cheap ALU operations
// instead of two widening shuffles, against fp32 operands in even/odd order (split_even_odd).
static inline __m256 bf16_even(__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }
static inline __m256 bf16_odd(__m256i v) {
  return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
// bf16_odd by two shifts instead of the mask, the same bits: for kernels whose registers are all
// taken, where the mask constant would be one too many and push accumulators onto the stack.
static inline __m256 bf16_odd_shifted(__m256i v) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_srli_epi32(v, 16), 16));
}
static inline __m256i load16_bf16(const uint16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
#endif

#if defined(DECODELAB_AVX512)
// bf16_even and bf16_odd on 32 values (two rows' 16 each, one per 256-bit half).
static inline __m512 bf16_even512(__m512i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)); }
static inline __m512 bf16_odd512(__m512i v) {
  return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
// The sum of v's 16 lanes: lane j plus lane j + 8, then j + 4, j + 2, j + 1, the order
// reduce16 below keeps for each of its sixteen vectors, so both give the same bits.
static inline float hsum512(__m512 v) {
  return hsum256(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

// reduce16 below from its second step: w[r] holds 8 partial sums of row r in lanes 0-7 and of
// row r + 8 in lanes 8-15, each added as hsum256 adds an AVX2 accumulator's lanes.
static inline __m512 reduce16_halves(const __m512 w[8]) {
  __m512 z[4], y[2];
  for (int r = 0; r < 4; ++r)  // 128-bit lanes: rows r, r + 8, r + 4, r + 12; each j + (j + 4)
    z[r] = _mm512_add_ps(_mm512_shuffle_f32x4(w[r], w[r + 4], 0x88), _mm512_shuffle_f32x4(w[r], w[r + 4], 0xDD));
  for (int r = 0; r < 2; ++r)  // per 128-bit lane: two lanes of z[r]'s row, two of z[r + 2]'s; j + (j + 2)
    y[r] = _mm512_add_ps(_mm512_shuffle_ps(z[r], z[r + 2], 0x44), _mm512_shuffle_ps(z[r], z[r + 2], 0xEE));
  // j + (j + 1): rows 0 2 1 3, 8 10 9 11, 4 6 5 7, 12 14 13 15, put back in order
  const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], 0x88), _mm512_shuffle_ps(y[0], y[1], 0xDD));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15), s);
}
// Lane r: the sum of a[r]'s 16 lanes, added in hsum512's order: each step adds the upper half of
// every partial sum to its lower half for two vectors at once, 15 shuffle pairs in all instead of
// the 16 x 4 steps of separate sums.
static inline __m512 reduce16(const __m512 a[16]) {
  __m512 w[8];
  for (int r = 0; r < 8; ++r)  // lanes 0-7: row r, 8-15: row r + 8; each lane j + lane j + 8
    w[r] = _mm512_add_ps(_mm512_shuffle_f32x4(a[r], a[r + 8], 0x44), _mm512_shuffle_f32x4(a[r], a[r + 8], 0xEE));
  return reduce16_halves(w);
}

// The sums of the two 256-bit halves of v, each reduced as hsum256 reduces an AVX2 accumulator.
static inline void hsum_halves(__m512 v, float* lo, float* hi) {
  *lo = hsum256(_mm512_castps512_ps256(v));
  *hi = hsum256(_mm512_extractf32x8_ps(v, 1));
}
#endif

// The R fp32 weight rows from group g (rows [4g, 4g + R), one or two groups): a short last group
// repeats its last row, so the kernels always run R. Returns how many rows are real.
template <int R = 4>
static int group_rows(const Linear& L, int g, const float* w[R]) {
  const int o0 = 4 * g, nr = std::min(R, L.out - o0);
  for (int r = 0; r < R; ++r) w[r] = L.w + static_cast<size_t>(o0 + std::min(r, nr - 1)) * L.in;
  return nr;
}

// y[o] = W[o] . x for fp32 W (out, in), rows [4g, 4g + 4 NG) (NG groups): each thread owns a range
// of output rows and reads them once, as one contiguous stream. The group's rows share each load of
// x. Unlike the bf16 and int8 kernels this one asks for no software prefetch: at one FMA per 32
// weight bytes the hardware prefetcher keeps up, and prefetching the next group measured 8-18 %
// slower (while the bf16, int8 and w8a8 kernels, with more work per byte, decode 10-46 % slower
// without it). A row's sum does not depend on NG.
//
// Without AVX-512, decode runs two groups at once (kF32RowGroups): eight row streams per thread
// instead of four, and one load of x for eight rows. On an AVX2-only AMD EPYC (Zen 3), decode after
// a 16-token prompt, alternating rounds in one process (temporary switch), medians: Llama 110M 48.7
// -> 52.5 and 54.6 -> 59.4 tok/s, GPT-2 124M 46.0 -> 49.9; three groups at once 50.6 and four 49.0
// against the same 48.7. (Two bf16 groups at once, tried the same way, were 10-17 % slower than one.)
#if defined(DECODELAB_AVX512)
constexpr int kF32RowGroups = 1;
#else
constexpr int kF32RowGroups = 2;
#endif
template <int NG = 1>
static void f32_row_group(const float* x, const Linear& L, int g, float* y) {
  constexpr int R = 4 * NG;
  const float* w[R];
  for (int k = 0; k < NG; ++k) group_rows(L, g + k, w + 4 * k);
  const int o0 = 4 * g, nr = std::min(R, L.out - o0);
  float acc[R] = {};
  int i = 0;
#if defined(DECODELAB_AVX512)
  __m512 a[R];
  for (int r = 0; r < R; ++r) a[r] = _mm512_setzero_ps();
  for (; i + 16 <= L.in; i += 16) {
    const __m512 xv = _mm512_loadu_ps(x + i);
    for (int r = 0; r < R; ++r) a[r] = _mm512_fmadd_ps(_mm512_loadu_ps(w[r] + i), xv, a[r]);
  }
  if (i < L.in) {  // the last 1..15 columns under a mask
    const __mmask16 m = static_cast<__mmask16>((1u << (L.in - i)) - 1);
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
    for (int r = 0; r < R; ++r) a[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w[r] + i), xv, a[r]);
    i = L.in;
  }
  for (int r = 0; r < R; ++r) acc[r] = hsum512(a[r]);
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 a[R];
  for (int r = 0; r < R; ++r) a[r] = _mm256_setzero_ps();
  for (; i + 8 <= L.in; i += 8) {
    const __m256 xv = _mm256_loadu_ps(x + i);
    for (int r = 0; r < R; ++r) a[r] = _mm256_fmadd_ps(_mm256_loadu_ps(w[r] + i), xv, a[r]);
  }
  for (int r = 0; r < R; ++r) acc[r] = hsum256(a[r]);
#endif
  for (int r = 0; r < R; ++r)
    for (int j = i; j < L.in; ++j) acc[r] += w[r][j] * x[j];
  for (int r = 0; r < nr; ++r) y[o0 + r] = acc[r];
}

#if defined(DECODELAB_AVX512)
// f32_row_group for rows [o0, o0 + 16) at once, the same sums to the bit (each row's 16 lanes over
// the columns in the same order, then hsum512's order): a small layer decoded on one thread (a
// stories260K step: 64 or 172 columns) spends less on the sums across lanes than on the products,
// and sixteen rows at a time do them in 15 shuffle pairs (reduce16) where four rows take 16 steps.
static void f32_rows16(const float* x, const Linear& L, int o0, float* y) {
  const int nr = std::min(16, L.out - o0);
  const float* w[16];
  for (int r = 0; r < 16; ++r) w[r] = L.w + static_cast<size_t>(o0 + std::min(r, nr - 1)) * L.in;
  __m512 a[16];
  for (int r = 0; r < 16; ++r) a[r] = _mm512_setzero_ps();
  int i = 0;
  for (; i + 16 <= L.in; i += 16) {
    const __m512 xv = _mm512_loadu_ps(x + i);
    for (int r = 0; r < 16; ++r) a[r] = _mm512_fmadd_ps(_mm512_loadu_ps(w[r] + i), xv, a[r]);
  }
  if (i < L.in) {
    const __mmask16 m = static_cast<__mmask16>((1u << (L.in - i)) - 1);
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
    for (int r = 0; r < 16; ++r) a[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w[r] + i), xv, a[r]);
  }
  _mm512_mask_storeu_ps(y + o0, static_cast<__mmask16>((1u << nr) - 1), reduce16(a));
}
#endif

// bf16 weights are stored in groups of 4 output rows (the rows a kernel call reads together): per
// 16 input columns, the 4 rows' 16 values side by side (128 bytes), columns zero-padded to a multiple
// of 16 and rows to a multiple of 4. A group is one contiguous stream instead of four rows far apart,
// which the prefetcher follows as it follows the fp32 rows: the one-row kernel over 200 MB read
// 33-36 GB/s against 28-32 for the same loop over (out, in) rows (5 alternating runs, 2 threads);
// whole decode steps, medians of 10 alternating rounds against the row layout: Llama 110M 7.59 ->
// 7.29 ms at context 1, 10.78 -> 9.41 at 640; GPT-2 124M 11.27 -> 10.24 at context 1.
// Element (o, i) is at (o / 4) * 4 * ld + (i / 16) * 64 + (o % 4) * 16 + i % 16, ld = bf16_ld(in).
static inline int bf16_ld(int in) { return (in + 15) / 16 * 16; }
static inline size_t bf16_group_elems(const Linear& L) { return static_cast<size_t>(4) * bf16_ld(L.in); }
static inline const uint16_t* bf16_group(const Linear& L, int g) { return L.w_bf16 + g * bf16_group_elems(L); }

// Activation rows in the order the bf16 kernels read them: per 16 values, the 8 even-indexed, then
// the 8 odd-indexed, each row zero-padded to bf16_ld(n) (the padded weight columns are zero too, and
// zero times a zero pad stays zero where garbage times zero might be NaN). Row t at xd[t * ld ...].
static void split_even_odd(const float* x, int T, int n, FloatBuffer& xd) {
  const int ld = bf16_ld(n);
  grow(xd, static_cast<size_t>(T) * ld);
  for (int t = 0; t < T; ++t) {
    const float* xt = x + static_cast<size_t>(t) * n;
    float* d = xd.data() + static_cast<size_t>(t) * ld;
    for (int i = 0; i < ld; i += 16)
      for (int j = 0; j < 8; ++j) {
        d[i + j] = i + 2 * j < n ? xt[i + 2 * j] : 0.0f;
        d[i + 8 + j] = i + 2 * j + 1 < n ? xt[i + 2 * j + 1] : 0.0f;
      }
  }
}

// Bytes ahead of the one-row bf16 kernel that it asks memory for, into L2 (T1). The hint matters by
// vendor: on an AMD Zen host, 200 MB, 2 threads, GB/s in 5 alternating runs: no prefetch 26-31,
// 1024 bytes ahead into L1 (T0) 25-34, into L2 (T1) 28-37, non-temporal (NTA) 33-36; NTA 512 bytes
// ahead 24, 2048 31, 4096 22. On an Intel Xeon host (AMX, 2 cores) the same loop over 256 MiB, best
// of 5: NTA 15-16, T0 31.5, T1 30.3-34.2, T2 31.4, none 21-22; and whole decode steps NTA -> T1:
// Llama 110M 67 -> 144 tok/s, GPT-2 124M 54 -> 113. T1 is the one hint near the best on both.
// The distance matters on Intel: one group stream per thread, 1024 bytes ahead, read 11.8 GB/s on
// one core of a Xeon host without AVX512_BF16 (256 MiB, best of 15 interleaved passes) against
// 14.1 for the fp32 kernel's four row streams; 2048 ahead 13.5, 4096 13.3 (2 threads: 21.8, 25.0,
// 27.1 against 27.5). Whole decode there, bench_phase.py --phase decode --prompt 16, three
// alternating rounds, 1024 -> 4096: Llama 110M 105-108 -> 123-139 tok/s, GPT-2 124M 74-80 ->
// 90-101; 6144 to 16384 ahead were no faster than 4096. On a Xeon with AMX (two of its cores,
// taskset), three rounds: Llama 93-100 -> 98-147, GPT-2 63-81 -> 87-119. T1 at 4096 bytes has
// not been measured on the AMD host; retune there if its one-row bf16 decode falls behind fp32's.
constexpr int kBf16Ahead = 4096;
// The two cache lines kBf16Ahead bytes past a group's step at p, unless past the layer's end.
static inline void prefetch_ahead(const uint16_t* p, const char* end) {
  const char* ahead = reinterpret_cast<const char*>(p) + kBf16Ahead;
  if (ahead < end) {
    _mm_prefetch(ahead, _MM_HINT_T1);
    _mm_prefetch(ahead + 64, _MM_HINT_T1);
  }
}

// y[4g, 4g + 4) = W x for bf16 W: a bf16 value is the top half of an fp32 one, so 16 weights loaded
// as 32-bit lanes give the odd-indexed ones by masking off the low halves and the even-indexed ones
// by shifting left 16, two cheap ALU operations instead of two widening shuffles, against x in
// even/odd order (split_even_odd).
static void bf16_row_group(const float* xd, const Linear& L, int g, float* y) {
  const int ld = bf16_ld(L.in);
  const uint16_t* p = bf16_group(L, g);
#if defined(__AVX2__) && defined(__FMA__)
  const char* end = reinterpret_cast<const char*>(L.w_bf16 + (L.out + 3) / 4 * bf16_group_elems(L));
#endif
  const int o0 = 4 * g, nr = std::min(4, L.out - o0);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#if defined(DECODELAB_AVX512)
  // Two rows per 512-bit vector (one load covers rows 2k and 2k + 1, 16 values each), the
  // activations repeated in both halves: half the instructions of the AVX2 loop, each lane
  // accumulating the same products in the same order, so the same sums bit for bit.
  __m512 ae[2], ao[2];
  for (int k = 0; k < 2; ++k) ae[k] = ao[k] = _mm512_setzero_ps();
  for (int i = 0; i < ld; i += 16, p += 64) {
    prefetch_ahead(p, end);
    const __m512 xe = _mm512_broadcast_f32x8(_mm256_load_ps(xd + i));
    const __m512 xo = _mm512_broadcast_f32x8(_mm256_load_ps(xd + i + 8));
    for (int k = 0; k < 2; ++k) {
      const __m512i v = _mm512_loadu_si512(p + 32 * k);
      ae[k] = _mm512_fmadd_ps(bf16_even512(v), xe, ae[k]);
      ao[k] = _mm512_fmadd_ps(bf16_odd512(v), xo, ao[k]);
    }
  }
  for (int k = 0; k < 2; ++k) hsum_halves(_mm512_add_ps(ae[k], ao[k]), &acc[2 * k], &acc[2 * k + 1]);
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 ae[4], ao[4];
  for (int r = 0; r < 4; ++r) ae[r] = ao[r] = _mm256_setzero_ps();
  for (int i = 0; i < ld; i += 16, p += 64) {
    prefetch_ahead(p, end);
    const __m256 xe = _mm256_load_ps(xd + i), xo = _mm256_load_ps(xd + i + 8);
    for (int r = 0; r < 4; ++r) {
      const __m256i v = load16_bf16(p + 16 * r);
      ae[r] = _mm256_fmadd_ps(bf16_even(v), xe, ae[r]);
      ao[r] = _mm256_fmadd_ps(bf16_odd(v), xo, ao[r]);
    }
  }
  for (int r = 0; r < 4; ++r) acc[r] = hsum256(_mm256_add_ps(ae[r], ao[r]));
#else
  for (int i = 0; i < ld; i += 16, p += 64)
    for (int r = 0; r < 4; ++r)
      for (int j = 0; j < 8; ++j)
        acc[r] += bf16_to_f32(p[16 * r + 2 * j]) * xd[i + j] + bf16_to_f32(p[16 * r + 2 * j + 1]) * xd[i + 8 + j];
#endif
  for (int r = 0; r < nr; ++r) y[o0 + r] = acc[r];
}

#if defined(DECODELAB_AVX512)
// bf16_row_group for rows [o0, o0 + 16) (four groups) at once on one thread, the same sums to the
// bit: each pair of rows accumulated as there, then their halves reduced sixteen at a time.
static void bf16_rows16(const float* xd, const Linear& L, int o0, float* y) {
  const int ld = bf16_ld(L.in), nr = std::min(16, L.out - o0);
  const int g0 = o0 / 4, last = (L.out + 3) / 4 - 1;
  const uint16_t* p[4];
  for (int k = 0; k < 4; ++k) p[k] = bf16_group(L, std::min(g0 + k, last));  // a short end repeats its last
  __m512 ae[8], ao[8];  // [2 * group + k]: rows 4 * group + 2k (lanes 0-7) and + 1 (lanes 8-15)
  for (int j = 0; j < 8; ++j) ae[j] = ao[j] = _mm512_setzero_ps();
  for (int i = 0; i < ld; i += 16) {
    const __m512 xe = _mm512_broadcast_f32x8(_mm256_load_ps(xd + i));
    const __m512 xo = _mm512_broadcast_f32x8(_mm256_load_ps(xd + i + 8));
    for (int gg = 0; gg < 4; ++gg)
      for (int k = 0; k < 2; ++k) {
        const __m512i v = _mm512_loadu_si512(p[gg] + 4 * i + 32 * k);
        ae[2 * gg + k] = _mm512_fmadd_ps(bf16_even512(v), xe, ae[2 * gg + k]);
        ao[2 * gg + k] = _mm512_fmadd_ps(bf16_odd512(v), xo, ao[2 * gg + k]);
      }
  }
  __m512 pr[8], w[8];
  for (int j = 0; j < 8; ++j) pr[j] = _mm512_add_ps(ae[j], ao[j]);  // rows 2j and 2j + 1
  for (int r = 0; r < 8; ++r)  // rows r and r + 8: halves of pairs r / 2 and r / 2 + 4
    w[r] = _mm512_shuffle_f32x4(pr[r / 2], pr[r / 2 + 4], r % 2 ? 0xEE : 0x44);
  _mm512_mask_storeu_ps(y + o0, static_cast<__mmask16>((1u << nr) - 1), reduce16_halves(w));
}
#endif

// Activations for int8 products (every row count): x rounded to 16-bit fixed point with one fp32 scale
// per block of kI8Block values (block max |x| / 32767). The rounding error is at most 1 / 65534 of
// the block's largest value, two orders below the int8 weights' own (1 / 254 of each row's
// largest), and lets the products be summed exactly in int32 with pmaddwd: half the instructions
// per weight of widening int8 to fp32, which on AVX2 without VNNI is what bounds int8 decode.
constexpr int kI8Block = 256;

// Activation rows per register tile of the int8 and w8a8 panel kernels (see panel_rows): each
// weight vector loaded (and, for int8, widened) serves this many rows. With VNNI, one instruction
// per row and step, and 32 registers hold 16 rows' sums: 16 independent sums keep both VNNI
// units busy through the instruction's 4-cycle latency, where 8 just cover it. Llama 110M, 5
// alternating rounds, 16 against 8 rows (both on interleaved rows): 512-token prompt int8 128.7 ->
// 123.6 ms, w8a8 81.4 -> 79.9; batch 16 int8 6.27 -> 5.83 ms per step; batch 4 and 8 unchanged
// (2.80 -> 2.74, 2.89 -> 2.97). 8 against 4 had given prompts int8 203 -> 183 ms, w8a8 132 -> 111.
#if defined(DECODELAB_VNNI512)
constexpr int kPanelTile = 16;
#else
constexpr int kPanelTile = 4;
#endif

// Rounded activation rows (int16 for int8 weights, u8 for w8a8): ld values per row (padded), the
// block scales of row t at scale[t * blocks ...]. The panel kernels read them one 4-byte unit (an
// int16 pair or a u8 quad: one step) per row at a time. Without VNNI the rows lie one after
// another, ld values apart (ld a multiple of 16: each row on a 32-byte boundary). With VNNI they
// are interleaved: rows in groups of kPanelTile (the last group holds the rest), and per step the
// group's units side by side, so one tile's units for a step are contiguous, at fixed offsets from
// one pointer. The tile then addresses its rows by displacement alone: with a row stride GCC 12
// kept the offsets in vector registers and moved them back on every step, and tiles of more than 8
// rows ran out of general registers.
template <typename E>
struct RoundedRows {
#if defined(DECODELAB_VNNI512)
  static constexpr bool kInterleaved = true;
#else
  static constexpr bool kInterleaved = false;
#endif
  std::vector<E, AlignedAllocator<E>> q;
  std::vector<float> scale;
  int ld = 0, blocks = 0, rows = 0;
  int units() const { return ld * static_cast<int>(sizeof(E)) / 4; }
  // Rows in row t's group (interleaved).
  int group_width(int t) const { return std::min(kPanelTile, rows - t / kPanelTile * kPanelTile); }
  // Bytes from row t's unit for one step to its unit for the next (interleaved: the next row's
  // unit is 4 bytes on, and a tile starts on a group).
  size_t step_stride(int t) const { return kInterleaved ? 4 * static_cast<size_t>(group_width(t)) : 4; }
  const char* unit(int t, int s) const { return const_cast<RoundedRows*>(this)->unit(t, s); }
  char* unit(int t, int s) {
    char* base = reinterpret_cast<char*>(q.data());
    if (!kInterleaved) return base + static_cast<size_t>(t) * ld * sizeof(E) + 4 * static_cast<size_t>(s);
    const int g = t / kPanelTile;
    return base + static_cast<size_t>(g) * kPanelTile * ld * sizeof(E) + step_stride(t) * s + 4 * (t % kPanelTile);
  }
};
using Int16Rows = RoundedRows<int16_t>;

// Largest |x[i]| over [b, e), and whether every value there is finite (vectorised).
static float block_abs_max(const float* x, int b, int e, bool* finite) {
  float mx = 0.0f;
  bool ok_all = true;
  int i = b;
#if defined(__AVX2__)
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 vmx = _mm256_setzero_ps(), ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  for (; i + 8 <= e; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    vmx = _mm256_max_ps(vmx, _mm256_and_ps(v, abs_mask));
    ok = _mm256_and_ps(ok, _mm256_cmp_ps(_mm256_sub_ps(v, v), _mm256_setzero_ps(), _CMP_EQ_OQ));  // NaN, inf: 0
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmx), _mm256_extractf128_ps(vmx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  mx = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
  ok_all = _mm256_movemask_ps(ok) == 0xFF;
#endif
  for (; i < e; ++i) {
    mx = std::max(mx, std::fabs(x[i]));
    ok_all = ok_all && std::isfinite(x[i]);
  }
  *finite = ok_all;
  return mx;
}

// Calls round(b0, e, mx) for each block [b0, e) of kI8Block values of x (n values) with the block's
// largest |x|, storing the scale it returns; a block holding NaN or inf is written as `zero` with a
// NaN scale, so it reaches the output as NaN, as fp32 arithmetic would carry it.
template <typename Q, typename F>
static void round_blocks(const float* x, int n, Q* q, float* scale, Q zero, F&& round) {
  for (int b0 = 0, b = 0; b0 < n; b0 += kI8Block, ++b) {
    const int e = std::min(n, b0 + kI8Block);
    bool finite = true;
    const float mx = block_abs_max(x, b0, e, &finite);
    if (!finite) {
      scale[b] = std::numeric_limits<float>::quiet_NaN();
      std::fill(q + b0, q + e, zero);
      continue;
    }
    scale[b] = round(b0, e, mx);
  }
}

static void quantize_int16_row(const float* x, int n, int16_t* q, float* scale) {
  round_blocks(x, n, q, scale, int16_t{0}, [&](int b0, int e, float mx) {
    // In double, so a subnormal block maximum does not overflow the reciprocal; |x| * inv <= 32767.
    const double inv = mx > 0.0f ? 32767.0 / mx : 0.0;
    int i = b0;
#if defined(__AVX2__)
    const __m256d vinv = _mm256_set1_pd(inv);
    for (; i + 8 <= e; i += 8) {  // rounds to nearest even, as lrint does in the default mode
      const __m256 v = _mm256_loadu_ps(x + i);
      const __m128i lo = _mm256_cvtpd_epi32(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), vinv));
      const __m128i hi = _mm256_cvtpd_epi32(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), vinv));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm_packs_epi32(lo, hi));
    }
#endif
    for (; i < e; ++i) q[i] = static_cast<int16_t>(std::lrint(x[i] * inv));
    return mx / 32767.0f;
  });
}

// dst[(u * w + j) * 4 ..] = the 4-byte unit u of row j (rows row_bytes apart from src), for w rows
// of `units` units: per unit, the w rows' units side by side (RoundedRows' interleaved layout). A
// full group of 16 rows moves 16 units at a time as a 16 x 16 transpose of 32-bit values (4-byte
// copies one by one had been 3.2 % of a GPT-2 int8 prompt's perf samples).
static void interleave_units(const char* src, size_t row_bytes, int w, int units, char* dst) {
  int u = 0;
#if defined(DECODELAB_AVX512)
  if (w == 16) {
    for (; u + 16 <= units; u += 16) {
      __m512i r[16], t[16];
      for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_si512(src + j * row_bytes + 4 * static_cast<size_t>(u));
      // Per 128-bit lane L: t[2i] = rows 2i, 2i+1 at columns 4L, 4L+1; t[2i+1] at 4L+2, 4L+3.
      for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
      }
      // r[4i + c], lane L: rows 4i .. 4i+3 at column 4L + c.
      for (int i = 0; i < 4; ++i) {
        r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
      }
      // Column 4L + c: lane L of r[c], r[4 + c], r[8 + c], r[12 + c] (rows 0-3, 4-7, 8-11, 12-15).
      char* d = dst + 64 * static_cast<size_t>(u);
      for (int c = 0; c < 4; ++c) {
        const __m512i x0 = _mm512_shuffle_i32x4(r[c], r[4 + c], _MM_SHUFFLE(2, 0, 2, 0));
        const __m512i x1 = _mm512_shuffle_i32x4(r[c], r[4 + c], _MM_SHUFFLE(3, 1, 3, 1));
        const __m512i y0 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], _MM_SHUFFLE(2, 0, 2, 0));
        const __m512i y1 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], _MM_SHUFFLE(3, 1, 3, 1));
        _mm512_storeu_si512(d + 64 * c, _mm512_shuffle_i32x4(x0, y0, _MM_SHUFFLE(2, 0, 2, 0)));
        _mm512_storeu_si512(d + 64 * (4 + c), _mm512_shuffle_i32x4(x1, y1, _MM_SHUFFLE(2, 0, 2, 0)));
        _mm512_storeu_si512(d + 64 * (8 + c), _mm512_shuffle_i32x4(x0, y0, _MM_SHUFFLE(3, 1, 3, 1)));
        _mm512_storeu_si512(d + 64 * (12 + c), _mm512_shuffle_i32x4(x1, y1, _MM_SHUFFLE(3, 1, 3, 1)));
      }
    }
  }
#endif
  for (; u < units; ++u)
    for (int j = 0; j < w; ++j)
      std::memcpy(dst + (static_cast<size_t>(u) * w + j) * 4, src + j * row_bytes + 4 * static_cast<size_t>(u), 4);
}

// Rounds T rows of n values into v (int16 or u8 blocks) with round_row, in v's layout (rows ld
// values apart, or interleaved: see RoundedRows); prompts spread the rows over the threads.
template <typename E, typename RoundRow>
static void quantize_rows(const float* x, int T, int n, int ld, RoundedRows<E>& v, RoundRow round_row) {
  v.ld = ld;
  v.blocks = (n + kI8Block - 1) / kI8Block;
  v.rows = T;
  grow(v.q, static_cast<size_t>(T) * ld);
  grow(v.scale, static_cast<size_t>(T) * v.blocks);
  if (!RoundedRows<E>::kInterleaved) {
    for_each_index(T, T >= 32, [&](int64_t t) {
      round_row(x + static_cast<size_t>(t) * n, n, v.q.data() + static_cast<size_t>(t) * ld,
                v.scale.data() + static_cast<size_t>(t) * v.blocks);
    });
    return;
  }
  // Interleaved: a group's rows rounded in order into scratch, then spread out together.
  const int n_groups = (T + kPanelTile - 1) / kPanelTile;
  const size_t row_bytes = static_cast<size_t>(ld) * sizeof(E);
  for_each_index(n_groups, T >= 32, [&](int64_t g) {
    const int t0 = static_cast<int>(g) * kPanelTile, w = v.group_width(t0);
    thread_local std::vector<E, AlignedAllocator<E>> rows_buf;
    grow(rows_buf, static_cast<size_t>(kPanelTile) * ld);
    for (int j = 0; j < w; ++j) {
      E* row = rows_buf.data() + static_cast<size_t>(j) * ld;
      std::fill(row + n, row + ld, E{0});
      round_row(x + static_cast<size_t>(t0 + j) * n, n, row, v.scale.data() + static_cast<size_t>(t0 + j) * v.blocks);
    }
    interleave_units(reinterpret_cast<const char*>(rows_buf.data()), row_bytes, w, v.units(), v.unit(t0, 0));
  });
}

static void quantize_int16(const float* x, int T, int n, Int16Rows& v) {
  quantize_rows(x, T, n, aligned_stride(n), v, quantize_int16_row);
}

// Activations as 8-bit integers (load(dtype="w8a8")): x rounded per block of kI8Block values to
// q in [-63, 63] (scale = block max |x| / 63) and stored as u = q + 64 in [1, 127]. Seven bits, not
// eight, because AVX2 without VNNI multiplies bytes with pmaddubsw, which adds each pair of u8 x s8
// products into a saturating int16: 2 * 127 * 127 fits, 2 * 255 * 127 does not. Products are then
// exact in int32, 32 per instruction pair (pmaddwd on int16 sums 16), at the cost of rounding
// each activation to 1/126 of its block's largest value. VNNI (vpdpbusd) would take 8 bits, but the
// format stays 7 so that a checkpoint gives the same logits on AVX2 and AVX-512 machines.
using Int8Rows = RoundedRows<uint8_t>;
constexpr int kA8Offset = 64;

static void quantize_u7_row(const float* x, int n, uint8_t* u, float* scale) {
  round_blocks(x, n, u, scale, static_cast<uint8_t>(kA8Offset), [&](int b0, int e, float mx) {
    // |x| * inv <= 63 up to one rounding, which rounds back to 63 at most.
    const float inv = mx > 0.0f ? 63.0f / mx : 0.0f;
    if (std::isinf(inv)) {  // a block maximum below 63 / FLT_MAX (subnormal): the reciprocal in double
      const double invd = 63.0 / static_cast<double>(mx);
      for (int j = b0; j < e; ++j) u[j] = static_cast<uint8_t>(static_cast<int>(std::nearbyint(x[j] * invd)) + kA8Offset);
      return mx / 63.0f;
    }
    int i = b0;
#if defined(__AVX2__)
    // x * inv in fp32 rounded to nearest even (the default mode), as nearbyint does below.
    const __m256 vinv = _mm256_set1_ps(inv);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (; i + 32 <= e; i += 32) {
      __m256i v[4];
      for (int j = 0; j < 4; ++j) v[j] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * j), vinv));
      const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
      const __m256i q = _mm256_permutevar8x32_epi32(p, order);  // undo the per-lane packing order
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + i), _mm256_add_epi8(q, _mm256_set1_epi8(kA8Offset)));
    }
#endif
    for (; i < e; ++i) u[i] = static_cast<uint8_t>(static_cast<int>(std::nearbyint(x[i] * inv)) + kA8Offset);
    return mx / 63.0f;
  });
}

static void quantize_u7(const float* x, int T, int n, Int8Rows& v) {
  quantize_rows(x, T, n, (n + 31) / 32 * 32, v, quantize_u7_row);
}

// int8 weights (with 16-bit or 8-bit activations) are stored in panels of kPanel output rows, laid
// out for the products below. The inputs go in steps of G = 2 (int8) or 4 (w8a8); per step, the G
// bytes of each of the panel's 16 rows, 16 * G bytes in all. One step of 8 rows then widens (int8)
// or loads (w8a8) into one vector, and the activation's G values, broadcast to every lane, multiply
// all 8 rows at once (pmaddwd on 16-bit pairs; pmaddubsw then pmaddwd against ones on byte quads).
// Each lane sums one output, so a result needs no horizontal sum, and a panel is one contiguous
// stream. Inputs are padded with zero weights to whole steps, outputs to whole panels.
constexpr int kPanel = 16;
// The first tile of each block asks for the panel bytes this far ahead, a cache line per 64 bytes
// it reads: one stream per thread is not always enough for the hardware prefetcher to keep memory
// busy. Interleaved in one process against none: one-row decode +4-14 % on three of the four
// 8-bit rows (GPT-2 / Llama int8 / w8a8; Llama w8a8 +9 % and -7 % in two runs), batch 16 +4-9 %,
// 512-token prompts -2 % to +9 %. 2048 bytes against 1024 on an Intel Xeon host without
// AVX512_BF16, bench_phase.py --phase decode --prompt 16, 4 alternating rounds, tok/s: Llama 110M
// int8 186-210 -> 215-225, w8a8 182-241 -> 228-248, GPT-2 int8 133-170 -> 148-173, w8a8 157-168
// -> 126-173 (one slow round); 512-token prompts and batch 16 unchanged. Llama int8 at 4096 and
// 8192 bytes: 199-241, below 2048. On a Xeon with AMX (two cores), Llama int8 336-374 -> 385-410.
constexpr int kPanelPrefetch = 2048;
inline int panel_count(int out) { return (out + kPanel - 1) / kPanel; }
inline int panel_steps(int in, int G) { return (in + G - 1) / G; }

// Packs row-major int8 (out, in) into panels of G-value steps. With `start` (w8a8), also fills
// start[(p * blocks + b) * 16 + r] with -64 x the sum of row 16p + r over block b: the activations'
// offset of 64 adds 64 x that to each block's integer sum, so the sum starts there instead of at 0.
static size_t packed_size(int out, int in, int G) {
  return static_cast<size_t>(panel_count(out)) * kPanel * panel_steps(in, G) * G;
}
static void pack_panels(const int8_t* w, int out, int in, int G, int8_t* packed, std::vector<int32_t>* start) {
  const int steps = panel_steps(in, G), blocks = (in + kI8Block - 1) / kI8Block;
  std::memset(packed, 0, packed_size(out, in, G));
  if (start) start->assign(static_cast<size_t>(panel_count(out)) * blocks * kPanel, 0);
  for (int o = 0; o < out; ++o) {
    const int p = o / kPanel, r = o % kPanel;
    int8_t* dst = packed + static_cast<size_t>(p) * kPanel * steps * G + r * G;
    for (int i = 0; i < in; ++i) {
      const int8_t v = w[static_cast<size_t>(o) * in + i];
      dst[static_cast<size_t>(i / G) * kPanel * G + i % G] = v;
      if (start) (*start)[(static_cast<size_t>(p) * blocks + i / kI8Block) * kPanel + r] -= kA8Offset * v;
    }
  }
}

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
  static constexpr int G = 2;
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
  static constexpr int G = 4;
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
constexpr int kPanelRows = 48;
static_assert(kPanelRows % kPanelTile == 0, "chunks of rows start on a tile (and interleaved group)");
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
// One activation row (a decode step) against kRowPanels panels of an int8 or w8a8 layer at once,
// [p0, p0 + kRowPanels): each step loads from every panel, so a thread reads kRowPanels streams side
// by side instead of one, and the hardware prefetcher keeps more lines in flight. On an AVX2-only
// AMD EPYC (Zen 3, 2 threads): a loop of these products over 100 MB read 12-14 GB/s one panel at a
// time and 15-18 four at a time (medians of 9 alternating passes); decode with int8 weights after a
// 16-token prompt, 12 alternating rounds in one process, medians: GPT-2 124M 115.8 -> 131.4 tok/s,
// Llama 110M 145.9 -> 162.8. Each panel's block sums are the same exact integers, scaled and added
// over the blocks in the same order as panel_rows, so every output is the same to the bit.
constexpr int kRowPanels = 4;
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

// n values to fp32: a copy, or bf16 bits made the upper half of fp32 ones (vectorised).
static void widen(const float* src, size_t n, float* dst) { std::memcpy(dst, src, n * sizeof(float)); }
static void widen(const uint16_t* src, size_t n, float* dst) {
  size_t i = 0;
#if defined(__AVX2__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load8_bf16(src + i));
#endif
  for (; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

// Widens group g of bf16 weights (rows [4g, 4g + 4), padding rows included) into 4 fp32 rows of
// L.in values, row r at dst[r * L.in ...]: one pass over the group's contiguous block.
static void widen_group(const Linear& L, int g, float* dst) {
  const uint16_t* p = bf16_group(L, g);
  int i = 0;
#if defined(__AVX2__)
  for (; i + 16 <= L.in; i += 16, p += 64)
    for (int r = 0; r < 4; ++r) {
      float* d = dst + static_cast<size_t>(r) * L.in + i;
      _mm256_storeu_ps(d, load8_bf16(p + 16 * r));
      _mm256_storeu_ps(d + 8, load8_bf16(p + 16 * r + 8));
    }
#endif
  for (; i < L.in; i += 16, p += 64)
    for (int r = 0; r < 4; ++r)
      for (int j = 0; j < std::min(16, L.in - i); ++j)
        dst[static_cast<size_t>(r) * L.in + i + j] = bf16_to_f32(p[16 * r + j]);
}

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
      // the NT FMAs (15 loads per step instead of 7 at 3 rows). 2304x768 layer, GMAC/s, three
      // alternating runs: 16 rows 38-42 -> 52-59, 32 rows 47-50 -> 71-89.
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
        // accumulators: there the rows are loaded inside the FMAs (Llama batch 6 18.32 -> 16.07 ms
        // per step, 9 of 10 alternating rounds; batch 3 unchanged).
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

// bf16 weights are read in place (dot_4xN_bf16) for up to this many activation rows (two passes)
// and widened once per group for more: the shift and mask in every pass cost more than one
// widening from three passes on.
constexpr int kBf16DirectRows = 6;

// Whether small_group runs two groups of 4 weight rows together (8-row register tiles: AVX-512's
// 32 registers hold their 24 accumulators; AVX2's 16 do not), from kPairMinRows activation rows.
// Every group streams all T activation rows from L2, one load per 4 weight rows with single groups;
// pairs halve that. Scratch A/B on an Intel Xeon host (AVX-512 and VNNI, no AVX512_BF16;
// linear_seconds, GMAC/s, two alternating runs): fp32 2304x768 8 rows 40 -> 73, 16 rows 41 -> 76, 32 rows 43 -> 86; 3072 -> 768 at 16 rows
// 38 -> 80; bf16 widened (7 rows or more) 16 rows 58 -> 85. At 2 and 3 rows (one pass, the weights
// streamed from memory) eight row streams per thread ran 10-20 % slower than four, so those keep
// single groups.
#if defined(DECODELAB_AVX512)
constexpr bool kPairGroups = true;
#else
constexpr bool kPairGroups = false;
#endif
constexpr int kPairMinRows = 4;

// A few rows (batched decode, beams, short prompts; T < gemm_min_rows) with fp32 or bf16 weights
// (int8 has its panels): output rows [4g, 4g + R), R / 4 groups, are read in place (fp32; bf16 when
// `direct`, R = 4, with `xd` the activation rows in even/odd order) or widened to fp32 once (bf16,
// into the thread's `scratch` of R * in values), and multiplied with all T activation rows in
// register tiles. The weights are read once for the whole batch and the activations stay in cache.
// With AVX-512 two groups go together where they can (kPairGroups): the activation rows, which
// every group streams in full from L2, then serve 8 weight rows per load instead of 4.
template <int R>
static void small_group(const float* x, const float* xd, bool direct, int T, const Linear& L, int g, float* y,
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

// Row o of a bf16 layer's groups into plain (out, in) bf16 rows at w: 16 values per 64 of its group,
// at (o % 4) * 16. A work-sharing loop over the calling team, without a barrier at its end.
static void unpack_bf16_rows(const Linear& L, uint16_t* w) {
#pragma omp for schedule(static) nowait
  for (int o = 0; o < L.out; ++o) {
    const uint16_t* g = bf16_group(L, o / 4) + (o % 4) * 16;
    uint16_t* d = w + static_cast<size_t>(o) * L.in;
    for (int i = 0; i < L.in; i += 16) std::memcpy(d + i, g + 4 * static_cast<size_t>(i), std::min(16, L.in - i) * sizeof(uint16_t));
  }
}

// The two operands of a bf16 matmul, in scratch of the calling thread: the layer's weights as
// unpack(L, w) writes them (a work-sharing loop) and x (T, in) rounded to bf16 (nearest even),
// both in one parallel region.
struct Bf16Operands {
  const uint16_t* w;
  const uint16_t* x;
};
template <class Unpack>
static Bf16Operands bf16_operands(const float* x, int T, const Linear& L, Unpack unpack) {
  thread_local std::vector<uint16_t, AlignedAllocator<uint16_t>> wb, xb;
  grow(wb, static_cast<size_t>(L.out) * L.in);
  grow(xb, static_cast<size_t>(T) * L.in);
  uint16_t* w = wb.data();
  uint16_t* xq = xb.data();
  const int64_t nx = static_cast<int64_t>(T) * L.in;
#pragma omp parallel
  {
    unpack(L, w);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < nx; ++i) xq[i] = f32_to_bf16(x[i]);
  }
  return {w, xq};
}

// y = x W^T + b for a bf16 layer with bf16_activations: W unpacked from its groups into plain
// (out, in) bf16 rows and x rounded to bf16 (nearest even), both into scratch of the calling
// thread, then oneDNN's bf16 matmul (vdpbf16ps: products of bf16 pairs summed in fp32). A 512-row
// prompt, GMAC/s against the weights widened to fp32: 768x2304 205.6 -> 392.9, 3072x768 165.5 ->
// 363.3 (bench_linear's shapes, 20 repeats, an AMD Zen host with AVX512_BF16 and no AMX).
static void matmul_bf16(const float* x, int T, const Linear& L, float* y) {
  const Bf16Operands op = bf16_operands(x, T, L, unpack_bf16_rows);
  matmul_onednn_bf16(op.x, T, L.in, op.w, L.out, y, L.b);
}

// y = x W^T + b for an int8 layer with bf16_activations, W = scale * q: every int8 q is exactly
// a bf16 value (8 significant bits at most), so q unpacked from its panels into bf16 and x rounded
// to bf16 go through oneDNN's bf16 matmul, which applies the scales and bias to its fp32 sums
// (in the output tiles; a pass afterwards where it cannot). The only rounding beyond the int8
// weights' own is x to bf16, in place of the 16-bit fixed point of the int8 panel kernel. A
// panel's step holds inputs 2k and 2k + 1 of 16 consecutive outputs, so q unpacks to W^T (in,
// out): two 32-byte stores per 32 weights (a work-sharing loop, no barrier at its end).
static void unpack_i8_in_major(const Linear& L, uint16_t* w) {
  constexpr int G = I8Block<1>::G;
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

static void matmul_i8_bf16(const float* x, int T, const Linear& L, float* y) {
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

// Many rows (prefill) with bf16 weights and fp32 inputs: widen the matrix to fp32 in a reused
// scratch and run the fp32 matmul, bias included (prefill is compute-bound; the widening reads the
// weights once).
static void matmul_widened(const float* x, int T, const Linear& L, float* y) {
  thread_local FloatBuffer wide;  // the calling thread's; OpenMP workers use the pointer
  grow(wide, static_cast<size_t>(L.out) * L.in);
  float* base = wide.data();
  const int full = L.out / 4;  // whole groups straight into place; a short last one through a copy
#pragma omp parallel for schedule(static)
  for (int g = 0; g < full; ++g) widen_group(L, g, base + static_cast<size_t>(4) * g * L.in);
  if (full * 4 < L.out) {
    std::vector<float> last(static_cast<size_t>(4) * L.in);
    widen_group(L, full, last.data());
    std::copy(last.begin(), last.begin() + static_cast<size_t>(L.out - 4 * full) * L.in,
              base + static_cast<size_t>(4) * full * L.in);
  }
  matmul_onednn(x, T, L.in, base, L.out, y, L.b);
}

size_t quantized_size(const Linear& L, WeightType type) {
  switch (type) {
    case WeightType::BF16: return (L.out + 3) / 4 * bf16_group_elems(L) * sizeof(uint16_t);
    case WeightType::I8: return packed_size(L.out, L.in, I8Block<1>::G);
    case WeightType::I8A8: return packed_size(L.out, L.in, A8Block<1>::G);
    default: return 0;
  }
}

bool linear_row_view(const Linear& L, int first, int count, Linear* view) {
  if (first < 0 || count < 1 || first + count > L.out || L.in_major) return false;
  const int align = L.type == WeightType::BF16 ? 4 : L.type == WeightType::F32 ? 1 : kPanel;
  if (first % align != 0) return false;
  *view = L;
  view->out = count;
  if (L.w) view->w = L.w + static_cast<size_t>(first) * L.in;
  if (L.b) view->b = L.b + first;
  if (L.w_bf16) view->w_bf16 = bf16_group(L, first / 4);
  if (L.w_i8) {
    const int G = L.type == WeightType::I8A8 ? A8Block<1>::G : I8Block<1>::G;
    view->w_i8 = L.w_i8 + static_cast<size_t>(first / kPanel) * kPanel * panel_steps(L.in, G) * G;
  }
  if (L.scales) view->scales = L.scales + first;
  if (L.wsums) view->wsums = L.wsums + static_cast<size_t>(first / kPanel) * ((L.in + kI8Block - 1) / kI8Block) * kPanel;
  return true;
}

void quantize_linear(Linear& L, WeightType type, QuantizedWeights& q, uint8_t* dst) {
  if (type == WeightType::F32) return;
  const size_t n = static_cast<size_t>(L.out) * L.in;
  q.bytes = quantized_size(L, type);
  if (!dst) {
    q.own.resize(q.bytes);
    dst = q.own.data();
  }
  auto at = [&](int o, int i) {
    return L.in_major ? L.w[static_cast<size_t>(i) * L.out + o] : L.w[static_cast<size_t>(o) * L.in + i];
  };
  if (type == WeightType::BF16) {
    // The group layout (see bf16_ld); padding rows and columns are zero.
    uint16_t* w = reinterpret_cast<uint16_t*>(dst);
    const int ld = bf16_ld(L.in), groups = (L.out + 3) / 4;
    L.w_bf16 = w;
#pragma omp parallel for schedule(static)
    for (int g = 0; g < groups; ++g) {
      uint16_t* p = w + g * bf16_group_elems(L);
      for (int r = 0; r < 4; ++r)
        for (int i = 0; i < ld; ++i) {
          const int o = 4 * g + r;
          p[(i / 16) * 64 + 16 * r + i % 16] = o < L.out && i < L.in ? f32_to_bf16(at(o, i)) : 0;
        }
    }
  } else {
    std::vector<int8_t> rows(n);
    q.scales.resize(L.out);
#pragma omp parallel for schedule(static)
    for (int o = 0; o < L.out; ++o) {
      float mx = 0.0f;
      for (int i = 0; i < L.in; ++i) mx = std::max(mx, std::fabs(at(o, i)));
      const float scale = mx > 0.0f ? mx / 127.0f : 1.0f;
      q.scales[o] = scale;
      for (int i = 0; i < L.in; ++i)
        rows[static_cast<size_t>(o) * L.in + i] = static_cast<int8_t>(std::lrint(at(o, i) / scale));
    }
    if (type == WeightType::I8A8) {
      pack_panels(rows.data(), L.out, L.in, A8Block<1>::G, reinterpret_cast<int8_t*>(dst), &q.wsums);
      L.wsums = q.wsums.data();
    } else {
      pack_panels(rows.data(), L.out, L.in, I8Block<1>::G, reinterpret_cast<int8_t*>(dst), nullptr);
    }
    L.w_i8 = reinterpret_cast<const int8_t*>(dst);
    L.scales = q.scales.data();
  }
  L.type = type;
  L.in_major = false;
  L.w = nullptr;  // the fp32 weights are no longer read
}

float read_pass(const float* p, size_t n, int n_threads) {
  float total = 0.0f;
#pragma omp parallel for num_threads(n_threads) schedule(static) reduction(+ : total)
  for (int c = 0; c < n_threads; ++c) {
    const size_t lo = n * c / n_threads, hi = n * (c + 1) / n_threads;
    total += ConstVec(p + lo, static_cast<Eigen::Index>(hi - lo)).sum();  // vectorised by Eigen
  }
  return total;
}

double read_bandwidth(size_t nbytes, int n_threads, int repeats) {
  const size_t n = std::max<size_t>(nbytes / sizeof(float), 1024);
  std::vector<float, HugePageAllocator<float>> buf(n);
#pragma omp parallel for num_threads(n_threads) schedule(static)
  for (size_t i = 0; i < n; ++i) buf[i] = static_cast<float>(i & 1023);
  double best = 0.0;
  volatile float sink = 0.0f;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = omp_get_wtime();
    const float total = read_pass(buf.data(), n, n_threads);
    const double dt = omp_get_wtime() - t0;
    sink = sink + total;
    best = std::max(best, static_cast<double>(n * sizeof(float)) / dt);
  }
  return best;
}

namespace {
// Group indices [0, n) split over a team for one pass: each thread owns an equal contiguous range
// and takes it from the front, kStep groups at a time; a thread whose range runs out takes steps
// from the back of the fullest other range. Every thread reads its own rows as one stream, as with
// a static split, but a thread slowed by a neighbour on the shared host no longer leaves the other
// waiting at the barrier. Which thread computes a group never changes its result.
class GroupRanges {
 public:
  static constexpr int kStep = 4;
  void reset(int n, int n_threads) {
    if (n_threads > cap_) {
      slots_.reset(new Slot[n_threads]);
      cap_ = n_threads;
    }
    count_ = n_threads;
    for (int t = 0; t < n_threads; ++t)
      slots_[t].v.store(pack(static_cast<int64_t>(n) * t / n_threads, static_cast<int64_t>(n) * (t + 1) / n_threads),
                        std::memory_order_relaxed);
  }
  // The next groups [b, e) for thread `me`; false once every range is empty.
  bool next(int me, int& b, int& e) {
    if (me < count_ && take(slots_[me], true, b, e)) return true;
    for (;;) {
      int victim = -1;
      uint32_t most = 0;
      for (int t = 0; t < count_; ++t) {
        const uint64_t v = slots_[t].v.load(std::memory_order_relaxed);
        const uint32_t left = hi(v) > lo(v) ? hi(v) - lo(v) : 0;
        if (left > most) most = left, victim = t;
      }
      if (victim < 0) return false;
      if (take(slots_[victim], false, b, e)) return true;
    }
  }

 private:
  struct alignas(64) Slot {
    std::atomic<uint64_t> v{0};
  };
  static uint64_t pack(int64_t b, int64_t e) { return static_cast<uint64_t>(b) << 32 | static_cast<uint32_t>(e); }
  static uint32_t lo(uint64_t v) { return static_cast<uint32_t>(v >> 32); }
  static uint32_t hi(uint64_t v) { return static_cast<uint32_t>(v); }
  static bool take(Slot& s, bool front, int& b, int& e) {
    uint64_t v = s.v.load(std::memory_order_relaxed);
    for (;;) {
      const uint32_t l = lo(v), h = hi(v);
      if (l >= h) return false;
      const uint32_t step = std::min<uint32_t>(kStep, h - l);
      const uint64_t nv = front ? pack(l + step, h) : pack(l, h - step);
      if (s.v.compare_exchange_weak(v, nv, std::memory_order_relaxed)) {
        b = static_cast<int>(front ? l : h - step);
        e = static_cast<int>(front ? l + step : h);
        return true;
      }
    }
  }
  std::unique_ptr<Slot[]> slots_;
  int cap_ = 0, count_ = 0;
};

enum class Path { F32Row, Bf16Row, I8Rows, A8Rows, SmallRows, Gemm };

}  // namespace

int gemm_min_rows(WeightType type) {
  switch (type) {
    case WeightType::F32: return kGemmMinRowsF32;
    case WeightType::BF16: return kGemmMinRowsBf16;
    case WeightType::I8: return kGemmMinRowsI8;
    default: return std::numeric_limits<int>::max();
  }
}

bool bf16_matmul_native() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool native = __builtin_cpu_supports("avx512bf16");
  return native;
#else
  return false;
#endif
}

namespace {
// Which kernel a layer runs for T rows.
Path path_of(const Linear& L, int T) {
  // w8a8 runs its panels at every row count, and so does int8 without bf16_activations: see I8Block.
  if (L.type == WeightType::I8A8) return Path::A8Rows;
  if (L.type == WeightType::I8)
    return L.bf16_activations && T >= gemm_min_rows(L.type) ? Path::Gemm : Path::I8Rows;
  if (T >= gemm_min_rows(L.type)) return Path::Gemm;
  if (T == 1) return L.type == WeightType::BF16 ? Path::Bf16Row : Path::F32Row;
  return Path::SmallRows;
}
}  // namespace

void linear_many(const float* x, int T, const Linear* const* layers, float* const* ys, int n) {
  constexpr int kMaxLayers = 4;
  if (n < 1 || n > kMaxLayers)
    throw std::invalid_argument("linear_many takes 1 to 4 layers, got " + std::to_string(n));
  const Path path = path_of(*layers[0], T);
  bool fused = true;
  for (int i = 1; i < n; ++i)
    fused = fused && path_of(*layers[i], T) == path && layers[i]->in == layers[0]->in &&
            layers[i]->type == layers[0]->type;
  if (path == Path::Gemm || !fused) {
    for (int i = 0; i < n; ++i) {
      const Linear& L = *layers[i];
      if (path_of(L, T) != Path::Gemm) linear_many(x, T, &layers[i], &ys[i], 1);
      else if (L.type == WeightType::F32) matmul_onednn(x, T, L.in, L.w, L.out, ys[i], L.b);
      else if (L.type == WeightType::I8) matmul_i8_bf16(x, T, L, ys[i]);
      else if (L.bf16_activations) matmul_bf16(x, T, L, ys[i]);
      else matmul_widened(x, T, L, ys[i]);
    }
    return;
  }
  // The input, converted once for all the layers: 16-bit or 8-bit blocks (int8, w8a8) or even/odd
  // order (bf16). The calling thread's buffers; OpenMP workers read them through references.
  thread_local Int16Rows xq_buf;
  thread_local Int8Rows xa_buf;
  thread_local FloatBuffer xd_buf;
  if (path == Path::I8Rows) quantize_int16(x, T, layers[0]->in, xq_buf);
  if (path == Path::A8Rows) quantize_u7(x, T, layers[0]->in, xa_buf);
  if (path == Path::Bf16Row) split_even_odd(x, 1, layers[0]->in, xd_buf);
  // Llama 110M bf16, batched decode, switched in one process (tok/s, widened -> in place): batch 2
  // 134 -> 196, 3 189 -> 261, 4 236 -> 267, 6 305 -> 316; 8 331 -> 329, 12 417 -> 322, 16 406 -> 318.
  const bool direct_bf16 =
      path == Path::SmallRows && layers[0]->type == WeightType::BF16 && T <= kBf16DirectRows;
  if (direct_bf16) split_even_odd(x, T, layers[0]->in, xd_buf);
  const Int16Rows& xq = xq_buf;
  const Int8Rows& xa = xa_buf;
  const float* xd = xd_buf.data();
  // Many rows (prompts) run in chunks, each thread taking its weight groups over one chunk of rows
  // at a time: a chunk's activations stay in cache while the weights stream past them.
  const bool panels = path == Path::I8Rows || path == Path::A8Rows;
  const int chunk = panels ? kPanelRows : T;
  // Groups of 4 output rows (int8, w8a8: panels of 16) of every layer in one parallel region: one wake-up
  // and one barrier for, say, a Llama layer's q, k and v instead of three.
  int first[kMaxLayers + 1] = {0};
  int64_t work = 0;
  for (int i = 0; i < n; ++i) {
    first[i + 1] = first[i] + (panels ? panel_count(layers[i]->out) : (layers[i]->out + 3) / 4);
    work += static_cast<int64_t>(layers[i]->in) * layers[i]->out;
  }
  const bool widen_rows = path == Path::SmallRows && layers[0]->type == WeightType::BF16 && !direct_bf16;
  const bool pairs = kPairGroups && path == Path::SmallRows && !direct_bf16 && T >= kPairMinRows;
  // Runs group G (and G + 1 with it where pairs allow, both below `end` and in one layer); returns
  // how many it ran.
  auto run_group = [&](int G, int end, float* scratch, int c0) {
    int i = 0;
    while (G >= first[i + 1]) ++i;
    const Linear& L = *layers[i];
    const int g = G - first[i];
    switch (path) {
      case Path::F32Row:
        if (kF32RowGroups > 1 && G + kF32RowGroups <= std::min(end, first[i + 1])) {  // where range and layer hold them
          f32_row_group<kF32RowGroups>(x, L, g, ys[i]);
          return kF32RowGroups;
        }
        f32_row_group(x, L, g, ys[i]);
        break;
      case Path::Bf16Row: bf16_row_group(xd, L, g, ys[i]); break;
      case Path::I8Rows:
      case Path::A8Rows:
#if defined(__AVX2__) && defined(__FMA__) && !defined(DECODELAB_VNNI512)
        // A decode step: kRowPanels panels at once where this range and layer hold them.
        if (T == 1 && G + kRowPanels <= std::min(end, first[i + 1])) {
          if (path == Path::I8Rows) panels_row<I8Block>(xq, L, g, ys[i]);
          else panels_row<A8Block>(xa, L, g, ys[i]);
          return kRowPanels;
        }
#endif
        if (path == Path::I8Rows) panel_rows<I8Block>(xq, c0, std::min(T, c0 + chunk), L, g, ys[i]);
        else panel_rows<A8Block>(xa, c0, std::min(T, c0 + chunk), L, g, ys[i]);
        break;
      default:
        if constexpr (kPairGroups) {
          if (pairs && G + 1 < std::min(end, first[i + 1])) {
            small_group<8>(x, xd, false, T, L, g, ys[i], scratch);
            return 2;
          }
        }
        small_group<4>(x, xd, direct_bf16, T, L, g, ys[i], scratch);
        break;
    }
    return 1;
  };
  thread_local FloatBuffer scratch;  // each thread's own (bf16 rows widened for the tiles)
  // Below this many weights one thread is faster than waking the others (a few microseconds per
  // parallel region): small models decode serially, without entering OpenMP. A prompt in several
  // chunks counts all its rows, so a small model's prompt still spreads over the threads.
  const bool one_pass = chunk >= T;
  if (work * (one_pass ? 1 : T) >= (1 << 16)) {
    // The groups of each pass (one for a decode step or a small batch, one per chunk of a prompt's
    // rows) are split by GroupRanges: each thread starts on its own range, the same in every
    // chunk, so it reads its own weights as one stream, and takes from the other's range once its
    // own is done. A thread that finishes a chunk first goes on to the next without waiting, so a
    // thread slowed by a neighbour on the shared host is caught up with at the end of the call,
    // not at every chunk. Interleaved in one process against a static split per chunk (512 rows,
    // kernel alone): w8a8 +5-10 %, int8 +11 %; GPT-2 w8a8 prompts +5 %, int8 +8 %.
    const int n_chunks = (T + chunk - 1) / chunk;
    thread_local std::vector<GroupRanges> ranges;  // the calling thread's; the team reads it by reference
    if (static_cast<int>(ranges.size()) < n_chunks) ranges.resize(n_chunks);
    for (int c = 0; c < n_chunks; ++c) ranges[c].reset(first[n], omp_get_max_threads());
    std::vector<GroupRanges>& shared_ranges = ranges;
#pragma omp parallel
    {
      if (widen_rows) grow(scratch, static_cast<size_t>(pairs ? 8 : 4) * layers[0]->in);
      int b, e;
      for (int c = 0; c < n_chunks; ++c)
        while (shared_ranges[c].next(omp_get_thread_num(), b, e))
          for (int G = b; G < e;) G += run_group(G, e, scratch.data(), c * chunk);
    }
  }
#if defined(DECODELAB_AVX512)
  else if (path == Path::F32Row || path == Path::Bf16Row) {  // one thread: sixteen rows at a time
    for (int i = 0; i < n; ++i)
      for (int o = 0; o < layers[i]->out; o += 16)
        if (path == Path::F32Row) f32_rows16(x, *layers[i], o, ys[i]);
        else bf16_rows16(xd, *layers[i], o, ys[i]);
  }
#endif
  else {
    if (widen_rows) grow(scratch, static_cast<size_t>(pairs ? 8 : 4) * layers[0]->in);
    for (int c0 = 0; c0 < T; c0 += chunk)
      for (int G = 0; G < first[n];) G += run_group(G, first[n], scratch.data(), c0);
  }
  for (int i = 0; i < n; ++i) {
    const Linear& L = *layers[i];
    if (L.b && !panels)  // panel_rows adds its own
      for (int t = 0; t < T; ++t) Vec(ys[i] + static_cast<size_t>(t) * L.out, L.out) += ConstVec(L.b, L.out);
  }
}

void linear(const float* x, int T, const Linear& L, float* y) {
  const Linear* layers[1] = {&L};
  float* ys[1] = {y};
  linear_many(x, T, layers, ys, 1);
}

// Row-wise work spreads over the threads only for a prompt's many rows: for a few rows waking the
// other thread costs more than it saves.
static bool rows_worth_threads(int T, int dim) { return static_cast<int64_t>(T) * dim >= (1 << 15); }

void rmsnorm(const float* x, const float* w, int T, int dim, float eps, float* y) {
  for_each_index(T, rows_worth_threads(T, dim), [&](int64_t t) {
    const float* xt = x + static_cast<size_t>(t) * dim;
    float* yt = y + static_cast<size_t>(t) * dim;
    const float ms = ConstVec(xt, dim).squaredNorm() / dim;
    const float inv = 1.0f / std::sqrt(ms + eps);
    for (int i = 0; i < dim; ++i) yt[i] = w[i] * (xt[i] * inv);
  });
}

void layernorm(const float* x, const float* w, const float* b, int T, int dim, float eps, float* y) {
  for_each_index(T, rows_worth_threads(T, dim), [&](int64_t t) {
    const float* xt = x + static_cast<size_t>(t) * dim;
    float* yt = y + static_cast<size_t>(t) * dim;
    const auto xa = ConstVec(xt, dim).array();
    const float mean = xa.sum() / dim;
    // Through Eigen, vectorised: a plain loop's float sum stays scalar without -ffast-math.
    const float var = (xa - mean).square().sum() / dim;
    const float inv = 1.0f / std::sqrt(var + eps);
    for (int i = 0; i < dim; ++i) yt[i] = (xt[i] - mean) * inv * w[i] + b[i];
  });
}

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
inline float load(const int8_t* p, int i) { return static_cast<float>(p[i]); }  // before its row's scale

inline float dot_kv(const float* q, const float* k, int n) { return dot(q, k, n); }
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
// on the stack, storing every accumulator back after each FMA, at half the speed (512-token
// prompts 6-8 % longer, GPT-2 and Llama).
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
                       int n_heads, float* out, float* kv_all, int n_threads) {
  constexpr int kTile = 32;
  const int n_kv = pool.n_kv_heads(), hd = pool.head_dim(), bs = pool.block_size();
  const int group = n_heads / n_kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
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
        for (int r = 0; r < rows; ++r) {
          const int valid = p0 + t0 + r + 1;
          auto row = S.row(r);
          const float mx = row.head(valid).maxCoeff();
          row.head(valid) = ((row.head(valid).array() - mx) * scale).exp();
          row.head(valid) /= row.head(valid).sum();
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

// Asks memory for `bytes` at p a few cache lines per next() over `calls` calls, so the requests
// ride inside the arithmetic on the current slab instead of leaving as one burst, which fills the
// core's miss buffers and stalls it (a slab of keys or values is one block's rows of one head:
// 16 KiB fp32 with the default 64-token blocks and head size 64).
struct Trickle {
  const char* p = nullptr;
  const char* end = nullptr;
  int per = 0;
  Trickle(const void* base, size_t bytes, int calls)
      : p(static_cast<const char*>(base)), end(base ? p + bytes : nullptr),
        per(static_cast<int>(((bytes + 63) / 64 + calls - 1) / std::max(calls, 1))) {}
  void next() {
    for (int k = 0; k < per && p < end; ++k, p += 64) _mm_prefetch(p, _MM_HINT_T0);
  }
  void rest() {
    for (; p < end; p += 64) _mm_prefetch(p, _MM_HINT_T0);
  }
};

#if defined(__AVX2__) && defined(__FMA__)
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return load8_bf16(p); }
inline __m256 load8(const int8_t* p) {  // an int8 cache row's values, before the row's scale
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// How the attention kernels read a row of keys or values, kStep values at a time. InOrder: 8
// values as they lie (fp32; bf16 widened by shuffles; int8 widened, the row's scale applied by the
// caller). EvenOdd: 16 bf16 values split by
// bf16_even / bf16_odd, against a query and an output kept in even/odd order (bf16 caches with head
// sizes a multiple of 16).
template <typename E>
struct InOrder {
  using Elem = E;
  static constexpr int kStep = 8;
  // a + row . q, lane by lane, over the step's values
  static __m256 dot(const E* row, const float* q, __m256 a) {
    return _mm256_fmadd_ps(load8(row), _mm256_loadu_ps(q), a);
  }
  // a[g] += row . q[g] + i, lane by lane, for G queries: the row's values loaded once
  template <int G>
  static void dots(const E* row, const float* const* q, int i, __m256* a) {
    const __m256 w = load8(row);
    for (int g = 0; g < G; ++g) a[g] = _mm256_fmadd_ps(w, _mm256_loadu_ps(q[g] + i), a[g]);
  }
  // o[g] += p[g] * row, lane by lane, for G outputs held in registers (kStep values: one vector each)
  template <int G>
  static void adds(const E* row, const float* p, __m256* o) {
    const __m256 w = load8(row);
    for (int g = 0; g < G; ++g) o[g] = _mm256_fmadd_ps(_mm256_set1_ps(p[g]), w, o[g]);
  }
  static constexpr int kVecs = 1;  // fp32 vectors per step
  // o += p[0] row0 + ... + p[n - 1] row(n - 1), the rows hd apart, over the step's values
  template <int N>
  static void add(const E* v, int hd, const __m256* p, float* o) {
    __m256 a = _mm256_loadu_ps(o);
    for (int j = 0; j < N; ++j) a = _mm256_fmadd_ps(p[j], load8(v + static_cast<size_t>(j) * hd), a);
    _mm256_storeu_ps(o, a);
  }
};
struct EvenOdd {
  using Elem = uint16_t;
  static constexpr int kStep = 16;
  static __m256 dot(const uint16_t* row, const float* qd, __m256 a) {
    const __m256i v = load16_bf16(row);
    a = _mm256_fmadd_ps(bf16_even(v), _mm256_loadu_ps(qd), a);
    return _mm256_fmadd_ps(bf16_odd(v), _mm256_loadu_ps(qd + 8), a);
  }
  template <int G>
  static void dots(const uint16_t* row, const float* const* qd, int i, __m256* a) {
    const __m256i v = load16_bf16(row);
    const __m256 e = bf16_even(v), o = bf16_odd(v);
    for (int g = 0; g < G; ++g) {
      a[g] = _mm256_fmadd_ps(e, _mm256_loadu_ps(qd[g] + i), a[g]);
      a[g] = _mm256_fmadd_ps(o, _mm256_loadu_ps(qd[g] + i + 8), a[g]);
    }
  }
  template <int G>
  static void adds(const uint16_t* row, const float* p, __m256* od) {  // od[2g], od[2g + 1]: even, odd
    const __m256i v = load16_bf16(row);
    const __m256 e = bf16_even(v), o = bf16_odd(v);
    for (int g = 0; g < G; ++g) {
      const __m256 pg = _mm256_set1_ps(p[g]);
      od[2 * g] = _mm256_fmadd_ps(pg, e, od[2 * g]);
      od[2 * g + 1] = _mm256_fmadd_ps(pg, o, od[2 * g + 1]);
    }
  }
  static constexpr int kVecs = 2;
  template <int N>
  static void add(const uint16_t* v, int hd, const __m256* p, float* od) {
    __m256 e = _mm256_loadu_ps(od), o = _mm256_loadu_ps(od + 8);
    for (int j = 0; j < N; ++j) {
      const __m256i w = load16_bf16(v + static_cast<size_t>(j) * hd);
      e = _mm256_fmadd_ps(p[j], bf16_even(w), e);
      o = _mm256_fmadd_ps(p[j], bf16_odd(w), o);
    }
    _mm256_storeu_ps(od, e);
    _mm256_storeu_ps(od + 8, o);
  }
};

// s[r] = scale * dot(key row r, q) for `rows` rows of hd values (hd % Read::kStep == 0); returns
// the largest. Eight rows share one reduction tree instead of a horizontal sum each. Along the way
// asks for the pf_bytes at pf (the next slab; none when pf is null).
template <typename Read>
float key_scores(const typename Read::Elem* k, const float* q, int rows, int hd, float scale, float* s,
                 const void* pf, size_t pf_bytes) {
  constexpr int kStep = Read::kStep;
  float mx = -std::numeric_limits<float>::infinity();
  Trickle ahead(pf, pf_bytes, rows / 8 * (hd / kStep) + rows % 8);
  int r = 0;
  for (; r + 8 <= rows; r += 8) {
    // Across the eight rows first, so the eight sums advance side by side, not one chain at a time.
    const auto* kr = k + static_cast<size_t>(r) * hd;
    __m256 a[8];
    for (int j = 0; j < 8; ++j) a[j] = _mm256_setzero_ps();
    for (int i = 0; i < hd; i += kStep) {
      ahead.next();
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) a[j] = Read::dot(kr + static_cast<size_t>(j) * hd + i, q + i, a[j]);
    }
    const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    __m256 s8 = _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
    s8 = _mm256_mul_ps(s8, _mm256_set1_ps(scale));
    _mm256_storeu_ps(s + r, s8);
    for (int j = 0; j < 8; ++j) mx = std::max(mx, s[r + j]);
  }
  for (; r < rows; ++r) {
    ahead.next();
    const auto* kr = k + static_cast<size_t>(r) * hd;
    __m256 a = _mm256_setzero_ps();
    for (int i = 0; i < hd; i += kStep) a = Read::dot(kr + i, q + i, a);
    s[r] = hsum256(a) * scale;
    mx = std::max(mx, s[r]);
  }
  ahead.rest();
  return mx;
}

// o (hd) += sum_r p[r] * value row r (hd % Read::kStep == 0): four rows per pass over o. Asks for
// the next slab along the way, as key_scores does.
template <typename Read>
void add_weighted_values(const typename Read::Elem* v, const float* p, int rows, int hd, float* o, const void* pf,
                         size_t pf_bytes) {
  constexpr int kStep = Read::kStep;
  Trickle ahead(pf, pf_bytes, rows / 4 * (hd / kStep) + rows % 4);
  int r = 0;
  for (; r + 4 <= rows; r += 4) {
    const auto* v0 = v + static_cast<size_t>(r) * hd;
    const __m256 pr[4] = {_mm256_set1_ps(p[r]), _mm256_set1_ps(p[r + 1]), _mm256_set1_ps(p[r + 2]),
                          _mm256_set1_ps(p[r + 3])};
    for (int i = 0; i < hd; i += kStep) {
      ahead.next();
      Read::template add<4>(v0 + i, hd, pr, o + i);
    }
  }
  for (; r < rows; ++r) {
    ahead.next();
    const __m256 pr = _mm256_set1_ps(p[r]);
    for (int i = 0; i < hd; i += kStep) Read::template add<1>(v + static_cast<size_t>(r) * hd + i, hd, &pr, o + i);
  }
  ahead.rest();
}
// Grouped-query attention: G (1 to 4) of the query heads that share a key/value head, in one pass
// over its slab instead of one pass each, so each key and value is loaded once for all of them.
// Heads that have a key/value head to themselves (GPT-2) keep key_scores / add_weighted_values
// above: routed through these with G = 1 (the same results bit for bit), GPT-2's attention at
// context 960 ran 2-20 % slower (medians of six runs of 12-14 alternating rounds, fp32 and bf16
// caches), also with the values loop given 4 independent chains and the next slab's prefetch
// spread over its rows.
// key_scores for G queries q[g] into s[g]; m[g] = max(m[g], the largest of s[g]).
template <typename Read, int G>
void key_scores_group(const typename Read::Elem* k, const float* const* q, int rows, int hd, float scale,
                      float* const* s, float* m, const void* pf, size_t pf_bytes) {
  constexpr int kStep = Read::kStep;
  Trickle ahead(pf, pf_bytes, rows / 4 * (hd / kStep) + rows % 4);
  int r = 0;
  for (; r + 4 <= rows; r += 4) {
    const auto* kr = k + static_cast<size_t>(r) * hd;
    __m256 a[4][G];
    for (int j = 0; j < 4; ++j)
      for (int g = 0; g < G; ++g) a[j][g] = _mm256_setzero_ps();
    for (int i = 0; i < hd; i += kStep) {
      ahead.next();
      for (int j = 0; j < 4; ++j) Read::template dots<G>(kr + static_cast<size_t>(j) * hd + i, q, i, a[j]);
    }
    for (int g = 0; g < G; ++g) {
      const __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(a[0][g], a[1][g]), _mm256_hadd_ps(a[2][g], a[3][g]));
      const __m128 s4 = _mm_mul_ps(_mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1)),
                                   _mm_set1_ps(scale));
      _mm_storeu_ps(s[g] + r, s4);
      for (int j = 0; j < 4; ++j) m[g] = std::max(m[g], s[g][r + j]);
    }
  }
  for (; r < rows; ++r) {
    ahead.next();
    const auto* kr = k + static_cast<size_t>(r) * hd;
    __m256 a[G];
    for (int g = 0; g < G; ++g) a[g] = _mm256_setzero_ps();
    for (int i = 0; i < hd; i += kStep) Read::template dots<G>(kr + i, q, i, a);
    for (int g = 0; g < G; ++g) {
      s[g][r] = hsum256(a[g]) * scale;
      m[g] = std::max(m[g], s[g][r]);
    }
  }
  ahead.rest();
}

// add_weighted_values for G outputs o[g] with weights p[g]: each step of every output stays in
// registers while all the rows pass, each row's values loaded once for the G heads.
template <typename Read, int G>
void add_weighted_values_group(const typename Read::Elem* v, const float* const* p, int rows, int hd,
                               float* const* o, const void* pf, size_t pf_bytes) {
  constexpr int kStep = Read::kStep, kVecs = Read::kVecs;
  Trickle ahead(pf, pf_bytes, hd / kStep);
  for (int i = 0; i < hd; i += kStep) {
    ahead.next();
    __m256 acc[G * kVecs];
    for (int g = 0; g < G; ++g)
      for (int e = 0; e < kVecs; ++e) acc[g * kVecs + e] = _mm256_loadu_ps(o[g] + i + 8 * e);
    for (int r = 0; r < rows; ++r) {
      float pr[G];
      for (int g = 0; g < G; ++g) pr[g] = p[g][r];
      Read::template adds<G>(v + static_cast<size_t>(r) * hd + i, pr, acc);
    }
    for (int g = 0; g < G; ++g)
      for (int e = 0; e < kVecs; ++e) _mm256_storeu_ps(o[g] + i + 8 * e, acc[g * kVecs + e]);
  }
  ahead.rest();
}
constexpr bool kVectorAttention = true;

#if defined(DECODELAB_AVX512)
// int8 caches on AVX-512 (head sizes a multiple of 16): 16 values per step, widened to fp32 by one
// vpmovsxbd and one convert, with each row's scale applied here. Through the AVX2 kernels above (8
// values per step, the scales applied by the caller) int8 reads were bound by the widening: the
// Llama 110M shape's decode attention at context 640 took longer than with a bf16 cache.
constexpr bool kInt8Attention512 = true;
inline __m512 load16_i8(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
// a[j][g] += key row j (of NR, hd apart) . q[g] lane by lane, over all hd values.
template <int NR, int G>
inline void key_rows_i8(const int8_t* kr, int hd, const float* const* q, __m512 (&a)[NR][G], Trickle& ahead) {
  for (int j = 0; j < NR; ++j)
    for (int g = 0; g < G; ++g) a[j][g] = _mm512_setzero_ps();
  for (int i = 0; i < hd; i += 16) {
    ahead.next();
    for (int j = 0; j < NR; ++j) {
      const __m512 w = load16_i8(kr + static_cast<size_t>(j) * hd + i);
      for (int g = 0; g < G; ++g) a[j][g] = _mm512_fmadd_ps(w, _mm512_loadu_ps(q[g] + i), a[j][g]);
    }
  }
}
// s[g][r] = scale * rs[r] * (key row r . q[g]) for G queries; m[g] = max(m[g], those).
template <int G>
void key_scores_i8(const int8_t* k, const float* rs, const float* const* q, int rows, int hd, float scale,
                   float* const* s, float* m, const void* pf, size_t pf_bytes) {
  Trickle ahead(pf, pf_bytes, rows / 4 * (hd / 16) + rows % 4 * (hd / 16));
  int r = 0;
  for (; r + 4 <= rows; r += 4) {
    __m512 a[4][G];
    key_rows_i8<4, G>(k + static_cast<size_t>(r) * hd, hd, q, a, ahead);
    const __m128 sc = _mm_mul_ps(_mm_loadu_ps(rs + r), _mm_set1_ps(scale));
    for (int g = 0; g < G; ++g) {
      __m256 h[4];
      for (int j = 0; j < 4; ++j)
        h[j] = _mm256_add_ps(_mm512_castps512_ps256(a[j][g]),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[j][g]), 1)));
      const __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(h[0], h[1]), _mm256_hadd_ps(h[2], h[3]));
      const __m128 s4 = _mm_mul_ps(_mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1)), sc);
      _mm_storeu_ps(s[g] + r, s4);
      for (int j = 0; j < 4; ++j) m[g] = std::max(m[g], s[g][r + j]);
    }
  }
  for (; r < rows; ++r) {
    __m512 a[1][G];
    key_rows_i8<1, G>(k + static_cast<size_t>(r) * hd, hd, q, a, ahead);
    for (int g = 0; g < G; ++g) {
      s[g][r] = _mm512_reduce_add_ps(a[0][g]) * scale * rs[r];
      m[g] = std::max(m[g], s[g][r]);
    }
  }
  ahead.rest();
}
// o[g][c0, c0 + 16 NV) += sum_r p[g][r] rs[r] value row r, the outputs in registers over all rows.
template <int G, int NV>
void values_chunk_i8(const int8_t* v, const float* rs, const float* const* p, int rows, int hd, int c0,
                     float* const* o, Trickle& ahead) {
  __m512 acc[G][NV];
  for (int g = 0; g < G; ++g)
    for (int e = 0; e < NV; ++e) acc[g][e] = _mm512_loadu_ps(o[g] + c0 + 16 * e);
  for (int r = 0; r < rows; ++r) {
    ahead.next();
    __m512 w[NV];
    for (int e = 0; e < NV; ++e) w[e] = load16_i8(v + static_cast<size_t>(r) * hd + c0 + 16 * e);
    for (int g = 0; g < G; ++g) {
      const __m512 pg = _mm512_set1_ps(p[g][r] * rs[r]);
      for (int e = 0; e < NV; ++e) acc[g][e] = _mm512_fmadd_ps(pg, w[e], acc[g][e]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int e = 0; e < NV; ++e) _mm512_storeu_ps(o[g] + c0 + 16 * e, acc[g][e]);
}
template <int G>
void add_values_i8(const int8_t* v, const float* rs, const float* const* p, int rows, int hd, float* const* o,
                   const void* pf, size_t pf_bytes) {
  Trickle ahead(pf, pf_bytes, rows * ((hd + 63) / 64));
  for (int c0 = 0; c0 < hd; c0 += 64) {  // up to 64 columns (4 vectors per output) per pass
    switch (std::min(64, hd - c0) / 16) {
      case 4: values_chunk_i8<G, 4>(v, rs, p, rows, hd, c0, o, ahead); break;
      case 3: values_chunk_i8<G, 3>(v, rs, p, rows, hd, c0, o, ahead); break;
      case 2: values_chunk_i8<G, 2>(v, rs, p, rows, hd, c0, o, ahead); break;
      default: values_chunk_i8<G, 1>(v, rs, p, rows, hd, c0, o, ahead); break;
    }
  }
  ahead.rest();
}
void key_scores_i8_heads(int G, const int8_t* k, const float* rs, const float* const* q, int rows, int hd,
                         float scale, float* const* s, float* m, const void* pf, size_t pf_bytes) {
  switch (G) {
    case 4: key_scores_i8<4>(k, rs, q, rows, hd, scale, s, m, pf, pf_bytes); break;
    case 3: key_scores_i8<3>(k, rs, q, rows, hd, scale, s, m, pf, pf_bytes); break;
    case 2: key_scores_i8<2>(k, rs, q, rows, hd, scale, s, m, pf, pf_bytes); break;
    default: key_scores_i8<1>(k, rs, q, rows, hd, scale, s, m, pf, pf_bytes); break;
  }
}
void add_values_i8_heads(int G, const int8_t* v, const float* rs, const float* const* p, int rows, int hd,
                         float* const* o, const void* pf, size_t pf_bytes) {
  switch (G) {
    case 4: add_values_i8<4>(v, rs, p, rows, hd, o, pf, pf_bytes); break;
    case 3: add_values_i8<3>(v, rs, p, rows, hd, o, pf, pf_bytes); break;
    case 2: add_values_i8<2>(v, rs, p, rows, hd, o, pf, pf_bytes); break;
    default: add_values_i8<1>(v, rs, p, rows, hd, o, pf, pf_bytes); break;
  }
}
#else
constexpr bool kInt8Attention512 = false;
#endif
#else
template <typename E>
struct InOrder {
  using Elem = E;
};
struct EvenOdd {
  using Elem = uint16_t;
};
template <typename Read>
float key_scores(const typename Read::Elem*, const float*, int, int, float, float*, const void*, size_t) {
  return 0.0f;
}
template <typename Read>
void add_weighted_values(const typename Read::Elem*, const float*, int, int, float*, const void*, size_t) {}
template <typename Read, int G>
void key_scores_group(const typename Read::Elem*, const float* const*, int, int, float, float* const*, float*,
                      const void*, size_t) {}
template <typename Read, int G>
void add_weighted_values_group(const typename Read::Elem*, const float* const*, int, int, float* const*,
                               const void*, size_t) {}
constexpr bool kVectorAttention = false;
constexpr bool kInt8Attention512 = false;
#endif
#if !defined(DECODELAB_AVX512)
inline void key_scores_i8_heads(int, const int8_t*, const float*, const float* const*, int, int, float, float* const*,
                                float*, const void*, size_t) {}
inline void add_values_i8_heads(int, const int8_t*, const float*, const float* const*, int, int, float* const*,
                                const void*, size_t) {}
#endif

// Requests `bytes` at p into cache at once (attention's plain loops, for head sizes the vector
// kernels do not take; those trickle the requests instead).
inline void prefetch_range(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(c + off, _MM_HINT_T0);
}

// Decode-style attention (query t over its causal prefix) straight from the paged cache, for a
// thread's run of KV heads [kh0, kh1): block by block, every head of the run in turn, so a thread
// reads its heads' slabs of one cache block (adjacent in memory) before the next block, and the
// query heads of a KV group share each key and value slab while it is in cache. Cache blocks live
// apart, where the hardware prefetcher stops, so each slab's kernel asks for the head's next slab
// as it goes. Scores for all the run's heads first, then softmax, then the weighted values; sc
// holds (kh1 - kh0) * group rows of `stride` scores. Head sizes that are a multiple of 8 take the
// vector kernels above (bf16 caches the even/odd ones when a multiple of 16); others a plain loop.
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

template <typename E>
void attend_heads(const float* q, const BlockPool& pool, const int* table, int layer, int t, int p0, int n_heads,
                  int kh0, int kh1, float* out, float* sc, int stride, bool vec) {
  const int n_kv = pool.n_kv_heads(), hd = pool.head_dim(), bs = pool.block_size();
  const int group = n_heads / n_kv, nh = (kh1 - kh0) * group;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int n_ctx = p0 + t + 1, n_blocks = (n_ctx + bs - 1) / bs;
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
  for (int b = 0; b < n_blocks; ++b) {
    const int rows = rows_of(b);
    for (int kh = kh0; kh < kh1; ++kh) {
      const E* kb = slab(b, 0, kh);
      // This head's next slab: its keys in the next block, or after the last its values' first.
      const E* next = b + 1 < n_blocks ? slab(b + 1, 0, kh) : slab(0, 1, kh);
      const size_t next_bytes = static_cast<size_t>(rows_of(b + 1 < n_blocks ? b + 1 : 0)) * hd * sizeof(E);
      if (!vec) prefetch_range(next, next_bytes);
      if (b + 1 < n_blocks) prefetch_scales(b + 1, 0, kh);
      else prefetch_scales(0, 1, kh);
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
      // Llama 110M (12 query heads on 4, int8 weights), a step at context 960 less one at context 1,
      // medians of 14 alternating rounds against one pass per head: fp32 cache 1.73 -> 1.46 ms, bf16
      // cache 1.02 -> 0.93 ms.
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
      for (int b = 0; b < n_blocks; ++b) {
        Eigen::Map<Eigen::ArrayXf> sb(s + static_cast<size_t>(b) * bs, rows_of(b));
        sb *= Eigen::Map<const Eigen::ArrayXf>(scales_of(b, 0, kh), sb.size());  // vectorised, as is the max
        mx = std::max(mx, sb.maxCoeff());
      }
      m[j] = mx;
    }
  }
  for (int j = 0; j < nh; ++j) {
    Eigen::Map<Eigen::ArrayXf> p(sc + static_cast<size_t>(j) * stride, n_ctx);
    p = (p - m[j]).exp();  // vectorised
    m[j] = 1.0f / p.sum();
    const int h = kh0 * group + j;
    float* o = out + (static_cast<size_t>(t) * n_heads + h) * hd;
    std::fill(o, o + hd, 0.0f);
  }
  for (int b = 0; b < n_blocks; ++b) {
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
              os[g] = out + (static_cast<size_t>(t) * n_heads + kh * group + g0 + g) * hd;
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
          os[g] = eo ? od + static_cast<size_t>(j) * hd : out + (static_cast<size_t>(t) * n_heads + h) * hd;
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
        float* o = out + (static_cast<size_t>(t) * n_heads + h) * hd;
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
  for (int j = 0; j < nh; ++j) {
    float* o = out + (static_cast<size_t>(t) * n_heads + kh0 * group + j) * hd;
    if (eo) {
      const float* d = od + static_cast<size_t>(j) * hd;
      for (int i = 0; i < hd; i += 16)
        for (int e = 0; e < 8; ++e) {
          o[i + 2 * e] = d[i + e] * m[j];
          o[i + 2 * e + 1] = d[i + 8 + e] * m[j];
        }
    } else {
      Vec(o, hd) *= m[j];
    }
  }
}

// Multiply-adds (queries x heads x context x head size) from which decode attention spreads its
// heads over the threads.
constexpr int64_t kAttentionThreadsMinWork = int64_t(1) << 12;

// Decode attention for T < 8 queries: the (query, KV head) pairs split evenly into one contiguous
// run per thread (not handed out one at a time: a run reads adjacent slabs, and its GQA heads
// share them). scratch holds n_threads * n_heads * stride floats.
template <typename E>
void attention_runs(const float* q, const BlockPool& pool, const int* table, int layer, int T, int p0, int n_heads,
                    float* out, float* scratch, int stride, int n_threads) {
  const int n_kv = pool.n_kv_heads(), hd = pool.head_dim();
  const bool vec = kVectorAttention && hd % 8 == 0;
  const int items = T * n_kv;
  const int64_t work = static_cast<int64_t>(T) * n_heads * (p0 + T) * hd;  // multiply-adds, roughly
  auto run = [&](int nth, int id) {
    float* sc = scratch + static_cast<size_t>(id) * n_heads * stride;
    const int i1 = static_cast<int>(static_cast<int64_t>(items) * (id + 1) / nth);
    for (int i = static_cast<int>(static_cast<int64_t>(items) * id / nth); i < i1;) {
      const int t = i / n_kv, kh0 = i % n_kv, kh1 = std::min(n_kv, kh0 + (i1 - i));
      attend_heads<E>(q, pool, table, layer, t, p0, n_heads, kh0, kh1, out, sc, stride, vec);
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
}
}  // namespace

void attention_paged(const float* q, const BlockPool& pool, const int* block_table, int layer, int T, int p0,
                     int n_heads, float* out, float* scratch, int scratch_stride, float* gather, int n_threads) {
  // Eight or more queries: matrix products over keys and values gathered (and widened) per head.
  switch (pool.dtype()) {
    case KVDType::F32:
      if (T >= 8) attention_prefill<float>(q, pool, block_table, layer, T, p0, n_heads, out, gather, n_threads);
      else attention_runs<float>(q, pool, block_table, layer, T, p0, n_heads, out, scratch, scratch_stride, n_threads);
      break;
    case KVDType::BF16:
      if (T >= 8) attention_prefill<uint16_t>(q, pool, block_table, layer, T, p0, n_heads, out, gather, n_threads);
      else attention_runs<uint16_t>(q, pool, block_table, layer, T, p0, n_heads, out, scratch, scratch_stride,
                                    n_threads);
      break;
    case KVDType::I8:
      if (T >= 8) attention_prefill<int8_t>(q, pool, block_table, layer, T, p0, n_heads, out, gather, n_threads);
      else attention_runs<int8_t>(q, pool, block_table, layer, T, p0, n_heads, out, scratch, scratch_stride,
                                  n_threads);
      break;
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

}  // namespace decodelab
