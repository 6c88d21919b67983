// fp32 weights converted to the reduced-precision layouts (bf16 groups, int8, w8a8 and 4-bit panels), and
// views of a layer's output rows in place.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/linear/kernels.h"
#include "decodelab/bf16.h"

namespace decodelab {
namespace DECODELAB_ISA {

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

size_t quantized_size(const Linear& L, WeightType type) {
  switch (type) {
    case WeightType::BF16: return (L.out + 3) / 4 * bf16_group_elems(L) * sizeof(uint16_t);
    case WeightType::I8: return packed_size(L.out, L.in, kI8Step);
    case WeightType::I8A8: return packed_size(L.out, L.in, kA8Step);
    case WeightType::I4: return static_cast<size_t>(panel_count(L.out)) * i4_panel_bytes(L.in);
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
    const int G = L.type == WeightType::I8A8 ? kA8Step : kI8Step;
    view->w_i8 = L.w_i8 + static_cast<size_t>(first / kPanel) * kPanel * panel_steps(L.in, G) * G;
  }
  if (L.type == WeightType::I4) {  // steps and minima per panel and block
    const size_t per_panel = static_cast<size_t>(i4_blocks(L.in)) * kPanel;
    view->w_i4 = L.w_i4 + static_cast<size_t>(first / kPanel) * i4_panel_bytes(L.in);
    view->scales = L.scales + first / kPanel * per_panel;
    view->mins = L.mins + first / kPanel * per_panel;
  } else if (L.scales) {
    view->scales = L.scales + first;
  }
  if (L.wsums) view->wsums = L.wsums + static_cast<size_t>(first / kPanel) * ((L.in + kI8Block - 1) / kI8Block) * kPanel;
  return true;
}

void quantize_linear(Linear& L, WeightType type, QuantizedWeights& q, uint8_t* dst) {
  if (type == WeightType::F32) return;
  const size_t n = static_cast<size_t>(L.out) * L.in;
  q.bytes = DECODELAB_ISA::quantized_size(L, type);
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
  } else if (type == WeightType::I4) {
    // Per block of 32: min and max of its values, 15 steps between them, each value the nearest
    // step (GGUF's Q4_1 rule; a dequantized Q4_1 block comes back with its own values). Steps
    // first, then minima, in one vector; padding rows and blocks stay zero.
    const int nb = i4_blocks(L.in), panels = panel_count(L.out);
    const size_t per = static_cast<size_t>(panels) * nb * kPanel;
    q.scales.assign(2 * per, 0.0f);
    float* steps = q.scales.data();
    float* mins = steps + per;
    std::memset(dst, 0, q.bytes);
#pragma omp parallel for schedule(static)
    for (int p = 0; p < panels; ++p)
      for (int r = 0; r < kPanel && p * kPanel + r < L.out; ++r) {
        const int o = p * kPanel + r;
        for (int b = 0; b < nb; ++b) {
          const int i0 = b * kI4Block, i1 = std::min(L.in, i0 + kI4Block);
          float lo = at(o, i0), hi = lo;
          for (int i = i0; i < i1; ++i) lo = std::min(lo, at(o, i)), hi = std::max(hi, at(o, i));
          const float d = (hi - lo) / 15.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
          const size_t k = (static_cast<size_t>(p) * nb + b) * kPanel + r;
          steps[k] = d;
          mins[k] = lo;
          uint8_t* blk = dst + (static_cast<size_t>(p) * nb + b) * kI4BlockBytes;
          for (int i = i0; i < i1; ++i) {
            const int v = std::min(15, static_cast<int>((at(o, i) - lo) * id + 0.5f));
            blk[i4_byte(r, i - i0)] |= static_cast<uint8_t>(v << i4_shift(r));
          }
        }
      }
    L.w_i4 = dst;
    L.scales = steps;
    L.mins = mins;
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
      pack_panels(rows.data(), L.out, L.in, kA8Step, reinterpret_cast<int8_t*>(dst), &q.wsums);
      L.wsums = q.wsums.data();
    } else {
      pack_panels(rows.data(), L.out, L.in, kI8Step, reinterpret_cast<int8_t*>(dst), nullptr);
    }
    L.w_i8 = reinterpret_cast<const int8_t*>(dst);
    L.scales = q.scales.data();
  }
  L.type = type;
  L.in_major = false;
  L.w = nullptr;  // the fp32 weights are no longer read
}

}  // namespace DECODELAB_ISA
}  // namespace decodelab
