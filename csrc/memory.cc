// Aligned and huge-page buffers (decodelab/aligned.h): huge_alloc / huge_free, and the code of the
// buffer types, compiled here once so that kernel files built per instruction set (cpu/isa.h) do
// not each emit a copy that the linker could pick for every caller.
#include <sys/mman.h>

#include <cstdint>
#include <new>

#include "decodelab/aligned.h"

namespace decodelab {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
size_t huge_rounded(size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }
}  // namespace

void* huge_alloc(size_t bytes) {
  if (bytes < kHugePage) return ::operator new(bytes, std::align_val_t(kAlign));
  // Over-map by one huge page and trim both ends, so the block starts on a 2 MiB boundary.
  const size_t len = huge_rounded(bytes);
  void* raw = ::mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t r = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t a = (r + kHugePage - 1) / kHugePage * kHugePage;
  if (a > r) ::munmap(raw, a - r);
  if (r + kHugePage > a) ::munmap(reinterpret_cast<void*>(a + len), r + kHugePage - a);
  // Only the whole huge pages: a partly used one at the end would make the first write to its
  // tail take 2 MiB of memory for what may be a few KiB.
#ifdef MADV_HUGEPAGE
  ::madvise(reinterpret_cast<void*>(a), bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
#endif
  return reinterpret_cast<void*>(a);
}

void huge_free(void* p, size_t bytes) {
  if (!p) return;
  if (bytes < kHugePage) ::operator delete(p, std::align_val_t(kAlign));
  else ::munmap(p, huge_rounded(bytes));
}

}  // namespace decodelab

template class std::vector<float, decodelab::AlignedAllocator<float>>;
template class std::vector<int16_t, decodelab::AlignedAllocator<int16_t>>;
template class std::vector<uint8_t, decodelab::AlignedAllocator<uint8_t>>;
template class std::vector<uint16_t, decodelab::AlignedAllocator<uint16_t>>;
template class std::vector<uint8_t, decodelab::HugePageAllocator<uint8_t>>;
template class std::vector<float, decodelab::HugePageAllocator<float>>;
