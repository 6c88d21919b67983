// How fast a decode kernel's inner loop reads weights from memory when each thread reads one
// stream at a time against several side by side: the int8 panel product of the AVX2 decode path
// (16 rows x 2 values = 32 bytes per step, widened to int16 and multiplied with vpmaddwd) over
// panels of 12 KiB (GPT-2's 768 inputs), one panel or several adjacent panels per step, with and
// without a software prefetch 2 KiB ahead. This is the measurement behind the int8 / w8a8 decode
// kernel that reads four panels at once on AVX2 machines without VNNI (panels_row in
// csrc/cpu/linear/int8.cc).
//
//   g++ -O3 -march=native -fopenmp benchmarks/baseline/streams.cc -o /tmp/streams && /tmp/streams
//
// Prints GB/s per setting: median and best of 9 passes, the settings interleaved, each pass after a
// 256 MiB read that pushes the weights out of the caches. Needs AVX2.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

// Reads `bytes` of int8 panels of `panel` bytes, `at_once` adjacent panels per step; returns a sum
// so that the compiler keeps the work.
static int panels_pass(const int8_t* w, size_t bytes, int at_once, size_t panel, int prefetch) {
  int total = 0;
#pragma omp parallel reduction(+ : total)
  {
    const int n_threads = omp_get_num_threads(), me = omp_get_thread_num();
    const size_t n_panels = bytes / panel / n_threads / at_once * at_once;  // this thread's
    const int8_t* base = w + static_cast<size_t>(me) * (bytes / n_threads);
    __m256i acc[8];
    for (auto& a : acc) a = _mm256_setzero_si256();
    const __m256i x = _mm256_set1_epi32(0x00030002);
    for (size_t p = 0; p < n_panels; p += at_once)
      for (size_t s = 0; s < panel; s += 32)
        for (int k = 0; k < at_once; ++k) {
          const int8_t* ws = base + (p + k) * panel + s;
          if (prefetch && (s & 63) == 0) _mm_prefetch(reinterpret_cast<const char*>(ws) + prefetch, _MM_HINT_T0);
          const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ws)));
          const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ws + 16)));
          acc[2 * (k & 3)] = _mm256_add_epi32(acc[2 * (k & 3)], _mm256_madd_epi16(x, w0));
          acc[2 * (k & 3) + 1] = _mm256_add_epi32(acc[2 * (k & 3) + 1], _mm256_madd_epi16(x, w1));
        }
    __m256i s = acc[0];
    for (int k = 1; k < 8; ++k) s = _mm256_add_epi32(s, acc[k]);
    alignas(32) int o[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(o), s);
    for (int v : o) total += v;
  }
  return total;
}

int main() {
  const size_t bytes = size_t{100} << 20, panel = 12288;
  auto* w = static_cast<int8_t*>(std::aligned_alloc(4096, bytes));
  for (size_t i = 0; i < bytes; ++i) w[i] = static_cast<int8_t>(i & 7);
  std::vector<int8_t> sweep(size_t{256} << 20, 1);
  struct Setting {
    int at_once, prefetch;
  } settings[] = {{1, 0}, {1, 2048}, {2, 0}, {4, 0}, {4, 2048}, {8, 0}};
  constexpr int kPasses = 9;
  std::vector<std::vector<double>> gbs(std::size(settings));
  volatile int sink = 0;
  for (int pass = 0; pass < kPasses; ++pass)
    for (size_t c = 0; c < std::size(settings); ++c) {
      sink = sink + panels_pass(sweep.data(), sweep.size(), 1, 4096, 0);
      const double t = omp_get_wtime();
      sink = sink + panels_pass(w, bytes, settings[c].at_once, panel, settings[c].prefetch);
      gbs[c].push_back(bytes / (omp_get_wtime() - t) / 1e9);
    }
  std::printf("int8 panel products over %zu MiB, %d threads, panels of %zu bytes\n", bytes >> 20,
              omp_get_max_threads(), panel);
  for (size_t c = 0; c < std::size(settings); ++c) {
    std::sort(gbs[c].begin(), gbs[c].end());
    std::printf("  %d panel(s) at once, prefetch %4d bytes ahead: median %5.1f GB/s, best %5.1f\n",
                settings[c].at_once, settings[c].prefetch, gbs[c][kPasses / 2], gbs[c][kPasses - 1]);
  }
  std::free(w);
  return 0;
}
