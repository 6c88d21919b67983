// fp32 weights converted to the reduced-precision layouts (bf16 groups, int8, w8a8 and 4-bit panels), a
// GGUF file's blocks packed as they are (I4, I8Blocks, I5Blocks), and views of a layer's output rows.
#include <immintrin.h>

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/linear/kernels.h"
#include "decodelab/bf16.h"
#include "decodelab/f16.h"
#include "decodelab/gguf_blocks.h"

namespace decodelab {
namespace DECODELAB_ISA {

// Panels per chunk of a packing loop: about eight chunks per thread, handed out as each thread is
// free, so that a thread slowed by first writes to fresh memory does not leave the others waiting
// at the end of every layer. A panel packs to the same bytes on any thread.
// Called inside the parallel region: the team's size.
static int pack_chunk(int panels) { return std::max(1, panels / (8 * omp_get_num_threads())); }

// One thread's source rows that are read and done with, handed to `done` in runs of at least
// kRows (so that a large layer costs a few hundred madvise calls, not one per panel), where the
// thread's next panels do not follow on (a new chunk of the loop), and at the end.
class DoneRows {
 public:
  explicit DoneRows(const RowsDone* done) : done_(done) {}
  DoneRows(const DoneRows&) = delete;
  DoneRows& operator=(const DoneRows&) = delete;
  ~DoneRows() { flush(); }
  void add(int o0, int n) {
    if (!done_) return;
    if (o0 != end_) flush(), begin_ = o0;
    end_ = o0 + n;
    if (end_ - begin_ >= kRows) flush();
  }

 private:
  static constexpr int kRows = 1024;
  void flush() {
    if (end_ > begin_) (*done_)(begin_, end_ - begin_);
    begin_ = end_;
  }
  const RowsDone* done_;
  int begin_ = 0, end_ = 0;
};

// The largest |x| of n values (0 for none; a NaN is passed over, as std::max passes it over).
static float max_abs(const float* x, int n) {
  float mx = 0.0f;
  int i = 0;
#if defined(__AVX2__)
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), m);  // NaN: m
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  for (float v : lanes) mx = std::max(mx, v);
#endif
  for (; i < n; ++i) mx = std::max(mx, std::fabs(x[i]));
  return mx;
}

// x / scale rounded to the nearest integer, ties to even (lrint in the default rounding mode), held
// to [-127, 127], for n values. Only a row of subnormal values (its scale rounded) or one holding a
// NaN or an infinity can fall outside; a cast alone would wrap 128 to -128.
static void round_codes(const float* x, int n, float scale, int8_t* q) {
  int i = 0;
#if defined(__AVX2__)
  const __m256 s = _mm256_set1_ps(scale);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  alignas(32) int32_t lanes[8];
  for (; i + 8 <= n; i += 8) {
    const __m256i v = _mm256_cvtps_epi32(_mm256_div_ps(_mm256_loadu_ps(x + i), s));  // NaN, overflow: INT_MIN
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_min_epi32(_mm256_max_epi32(v, lo), hi));
    for (int k = 0; k < 8; ++k) q[i + k] = static_cast<int8_t>(lanes[k]);
  }
#endif
  for (; i < n; ++i) {
    const float v = x[i] / scale;  // as the vector lanes: NaN and anything past int32 give INT_MIN
    const long r = v == v && std::fabs(v) < 2147483648.0f ? std::lrint(v) : std::numeric_limits<int32_t>::min();
    q[i] = static_cast<int8_t>(std::clamp(r, -127L, 127L));
  }
}

// Row r's codes into its panel: step s's G codes at panel[s * 16 G + r G ...], a step per move
// (G a constant: one load and store each), not a division per code.
template <int G>
static void place_codes(const int8_t* codes, int in, int r, int8_t* panel) {
  int i0 = 0;
  for (; i0 + G <= in; i0 += G) std::memcpy(panel + static_cast<size_t>(i0) * kPanel + r * G, codes + i0, G);
  for (int g = 0; i0 + g < in; ++g) panel[static_cast<size_t>(i0) * kPanel + r * G + g] = codes[i0 + g];
}

static size_t packed_size(int out, int in, int G) {
  return static_cast<size_t>(panel_count(out)) * kPanel * panel_steps(in, G) * G;
}

