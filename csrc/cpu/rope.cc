// Rotary position embedding, from precomputed cos / sin tables; compiled without contracted
// multiply-adds (CMakeLists.txt), so every level rounds x0 c - x1 s the same way.
#include <cstddef>

#include "cpu/kernels.h"

namespace decodelab {
namespace DECODELAB_ISA {

void rope(float* x, int T, int n_heads, int head_dim, int p0, const float* cos_table,
          const float* sin_table, bool interleaved, int rot_dim) {
  const int half = (rot_dim > 0 ? rot_dim : head_dim) / 2;
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

}  // namespace DECODELAB_ISA
}  // namespace decodelab
