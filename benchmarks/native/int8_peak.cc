// The CPU's peak rate of int8 multiply-adds, the ceiling for the integer kernels of a long prompt:
// independent chains of the instructions each ISA's kernels use (vpdpbusd on 256- and 512-bit
// vectors with VNNI; pmaddubsw + pmaddwd + paddd on AVX2), on every OpenMP thread, best of 5.
// Also vpdpwssd (int16 pairs), the product of the int8 dtype, whose activations stay 16-bit.
// Written in assembly so that no compiler can fold or spill the chains. Prints one JSON object.
// Built and run by benchmarks/bench_int8_peak.py.
#include <omp.h>

#include <cstdio>

namespace {

// 12 independent vpdpbusd per step on R-registers ("ymm": 12 x 32 multiply-adds, "zmm": 12 x 64).
#define DPBUSD2(R, A, B) "vpdpbusd %%" R "13, %%" R "12, %%" R #A "\n vpdpbusd %%" R "13, %%" R "12, %%" R #B "\n"
#define DPBUSD12(R) \
  DPBUSD2(R, 0, 1) DPBUSD2(R, 2, 3) DPBUSD2(R, 4, 5) DPBUSD2(R, 6, 7) DPBUSD2(R, 8, 9) DPBUSD2(R, 10, 11)
#define CLOBBERS "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11"

void vnni256(long steps) {
  for (long k = 0; k < steps; ++k) asm volatile(DPBUSD12("ymm")::: CLOBBERS);
}

void vnni512(long steps) {
  for (long k = 0; k < steps; ++k) asm volatile(DPBUSD12("zmm")::: CLOBBERS);
}

// The same chains of vpdpwssd: 12 x 32 multiply-adds of int16 pairs on zmm.
#define DPWSSD2(A, B) "vpdpwssd %%zmm13, %%zmm12, %%zmm" #A "\n vpdpwssd %%zmm13, %%zmm12, %%zmm" #B "\n"
void wssd512(long steps) {
  for (long k = 0; k < steps; ++k)
    asm volatile(DPWSSD2(0, 1) DPWSSD2(2, 3) DPWSSD2(4, 5) DPWSSD2(6, 7) DPWSSD2(8, 9) DPWSSD2(10, 11)::: CLOBBERS);
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
            : CLOBBERS);
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
  std::printf(", \"int16_vnni512_gmac_s\": %.1f", rate(wssd512, steps, 12 * 32) / 1e9);
#endif
  std::printf("}\n");
}