// Where a conversion of `bytes` goes: dst, or the store's own buffer; zeroed (padding stays zero)
// by all threads, so that the first touch of fresh pages, the costly part, is shared. A packing
// that writes every byte itself, on all threads, skips the zeroing (`zero` false).
static uint8_t* destination(QuantizedWeights& q, size_t bytes, uint8_t* dst, bool zero = true) {
  q.bytes = bytes;
  if (!dst) {
    q.own.resize(bytes);
    dst = q.own.data();
  }
  if (!zero) return dst;
  constexpr size_t kChunk = size_t(1) << 20;
  const long chunks = static_cast<long>((bytes + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (long c = 0; c < chunks; ++c) {
    const size_t at = static_cast<size_t>(c) * kChunk;
    std::memset(dst + at, 0, std::min(kChunk, bytes - at));
  }
  return dst;
}

// An I4 layer's steps and minima (q.scales: `per` of each) rounded to halves, as GGUF's Q4_1 stores
// them, in half the bytes, where every one of them is a normal half or zero once rounded;
// otherwise they stay fp32 as they are.
static void keep_halves(Linear& L, QuantizedWeights& q, size_t per) {
  q.halves.resize(2 * per);
  bool ok = true;
  for (size_t i = 0; i < 2 * per && ok; ++i) {
    const float x = q.scales[i];
    const uint16_t h = f32_to_f16(x);
    const uint32_t e = (h >> 10) & 0x1fu;
    ok = x == 0.0f || (e != 0 && e != 0x1f);  // no overflow, and no loss to a subnormal
    q.halves[i] = h;
  }
  if (!ok) {
    std::vector<uint16_t>().swap(q.halves);
    return;
  }
  // Every minimum -8 steps (centred codes, as Q4_0's): the minima are not kept, the kernels form
  // them as -8 x step, the same values.
  bool centred = true;
  for (size_t i = 0; i < per && centred; ++i) centred = q.scales[per + i] == -8.0f * q.scales[i];
  if (centred) q.halves.resize(per);
  L.steps16 = q.halves.data();
  L.mins16 = centred ? nullptr : q.halves.data() + per;
  L.scales = L.mins = nullptr;
  std::vector<float>().swap(q.scales);
}

// A Q4_K layer's steps and minima as the file's codes (Linear::k_sc and the rest): per panel,
// block and row the 6-bit codes, per panel, super-block and row the halves d and -dmin; step = d sc
// and minimum = -dmin m, the products q4_sub_blocks forms, so the same values.
struct Q4KCodes {
  uint8_t *sc, *m;
  uint16_t *d, *nd;
  Q4KCodes(QuantizedWeights& q, size_t per) {
    q.codes.assign(2 * per, 0);
    q.halves.assign(2 * (per / 8), 0);
    sc = q.codes.data(), m = sc + per, d = q.halves.data(), nd = d + per / 8;
  }
  // Output row r of panel p (nb blocks), from the row's blocks; `scratch` holds nb + nb + 2 nb / 8.
  void put(const uint8_t* row, int nb, int p, int r, std::vector<uint8_t>& scratch) const {
    const int ns = nb / 8;
    scratch.resize(static_cast<size_t>(2) * nb + 4 * ns);
    uint8_t *rsc = scratch.data(), *rm = rsc + nb;
    uint16_t rd[64], rnd[64];  // a super-block per 256 inputs: rows up to 16,384 wide
    for (int s0 = 0; s0 < ns; s0 += 64) {
      const int n = std::min(64, ns - s0);
      q4k_codes(row + static_cast<size_t>(s0) * 144, static_cast<size_t>(n) * 256, rsc + 8 * s0, rm + 8 * s0, rd, rnd);
      for (int s = 0; s < n; ++s) {
        const size_t ks = (static_cast<size_t>(p) * ns + s0 + s) * kPanel + r;
        d[ks] = rd[s], nd[ks] = rnd[s];
      }
    }
    for (int b = 0; b < nb; ++b) {
      const size_t k = (static_cast<size_t>(p) * nb + b) * kPanel + r;
      sc[k] = rsc[b], m[k] = rm[b];
    }
  }
  void point(Linear& L) const { L.k_sc = sc, L.k_m = m, L.k_d = d, L.k_dmin = nd; }
};

// A Q6_K layer's steps as the file's signed 8-bit scales per panel, block, group of 16 and row
// and its half d per panel, super-block and row: step = d sc, as q8_sub_blocks forms it.
struct Q6KScales {
  int8_t* sc;
  uint16_t* d;
  Q6KScales(QuantizedWeights& q, size_t per) {
    q.codes.assign(2 * per, 0);  // two groups of 16 per block of 32
    q.halves.assign(per / 8, 0);
    sc = reinterpret_cast<int8_t*>(q.codes.data()), d = q.halves.data();
  }
  void put(const uint8_t* row, int nb, int p, int r) const {
    const int ns = nb / 8;
    for (int s = 0; s < ns; ++s) {
      const uint8_t* blk = row + static_cast<size_t>(s) * 210;  // Q6_K: ql[128] qh[64] sc[16] d
      std::memcpy(&d[(static_cast<size_t>(p) * ns + s) * kPanel + r], blk + 208, 2);
      for (int g = 0; g < 16; ++g)  // group g of 16: block s * 8 + g / 2, its group g % 2
        sc[((static_cast<size_t>(p) * nb + s * 8 + g / 2) * 2 + g % 2) * kPanel + r] = static_cast<int8_t>(blk[192 + g]);
    }
  }
  void point(Linear& L) const { L.k_sc8 = sc, L.k_d = d; }
};

// A Q4_0, Q4_1, Q5_0 or Q5_1 layer's steps (and minima) as the file's halves per panel, block and
// row (Linear::steps16, mins16; Q4_0's and Q5_0's minima are formed from the step and offset).
struct FileHalves {
  uint16_t *st, *mn = nullptr;
  FileHalves(QuantizedWeights& q, size_t per, bool with_min) {
    q.halves.assign(with_min ? 2 * per : per, 0);
    st = q.halves.data();
    if (with_min) mn = st + per;
  }
  // Output row r of panel p (nb blocks): its codes to u, its halves in place.
  void put(const BlockFormat& f, const uint8_t* row, int nb, int p, int r, uint8_t* u,
           std::vector<uint16_t>& scratch) const {
    scratch.resize(static_cast<size_t>(2) * nb);
    half_step_codes(f, row, static_cast<size_t>(nb) * kI4Block, u, scratch.data(), scratch.data() + nb);
    for (int b = 0; b < nb; ++b) {
      const size_t k = (static_cast<size_t>(p) * nb + b) * kPanel + r;
      st[k] = scratch[b];
      if (mn) mn[k] = scratch[nb + b];
    }
  }
  void point(Linear& L) const { L.steps16 = st, L.mins16 = mn; }
};

// A panel's unsigned codes in the order its blocks' bytes take them: per block and step of 4
// inputs, 64 bytes, row l's 4 codes at (l / 8) * 32 + (l % 8) * 4. That is I4's byte order (rows
// l and l + 8 share a byte) and I5's bit order (i5_bit), so each step packs from one 64-byte run.
class PanelCodes {
 public:
  explicit PanelCodes(int nb) : v_(static_cast<size_t>(nb) * 8 * 64), nb_(nb) {}
  void clear() { std::fill(v_.begin(), v_.end(), uint8_t(0)); }
  // Row r's codes u[0, 32 nb).
  void put(int r, const uint8_t* u) {
    uint8_t* at = v_.data() + (r / 8) * 32 + (r % 8) * 4;
    for (int g = 0; g < 8 * nb_; ++g) std::memcpy(at + 64 * g, u + 4 * g, 4);
  }
  // The panel's blocks at dst: per step the low nibbles (I4's 32 bytes), then under I5 a plane of
  // 64 bits per high bit (bit 4, then bit 5).
  void write(int planes, uint8_t* dst) const {
    const int block_bytes = planes ? i5_block_bytes(planes) : kI4BlockBytes;
    for (int b = 0; b < nb_; ++b) {
      uint8_t* blk = dst + static_cast<size_t>(b) * block_bytes;
      for (int k = 0; k < kI4Block / 4; ++k) {
        const uint8_t* s = v_.data() + (static_cast<size_t>(b) * 8 + k) * 64;
        for (int i = 0; i < 32; ++i) blk[32 * k + i] = static_cast<uint8_t>((s[i] & 0x0F) | (s[32 + i] << 4));
        for (int h = 0; h < planes; ++h) {
          const uint64_t bits = bit_plane(s, 4 + h);
          std::memcpy(blk + kI4BlockBytes + 8 * planes * k + 8 * h, &bits, 8);
        }
      }
    }
  }

 private:
  // Bit `bit` of each of 64 bytes, byte i at bit i.
  static uint64_t bit_plane(const uint8_t* s, int bit) {
#if defined(DECODELAB_AVX512)
    return _mm512_test_epi8_mask(_mm512_loadu_si512(s), _mm512_set1_epi8(static_cast<char>(1 << bit)));
#elif defined(__AVX2__)
    // A 16-bit shift by 7 - bit takes each byte's bit to its bit 7 (none crosses into another's).
    const __m128i n = _mm_cvtsi32_si128(7 - bit);
    const uint32_t lo = static_cast<uint32_t>(
        _mm256_movemask_epi8(_mm256_sll_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)), n)));
    const uint32_t hi = static_cast<uint32_t>(
        _mm256_movemask_epi8(_mm256_sll_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32)), n)));
    return lo | static_cast<uint64_t>(hi) << 32;
