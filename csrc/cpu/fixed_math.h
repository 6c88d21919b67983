// Float arithmetic in one fixed order, the same bits on every instruction set: sums over 16 lanes
// added up in one tree, and exp / tanh from one polynomial. The glue between the integer products
// (norms, RoPE, activations, attention) uses these so that a layer's input is rounded to integers
// from the same values at every level. The kernels are compiled with -ffp-contract=off
// (CMakeLists.txt): a multiply-add the compiler fused on the levels with FMA would differ in the
// last bit from the plain level's; where a sum wants FMA it says so (fixed::fma), the same on
// every level. The compiler vectorises the lane loops at its own width (4, 8 or 16 floats), which
// keeps every lane's sum in the same order.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "cpu/isa.h"

namespace decodelab {
namespace DECODELAB_ISA {
namespace fixed {

constexpr int kLanes = 16;

// The sum of 16 lanes: lane l plus lane l + 8, then l + 4, l + 2, l + 1 (hsum512's order).
inline float tree16(const float* a) {
  float t[8], u[4];
  for (int l = 0; l < 8; ++l) t[l] = a[l] + a[l + 8];
  for (int l = 0; l < 4; ++l) u[l] = t[l] + t[l + 4];
  return (u[0] + u[2]) + (u[1] + u[3]);
}

inline float widen(float x) { return x; }
inline float widen(uint16_t b) {  // bf16 bits
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline float widen(int8_t x) { return static_cast<float>(x); }

// sum_i a[i] b[i]: element i into lane i % 16 in index order (a product, then an add), then tree16.
inline float dot(const float* a, const float* b, int n) {
  float acc[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = acc[l] + a[i + l] * b[i + l];
  for (int l = 0; i + l < n; ++l) acc[l] = acc[l] + a[i + l] * b[i + l];
  return tree16(acc);
}

// a * b + c rounded once: the instruction where the level has FMA (AVX2 and up), else the C
// library's fmaf (exact, and slow: attention on the plain x86-64 level pays for it).
inline float fma(float a, float b, float c) {
#if defined(__FMA__)
  return __builtin_fmaf(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// dot() with each lane's products added by fma: attention's scores, half the instructions of a
// multiply and an add where the level has FMA.
inline float dot_fma(const float* a, const float* b, int n) {
  float acc[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = fma(a[i + l], b[i + l], acc[l]);
  for (int l = 0; i + l < n; ++l) acc[l] = fma(a[i + l], b[i + l], acc[l]);
  return tree16(acc);
}

// sum_i a[i] and sum_i a[i]^2, lane by lane as dot().
inline float sum(const float* a, int n) {
  float acc[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = acc[l] + a[i + l];
  for (int l = 0; i + l < n; ++l) acc[l] = acc[l] + a[i + l];
  return tree16(acc);
}
inline float sum_squares(const float* a, int n) { return dot(a, a, n); }
// sum_i (a[i] - c)^2.
inline float sum_squares_about(const float* a, float c, int n) {
  float acc[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float d = a[i + l] - c;
      acc[l] = acc[l] + d * d;
    }
  for (int l = 0; i + l < n; ++l) {
    const float d = a[i + l] - c;
    acc[l] = acc[l] + d * d;
  }
  return tree16(acc);
}

inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// exp(x) within 2 ulp: x = n ln2 + r with |r| <= ln2 / 2, a degree-7 polynomial for e^r (Cephes'
// expf), times 2^n as two powers of two so that n up to 128 does not overflow the exponent field.
// Below -87.33 (under FLT_MIN) it gives 0, above ln(FLT_MAX) inf; NaN stays NaN. Branch free, so
// the lane loops that call it vectorise.
inline float exp(float x) {
  constexpr float kLo = -87.3365447505531f, kHi = 88.7228391116729f;
  const bool nan = x != x;
  float xc = nan ? 0.0f : x;
  xc = xc < kLo ? kLo : xc;
  xc = xc > kHi ? kHi : xc;
  // n = x / ln 2 to the nearest integer: adding and taking away 1.5 * 2^23 rounds in the default mode.
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  // r = x - n ln2, ln2 in two parts: n times the first (few bits) is exact.
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = (p * (r * r) + r) + 1.0f;
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t n1 = ni / 2, n2 = ni - n1;  // each in [-63, 64]
  float out = (y * from_bits(static_cast<uint32_t>(n1 + 127) << 23)) * from_bits(static_cast<uint32_t>(n2 + 127) << 23);
  out = x < kLo ? 0.0f : out;
  out = x > kHi ? std::numeric_limits<float>::infinity() : out;
  return nan ? x : out;
}

// tanh(x): an odd polynomial below |x| = 0.625 (Cephes' tanhf), 1 - 2 / (e^{2|x|} + 1) above.
inline float tanh(float x) {
  const float ax = x < 0.0f ? -x : x;
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = (p * z) * x + x;
  const float big = 1.0f - 2.0f / (exp(2.0f * ax) + 1.0f);
  const float signed_big = x < 0.0f ? -big : big;
  return ax < 0.625f ? small : (x != x ? x : signed_big);
}

}  // namespace fixed
}  // namespace DECODELAB_ISA
}  // namespace decodelab
