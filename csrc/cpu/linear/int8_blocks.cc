// 8-bit block weights (WeightType::I8Blocks) at every row count: w = step q + min with int8 codes
// q, a step per group of 32 or 16 inputs and a minimum per 32 where the format has one, in the
// panels of layout.h; activations as I4's (int8 per block of 32, int4.cc), so a group's product is
//   (step dx) sum(q xq)   and a block's minimum adds   min (dx sum(xq)),
// the integer sums exact and the fp32 sums over groups and blocks in order, for any row count.
// 5-bit layers (I5Blocks) keep unsigned codes u = q + offset in 5 bits and reach the same integer
// sum(q xq) as sum(u xq) - offset sum(xq), so the same results as these layers in 8 bits.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/linear/block_tiles.h"
#include "cpu/linear/kernels.h"
#include "decodelab/f16.h"

namespace decodelab {
namespace DECODELAB_ISA {

namespace {

// How a layer keeps its steps: fp32, halves (Linear::steps16, minima likewise), or Q6_K's codes
// (Linear::k_sc8, step = d sc, an exact product in fp32, so the same values).
enum class Steps { F32, Half, Q6K };

// Steps of group g of block b (rows h * 8 .. h * 8 + 7, or row r) and minima of block b.
template <Steps K, int G>
struct GroupSteps {
  const float *st = nullptr, *mn = nullptr;
  const uint16_t *st16 = nullptr, *mn16 = nullptr, *d = nullptr;
  const int8_t* sc = nullptr;

  GroupSteps(const Linear& L, int p, int nb) {
    const size_t s0 = static_cast<size_t>(p) * nb * kPanel;
    if constexpr (K == Steps::F32) st = L.scales + s0 * G, mn = L.mins ? L.mins + s0 : nullptr;
    if constexpr (K == Steps::Half) st16 = L.steps16 + s0 * G, mn16 = L.mins16 ? L.mins16 + s0 : nullptr;
    if constexpr (K == Steps::Q6K) sc = L.k_sc8 + s0 * G, d = L.k_d + s0 / 8;
  }
  bool has_min() const { return mn != nullptr || mn16 != nullptr; }
  float step(int b, int g, int r) const {
    const size_t i = (static_cast<size_t>(b) * G + g) * kPanel + r;
    if constexpr (K == Steps::F32) return st[i];
    if constexpr (K == Steps::Half) return f16_to_f32(st16[i]);
    return f16_to_f32(d[static_cast<size_t>(b / 8) * kPanel + r]) * static_cast<float>(sc[i]);
  }
  float min(int b, int r) const {
    const size_t i = static_cast<size_t>(b) * kPanel + r;
    return mn ? mn[i] : f16_to_f32(mn16[i]);
  }
#if defined(__AVX2__) && defined(__FMA__)
  static __m256 halves8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  __m256 step8(int b, int g, int h) const {
    const size_t i = (static_cast<size_t>(b) * G + g) * kPanel + 8 * h;
    if constexpr (K == Steps::F32) return _mm256_loadu_ps(st + i);
    if constexpr (K == Steps::Half) return halves8(st16 + i);
    const __m256 codes = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + i))));
    return _mm256_mul_ps(halves8(d + static_cast<size_t>(b / 8) * kPanel + 8 * h), codes);
  }
  __m256 min8(int b, int h) const {
    const size_t i = static_cast<size_t>(b) * kPanel + 8 * h;
    return mn ? _mm256_loadu_ps(mn + i) : halves8(mn16 + i);
  }
#endif
};

// Whether a tile of NT rows takes the codes as offset unsigned bytes (q + 128, corrected by
// 128 sum(x) per group) rather than |q| against x with q's sign: one operation per product fewer,
// for VNNI, whose sums do not saturate. A single row (decode) reads weights faster the other way.
template <int NT>
constexpr bool kOffsetCodes =
#if defined(DECODELAB_VNNI512)
    NT >= 2;
#else
    false;
#endif

#if defined(__AVX2__) && defined(__FMA__)
// acc plus group g of block b: each tile row's int32 sums s, less `offset` times the row's sum of x
// over the group (codes held as q + offset), times the group's steps and the row's scale dx.
template <int NT, int G, Steps K>
static inline void add_group(__m256i (&s)[NT][2], int offset, const GroupSteps<K, G>& steps, const Q8Blocks& xb,
                             int t0, int b, int g, __m256 (&acc)[NT][2]) {
  const __m256 st[2] = {steps.step8(b, g, 0), steps.step8(b, g, 1)};
  for (int t = 0; t < NT; ++t) {
    const size_t xi = static_cast<size_t>(t0 + t) * xb.blocks + b;
    if (offset) {
      const int32_t* h = xb.sum16.data() + 2 * xi;
      const __m256i off = _mm256_set1_epi32(offset * (G == 1 ? h[0] + h[1] : h[g]));
      s[t][0] = _mm256_sub_epi32(s[t][0], off);
      s[t][1] = _mm256_sub_epi32(s[t][1], off);
    }
    const __m256 dx = _mm256_set1_ps(xb.d[xi]);
    for (int h = 0; h < 2; ++h)
      acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t][h]), _mm256_mul_ps(st[h], dx), acc[t][h]);
  }
}
#endif

