// The memory read-bandwidth probe that benchmarks compare the kernels' speed against.
#pragma once

#include <cstddef>

namespace decodelab {

// Best read bandwidth (bytes / s) over `repeats` passes summing an `nbytes` buffer on n_threads.
// The buffer is in huge pages where the system allows, as the converted weights are, so the bound
// it gives is one the weights can reach.
double read_bandwidth(size_t nbytes, int n_threads, int repeats);
// The sum of p[0, n), read on n_threads, each a contiguous part as one stream: read_bandwidth's
// pass, and a read-only sweep that pushes other data out of the caches.
float read_pass(const float* p, size_t n, int n_threads);

}  // namespace decodelab
