// fp32 weights, one activation row (a decode step): matrix-vector kernels that read each weight once.
#include <immintrin.h>

#include <algorithm>

#include "cpu/linear/kernels.h"
#include "cpu/simd_avx512.h"

namespace decodelab {
namespace DECODELAB_ISA {

// Rows [4g, 4g + 4 NG): each thread owns a range of output rows and reads them once, as one
// contiguous stream, the group's rows sharing each load of x. No software prefetch: at one FMA per
// 32 weight bytes the hardware prefetcher keeps up (benchmarks/results/kernel_tuning.md).
template <int NG>
void f32_row_group(const float* x, const Linear& L, int g, float* y) {
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

template void f32_row_group<1>(const float*, const Linear&, int, float*);
template void f32_row_group<2>(const float*, const Linear&, int, float*);

#if defined(DECODELAB_AVX512)
// Each row's 16 lanes over the columns in f32_row_group's order, then reduce16 in hsum512's order.
void f32_rows16(const float* x, const Linear& L, int o0, float* y) {
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

}  // namespace DECODELAB_ISA
}  // namespace decodelab
