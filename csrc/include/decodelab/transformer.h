// Decoder-only transformers: Llama (RMSNorm, RoPE, SwiGLU, grouped-query attention) and
// GPT-2 (learned positions, LayerNorm, gelu_new, Conv1D layout, tied head).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "decodelab/config.h"
#include "decodelab/kernels.h"
#include "decodelab/kv_cache.h"
#include "decodelab/op_profile.h"
#include "decodelab/weights.h"
#include "decodelab/workspace.h"

namespace decodelab {

class Transformer {
 public:
  // weight_type: the precision the linear layers (and the output head) are kept and read in.
  // zero_copy: fp32 linear layers and head are read from the file mapping itself rather than
  // copied once into huge pages (see Transformer::Transformer). block_size: tokens per KV-cache
  // block, in [1, kMaxBlockSize]. bf16_matmul: with bf16 or int8 weights, where the CPU multiplies
  // bf16 natively, the prompt matmuls (from gemm_min_rows rows) round their inputs to bf16
  // (Linear::bf16_activations).
  Transformer(const ModelConfig& cfg, std::shared_ptr<WeightStore> weights, int n_threads,
              WeightType weight_type = WeightType::F32, bool zero_copy = false,
              int block_size = kDefaultBlockSize, bool bf16_matmul = true);
  WeightType weight_type() const { return weight_type_; }
  // Whether prompt matmuls round their inputs to bf16 (bf16_matmul at construction, bf16 or int8
  // weights, a CPU with native bf16 products).
  bool bf16_matmul() const {
    return bf16_matmul_ && bf16_matmul_applies(weight_type_);
  }
  uint64_t quantized_bytes() const;
  // Bytes of fp32 copies: the store's conversions and the layers copied from the mapping.
  uint64_t owned_bytes() const;

  const ModelConfig& config() const { return cfg_; }
  const WeightStore& weights() const { return *weights_; }
  int n_threads() const { return n_threads_.load(); }
  // Throws while an Activity is alive (a call running on another thread).
  void set_n_threads(int n);
  // auto_threads: each forward pass runs on n_threads less the cores other programs keep busy
  // (at least 1), checked every kThreadCheckNs or more. Spread over two cores, a step waits at every
  // parallel region for a thread that shares its core with another program; on one free core it
  // runs undisturbed.
  void set_auto_threads(bool on) { auto_threads_.store(on); }
  bool auto_threads() const { return auto_threads_.load(); }
  // The threads the next forward pass runs on.
  int threads_now() const;
  static constexpr int64_t kThreadCheckNs = 20'000'000;
  // Marks a call in progress for as long as it lives (the bindings hold one per call), so that
  // set_n_threads refuses to change the thread count under it.
  class Activity {
   public:
    explicit Activity(const Transformer& m);
    ~Activity();
    Activity(const Activity&) = delete;
    Activity& operator=(const Activity&) = delete;

   private:
    const Transformer& m_;
  };

  // Runs T tokens at positions cache.length() .. cache.length()+T-1 and appends them to the
  // cache. Writes logits (T, vocab) when all_logits, else (1, vocab) for the last token.
  // Throws, leaving the cache as it was, when the tokens do not fit or are out of range.
  void forward(const int32_t* tokens, int T, KVCache& cache, float* logits, bool all_logits) const;
  // forward() with all logits, also writing the residual stream into hidden: (n_layers + 1) x T x
  // dim floats, the embeddings first, then each layer's output (before the final norm); and, where
  // attentions is not null (the cache then must be empty), each layer's attention probabilities:
  // n_layers x n_heads x T x T floats (attention_probs.h).
  void forward_hidden(const int32_t* tokens, int T, KVCache& cache, float* logits, float* hidden,
                      float* attentions = nullptr) const;
  // The final norm and the output head on R rows of the residual stream (a logit lens).
  void head(const float* hidden, int R, float* logits) const;

  // One decode step for B sequences at once, token b continuing caches[b] (distinct caches of
  // this model, any lengths); logits (B, vocab). The weights are read once for the whole batch.
  // fixed_rows: each row's logits are the same bits at any B (FixedRowArithmetic, in passes of at
  // most kFixedRowsMax rows), for a scheduler whose batches come and go.
  void decode_batch(const int32_t* tokens, int B, KVCache* const* caches, float* logits,
                    bool fixed_rows = false) const;

  // Throws unless the cache belongs to this model and each id is in the vocabulary.
  void check_tokens(const int32_t* tokens, int T, const KVCache& cache) const;

