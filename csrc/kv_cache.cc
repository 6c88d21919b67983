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

KVCache::Use::Use(const KVCache& c) : c_(c) {
  if (c.busy_.exchange(true, std::memory_order_acquire))
    throw std::invalid_argument(
        "this KV cache is in use by another call (another thread is running it): a cache holds one sequence and "
        "serves one call at a time; give each thread its own cache (Model.new_cache() or cache.fork())");
}

KVCache::KVCache(std::shared_ptr<BlockPool> pool, int capacity, int max_capacity, bool grow)
    : pool_(std::move(pool)), capacity_(capacity), max_capacity_(max_capacity), grow_(grow) {
  if (capacity < 1 || capacity > max_capacity)
    throw std::invalid_argument("cache capacity must be in [1, " + std::to_string(max_capacity) +
                                "] (the model's context window), got " + std::to_string(capacity));
}

KVCache::~KVCache() {
  for (int b : table_) pool_->release(b);
}

int KVCache::shared_blocks() const {
  int n = 0;
  for (int b : table_) n += pool_->refcount(b) > 1;
  return n;
}

void KVCache::prepare_append(int n) {
  const int64_t end = static_cast<int64_t>(length_) + n;
  if (end > max_capacity_)
    throw std::invalid_argument(std::to_string(end) + " tokens (" + std::to_string(length_) + " cached + " +
                                std::to_string(n) + " new) exceed the context window of " +
                                std::to_string(max_capacity_) + " positions");
  if (end > capacity_) {
    if (!grow_)
      throw std::invalid_argument(std::to_string(end) + " tokens (" + std::to_string(length_) + " cached + " +
                                  std::to_string(n) + " new) exceed the cache capacity of " +
                                  std::to_string(capacity_) + " (create the cache with grow=True to let it grow)");
    while (capacity_ < end) capacity_ = static_cast<int>(std::min<int64_t>(2 * static_cast<int64_t>(capacity_), max_capacity_));
  }
  const int bs = pool_->block_size();
  // Copy-on-write: the block that holds position `length_` may be shared with a fork.
  if (length_ % bs != 0) {
    const int idx = length_ / bs;
    const int old = table_[idx];
    if (pool_->refcount(old) > 1) {
      const int fresh = pool_->alloc();
      std::memcpy(pool_->data(fresh), pool_->data(old), pool_->block_bytes());
      pool_->release(old);
      table_[idx] = fresh;
    }
  }
  const size_t need = static_cast<size_t>((end + bs - 1) / bs);
  while (table_.size() < need) table_.push_back(pool_->alloc());
}

void KVCache::commit_append(const int32_t* tokens, int n) {
  token_ids_.insert(token_ids_.end(), tokens, tokens + n);
  length_ += n;
}

std::shared_ptr<KVCache> KVCache::fork() const {
  auto c = std::make_shared<KVCache>(pool_, capacity_, max_capacity_, grow_);
  for (int b : table_) pool_->retain(b);
  c->table_ = table_;
  c->length_ = length_;
  c->token_ids_ = token_ids_;
  return c;
}

void KVCache::truncate(int n) {
  if (n < 0 || n > length_)
    throw std::invalid_argument("truncate(" + std::to_string(n) + ") is outside [0, " + std::to_string(length_) +
                                "], the tokens this cache holds");
  const int bs = pool_->block_size();
  const size_t keep = static_cast<size_t>((n + bs - 1) / bs);
  while (table_.size() > keep) {
    pool_->release(table_.back());
    table_.pop_back();
  }
  length_ = n;
  token_ids_.resize(n);
}

}  // namespace decodelab
