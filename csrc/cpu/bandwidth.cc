// The memory read-bandwidth probe (benchmarks compare the kernels' speed against it).
#include "decodelab/bandwidth.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "cpu/eigen_maps.h"
#include "decodelab/aligned.h"

namespace decodelab {

float read_pass(const float* p, size_t n, int n_threads) {
  float total = 0.0f;
#pragma omp parallel for num_threads(n_threads) schedule(static) reduction(+ : total)
  for (int c = 0; c < n_threads; ++c) {
    const size_t lo = n * c / n_threads, hi = n * (c + 1) / n_threads;
    total += ConstVec(p + lo, static_cast<Eigen::Index>(hi - lo)).sum();  // vectorised by Eigen
  }
  return total;
}

double read_bandwidth(size_t nbytes, int n_threads, int repeats) {
  const size_t n = std::max<size_t>(nbytes / sizeof(float), 1024);
  std::vector<float, HugePageAllocator<float>> buf(n);
#pragma omp parallel for num_threads(n_threads) schedule(static)
  for (size_t i = 0; i < n; ++i) buf[i] = static_cast<float>(i & 1023);
  double best = 0.0;
  volatile float sink = 0.0f;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = omp_get_wtime();
    const float total = read_pass(buf.data(), n, n_threads);
    const double dt = omp_get_wtime() - t0;
    sink = sink + total;
    best = std::max(best, static_cast<double>(n * sizeof(float)) / dt);
  }
  return best;
}

}  // namespace decodelab