  // A new, empty sequence cache drawing on this model's block pool for `dtype`.
  std::shared_ptr<KVCache> new_cache(int capacity, KVDType dtype, bool grow) const;
  // The pool for `dtype`, or null if no cache of that dtype was made yet.
  std::shared_ptr<BlockPool> pool(KVDType dtype) const;
  // Tokens per cache block unless load() says otherwise. A decode step reads each block's keys and
  // values of one layer and head as one contiguous slab: 64-token slabs (16 KiB fp32 at head size
  // 64) make long-context attention faster than vLLM's 16 (benchmarks/results/kernel_tuning.md).
  // The cost is at most 63 positions of unused cache per sequence, and a fork copies up to 63 rows
  // on its first write.
  static constexpr int kDefaultBlockSize = 64;
  static constexpr int kMaxBlockSize = BlockPool::kMaxBlockSize;
  int block_size() const { return block_size_; }
  // Rows of activations the model's first scratch is sized (and touched) for at load: a prompt up
  // to this long runs on memory that is already mapped, so the first request pays no page faults
  // for it (tens of milliseconds for a 100M-parameter model here).
  static constexpr int kReservedRows = 512;
  // Positions whose RoPE rows are kept in a table; later ones are computed per call.
  static constexpr int kRopeTablePositions = 8192;

 private:
  struct Layer {
    const float* norm1_w = nullptr;
    const float* norm1_b = nullptr;
    const float* norm2_w = nullptr;
    const float* norm2_b = nullptr;
    const float* post_attn_norm_w = nullptr;  // Gemma: the attention's output normalised
    const float* post_ff_norm_w = nullptr;    // Gemma: the MLP's output normalised
    const float* q_norm_w = nullptr;  // Qwen3: (head_dim), applied to each query head
    const float* k_norm_w = nullptr;  // and each key head
    Linear q, k, v;    // Llama
    Linear qkv;        // GPT-2: one (dim, 3*dim) Conv1D
    Linear qkv_rows[3];  // GPT-2: its q, k and v rows in place, when the layout allows (qkv_split)
    bool qkv_split = false;
    Linear o;
    Linear gate, up;   // Llama SwiGLU
    Linear fc;         // GPT-2
    Linear down;
  };
  void norm(const float* x, const float* w, const float* b, int T, float* y) const;
  void rope_rows(int p0, int T, float* cos_out, float* sin_out, int seq_len = 0, bool local = false) const;
  std::vector<Linear*> layer_linears();  // every layer's linear layers present in this architecture
  void run(const int32_t* tokens, int R, KVCache* const* caches, const int* rows, int n_seg, float* logits,
           bool all_logits, Workspace& ws, float* hidden = nullptr, float* attentions = nullptr) const;
  // A profiled pass's weight bytes, multiply-adds and cache reads (decodelab/op_profile.h).
  void record_pass(OpClock& clk, int R, KVCache* const* caches, const int* rows, int n_seg, bool all_logits) const;

  ModelConfig cfg_;
  std::shared_ptr<WeightStore> weights_;
  std::atomic<int> n_threads_;
  std::atomic<bool> auto_threads_{false};
  mutable std::atomic<int64_t> next_thread_check_ns_{0};
  mutable std::atomic<int> auto_n_{0};         // auto_threads' current choice (0: none yet)
  mutable std::atomic<bool> drop_pending_{false};
  mutable std::atomic<int> active_{0};
  const float* tok_embed_ = nullptr;   // (vocab, dim), unless the table stays in a file's blocks:
  // read a row at a time with pread, not through the mapping, where a fault would map 64 KiB of
  // neighbouring rows (the kernel's fault-around) that then stay resident.
  struct BlockRows {
    const BlockFormat* format = nullptr;
    const MappedFile* file = nullptr;
    uint64_t offset = 0;  // of row 0 in the file
    size_t row_bytes = 0;
  } embed_blocks_;
  const float* pos_embed_ = nullptr;   // GPT-2: (max_position, dim)
  const float* final_w_ = nullptr;
  const float* final_b_ = nullptr;
  Linear lm_head_;                     // (vocab, dim)
  std::vector<Layer> layers_;
  int rope_positions_ = 0;
  std::vector<float> rope_cos_, rope_sin_;  // (rope_positions_, head_dim/2)
  std::vector<float> rope_local_cos_, rope_local_sin_;  // sliding layers' own (Gemma 3), or empty
  std::vector<std::vector<float>> plus_one_;  // Gemma's RMSNorm weights as 1 + w
  WeightType weight_type_ = WeightType::F32;
  int block_size_ = kDefaultBlockSize;
  bool bf16_matmul_ = true;
  std::vector<QuantizedWeights> quantized_;  // one per quantized linear layer
  HugeBytes arena_;                          // their converted weights
  HugeBytes f32_arena_;                      // fp32 layers copied from the mapping
  // Scratch lent to one forward pass at a time: calls on different caches may run at once from
  // several Python threads, and each takes its own; one is made at load, more only if needed.
  class WorkspaceLease;
  mutable std::mutex ws_mu_;
  mutable std::vector<std::unique_ptr<Workspace>> spare_ws_;
  mutable std::mutex pools_mu_;
  mutable std::shared_ptr<BlockPool> pools_[3];  // by KVDType
};

}  // namespace decodelab
