// ggml's block formats, decoded as ggml-quants.c's reference dequantizers decode them: products
// and sums in fp32, in their order, so the values equal gguf.quants.dequantize to the bit.
#include "decodelab/gguf_blocks.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "decodelab/f16.h"

namespace decodelab {

namespace {

float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// Sub-block j's 6-bit scale and min of a Q4_K / Q5_K block (ggml's get_scale_min_k4).
void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace

const BlockFormat* find_block_format(const std::string& name) {
  for (const BlockFormat& f : kBlockFormats)
    if (name == f.name) return &f;
  return nullptr;
}

void dequantize_blocks(const BlockFormat& f, const uint8_t* src, size_t n, float* y) {
  const size_t nb = n / f.elems;
  for (size_t i = 0; i < nb; ++i, src += f.bytes, y += f.elems) {
    switch (f.type) {
      case BlockType::Q8_0: {
        const float d = half(src);
        for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(src[2 + j])) * d;
        break;
      }
      case BlockType::Q4_0: {
        const float d = half(src);
        for (int j = 0; j < 16; ++j) {
          y[j] = static_cast<float>((src[2 + j] & 0x0F) - 8) * d;
          y[j + 16] = static_cast<float>((src[2 + j] >> 4) - 8) * d;
        }
        break;
      }
      case BlockType::Q4_1: {
        const float d = half(src), m = half(src + 2);
        for (int j = 0; j < 16; ++j) {
          y[j] = static_cast<float>(src[4 + j] & 0x0F) * d + m;
          y[j + 16] = static_cast<float>(src[4 + j] >> 4) * d + m;
        }
        break;
      }
      case BlockType::Q5_0: {
        uint8_t q[32];
        uint16_t dh, mh;
        half_step_codes(f, src, 32, q, &dh, &mh);
        const float d = half(src);
        for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(q[j] - 16) * d;
        break;
      }
      case BlockType::Q5_1: {
        uint8_t q[32];
        uint16_t dh, mh;
        half_step_codes(f, src, 32, q, &dh, &mh);
        const float d = half(src), m = half(src + 2);
        for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(q[j]) * d + m;
        break;
      }
      case BlockType::Q4_K:
      case BlockType::Q5_K: {
        const bool five = f.type == BlockType::Q5_K;
        const float d = half(src), dmin = half(src + 2);
        const uint8_t* scales = src + 4;
        const uint8_t* qh = src + 16;
        const uint8_t* ql = src + (five ? 48 : 16);
        float* out = y;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0, is = 0; j < 256; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
          int sc, m;
          scale_min_k4(is, scales, &sc, &m);
          const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
          scale_min_k4(is + 1, scales, &sc, &m);
          const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
          for (int l = 0; l < 32; ++l)
            *out++ = d1 * static_cast<float>((ql[l] & 0x0F) + (five && (qh[l] & u1) ? 16 : 0)) - m1;
          for (int l = 0; l < 32; ++l)
            *out++ = d2 * static_cast<float>((ql[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0)) - m2;
        }
        break;
      }
      case BlockType::Q6_K: {  // value o: d sc[o / 16] (u - 32)
        uint8_t u[256];
        q6k_unsigned(src, 256, u);
        const int8_t* sc = reinterpret_cast<const int8_t*>(src + 192);
        const float d = half(src + 208);
        for (int o = 0; o < 256; ++o) y[o] = d * static_cast<float>(sc[o / 16]) * static_cast<float>(u[o] - 32);
        break;
      }
    }
  }
}

void q4_sub_blocks(const BlockFormat& f, const uint8_t* src, size_t n, uint8_t* q, float* step, float* min) {
  if (f.type == BlockType::Q4_K) {  // 8 sub-blocks of 32, in the order dequantize_blocks writes them
    q4k_nibbles(src, n, q);
    for (size_t i = 0; i < n / 256; ++i, src += f.bytes) {
      const float d = half(src), dmin = half(src + 2);
      for (int j = 0; j < 8; ++j) {
        int sc, m;
        scale_min_k4(j, src + 4, &sc, &m);
        *step++ = d * static_cast<float>(sc);
        *min++ = -(dmin * static_cast<float>(m));
      }
    }
    return;
  }
  std::vector<uint16_t> d(n / 32), m(n / 32);  // Q4_0, Q4_1
  half_step_codes(f, src, n, q, d.data(), m.data());
  for (size_t i = 0; i < n / 32; ++i) {
    step[i] = f16_to_f32(d[i]);
    min[i] = f.type == BlockType::Q4_0 ? -8.0f * step[i] : f16_to_f32(m[i]);
  }
}

void q4k_codes(const uint8_t* src, size_t n, uint8_t* sc, uint8_t* m, uint16_t* d, uint16_t* neg_dmin) {
  for (size_t i = 0; i < n / 256; ++i, src += 144) {
    uint16_t dh, mh;
    std::memcpy(&dh, src, 2);
    std::memcpy(&mh, src + 2, 2);
    *d++ = dh;
    *neg_dmin++ = static_cast<uint16_t>(mh ^ 0x8000u);  // -dmin: the sign bit flipped, exactly
    for (int j = 0; j < 8; ++j) {
      int s, mn;
      scale_min_k4(j, src + 4, &s, &mn);
      *sc++ = static_cast<uint8_t>(s);
      *m++ = static_cast<uint8_t>(mn);
    }
  }
}

void q4k_nibbles(const uint8_t* src, size_t n, uint8_t* u) {
  for (size_t i = 0; i < n / 256; ++i, src += 144)
    for (int pair = 0; pair < 4; ++pair, u += 64) {  // 32 bytes: sub-block 2 pair low, 2 pair + 1 high
      const uint8_t* qs = src + 16 + 32 * pair;
      for (int l = 0; l < 32; ++l) u[l] = qs[l] & 0x0F;
      for (int l = 0; l < 32; ++l) u[32 + l] = qs[l] >> 4;
    }
}

void q6k_unsigned(const uint8_t* src, size_t n, uint8_t* u) {
  for (size_t i = 0; i < n / 256; ++i, src += 210) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    for (int n128 = 0; n128 < 2; ++n128, u += 128, ql += 64, qh += 32)
      for (int l = 0; l < 32; ++l) {  // the order q8_sub_blocks writes
        u[l] = static_cast<uint8_t>((ql[l] & 0x0F) | ((qh[l] & 3) << 4));
        u[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4));
        u[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
        u[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
      }
  }
}

void half_step_codes(const BlockFormat& f, const uint8_t* src, size_t n, uint8_t* u, uint16_t* d, uint16_t* m) {
  const bool with_min = f.type == BlockType::Q4_1 || f.type == BlockType::Q5_1;
  const bool five = f.bits == 5;
  for (size_t i = 0; i < n / 32; ++i, src += f.bytes, u += 32) {
    std::memcpy(d + i, src, 2);
    if (with_min) std::memcpy(m + i, src + 2, 2);
    const uint8_t* q = src + (with_min ? 4 : 2);
    uint32_t qh = 0;  // 5-bit formats: bit j is value j's fifth bit, before the nibbles
    if (five) std::memcpy(&qh, q, 4), q += 4;
    for (int j = 0; j < 16; ++j) {  // as five_bits and q4_sub_blocks
      u[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((qh >> j & 1) << 4));
      u[j + 16] = static_cast<uint8_t>((q[j] >> 4) | ((qh >> (j + 16) & 1) << 4));
    }
  }
}

int q8_group(const BlockFormat& f) { return f.type == BlockType::Q6_K ? 16 : 32; }

int narrow_planes(const BlockFormat& f) {
  if (f.type == BlockType::Q6_K) return 2;
  return f.bits == 5 && q8_group(f) == 32 ? 1 : 0;
}

bool q8_has_min(const BlockFormat& f) {
  return f.type == BlockType::Q4_1 || f.type == BlockType::Q5_1 || f.type == BlockType::Q4_K ||
         f.type == BlockType::Q5_K;
}

void q8_sub_blocks(const BlockFormat& f, const uint8_t* src, size_t n, int8_t* q, float* step, float* min) {
  const size_t nb = n / f.elems;
  if (f.bits == 4) {  // the 4-bit codes, Q4_0's centred so that it needs no minimum
    std::vector<uint8_t> u(n);
    std::vector<float> mn(n / 32);
    q4_sub_blocks(f, src, n, u.data(), step, mn.data());
    const bool centred = f.type == BlockType::Q4_0;
    for (size_t j = 0; j < n; ++j) q[j] = static_cast<int8_t>(centred ? u[j] - 8 : u[j]);
    if (!centred) std::copy(mn.begin(), mn.end(), min);
    return;
  }
  for (size_t i = 0; i < nb; ++i, src += f.bytes) {
    switch (f.type) {
      case BlockType::Q8_0:
        *step++ = half(src);
        std::memcpy(q, src + 2, 32);
        q += 32;
        break;
      case BlockType::Q5_0:
      case BlockType::Q5_1: {
        const bool one = f.type == BlockType::Q5_1;
        uint8_t v[32];
        uint16_t dh, mh;
        half_step_codes(f, src, 32, v, &dh, &mh);
        *step++ = f16_to_f32(dh);
        if (one) *min++ = f16_to_f32(mh);
        for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(one ? v[j] : v[j] - 16);
        q += 32;
        break;
      }
      case BlockType::Q5_K: {  // 8 sub-blocks of 32, in the order dequantize_blocks writes them
        const float d = half(src), dmin = half(src + 2);
        const uint8_t* qh = src + 16;
        const uint8_t* ql = src + 48;
        uint8_t u1 = 1, u2 = 2;
        for (int is = 0; is < 8; is += 2, ql += 32, u1 <<= 2, u2 <<= 2)
          for (int h = 0; h < 2; ++h) {
            int sc, m;
            scale_min_k4(is + h, src + 4, &sc, &m);
            *step++ = d * static_cast<float>(sc);
            *min++ = -(dmin * static_cast<float>(m));
            const uint8_t bit = h ? u2 : u1;
            for (int l = 0; l < 32; ++l)
              q[l] = static_cast<int8_t>((h ? ql[l] >> 4 : ql[l] & 0x0F) + ((qh[l] & bit) ? 16 : 0));
            q += 32;
          }
        break;
      }
      case BlockType::Q6_K: {  // 16 groups of 16 values, group g scaled by d sc[g]
        const int8_t* sc = reinterpret_cast<const int8_t*>(src + 192);
        const float d = half(src + 208);
        for (int g = 0; g < 16; ++g) step[g] = d * static_cast<float>(sc[g]);
        step += 16;
        uint8_t u[256];
        q6k_unsigned(src, 256, u);
        for (int j = 0; j < 256; ++j) q[j] = static_cast<int8_t>(u[j] - 32);
        q += 256;
        break;
      }
      default: break;
    }
  }
}

}  // namespace decodelab
