// Spreading a loop over the OpenMP team, or not entering OpenMP at all for small work.
#pragma once

#include <cstdint>

namespace decodelab {

// fn(i) for i in [0, n): spread over the threads when `parallel`, else on the calling thread
// without entering OpenMP at all (a parallel region switched off by an if clause still sets up a
// team on every call, which shows in a small model's per-token time).
template <class F>
void for_each_index(int64_t n, bool parallel, F&& fn) {
  if (parallel) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) fn(i);
  } else {
    for (int64_t i = 0; i < n; ++i) fn(i);
  }
}

}  // namespace decodelab
