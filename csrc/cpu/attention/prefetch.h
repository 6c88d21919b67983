// Software prefetch for the attention kernels: cache blocks live apart, where the hardware
// prefetcher stops, so each kernel asks for the next slab itself.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>

#include "cpu/isa.h"

namespace decodelab {
namespace DECODELAB_ISA {

// Asks memory for `bytes` at p a few cache lines per next() over `calls` calls, so the requests
// ride inside the arithmetic on the current slab instead of leaving as one burst, which fills the
// core's miss buffers and stalls it (a slab of keys or values is one block's rows of one head:
// 16 KiB fp32 with the default 64-token blocks and head size 64).
struct Trickle {
  const char* p = nullptr;
  const char* end = nullptr;
  int per = 0;
  Trickle(const void* base, size_t bytes, int calls)
      : p(static_cast<const char*>(base)), end(base ? p + bytes : nullptr),
        per(static_cast<int>(((bytes + 63) / 64 + calls - 1) / std::max(calls, 1))) {}
  void next() {
    for (int k = 0; k < per && p < end; ++k, p += 64) _mm_prefetch(p, _MM_HINT_T0);
  }
  void rest() {
    for (; p < end; p += 64) _mm_prefetch(p, _MM_HINT_T0);
  }
};

// Requests `bytes` at p into cache at once (attention's plain loops, for head sizes the vector
// kernels do not take; those trickle the requests instead).
inline void prefetch_range(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(c + off, _MM_HINT_T0);
}

}  // namespace DECODELAB_ISA
}  // namespace decodelab
