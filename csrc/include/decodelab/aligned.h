// 64-byte aligned storage for activations, scratch and cache blocks.
//
// Vectorised loops (Eigen's among them) handle the first elements of an unaligned array one by
// one, so the order of a sum, and its last bits, depends on where the buffer happens to start.
// With every buffer on a 64-byte boundary (and row strides multiples of 16 floats) the same
// input gives the same logits on every call, thread and cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

namespace decodelab {

constexpr std::size_t kAlign = 64;

template <typename T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(kAlign))); }
  void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t(kAlign)); }
  template <typename U>
  bool operator==(const AlignedAllocator<U>&) const { return true; }
  template <typename U>
  bool operator!=(const AlignedAllocator<U>&) const { return false; }
};

using FloatBuffer = std::vector<float, AlignedAllocator<float>>;

// Storage read end to end on every decode step (converted weights, KV-cache chunks, the bandwidth
// probe): blocks of 2 MiB or more start on a 2 MiB boundary and ask the kernel for transparent huge
// pages before the first write, so streaming them walks one page table entry per 2 MiB instead of
// per 4 KiB.
// Where huge pages are off (or the hint is refused) they are ordinary pages; nothing else changes.
// Defined in memory.cc.
void* huge_alloc(std::size_t bytes);
void huge_free(void* p, std::size_t bytes);

template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(huge_alloc(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) { huge_free(p, n * sizeof(T)); }
  // resize() leaves new elements default-initialised, not zeroed: a gigabyte of weights is then
  // first touched by the threads that write it, not by one thread zeroing it (fresh pages of 2 MiB
  // or more read as zero). Every user writes its elements before reading them.
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const { return true; }
  template <typename U>
  bool operator!=(const HugePageAllocator<U>&) const { return false; }
};
using HugeBytes = std::vector<uint8_t, HugePageAllocator<uint8_t>>;

// Makes a reused scratch buffer hold at least n elements. It never shrinks: resizing down and back
// up would zero-fill the regrown part on every call (a layer of 768 inputs after one of 2048).
template <class Buffer>
void grow(Buffer& buf, size_t n) {
  if (buf.size() < n) buf.resize(n);
}

// Rounds a row length in floats up to a whole number of 64-byte lines.
inline int aligned_stride(int n) { return (n + 15) / 16 * 16; }

}  // namespace decodelab

// The buffer types' code is compiled once, in memory.cc (see there).
extern template class std::vector<float, decodelab::AlignedAllocator<float>>;
extern template class std::vector<int16_t, decodelab::AlignedAllocator<int16_t>>;
extern template class std::vector<uint8_t, decodelab::AlignedAllocator<uint8_t>>;
extern template class std::vector<uint16_t, decodelab::AlignedAllocator<uint16_t>>;
extern template class std::vector<uint8_t, decodelab::HugePageAllocator<uint8_t>>;
extern template class std::vector<float, decodelab::HugePageAllocator<float>>;
