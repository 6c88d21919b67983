// linear() and linear_many(): which kernel a layer runs for its weight type and row count, and how
// its groups of output rows are shared among the threads.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/eigen_maps.h"
#include "cpu/linear/kernels.h"

namespace decodelab {
namespace DECODELAB_ISA {

namespace {
// Group indices [0, n) split over a team for one pass: each thread owns an equal contiguous range
// and takes it from the front, kStep groups at a time; a thread whose range runs out takes steps
// from the back of the fullest other range. Every thread reads its own rows as one stream, as with
// a static split, but a thread slowed by a neighbour on the shared host no longer leaves the other
// waiting at the barrier. Which thread computes a group never changes its result.
class GroupRanges {
 public:
  static constexpr int kStep = 4;
  void reset(int n, int n_threads) {
    if (n_threads > cap_) {
      slots_.reset(new Slot[n_threads]);
      cap_ = n_threads;
    }
    count_ = n_threads;
    for (int t = 0; t < n_threads; ++t)
      slots_[t].v.store(pack(static_cast<int64_t>(n) * t / n_threads, static_cast<int64_t>(n) * (t + 1) / n_threads),
                        std::memory_order_relaxed);
  }
  // The next groups [b, e) for thread `me`; false once every range is empty.
  bool next(int me, int& b, int& e) {
    if (me < count_ && take(slots_[me], true, b, e)) return true;
    for (;;) {
      int victim = -1;
      uint32_t most = 0;
      for (int t = 0; t < count_; ++t) {
        const uint64_t v = slots_[t].v.load(std::memory_order_relaxed);
        const uint32_t left = hi(v) > lo(v) ? hi(v) - lo(v) : 0;
        if (left > most) most = left, victim = t;
      }
      if (victim < 0) return false;
      if (take(slots_[victim], false, b, e)) return true;
    }
  }

