// PrefixCache: prompt blocks kept by content, looked up block by block from a sequence's start.
#include "decodelab/prefix_cache.h"

#include <limits>

namespace decodelab {

PrefixCache::PrefixCache(std::shared_ptr<BlockPool> pool, int max_blocks)
    : pool_(std::move(pool)), max_blocks_(max_blocks) {}

PrefixCache::~PrefixCache() {
  for (auto& kv : nodes_) pool_->release(kv.second.block);
}

std::vector<int> PrefixCache::match(const int32_t* tokens, int limit) {
  const int bs = pool_->block_size();
  std::vector<int> blocks;
  int64_t parent = 0;
  ++clock_;
  for (int p = 0; p + bs <= limit; p += bs) {
    auto it = index_.find({parent, std::vector<int32_t>(tokens + p, tokens + p + bs)});
    if (it == index_.end()) break;
    Node& n = nodes_.at(it->second);
    n.last_use = clock_;
    blocks.push_back(n.block);
    parent = it->second;
  }
  return blocks;
}

void PrefixCache::insert(const KVCache& cache, int n) {
  const int bs = pool_->block_size();
  const std::vector<int32_t>& ids = cache.token_ids();
  const std::vector<int>& table = cache.block_table();
  int64_t parent = 0;
  ++clock_;
  for (int p = 0, b = 0; p + bs <= n; p += bs, ++b) {
    std::pair<int64_t, std::vector<int32_t>> key{parent, std::vector<int32_t>(ids.begin() + p, ids.begin() + p + bs)};
    auto it = index_.find(key);
    if (it != index_.end()) {
      nodes_.at(it->second).last_use = clock_;
      parent = it->second;
      continue;
    }
    const int64_t id = next_++;
    pool_->retain(table[b]);
    nodes_.emplace(id, Node{parent, key.second, table[b], clock_, 0});
    if (parent) ++nodes_.at(parent).children;
    index_.emplace(std::move(key), id);
    parent = id;
  }
  evict();
}

void PrefixCache::evict() {
  while (size() > max_blocks_) {
    // The least recently used leaf that only this cache references.
    int64_t victim = 0;
    uint64_t oldest = std::numeric_limits<uint64_t>::max();
    for (const auto& kv : nodes_)
      if (kv.second.children == 0 && kv.second.last_use < oldest && pool_->refcount(kv.second.block) == 1)
        victim = kv.first, oldest = kv.second.last_use;
    if (!victim) return;  // every block is in use: kept until a later insert
    Node& n = nodes_.at(victim);
    if (n.parent) --nodes_.at(n.parent).children;
    index_.erase({n.parent, n.tokens});
    pool_->release(n.block);
    nodes_.erase(victim);
  }
}

}  // namespace decodelab
