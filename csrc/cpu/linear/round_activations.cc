// Activation rows rounded per block of 256 values for the integer panel kernels: 16-bit fixed
// point against int8 weights, 7-bit integers against w8a8 weights (see rounded_rows.h).
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/linear/rounded_rows.h"
#include "cpu/simd_avx512.h"
#include "decodelab/parallel.h"

namespace decodelab {
namespace DECODELAB_ISA {

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
// full group of 16 rows moves 16 units at a time as a 16 x 16 transpose of 32-bit values, where
// 4-byte copies one by one showed in an int8 prompt's profile.
static void interleave_units(const char* src, size_t row_bytes, int w, int units, char* dst) {
  int u = 0;
#if defined(DECODELAB_AVX512)
  if (w == 16) {
    for (; u + 16 <= units; u += 16) {
      __m512i r[16], col[16];
      for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_si512(src + j * row_bytes + 4 * static_cast<size_t>(u));
      transpose16x16(r, col);
      char* d = dst + 64 * static_cast<size_t>(u);
      for (int c = 0; c < 16; ++c) _mm512_storeu_si512(d + 64 * c, col[c]);
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

void quantize_int16(const float* x, int T, int n, Int16Rows& v) {
  quantize_rows(x, T, n, aligned_stride(n), v, quantize_int16_row);
}

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

void quantize_u7(const float* x, int T, int n, Int8Rows& v) {
  quantize_rows(x, T, n, (n + 31) / 32 * 32, v, quantize_u7_row);
}

}  // namespace DECODELAB_ISA
}  // namespace decodelab
