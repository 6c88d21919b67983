// Prompt blocks found by content, as vLLM's automatic prefix caching finds them: each full block
// of a prefilled prompt is kept under the exact tokens from the sequence's start to the block's
// end, so a later prompt that starts the same way begins from those blocks instead of computing
// them again.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "decodelab/kv_cache.h"

namespace decodelab {

class PrefixCache {
 public:
  // Keeps at most max_blocks blocks (each one reference in `pool`), evicting the least recently
  // used block that no running sequence holds and no longer cached prefix extends.
  PrefixCache(std::shared_ptr<BlockPool> pool, int max_blocks);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // The cached blocks that tokens[0, limit) starts with: their ids, in order; each covers
  // block_size tokens.
  std::vector<int> match(const int32_t* tokens, int limit);
  // Keeps the full blocks of the first n tokens of `cache` (a cache of this pool).
  void insert(const KVCache& cache, int n);
  int size() const { return static_cast<int>(nodes_.size()); }

 private:
  struct Node {
    int64_t parent;                // 0: the sequence's first block
    std::vector<int32_t> tokens;   // this block's tokens
    int block;
    uint64_t last_use;
    int children = 0;
  };
  void evict();

  std::shared_ptr<BlockPool> pool_;
  int max_blocks_;
  uint64_t clock_ = 0;
  int64_t next_ = 1;
  std::map<std::pair<int64_t, std::vector<int32_t>>, int64_t> index_;  // (parent, tokens) -> node
  std::map<int64_t, Node> nodes_;
};

}  // namespace decodelab