#else
    uint64_t bits = 0;
    for (int i = 0; i < 64; ++i) bits |= static_cast<uint64_t>(s[i] >> bit & 1) << i;
    return bits;
#endif
  }

  std::vector<uint8_t> v_;
  int nb_;
};

// A layer of a file's blocks packed panel by panel on all threads: row_codes(p, r, row, u, scratch)
// decodes output row 16 p + r (its blocks at `row`) into u (its 32 nb codes) and keeps the row's
// steps, with a thread's own Scratch; each panel's blocks then go to dst with `planes` planes of
// high bits (I5Blocks; none: I4), and its source rows to `done`.
template <class Scratch, class RowCodes>
static void pack_panels(const Linear& L, const uint8_t* src, size_t row_bytes, int planes, uint8_t* dst,
                        const RowsDone* done, RowCodes&& row_codes) {
  const int out = L.out, panels = panel_count(out), nb = i4_blocks(L.in);
  const size_t panel_bytes = static_cast<size_t>(nb) * (planes ? i5_block_bytes(planes) : kI4BlockBytes);
#pragma omp parallel
  {
    PanelCodes panel(nb);
    std::vector<uint8_t> u(static_cast<size_t>(nb) * kI4Block);
    Scratch scratch;
    DoneRows finished(done);
#pragma omp for schedule(dynamic, pack_chunk(panels))
    for (int p = 0; p < panels; ++p) {
      const int rows = std::min(kPanel, out - p * kPanel);
      if (rows < kPanel) panel.clear();  // rows past the last stay zero
      for (int r = 0; r < rows; ++r) {
        row_codes(p, r, src + static_cast<size_t>(p * kPanel + r) * row_bytes, u.data(), scratch);
        panel.put(r, u.data());
      }
      panel.write(planes, dst + static_cast<size_t>(p) * panel_bytes);
      finished.add(p * kPanel, rows);
    }
  }
}

