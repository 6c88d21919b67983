// Paged key/value cache.
//
// A BlockPool, one per model and cache dtype, owns fixed-size blocks; each holds the keys and
// values of `block_size` consecutive positions for every layer:
//   block (n_layers, 2 [K, V], n_kv_heads, block_size, head_dim)
// A KVCache is one sequence: a block table mapping position p to block table[p / block_size],
// row p % block_size. Blocks are reference-counted, so fork() shares every block of a prefix
// without copying a token; a write into a block that another sequence still references copies
// that one block first (copy-on-write).
//
// int8 caches store each (layer, K or V, head, position) row of head_dim values as int8 with one
// fp32 scale (row max |x| / 127, values round(x / scale)), the scales after the values in the same
// block: (n_layers, 2, n_kv_heads, block_size) floats from scales_offset(). A row reads back as
// scale * value, within half a step (max |x| / 254) of what was stored.
#pragma once

#include "decodelab/aligned.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "decodelab/config.h"

namespace decodelab {

enum class KVDType { F32, BF16, I8 };

class BlockPool {
 public:
  // Tokens per block: the one rule for kv_block_size, checked by the model at load and here.
  static constexpr int kMaxBlockSize = 4096;
  static void check_block_size(int block_size);

  BlockPool(const ModelConfig& cfg, const void* owner, KVDType dtype, int block_size);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int alloc();                 // a block with reference count 1
  void retain(int id);
  void release(int id);
  int refcount(int id) const;

  // Safe beside alloc() on other threads: a block's address never moves once published.
  uint8_t* data(int id) { return slot(id); }
  const uint8_t* data(int id) const { return slot(id); }
  // Element offset of the (block_size, head_dim) slab of one layer, K (kind 0) or V (kind 1), head.
  size_t slab(int layer, int kind, int kv_head) const {
    return ((static_cast<size_t>(layer) * 2 + kind) * n_kv_heads_ + kv_head) * block_size_ * head_dim_;
  }

  const void* owner() const { return owner_; }
  KVDType dtype() const { return dtype_; }
  size_t elem_bytes() const { return dtype_ == KVDType::F32 ? 4 : dtype_ == KVDType::BF16 ? 2 : 1; }
  int block_size() const { return block_size_; }
  size_t block_elems() const { return block_elems_; }
  // Where an int8 block's row scales start (bytes, 64-aligned), and the block's whole size.
  size_t scales_offset() const { return (block_elems_ * elem_bytes() + 63) / 64 * 64; }
  size_t block_bytes() const {
    return dtype_ == KVDType::I8 ? scales_offset() + block_elems_ / head_dim_ * sizeof(float)
                                 : block_elems_ * elem_bytes();
  }
  // An int8 block's row scales of one slab (block_size floats, as slab() counts elements).
  float* row_scales(uint8_t* blk, int layer, int kind, int kv_head) const {
    return reinterpret_cast<float*>(blk + scales_offset()) + slab(layer, kind, kv_head) / head_dim_;
  }
  const float* row_scales(const uint8_t* blk, int layer, int kind, int kv_head) const {
    return reinterpret_cast<const float*>(blk + scales_offset()) + slab(layer, kind, kv_head) / head_dim_;
  }
  int n_layers() const { return n_layers_; }
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return head_dim_; }

  struct Stats {
    int64_t blocks_allocated;  // blocks obtained from the system (in use or free)
    int64_t blocks_in_use;     // referenced by at least one sequence
    int64_t blocks_shared;     // referenced by two or more sequences
    int64_t references;        // sum of reference counts
  };
  Stats stats() const;

 private:
  const void* owner_;
  KVDType dtype_;
  int block_size_, n_layers_, n_kv_heads_, head_dim_;
  size_t block_elems_;
  mutable std::mutex mu_;
  // Blocks are carved, one after another, from chunks from huge_alloc: the first spans at least
  // 2 MiB, each next one doubles, up to 32 MiB. A decode step reads every block of a sequence,
  // and from 2 MiB pages (as the weights are) instead of 4 KiB ones the hardware keeps fewer
  // translations in flight (benchmarks/results/kernel_tuning.md). A freed block goes back to the
  // free list; chunks go with the pool.
  struct Chunk {
    uint8_t* p;
    int blocks, used;
  };
  // Bytes from one block of a chunk to the next (each block on a 64-byte boundary).
  size_t stride() const { return (block_bytes() + kAlign - 1) / kAlign * kAlign; }
  std::vector<Chunk> chunks_;
  // Block addresses by id, in segments that never move: segment s holds ids
  // [kSeg0 (2^s - 1), kSeg0 (2^(s+1) - 1)). Threads decoding other caches of the model read their
  // blocks' addresses without the lock while alloc() appends, which a growing vector would move.
  static constexpr int kSeg0 = 1024, kSegments = 40;
  std::atomic<uint8_t**> segs_[kSegments] = {};
  int n_blocks_ = 0;  // ids handed out so far (under mu_)
  static int segment_of(int id) { return 63 - __builtin_clzll(static_cast<uint64_t>(id) / kSeg0 + 1); }
  uint8_t*& slot(int id) const {
    const int s = segment_of(id);
    return segs_[s].load(std::memory_order_acquire)[id - static_cast<int64_t>(kSeg0) * ((int64_t(1) << s) - 1)];
  }
  std::vector<int> refs_;
  std::vector<int> free_;
};

class KVCache {
 public:
  // Exclusive use of a cache by one call at a time: a second thread that reaches for a cache
  // another call is writing gets std::invalid_argument instead of corrupting its block table.
  class Use {
   public:
    explicit Use(const KVCache& c);
    ~Use() { c_.busy_.store(false, std::memory_order_release); }
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

   private:
    const KVCache& c_;
  };

  KVCache(std::shared_ptr<BlockPool> pool, int capacity, int max_capacity, bool grow);
  ~KVCache();
  KVCache(const KVCache&) = delete;
  KVCache& operator=(const KVCache&) = delete;

  int length() const { return length_; }
  int capacity() const { return capacity_; }
  bool grows() const { return grow_; }
  BlockPool& pool() const { return *pool_; }
  const std::shared_ptr<BlockPool>& pool_ptr() const { return pool_; }
  const std::vector<int>& block_table() const { return table_; }
  // Exact bytes of the blocks this sequence references (shared blocks included).
  uint64_t nbytes() const { return static_cast<uint64_t>(table_.size()) * pool_->block_bytes(); }
  int shared_blocks() const;

  const std::vector<int32_t>& token_ids() const { return token_ids_; }

  // Make positions [length, length + n) writable: allocate blocks, copy a shared last block
  // (copy-on-write), grow the capacity if allowed. Throws std::invalid_argument on overflow.
  void prepare_append(int n);
  void commit_append(const int32_t* tokens, int n);

  // An empty cache takes `blocks` (full blocks of this pool, found by PrefixCache) as its first
  // blocks.size() * block_size positions, holding tokens[0, that); each block gains a reference.
  void adopt_prefix(const std::vector<int>& blocks, const int32_t* tokens);

  std::shared_ptr<KVCache> fork() const;
  void truncate(int n);  // keep the first n tokens
  void clear() { truncate(0); }

 private:
  std::shared_ptr<BlockPool> pool_;
  std::vector<int> table_;
  int length_ = 0;
  int capacity_;
  int max_capacity_;  // the model's context window
  bool grow_;
  std::vector<int32_t> token_ids_;
  mutable std::atomic<bool> busy_{false};
};

}  // namespace decodelab
