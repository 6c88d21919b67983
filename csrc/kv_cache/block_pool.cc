// The block pool: fixed-size KV blocks in segments that never move, with reference counts.
#include "decodelab/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace decodelab {

void BlockPool::check_block_size(int block_size) {
  if (block_size < 1 || block_size > kMaxBlockSize)
    throw std::invalid_argument("kv_block_size must be in [1, " + std::to_string(kMaxBlockSize) + "], got " +
                                std::to_string(block_size));
}

BlockPool::BlockPool(const ModelConfig& cfg, const void* owner, KVDType dtype, int block_size)
    : owner_(owner),
      dtype_(dtype),
      block_size_(block_size),
      n_layers_(cfg.n_layers),
      n_kv_heads_(cfg.n_kv_heads),
      head_dim_(cfg.head_dim) {
  check_block_size(block_size);
  block_elems_ = static_cast<size_t>(n_layers_) * 2 * n_kv_heads_ * block_size_ * head_dim_;
}

BlockPool::~BlockPool() {
  for (const Chunk& c : chunks_) huge_free(c.p, c.blocks * stride());
  for (auto& seg : segs_) delete[] seg.load();
}

namespace {
constexpr size_t kHugePageBytes = size_t(2) << 20, kChunkBytes = size_t(32) << 20;
}

int BlockPool::alloc() {
  std::lock_guard<std::mutex> lock(mu_);
  int id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    const size_t stride = this->stride();
    if (chunks_.empty() || chunks_.back().used == chunks_.back().blocks) {
      // The first chunk spans at least one huge page; each next one doubles, up to kChunkBytes.
      const int first = static_cast<int>((kHugePageBytes + stride - 1) / stride);
      const int cap = std::max(first, static_cast<int>(kChunkBytes / stride));
      const int n = chunks_.empty() ? first : std::min(cap, 2 * chunks_.back().blocks);
      chunks_.push_back(Chunk{static_cast<uint8_t*>(huge_alloc(n * stride)), n, 0});
    }
    Chunk& c = chunks_.back();
    uint8_t* p = c.p + static_cast<size_t>(c.used++) * stride;
    std::memset(p, 0, block_bytes());
    if (n_blocks_ == INT32_MAX) throw std::length_error("the KV block pool holds 2^31 - 1 blocks already");
    id = n_blocks_;
    const int s = segment_of(id);
    if (!segs_[s].load(std::memory_order_relaxed))
      segs_[s].store(new uint8_t*[static_cast<size_t>(kSeg0) << s](), std::memory_order_release);
    slot(id) = p;
    ++n_blocks_;
    refs_.push_back(0);
  }
  refs_[id] = 1;
  return id;
}

void BlockPool::retain(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  ++refs_[id];
}

void BlockPool::release(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (--refs_[id] == 0) free_.push_back(id);
}

int BlockPool::refcount(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return refs_[id];
}

BlockPool::Stats BlockPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s{static_cast<int64_t>(n_blocks_), 0, 0, 0};
  for (int r : refs_) {
    s.blocks_in_use += r > 0;
    s.blocks_shared += r > 1;
    s.references += r;
  }
  return s;
}

}  // namespace decodelab