// An I8Blocks layer's steps (n_steps) and minima (n_mins) as halves where every one of them is a
// half as it is (Q8_0, Q5_0, Q5_1 always), in half the bytes; otherwise they stay fp32.
static void keep_i8b_halves(Linear& L, QuantizedWeights& q, size_t n_steps, size_t n_mins) {
  q.halves.resize(n_steps + n_mins);
  for (size_t i = 0; i < n_steps + n_mins; ++i) {
    const float x = q.scales[i];
    const uint16_t h = f32_to_f16(x);
    if (((h >> 10) & 0x1fu) == 0x1f || f16_to_f32(h) != x) {
      std::vector<uint16_t>().swap(q.halves);
      return;
    }
    q.halves[i] = h;
  }
  L.steps16 = q.halves.data();
  L.mins16 = n_mins ? q.halves.data() + n_steps : nullptr;
  L.scales = L.mins = nullptr;
  std::vector<float>().swap(q.scales);
}

// An I8Blocks layer of Q6_K with the file's scales in place of the fp32 steps q8_sub_blocks gave.
static void keep_q6k_codes(Linear& L, QuantizedWeights& q, const uint8_t* src, size_t row_bytes, size_t per) {
  const int out = L.out, nb = i4_blocks(L.in);
  const Q6KScales codes(q, per);
#pragma omp parallel for schedule(static)
  for (int o = 0; o < out; ++o) codes.put(src + static_cast<size_t>(o) * row_bytes, nb, o / kPanel, o % kPanel);
  codes.point(L);
  L.scales = nullptr;
  std::vector<float>().swap(q.scales);
}