// Panel p's outputs for rows t0 .. t0 + NT, its 8-bit codes at w (the layer's, or a 5-bit
// panel's unpacked).
template <int NT, int G, Steps K>
void i8b_tile(const Q8Blocks& xb, int t0, const Linear& L, int p, const int8_t* w, float* y) {
  const int nb = xb.blocks;
  const GroupSteps<K, G> steps(L, p, nb);
  const bool mins = steps.has_min();
  alignas(32) float f[NT][kPanel];
#if defined(__AVX2__) && defined(__FMA__)
  __m256 acc[NT][2];
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  for (int b = 0; b < nb; ++b) {
    const int8_t* wb = w + static_cast<size_t>(b) * kI8BlockBytes;
    for (int l = 0; l < kI8BlockBytes; l += 64) _mm_prefetch(reinterpret_cast<const char*>(wb) + 4096 + l, _MM_HINT_T0);
    const int8_t* xq = xb.q.data() + (static_cast<size_t>(t0) * nb + b) * kI4Block;
    for (int g = 0; g < G; ++g) {
      __m256i s[NT][2];
      for (int t = 0; t < NT; ++t) s[t][0] = s[t][1] = _mm256_setzero_si256();
      constexpr int kSteps = kI4Block / 4 / G;  // steps of 4 inputs per group
      for (int k = g * kSteps; k < (g + 1) * kSteps; ++k) {
        const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 64 * k));
        const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 64 * k + 32));
        if constexpr (kOffsetCodes<NT>) {
          // vpdpbusd sums in int32 without saturating: the codes as unsigned bytes q + 128 on the
          // left, x on the right, and 128 sum(x) taken off once per group below.
          const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
          const __m256i a0 = _mm256_xor_si256(w0, bias), a1 = _mm256_xor_si256(w1, bias);
          for (int t = 0; t < NT; ++t) {
            int32_t quad;
            std::memcpy(&quad, xq + static_cast<size_t>(t) * nb * kI4Block + 4 * k, 4);
            const __m256i xv = _mm256_set1_epi32(quad);
            s[t][0] = add_quad_products(s[t][0], a0, xv);
            s[t][1] = add_quad_products(s[t][1], a1, xv);
          }
        } else {
          // The products take unsigned bytes on their left: |w| there and x with w's sign on the
          // right (a pmaddubsw pair at most 2 x 128 x 127), summed in int32 per step.
          const __m256i a0 = _mm256_abs_epi8(w0), a1 = _mm256_abs_epi8(w1);
          for (int t = 0; t < NT; ++t) {
            int32_t quad;
            std::memcpy(&quad, xq + static_cast<size_t>(t) * nb * kI4Block + 4 * k, 4);
            const __m256i xv = _mm256_set1_epi32(quad);
            s[t][0] = add_quad_products(s[t][0], a0, _mm256_sign_epi8(xv, w0));
            s[t][1] = add_quad_products(s[t][1], a1, _mm256_sign_epi8(xv, w1));
          }
        }
      }
      add_group<NT>(s, kOffsetCodes<NT> ? 128 : 0, steps, xb, t0, b, g, acc);
    }
    if (mins) add_minima<NT>({steps.min8(b, 0), steps.min8(b, 1)}, xb, t0, b, acc);
  }
  store_acc<NT>(acc, f);
#else
  for (int t = 0; t < NT; ++t) std::fill(f[t], f[t] + kPanel, 0.0f);
  for (int b = 0; b < nb; ++b) {
    const int8_t* wb = w + static_cast<size_t>(b) * kI8BlockBytes;
    for (int t = 0; t < NT; ++t) {
      const size_t xi = static_cast<size_t>(t0 + t) * nb + b;
      const int8_t* xq = xb.q.data() + xi * kI4Block;
      for (int r = 0; r < kPanel; ++r) {
        for (int g = 0; g < G; ++g) {
          int32_t s = 0;
          for (int j = g * kI4Block / G; j < (g + 1) * kI4Block / G; ++j) s += wb[i8b_byte(r, j)] * xq[j];
          const float stdx = steps.step(b, g, r) * xb.d[xi];
          f[t][r] = std::fma(static_cast<float>(s), stdx, f[t][r]);
        }
        if (mins) f[t][r] = std::fma(steps.min(b, r), xb.s[xi], f[t][r]);
      }
    }
  }
