// 4-bit weights (WeightType::I4): per output row, blocks of 32 inputs, each 16 bytes of values
// 0..15 (the low nibbles are values 0-15, the high ones 16-31, as GGUF's Q4_1) with a float step
// and minimum: w = step q + min. Activations are rounded to int8 per block of 32 (scale
// max|x| / 127, as llama.cpp's Q8_1), so a block's dot product is
//   step dx sum(q xq) + min dx sum(xq),
// the integer sums exact; the float sum runs over the blocks in order, the same for every row count.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "cpu/linear/kernels.h"

namespace decodelab {
namespace DECODELAB_ISA {

void quantize_q8_blocks(const float* x, int T, int in, Q8Blocks& out) {
  const int nb = (in + kI4Block - 1) / kI4Block;
  out.blocks = nb;
  out.q.assign(static_cast<size_t>(T) * nb * kI4Block, 0);
  out.d.resize(static_cast<size_t>(T) * nb);
  out.s.resize(static_cast<size_t>(T) * nb);
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < nb; ++b) {
      const float* xs = x + static_cast<size_t>(t) * in + b * kI4Block;
      const int n = std::min(kI4Block, in - b * kI4Block);
      float amax = 0.0f;
      for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(xs[i]));
      const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
      int8_t* q = out.q.data() + (static_cast<size_t>(t) * nb + b) * kI4Block;
      int sum = 0;
      for (int i = 0; i < n; ++i) {
        q[i] = static_cast<int8_t>(std::lrint(xs[i] * id));
        sum += q[i];
      }
      out.d[static_cast<size_t>(t) * nb + b] = d;
      out.s[static_cast<size_t>(t) * nb + b] = d * static_cast<float>(sum);
    }
}

// The integer sum of one block: 32 values q (16 bytes of nibbles) times 32 int8 activations.
static inline int block_dot(const uint8_t* w, const int8_t* x) {
  int sum = 0;
  for (int i = 0; i < 16; ++i) sum += (w[i] & 0x0F) * x[i] + (w[i] >> 4) * x[i + 16];
  return sum;
}

void q4_group(const Q8Blocks& xb, int T, const Linear& L, int g, float* y) {
  const int nb = xb.blocks, o0 = 4 * g, nr = std::min(4, L.out - o0);
  // The group's four rows (a short last group repeats its last row, stored once): each activation
  // block is loaded once for all four, and four independent sums hide the FMA latency.
  const uint8_t* w[4];
  const float* step[4];
  const float* mn[4];
  for (int r = 0; r < 4; ++r) {
    const size_t o = static_cast<size_t>(o0 + std::min(r, nr - 1));
    w[r] = L.w_i4 + o * nb * 16;
    step[r] = L.scales + o * nb;
    mn[r] = L.mins + o * nb;
  }
  for (int t = 0; t < T; ++t) {
    const int8_t* x = xb.q.data() + static_cast<size_t>(t) * nb * kI4Block;
    const float* dx = xb.d.data() + static_cast<size_t>(t) * nb;
    const float* sx = xb.s.data() + static_cast<size_t>(t) * nb;
    float acc[4];
#if defined(__AVX2__) && defined(__FMA__)
    const __m256i low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 v[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int b = 0; b < nb; ++b) {
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + kI4Block * b));
      const float db = dx[b];
      for (int r = 0; r < 4; ++r) {
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[r] + 16 * b));
        const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low);
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, xq), ones);  // u8 x s8, at most 3810 a pair
        v[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(step[r][b] * db), v[r]);
      }
    }
    for (int r = 0; r < 4; ++r) {
      __m128 h = _mm_add_ps(_mm256_castps256_ps128(v[r]), _mm256_extractf128_ps(v[r], 1));
      h = _mm_add_ps(h, _mm_movehl_ps(h, h));
      h = _mm_add_ss(h, _mm_movehdup_ps(h));
      acc[r] = _mm_cvtss_f32(h);
    }
#else
    for (int r = 0; r < 4; ++r) {
      acc[r] = 0.0f;
      for (int b = 0; b < nb; ++b)
        acc[r] += step[r][b] * dx[b] * static_cast<float>(block_dot(w[r] + 16 * b, x + kI4Block * b));
    }
#endif
    for (int r = 0; r < nr; ++r) {
      float m = 0.0f;
      for (int b = 0; b < nb; ++b) m += mn[r][b] * sx[b];
      y[static_cast<size_t>(t) * L.out + o0 + r] = acc[r] + m;
    }
  }
}

}  // namespace DECODELAB_ISA
}  // namespace decodelab