size_t quantized_size(const Linear& L, WeightType type) {
  switch (type) {
    case WeightType::BF16: return (L.out + 3) / 4 * bf16_group_elems(L) * sizeof(uint16_t);
    case WeightType::I8: return packed_size(L.out, L.in, kI8Step);
    case WeightType::I8A8: return packed_size(L.out, L.in, kA8Step);
    case WeightType::I4: return static_cast<size_t>(panel_count(L.out)) * i4_panel_bytes(L.in);
    case WeightType::I8Blocks: return static_cast<size_t>(panel_count(L.out)) * i4_blocks(L.in) * kI8BlockBytes;
    case WeightType::I5Blocks:  // L.i5_planes set first
      return static_cast<size_t>(panel_count(L.out)) * i4_blocks(L.in) * i5_block_bytes(L.i5_planes);
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
    if (L.k_sc) {
      view->k_sc = L.k_sc + first / kPanel * per_panel;
      view->k_m = L.k_m + first / kPanel * per_panel;
      view->k_d = L.k_d + first / kPanel * (per_panel / 8);
      view->k_dmin = L.k_dmin + first / kPanel * (per_panel / 8);
    } else if (L.steps16) {
      view->steps16 = L.steps16 + first / kPanel * per_panel;
      view->mins16 = L.mins16 ? L.mins16 + first / kPanel * per_panel : nullptr;
    } else {
      view->scales = L.scales + first / kPanel * per_panel;
      view->mins = L.mins + first / kPanel * per_panel;
    }
  } else if (L.type == WeightType::I8Blocks || L.type == WeightType::I5Blocks) {
    // steps per panel, block and group; minima per panel and block
    const size_t per_panel = static_cast<size_t>(i4_blocks(L.in)) * kPanel;
    if (L.w_i8b) view->w_i8b = L.w_i8b + static_cast<size_t>(first / kPanel) * i4_blocks(L.in) * kI8BlockBytes;
    if (L.w_i5) view->w_i5 = L.w_i5 + static_cast<size_t>(first / kPanel) * i4_blocks(L.in) * i5_block_bytes(L.i5_planes);
    const size_t panel = first / kPanel;
    if (L.k_sc8) {
      view->k_sc8 = L.k_sc8 + panel * per_panel * L.i8b_groups;
      view->k_d = L.k_d + panel * (per_panel / 8);
    } else if (L.steps16) {
      view->steps16 = L.steps16 + panel * per_panel * L.i8b_groups;
      if (L.mins16) view->mins16 = L.mins16 + panel * per_panel;
    } else {
      view->scales = L.scales + panel * per_panel * L.i8b_groups;
      if (L.mins) view->mins = L.mins + panel * per_panel;
    }
  } else if (L.scales) {
    view->scales = L.scales + first;
  }
  if (L.wsums) view->wsums = L.wsums + static_cast<size_t>(first / kPanel) * ((L.in + kI8Block - 1) / kI8Block) * kPanel;
  return true;
}