#endif
  store_tile<NT>(f, t0, L, p, y);
}

#if defined(__AVX2__) && defined(__FMA__)
// The codes of one step's half: `codes` plus `value` (16 for bit 4, 32 for bit 5) where bit i of
// `bits` is set.
static inline __m256i with_high_bits(__m256i codes, uint32_t bits, int value) {
#if defined(DECODELAB_AVX512)
  return _mm256_mask_add_epi8(codes, static_cast<__mmask32>(bits), codes, _mm256_set1_epi8(static_cast<char>(value)));
#else
  // Byte i takes the byte of `bits` holding bit i, then tests that bit.
  const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), pick), bit);
  return _mm256_or_si256(codes, _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(static_cast<char>(value))));
#endif
}

// Step k's unsigned codes of a 5- or 6-bit block wb (PLANES higher-bit planes): rows 0-7 in lo,
// rows 8-15 in hi.
template <int PLANES>
static inline void high_codes(const uint8_t* wb, int k, __m256i& lo, __m256i& hi) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 32 * k));
  uint32_t bits[2 * PLANES];
  std::memcpy(bits, wb + kI4BlockBytes + 8 * PLANES * k, 8 * PLANES);
  lo = with_high_bits(_mm256_and_si256(raw, low), bits[0], 16);
  hi = with_high_bits(_mm256_and_si256(_mm256_srli_epi16(raw, 4), low), bits[1], 16);
  if constexpr (PLANES == 2) {
    lo = with_high_bits(lo, bits[2], 32);
    hi = with_high_bits(hi, bits[3], 32);
  }
}
#endif

// Panel p of an I5Blocks layer (nb blocks) as I8Blocks codes q = u - offset at w (nb * kI8BlockBytes):
// each step's unpacked halves are the 8-bit layout's rows 0-7 and 8-15 of that step.
template <int PLANES>
static void high_panel_as_i8(const Linear& L, int p, int nb, int8_t* w) {
  const int block_bytes = i5_block_bytes(PLANES);
  const uint8_t* src = L.w_i5 + static_cast<size_t>(p) * nb * block_bytes;
  for (int b = 0; b < nb; ++b) {
    const uint8_t* wb = src + static_cast<size_t>(b) * block_bytes;
    int8_t* out = w + static_cast<size_t>(b) * kI8BlockBytes;
#if defined(__AVX2__) && defined(__FMA__)
    const __m256i off = _mm256_set1_epi8(static_cast<char>(L.i5_offset));
    for (int k = 0; k < kI4Block / 4; ++k) {
      __m256i lo, hi;
      high_codes<PLANES>(wb, k, lo, hi);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 64 * k), _mm256_sub_epi8(lo, off));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 64 * k + 32), _mm256_sub_epi8(hi, off));
    }
#else
    for (int r = 0; r < kPanel; ++r)
      for (int j = 0; j < kI4Block; ++j) {
        const int bit = i5_bit(r, j);
        int u = (wb[i4_byte(r, j)] >> i4_shift(r)) & 0x0F;
        for (int h = 0; h < PLANES; ++h)
          u |= ((wb[kI4BlockBytes + ((j / 4) * PLANES + h) * 8 + bit / 8] >> (bit % 8)) & 1) << (4 + h);
        out[i8b_byte(r, j)] = static_cast<int8_t>(u - L.i5_offset);
      }
#endif
  }
}

void i5_panel_as_i8(const Linear& L, int p, int nb, int8_t* w) {
  if (L.i5_planes == 2) high_panel_as_i8<2>(L, p, nb, w);
  else high_panel_as_i8<1>(L, p, nb, w);
}

