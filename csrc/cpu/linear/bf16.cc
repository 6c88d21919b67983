// bf16 weights: the one-row kernel (a decode step), widening to fp32, and the two matmuls for
// prompts (widened weights, or bf16 products with bf16_activations).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/linear/kernels.h"
#include "cpu/simd_avx512.h"
#include "decodelab/bf16.h"

namespace decodelab {
namespace DECODELAB_ISA {

// Bytes ahead of the one-row bf16 kernel that it asks memory for, into L2 (T1): the one hint near
// the best on both AMD and Intel hosts, at the distance best on Intel (the sweeps are in
// benchmarks/results/kernel_tuning.md).
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
void bf16_row_group(const float* xd, const Linear& L, int g, float* y) {
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
void bf16_rows16(const float* xd, const Linear& L, int o0, float* y) {
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

// Widens group g of bf16 weights (rows [4g, 4g + 4), padding rows included) into 4 fp32 rows of
// L.in values, row r at dst[r * L.in ...]: one pass over the group's contiguous block.
void widen_group(const Linear& L, int g, float* dst) {
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

// Row o of a bf16 layer's groups into plain (out, in) bf16 rows at w: 16 values per 64 of its group,
// at (o % 4) * 16. A work-sharing loop over the calling team, without a barrier at its end.
void unpack_bf16_rows(const Linear& L, uint16_t* w) {
#pragma omp for schedule(static) nowait
  for (int o = 0; o < L.out; ++o) {
    const uint16_t* g = bf16_group(L, o / 4) + (o % 4) * 16;
    uint16_t* d = w + static_cast<size_t>(o) * L.in;
    for (int i = 0; i < L.in; i += 16) std::memcpy(d + i, g + 4 * static_cast<size_t>(i), std::min(16, L.in - i) * sizeof(uint16_t));
  }
}

Bf16Operands bf16_operands(const float* x, int T, const Linear& L, void (*unpack)(const Linear&, uint16_t*)) {
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
// thread, then oneDNN's bf16 matmul (vdpbf16ps: products of bf16 pairs summed in fp32).
void matmul_bf16(const float* x, int T, const Linear& L, float* y) {
  const Bf16Operands op = bf16_operands(x, T, L, unpack_bf16_rows);
  matmul_onednn_bf16(op.x, T, L.in, op.w, L.out, y, L.b);
}

// Many rows (prefill) with bf16 weights and fp32 inputs: widen the matrix to fp32 in a reused
// scratch and run the fp32 matmul, bias included (prefill is compute-bound; the widening reads the
// weights once).
void matmul_widened(const float* x, int T, const Linear& L, float* y) {
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

}  // namespace DECODELAB_ISA
}  // namespace decodelab