void quantize_linear(Linear& L, WeightType type, QuantizedWeights& q, uint8_t* dst, const RowSource* source,
                     const RowsDone* done) {
  if (type == WeightType::F32) return;
  if (!source && L.in_major) done = nullptr;  // every panel reads across all of an (in, out) source
  dst = destination(q, DECODELAB_ISA::quantized_size(L, type), dst);
  const int in = L.in, out = L.out, panels = panel_count(out);
  // Each panel's rows (16, fewer in the last) as fp32 (rows, in): in place where L.w is (out, in),
  // else in the thread's scratch, from `source` or transposed from an (in, out) L.w. One panel at
  // a time, so a source decoded from a file's blocks never exists whole in fp32.
  auto panel_rows = [&](int p, std::vector<float>& scratch) -> const float* {
    const int o0 = p * kPanel, nr = std::min(kPanel, out - o0);
    if (!source && !L.in_major) return L.w + static_cast<size_t>(o0) * in;
    scratch.resize(static_cast<size_t>(nr) * in);
    if (source) {
      (*source)(o0, nr, scratch.data());
    } else {
      for (int r = 0; r < nr; ++r)
        for (int i = 0; i < in; ++i) scratch[static_cast<size_t>(r) * in + i] = L.w[static_cast<size_t>(i) * out + o0 + r];
    }
    return scratch.data();
  };
  if (type == WeightType::BF16) {
    // The group layout (see bf16_ld): a panel's 16 rows are its 4 groups.
    uint16_t* w = reinterpret_cast<uint16_t*>(dst);
    const int groups = (out + 3) / 4;
    L.w_bf16 = w;
#pragma omp parallel
    {
      std::vector<float> scratch;
      DoneRows finished(done);
#pragma omp for schedule(dynamic, pack_chunk(panels))
      for (int p = 0; p < panels; ++p) {
        const float* rows = panel_rows(p, scratch);
        for (int g = 4 * p; g < std::min(groups, 4 * p + 4); ++g) {
          uint16_t* dg = w + g * bf16_group_elems(L);
          for (int r = 0; r < 4 && 4 * g + r < out; ++r) {
            const float* row = rows + static_cast<size_t>(4 * g + r - p * kPanel) * in;
            for (int i = 0; i < in; ++i) dg[(i / 16) * 64 + 16 * r + i % 16] = f32_to_bf16(row[i]);
          }
        }
        finished.add(p * kPanel, std::min(kPanel, out - p * kPanel));
      }
    }
  } else if (type == WeightType::I4) {
    // Per block of 32: min and max of its values, 15 steps between them, each value the nearest
    // step, then the step and minimum rounded to halves (GGUF's Q4_1 rule, the same blocks as
    // gguf's quantizer; a dequantized Q4_1 block comes back with its own values). Steps first,
    // then minima, in one vector.
    const int nb = i4_blocks(in);
    const size_t per = static_cast<size_t>(panels) * nb * kPanel;
    q.scales.assign(2 * per, 0.0f);
    float* steps = q.scales.data();
    float* mins = steps + per;
#pragma omp parallel
    {
      std::vector<float> scratch;
      DoneRows finished(done);
#pragma omp for schedule(dynamic, pack_chunk(panels))
      for (int p = 0; p < panels; ++p) {
        const float* rows = panel_rows(p, scratch);
        for (int r = 0; r < kPanel && p * kPanel + r < out; ++r) {
          const float* row = rows + static_cast<size_t>(r) * in;
          for (int b = 0; b < nb; ++b) {
            const int i0 = b * kI4Block, i1 = std::min(in, i0 + kI4Block);
            float lo = row[i0], hi = lo;
            for (int i = i0; i < i1; ++i) lo = std::min(lo, row[i]), hi = std::max(hi, row[i]);
            const float d = (hi - lo) / 15.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
            const size_t k = (static_cast<size_t>(p) * nb + b) * kPanel + r;
            steps[k] = d;
            mins[k] = lo;
            uint8_t* blk = dst + (static_cast<size_t>(p) * nb + b) * kI4BlockBytes;
            for (int i = i0; i < i1; ++i) {
              const int v = std::min(15, static_cast<int>((row[i] - lo) * id + 0.5f));
              blk[i4_byte(r, i - i0)] |= static_cast<uint8_t>(v << i4_shift(r));
            }
          }
        }
        finished.add(p * kPanel, std::min(kPanel, out - p * kPanel));
      }
    }
    L.w_i4 = dst;
    L.scales = steps;
    L.mins = mins;
    keep_halves(L, q, per);
  } else {
    // int8 per output row (scale max|w| / 127), packed into panels of G-value steps. w8a8 also
    // fills wsums[(p * blocks + b) * 16 + r] with -64 x the sum of row 16p + r over block b: the
    // activations' offset of 64 adds 64 x that to each block's integer sum, so the sum starts
    // there instead of at 0.
    const bool a8 = type == WeightType::I8A8;
    const int G = a8 ? kA8Step : kI8Step, steps = panel_steps(in, G), blocks = (in + kI8Block - 1) / kI8Block;
    q.scales.resize(out);
    if (a8) q.wsums.assign(static_cast<size_t>(panels) * blocks * kPanel, 0);
    int8_t* packed = reinterpret_cast<int8_t*>(dst);
#pragma omp parallel
    {
      std::vector<float> scratch;
      std::vector<int8_t> codes(in);
      DoneRows finished(done);
#pragma omp for schedule(dynamic, pack_chunk(panels))
      for (int p = 0; p < panels; ++p) {
        const float* rows = panel_rows(p, scratch);
        int8_t* panel = packed + static_cast<size_t>(p) * kPanel * steps * G;
        for (int r = 0; r < kPanel && p * kPanel + r < out; ++r) {
          const int o = p * kPanel + r;
          const float* row = rows + static_cast<size_t>(r) * in;
          const float mx = max_abs(row, in);
          float scale = mx / 127.0f;
          if (!(scale > 0.0f)) scale = 1.0f;  // all zeros, or subnormals whose step rounds to 0
          q.scales[o] = scale;
          round_codes(row, in, scale, codes.data());
          if (!a8) {
            place_codes<kI8Step>(codes.data(), in, r, panel);
            continue;
          }
          place_codes<kA8Step>(codes.data(), in, r, panel);
          for (int b = 0; b < blocks; ++b) {
            int32_t sum = 0;
            for (int i = b * kI8Block; i < std::min(in, (b + 1) * kI8Block); ++i) sum += codes[i];
            q.wsums[(static_cast<size_t>(p) * blocks + b) * kPanel + r] -= kA8Offset * sum;
          }
        }
        finished.add(p * kPanel, std::min(kPanel, out - p * kPanel));
      }
    }
    if (a8) L.wsums = q.wsums.data();
    L.w_i8 = packed;
    L.scales = q.scales.data();
  }
  L.type = type;
  L.in_major = false;
  L.w = nullptr;  // the fp32 weights are no longer read
}