// As i8b_tile, for I5Blocks: a step's 32 bytes of low nibbles (rows 0-7, then 8-15 shifted down)
// with the higher bits added, unsigned codes against x (no saturation: a pmaddubsw pair is at most
// 2 x 63 x 128), the offset taken off as offset sum(x) per group.
template <int NT, int G, Steps K, int PLANES>
void i5_tile(const Q8Blocks& xb, int t0, const Linear& L, int p, float* y) {
  const int nb = xb.blocks;
#if defined(__AVX2__) && defined(__FMA__)
  constexpr int kBlockBytes = kI4BlockBytes + kI4Block / 4 * 8 * PLANES;
  const uint8_t* w = L.w_i5 + static_cast<size_t>(p) * nb * kBlockBytes;
  const int offset = L.i5_offset;
  const GroupSteps<K, G> steps(L, p, nb);
  const bool mins = steps.has_min();
  alignas(32) float f[NT][kPanel];
  __m256 acc[NT][2];
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  for (int b = 0; b < nb; ++b) {
    const uint8_t* wb = w + static_cast<size_t>(b) * kBlockBytes;
    for (int l = 0; l < kBlockBytes; l += 64) _mm_prefetch(reinterpret_cast<const char*>(wb) + 8 * kBlockBytes + l, _MM_HINT_T0);
    const int8_t* xq = xb.q.data() + (static_cast<size_t>(t0) * nb + b) * kI4Block;
    for (int g = 0; g < G; ++g) {
      __m256i s[NT][2];
      for (int t = 0; t < NT; ++t) s[t][0] = s[t][1] = _mm256_setzero_si256();
      constexpr int kSteps = kI4Block / 4 / G;  // steps of 4 inputs per group
      for (int k = g * kSteps; k < (g + 1) * kSteps; ++k) {
        __m256i lo, hi;
        high_codes<PLANES>(wb, k, lo, hi);
        for (int t = 0; t < NT; ++t) {
          int32_t quad;
          std::memcpy(&quad, xq + static_cast<size_t>(t) * nb * kI4Block + 4 * k, 4);
          const __m256i xv = _mm256_set1_epi32(quad);
          s[t][0] = add_quad_products(s[t][0], lo, xv);
          s[t][1] = add_quad_products(s[t][1], hi, xv);
        }
      }
      add_group<NT>(s, offset, steps, xb, t0, b, g, acc);
    }
    if (mins) add_minima<NT>({steps.min8(b, 0), steps.min8(b, 1)}, xb, t0, b, acc);
  }
  store_acc<NT>(acc, f);
  store_tile<NT>(f, t0, L, p, y);
#else
  // Without vectors: the panel as 8-bit codes, then the 8-bit tile (the same integers).
  thread_local std::vector<int8_t> codes;
  codes.resize(static_cast<size_t>(nb) * kI8BlockBytes);
  i5_panel_as_i8(L, p, nb, codes.data());
  i8b_tile<NT, G, K>(xb, t0, L, p, codes.data(), y);
#endif
}

// The 8-bit tile of groups and steps K on codes w, or (w null) the 5/6-bit tile of L's planes.
template <int NT, int G, Steps K>
void block_tile(const Q8Blocks& xb, int t0, const Linear& L, int p, const int8_t* w, float* y) {
  if (w) i8b_tile<NT, G, K>(xb, t0, L, p, w, y);
  else if (L.i5_planes == 2) i5_tile<NT, G, K, 2>(xb, t0, L, p, y);
  else i5_tile<NT, G, K, 1>(xb, t0, L, p, y);
}

template <int NT>
void any_block_tile(const Q8Blocks& xb, int t0, const Linear& L, int p, const int8_t* w, float* y) {
  if (L.i8b_groups == 2) {
    if (L.k_sc8) block_tile<NT, 2, Steps::Q6K>(xb, t0, L, p, w, y);
    else if (L.steps16) block_tile<NT, 2, Steps::Half>(xb, t0, L, p, w, y);
    else block_tile<NT, 2, Steps::F32>(xb, t0, L, p, w, y);
  } else {
    if (L.steps16) block_tile<NT, 1, Steps::Half>(xb, t0, L, p, w, y);
    else block_tile<NT, 1, Steps::F32>(xb, t0, L, p, w, y);
  }
}

}  // namespace

void i8b_panel_rows(const Q8Blocks& xb, int t_lo, int t_hi, const Linear& L, int p, float* y) {
  const int nb = xb.blocks;
  const int8_t* w = L.w_i8b ? L.w_i8b + static_cast<size_t>(p) * nb * kI8BlockBytes : nullptr;
  if (L.type == WeightType::I5Blocks && t_hi - t_lo > kBlockTile) {
    // Several tiles (a prompt): the panel unpacked once to 8-bit codes, then the 8-bit tiles,
    // rather than each tile unpacking it again. The same integers, so the same results.
    thread_local std::vector<int8_t> codes;
    codes.resize(static_cast<size_t>(nb) * kI8BlockBytes);
    i5_panel_as_i8(L, p, nb, codes.data());
    w = codes.data();
  }
  // w null: an I5Blocks layer's own tiles (a decode step, or one tile).
  for_each_tile(t_lo, t_hi, [&](auto nt, int t0) { any_block_tile<decltype(nt)::value>(xb, t0, L, p, w, y); });
}

}  // namespace DECODELAB_ISA
}  // namespace decodelab
