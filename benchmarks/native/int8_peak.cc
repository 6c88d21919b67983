// The CPU's peak rate of int8 multiply-adds, the ceiling for the integer kernels of a long prompt:
// independent chains of the instructions each ISA's kernels use (vpdpbusd on 256- and 512-bit
// vectors with VNNI; pmaddubsw + pmaddwd + paddd on AVX2), on every OpenMP thread, best of 5.
// Written in assembly so that no compiler can fold or spill the chains. Prints one JSON object.
// Built and run by benchmarks/bench_int8_peak.py.
#include <omp.h>

#include <cstdio>

namespace {

// 12 independent vpdpbusd ymm per step: 12 x 32 multiply-adds.
void vnni256(long steps) {
  for (long k = 0; k < steps; ++k)
    asm volatile(
        "vpdpbusd %%ymm13, %%ymm12, %%ymm0\n vpdpbusd %%ymm13, %%ymm12, %%ymm1\n"
        "vpdpbusd %%ymm13, %%ymm12, %%ymm2\n vpdpbusd %%ymm13, %%ymm12, %%ymm3\n"
        "vpdpbusd %%ymm13, %%ymm12, %%ymm4\n vpdpbusd %%ymm13, %%ymm12, %%ymm5\n"
        "vpdpbusd %%ymm13, %%ymm12, %%ymm6\n vpdpbusd %%ymm13, %%ymm12, %%ymm7\n"
        "vpdpbusd %%ymm13, %%ymm12, %%ymm8\n vpdpbusd %%ymm13, %%ymm12, %%ymm9\n"
        "vpdpbusd %%ymm13, %%ymm12, %%ymm10\n vpdpbusd %%ymm13, %%ymm12, %%ymm11\n" ::
            : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11");
}

// The same with zmm: 12 x 64.
void vnni512(long steps) {
  for (long k = 0; k < steps; ++k)
    asm volatile(
        "vpdpbusd %%zmm13, %%zmm12, %%zmm0\n vpdpbusd %%zmm13, %%zmm12, %%zmm1\n"
        "vpdpbusd %%zmm13, %%zmm12, %%zmm2\n vpdpbusd %%zmm13, %%zmm12, %%zmm3\n"
        "vpdpbusd %%zmm13, %%zmm12, %%zmm4\n vpdpbusd %%zmm13, %%zmm12, %%zmm5\n"
        "vpdpbusd %%zmm13, %%zmm12, %%zmm6\n vpdpbusd %%zmm13, %%zmm12, %%zmm7\n"
        "vpdpbusd %%zmm13, %%zmm12, %%zmm8\n vpdpbusd %%zmm13, %%zmm12, %%zmm9\n"
        "vpdpbusd %%zmm13, %%zmm12, %%zmm10\n vpdpbusd %%zmm13, %%zmm12, %%zmm11\n" ::
            : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11");
}

// AVX2: 6 chains of pmaddubsw (u8 x s8 pairs to int16), pmaddwd against ones, paddd: 6 x 32.
void avx2(long steps) {
  for (long k = 0; k < steps; ++k)
    asm volatile(
        "vpmaddubsw %%ymm13, %%ymm12, %%ymm6\n vpmaddubsw %%ymm13, %%ymm12, %%ymm7\n"
        "vpmaddubsw %%ymm13, %%ymm12, %%ymm8\n vpmaddubsw %%ymm13, %%ymm12, %%ymm9\n"
        "vpmaddubsw %%ymm13, %%ymm12, %%ymm10\n vpmaddubsw %%ymm13, %%ymm12, %%ymm11\n"
        "vpmaddwd %%ymm14, %%ymm6, %%ymm6\n vpmaddwd %%ymm14, %%ymm7, %%ymm7\n"
        "vpmaddwd %%ymm14, %%ymm8, %%ymm8\n vpmaddwd %%ymm14, %%ymm9, %%ymm9\n"
        "vpmaddwd %%ymm14, %%ymm10, %%ymm10\n vpmaddwd %%ymm14, %%ymm11, %%ymm11\n"
        "vpaddd %%ymm6, %%ymm0, %%ymm0\n vpaddd %%ymm7, %%ymm1, %%ymm1\n vpaddd %%ymm8, %%ymm2, %%ymm2\n"
        "vpaddd %%ymm9, %%ymm3, %%ymm3\n vpaddd %%ymm10, %%ymm4, %%ymm4\n vpaddd %%ymm11, %%ymm5, %%ymm5\n" ::
            : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11");
}

// Best multiply-adds per second of body(steps) on every thread, over 5 runs.
double rate(void (*body)(long), long steps, double macs_per_step) {
  double best = 0.0;
  for (int rep = 0; rep < 5; ++rep) {
    int threads = 1;
    const double t0 = omp_get_wtime();
#pragma omp parallel
    {
#pragma omp single nowait
      threads = omp_get_num_threads();
      body(steps);
    }
    const double r = threads * steps * macs_per_step / (omp_get_wtime() - t0);
    if (r > best) best = r;
  }
  return best;
}

}  // namespace

int main() {
  const long steps = 10000000;
  std::printf("{\"threads\": %d, \"avx2_maddubs_gmac_s\": %.1f", omp_get_max_threads(),
              rate(avx2, steps, 6 * 32) / 1e9);
#if defined(__AVX512VNNI__)
  std::printf(", \"vnni256_gmac_s\": %.1f, \"vnni512_gmac_s\": %.1f", rate(vnni256, steps, 12 * 32) / 1e9,
              rate(vnni512, steps, 12 * 64) / 1e9);
#endif
  std::printf("}\n");
}