void pack_i4_blocks(Linear& L, const BlockFormat& f, const uint8_t* src, QuantizedWeights& q, uint8_t* dst,
                    const RowsDone* done) {
  if (f.bits != 4 || L.in % f.elems != 0)
    throw std::invalid_argument(std::string("4-bit blocks: ") + f.name + " rows of " + std::to_string(L.in) +
                                " values are not whole blocks of a 4-bit format");
  dst = destination(q, DECODELAB_ISA::quantized_size(L, WeightType::I4), dst, false);  // PanelCodes writes it all
  const int in = L.in, panels = panel_count(L.out), nb = i4_blocks(in);
  // Q4_K keeps the file's scale codes, Q4_0 and Q4_1 their halves (Q4_0's minimum -8 steps).
  const bool k_codes = f.type == BlockType::Q4_K;
  const size_t per = static_cast<size_t>(panels) * nb * kPanel;
  std::optional<Q4KCodes> codes;
  std::optional<FileHalves> halves;
  if (k_codes) codes.emplace(q, per);
  else halves.emplace(q, per, f.type == BlockType::Q4_1);
  const size_t row_bytes = static_cast<size_t>(in) / f.elems * f.bytes;
  struct Scratch {
    std::vector<uint8_t> codes;
    std::vector<uint16_t> halves;
  };
  pack_panels<Scratch>(L, src, row_bytes, 0, dst, done,
                       [&](int p, int r, const uint8_t* row, uint8_t* u, Scratch& scratch) {
                         if (k_codes) {
                           q4k_nibbles(row, in, u);
                           codes->put(row, nb, p, r, scratch.codes);
                         } else {
                           halves->put(f, row, nb, p, r, u, scratch.halves);
                         }
                       });
  L.w_i4 = dst;
  L.scales = L.mins = nullptr;
  if (k_codes) codes->point(L);
  else halves->point(L);
  L.type = WeightType::I4;
  L.in_major = false;
  L.w = nullptr;
}

void pack_i8_blocks(Linear& L, const BlockFormat& f, const uint8_t* src, QuantizedWeights& q, uint8_t* dst,
                    const RowsDone* done) {
  dst = destination(q, DECODELAB_ISA::quantized_size(L, WeightType::I8Blocks), dst);
  const int in = L.in, out = L.out, panels = panel_count(out), nb = i4_blocks(in);
  const bool q6k_codes = f.type == BlockType::Q6_K && nb % 8 == 0;
  if (q6k_codes) done = nullptr;  // keep_q6k_codes reads the source again
  const int G = kI4Block / q8_group(f);
  const bool with_min = q8_has_min(f);
  const size_t per = static_cast<size_t>(panels) * nb * kPanel;
  q.scales.assign(per * G + (with_min ? per : 0), 0.0f);
  float* steps = q.scales.data();
  float* mins = with_min ? steps + per * G : nullptr;
  const size_t row_bytes = static_cast<size_t>(in) / f.elems * f.bytes;
  int8_t* codes = reinterpret_cast<int8_t*>(dst);
#pragma omp parallel
  {
    std::vector<int8_t> values(in);
    std::vector<float> st(static_cast<size_t>(nb) * G), mn(nb);
    DoneRows finished(done);
#pragma omp for schedule(dynamic, pack_chunk(panels))
    for (int p = 0; p < panels; ++p) {
      for (int r = 0; r < kPanel && p * kPanel + r < out; ++r) {
        q8_sub_blocks(f, src + static_cast<size_t>(p * kPanel + r) * row_bytes, in, values.data(), st.data(), mn.data());
        for (int b = 0; b < nb; ++b) {
          for (int g = 0; g < G; ++g) steps[((static_cast<size_t>(p) * nb + b) * G + g) * kPanel + r] = st[b * G + g];
          if (mins) mins[(static_cast<size_t>(p) * nb + b) * kPanel + r] = mn[b];
          // Each step's 4 codes of the row lie together (i8b_byte): one 4-byte move per step.
          int8_t* blk = codes + (static_cast<size_t>(p) * nb + b) * kI8BlockBytes + i8b_byte(r, 0);
          for (int k = 0; k < kI4Block / 4; ++k) std::memcpy(blk + 64 * k, values.data() + b * kI4Block + 4 * k, 4);
        }
      }
      finished.add(p * kPanel, std::min(kPanel, out - p * kPanel));
    }
  }
  L.w_i8b = codes;
  L.scales = steps;
  L.mins = mins;
  L.i8b_groups = G;
  if (q6k_codes) keep_q6k_codes(L, q, src, row_bytes, per);
  else keep_i8b_halves(L, q, per * G, with_min ? per : 0);
  L.type = WeightType::I8Blocks;
  L.in_major = false;
  L.w = nullptr;
}

