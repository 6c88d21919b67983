// One sequence's cache (KVCache): its block table, appends, forks that share blocks, truncation.
#include "decodelab/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace decodelab {

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

void KVCache::adopt_prefix(const std::vector<int>& blocks, const int32_t* tokens) {
  const int n = static_cast<int>(blocks.size()) * pool_->block_size();
  if (length_ != 0 || n > capacity_)
    throw std::invalid_argument("adopt_prefix needs an empty cache with room for " + std::to_string(n) + " tokens");
  for (int b : blocks) pool_->retain(b);
  table_ = blocks;
  length_ = n;
  token_ids_.assign(tokens, tokens + n);
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