 private:
  struct alignas(64) Slot {
    std::atomic<uint64_t> v{0};
  };
  static uint64_t pack(int64_t b, int64_t e) { return static_cast<uint64_t>(b) << 32 | static_cast<uint32_t>(e); }
  static uint32_t lo(uint64_t v) { return static_cast<uint32_t>(v >> 32); }
  static uint32_t hi(uint64_t v) { return static_cast<uint32_t>(v); }
  static bool take(Slot& s, bool front, int& b, int& e) {
    uint64_t v = s.v.load(std::memory_order_relaxed);
    for (;;) {
      const uint32_t l = lo(v), h = hi(v);
      if (l >= h) return false;
      const uint32_t step = std::min<uint32_t>(kStep, h - l);
      const uint64_t nv = front ? pack(l + step, h) : pack(l, h - step);
      if (s.v.compare_exchange_weak(v, nv, std::memory_order_relaxed)) {
        b = static_cast<int>(front ? l : h - step);
        e = static_cast<int>(front ? l + step : h);
        return true;
      }
    }
  }
  std::unique_ptr<Slot[]> slots_;
  int cap_ = 0, count_ = 0;
};

enum class Path { F32Row, Bf16Row, I8Rows, A8Rows, I4Rows, SmallRows, Gemm };

}  // namespace

namespace {
// Which kernel a layer runs for T rows (FixedRowArithmetic: the tiles from one row on).
Path path_of(const Linear& L, int T) {
  // w8a8 runs its panels at every row count, and so does int8 without bf16_activations: see I8Block.
  if (L.type == WeightType::I8A8) return Path::A8Rows;
  if (L.type == WeightType::I4 || L.type == WeightType::I8Blocks || L.type == WeightType::I5Blocks)
    return Path::I4Rows;  // block kernels, every T
  if (L.type == WeightType::I8)
    return L.bf16_activations && T >= gemm_min_rows(L.type) ? Path::Gemm : Path::I8Rows;
  if (T >= gemm_min_rows(L.type)) return Path::Gemm;
  if (T == 1 && !FixedRowArithmetic::on()) return L.type == WeightType::BF16 ? Path::Bf16Row : Path::F32Row;
  return Path::SmallRows;
}
}  // namespace

void linear_many(const float* x, int T, const Linear* const* layers, float* const* ys, int n) {
  constexpr int kMaxLayers = 4;
  if (n < 1 || n > kMaxLayers)
    throw std::invalid_argument("linear_many takes 1 to 4 layers, got " + std::to_string(n));
  const Path path = path_of(*layers[0], T);
  bool fused = true;
  for (int i = 1; i < n; ++i)
    fused = fused && path_of(*layers[i], T) == path && layers[i]->in == layers[0]->in &&
            layers[i]->type == layers[0]->type;
  if (path == Path::Gemm || !fused) {
    for (int i = 0; i < n; ++i) {
      const Linear& L = *layers[i];
      if (path_of(L, T) != Path::Gemm) DECODELAB_ISA::linear_many(x, T, &layers[i], &ys[i], 1);
      else if (L.type == WeightType::F32) matmul_onednn(x, T, L.in, L.w, L.out, ys[i], L.b);
      else if (L.type == WeightType::I8) matmul_i8_bf16(x, T, L, ys[i]);
      else if (L.bf16_activations) matmul_bf16(x, T, L, ys[i]);
      else matmul_widened(x, T, L, ys[i]);
    }
    return;
  }
  // The input, converted once for all the layers: 16-bit or 8-bit blocks (int8, w8a8) or even/odd
  // order (bf16). The calling thread's buffers; OpenMP workers read them through references.
  thread_local Int16Rows xq_buf;
  thread_local Int8Rows xa_buf;
  thread_local FloatBuffer xd_buf;
  thread_local Q8Blocks xb_buf;
  if (path == Path::I8Rows) quantize_int16(x, T, layers[0]->in, xq_buf);
  if (path == Path::I4Rows) quantize_q8_blocks(x, T, layers[0]->in, xb_buf);
  if (path == Path::A8Rows) quantize_u7(x, T, layers[0]->in, xa_buf);
  if (path == Path::Bf16Row) split_even_odd(x, 1, layers[0]->in, xd_buf);
  // A few bf16 rows are multiplied in place; more are widened once (kBf16DirectRows). Under
  // FixedRowArithmetic every row count stays in place, so each row is summed in one order; in
  // place costs less than widening at a few rows, and a little more at 16 or more.
  const bool direct_bf16 = path == Path::SmallRows && layers[0]->type == WeightType::BF16 &&
                           (FixedRowArithmetic::on() ? T <= kFixedRowsMax : T <= kBf16DirectRows);
  if (direct_bf16) split_even_odd(x, T, layers[0]->in, xd_buf);
  const Int16Rows& xq = xq_buf;
  const Int8Rows& xa = xa_buf;
  const Q8Blocks& xb = xb_buf;
  const float* xd = xd_buf.data();
  // Many rows (prompts) run in chunks, each thread taking its weight groups over one chunk of rows
  // at a time: a chunk's activations stay in cache while the weights stream past them.
  const bool panels = path == Path::I8Rows || path == Path::A8Rows || path == Path::I4Rows;
  const int chunk = panels ? kPanelRows : T;
  // Groups of 4 output rows (int8, w8a8, int4: panels of 16) of every layer in one parallel region: one wake-up
  // and one barrier for, say, a Llama layer's q, k and v instead of three.
  int first[kMaxLayers + 1] = {0};
  int64_t work = 0;
  for (int i = 0; i < n; ++i) {
    first[i + 1] = first[i] + (panels ? panel_count(layers[i]->out) : (layers[i]->out + 3) / 4);
    work += static_cast<int64_t>(layers[i]->in) * layers[i]->out;
  }
  const bool widen_rows = path == Path::SmallRows && layers[0]->type == WeightType::BF16 && !direct_bf16;
  const bool pairs = kPairGroups && path == Path::SmallRows && !direct_bf16 && T >= kPairMinRows;
  // Runs group G (and G + 1 with it where pairs allow, both below `end` and in one layer); returns
  // how many it ran.
  auto run_group = [&](int G, int end, float* scratch, int c0) {
    int i = 0;
    while (G >= first[i + 1]) ++i;
    const Linear& L = *layers[i];
    const int g = G - first[i];
    switch (path) {
      case Path::F32Row:
        if (kF32RowGroups > 1 && G + kF32RowGroups <= std::min(end, first[i + 1])) {  // where range and layer hold them
          f32_row_group<kF32RowGroups>(x, L, g, ys[i]);
          return kF32RowGroups;
        }
        f32_row_group<1>(x, L, g, ys[i]);
        break;
      case Path::Bf16Row: bf16_row_group(xd, L, g, ys[i]); break;
      case Path::I4Rows:
        if (L.type == WeightType::I4) i4_panel_rows(xb, c0, std::min(T, c0 + chunk), L, g, ys[i]);
        else i8b_panel_rows(xb, c0, std::min(T, c0 + chunk), L, g, ys[i]);
        break;
      case Path::I8Rows:
      case Path::A8Rows:
#if defined(__AVX2__) && defined(__FMA__) && !defined(DECODELAB_VNNI512)
        // A decode step: kRowPanels panels at once where this range and layer hold them.
        if (T == 1 && G + kRowPanels <= std::min(end, first[i + 1])) {
          if (path == Path::I8Rows) panels_row_i8(xq, L, g, ys[i]);
          else panels_row_a8(xa, L, g, ys[i]);
          return kRowPanels;
        }
#endif
        if (path == Path::I8Rows) panel_rows_i8(xq, c0, std::min(T, c0 + chunk), L, g, ys[i]);
        else panel_rows_a8(xa, c0, std::min(T, c0 + chunk), L, g, ys[i]);
        break;
      default:
        if constexpr (kPairGroups) {
          if (pairs && G + 1 < std::min(end, first[i + 1])) {
            small_group<8>(x, xd, false, T, L, g, ys[i], scratch);
            return 2;
          }
        }
        small_group<4>(x, xd, direct_bf16, T, L, g, ys[i], scratch);
        break;
    }
    return 1;
  };
  thread_local FloatBuffer scratch;  // each thread's own (bf16 rows widened for the tiles)
  // Below this many weights one thread is faster than waking the others (a few microseconds per
  // parallel region): small models decode serially, without entering OpenMP. A prompt in several
  // chunks counts all its rows, so a small model's prompt still spreads over the threads.
  const bool one_pass = chunk >= T;
  if (work * (one_pass ? 1 : T) >= (1 << 16)) {
    // The groups of each pass (one for a decode step or a small batch, one per chunk of a prompt's
    // rows) are split by GroupRanges: each thread starts on its own range, the same in every
    // chunk, so it reads its own weights as one stream, and takes from the other's range once its
    // own is done. A thread that finishes a chunk first goes on to the next without waiting, so a
    // thread slowed by a neighbour on the shared host is caught up with at the end of the call,
    // not at every chunk.
    const int n_chunks = (T + chunk - 1) / chunk;
    thread_local std::vector<GroupRanges> ranges;  // the calling thread's; the team reads it by reference
    if (static_cast<int>(ranges.size()) < n_chunks) ranges.resize(n_chunks);
    for (int c = 0; c < n_chunks; ++c) ranges[c].reset(first[n], omp_get_max_threads());
    std::vector<GroupRanges>& shared_ranges = ranges;
#pragma omp parallel
    {
      if (widen_rows) grow(scratch, static_cast<size_t>(pairs ? 8 : 4) * layers[0]->in);
      int b, e;
      for (int c = 0; c < n_chunks; ++c)
        while (shared_ranges[c].next(omp_get_thread_num(), b, e))
          for (int G = b; G < e;) G += run_group(G, e, scratch.data(), c * chunk);
    }
  }
#if defined(DECODELAB_AVX512)
  else if (path == Path::F32Row || path == Path::Bf16Row) {  // one thread: sixteen rows at a time
    for (int i = 0; i < n; ++i)
      for (int o = 0; o < layers[i]->out; o += 16)
        if (path == Path::F32Row) f32_rows16(x, *layers[i], o, ys[i]);
        else bf16_rows16(xd, *layers[i], o, ys[i]);
  }
#endif
  else {
    if (widen_rows) grow(scratch, static_cast<size_t>(pairs ? 8 : 4) * layers[0]->in);
    for (int c0 = 0; c0 < T; c0 += chunk)
      for (int G = 0; G < first[n];) G += run_group(G, first[n], scratch.data(), c0);
  }
  for (int i = 0; i < n; ++i) {
    const Linear& L = *layers[i];
    if (L.b && !panels)  // panel_rows adds its own
      for (int t = 0; t < T; ++t) Vec(ys[i] + static_cast<size_t>(t) * L.out, L.out) += ConstVec(L.b, L.out);
  }
}

}  // namespace DECODELAB_ISA
}  // namespace decodelab