void pack_i5_blocks(Linear& L, const BlockFormat& f, const uint8_t* src, QuantizedWeights& q, uint8_t* dst,
                    const RowsDone* done) {
  const int planes = narrow_planes(f);
  if (!planes)
    throw std::invalid_argument(std::string("5- and 6-bit blocks: ") + f.name +
                                " is neither a 5-bit format with a step per 32 nor Q6_K");
  const bool six = planes == 2;
  L.i5_planes = planes;
  dst = destination(q, DECODELAB_ISA::quantized_size(L, WeightType::I5Blocks), dst, false);  // PanelCodes writes it all
  const int in = L.in, panels = panel_count(L.out), nb = i4_blocks(in);
  const int G = kI4Block / q8_group(f);
  // Q6_K keeps the file's scales and its unsigned codes as they are, Q5_0 and Q5_1 their halves and
  // codes u = q + offset; Q5_K its steps and minima, formed in fp32 (kept as halves below if they are).
  const bool k_codes = six && nb % 8 == 0;
  const bool h_codes = f.type == BlockType::Q5_0 || f.type == BlockType::Q5_1;
  const bool with_min = q8_has_min(f);
  const int offset = with_min ? 0 : six ? 32 : 16;  // Q5_0's codes come centred, q - 16; Q6_K's q - 32
  const int limit = 16 << planes;
  const size_t per = static_cast<size_t>(panels) * nb * kPanel;
  std::optional<Q6KScales> codes;
  std::optional<FileHalves> halves;
  float *steps = nullptr, *mins = nullptr;
  if (k_codes) {
    codes.emplace(q, per);
  } else if (h_codes) {
    halves.emplace(q, per, with_min);
  } else {
    q.scales.assign(per * G + (with_min ? per : 0), 0.0f);
    steps = q.scales.data();
    mins = with_min ? steps + per * G : nullptr;
  }
  const size_t row_bytes = static_cast<size_t>(in) / f.elems * f.bytes;
  std::atomic<bool> in_range{true};
  struct Scratch {
    std::vector<int8_t> values;
    std::vector<float> st, mn;
    std::vector<uint16_t> halves;
  };
  pack_panels<Scratch>(L, src, row_bytes, planes, dst, done,
                       [&](int p, int r, const uint8_t* row, uint8_t* u, Scratch& scratch) {
                         if (k_codes) {
                           q6k_unsigned(row, in, u);
                           codes->put(row, nb, p, r);
                           return;
                         }
                         if (h_codes) {
                           halves->put(f, row, nb, p, r, u, scratch.halves);
                           return;
                         }
                         scratch.values.resize(in), scratch.st.resize(static_cast<size_t>(nb) * G), scratch.mn.resize(nb);
                         q8_sub_blocks(f, row, in, scratch.values.data(), scratch.st.data(), scratch.mn.data());
                         for (int b = 0; b < nb; ++b) {
                           for (int g = 0; g < G; ++g)
                             steps[((static_cast<size_t>(p) * nb + b) * G + g) * kPanel + r] = scratch.st[b * G + g];
                           if (mins) mins[(static_cast<size_t>(p) * nb + b) * kPanel + r] = scratch.mn[b];
                         }
                         bool ok = true;
                         for (int i = 0; i < in; ++i) {
                           const int c = scratch.values[i] + offset;
                           ok = ok && c >= 0 && c < limit;
                           u[i] = static_cast<uint8_t>(c);
                         }
                         if (!ok) in_range.store(false, std::memory_order_relaxed);
                       });
  if (!in_range)  // not expected: every such format's decoded codes lie in 0..31 (Q6_K: 0..63)
    throw std::logic_error(std::string("5- and 6-bit blocks: a ") + f.name + " code outside 0.." +
                           std::to_string(limit - 1));
  L.w_i5 = dst;
  L.i5_offset = offset;
  L.i8b_groups = G;
  L.scales = L.mins = nullptr;
  if (k_codes) {
    codes->point(L);
  } else if (h_codes) {
    halves->point(L);
  } else {
    L.scales = steps;
    L.mins = mins;
    keep_i8b_halves(L, q, per * G, with_min ? per : 0);
  }
  L.type = WeightType::I5Blocks;
  L.in_major = false;
  L.w = nullptr;
}

}  // namespace DECODELAB_ISA
}  // namespace decodelab
