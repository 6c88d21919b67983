// fp32 rows for the bf16 kernels: bf16 widened to fp32, and activations in even/odd order.
#include "cpu/convert.h"

#include <cstring>

#include "cpu/simd_avx2.h"
#include "decodelab/bf16.h"

namespace decodelab {
namespace DECODELAB_ISA {

void split_even_odd(const float* x, int T, int n, FloatBuffer& xd) {
  const int ld = (n + 15) / 16 * 16;
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

void widen(const float* src, size_t n, float* dst) { std::memcpy(dst, src, n * sizeof(float)); }
void widen(const uint16_t* src, size_t n, float* dst) {
  size_t i = 0;
#if defined(__AVX2__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load8_bf16(src + i));
#endif
  for (; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

}  // namespace DECODELAB_ISA
}  // namespace decodelab
