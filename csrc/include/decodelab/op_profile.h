// Where forward passes spend their time, op by op: a collector installed on one thread
// (exchange_op_profile), which Transformer::run and the decoder mark as they go when it is there.
#pragma once

#include <chrono>
#include <cstdint>

namespace decodelab {

// The ops of a pass, in the order they run. Each mark gives an op the time since the previous one,
// so the ops of a pass add up to its time on the calling thread (parallel regions included).
enum class Op : int {
  Embed,       // token (and position) embeddings
  Norm,        // every RMSNorm / LayerNorm but the final one
  QkvProj,     // q, k and v projections
  Rope,        // q/k norms and rotary embeddings
  KvStore,     // writing keys and values into the cache
  Attention,   // attention over the cache (batched decode: with its RoPE and stores)
  OutProj,     // the attention's output projection
  MlpIn,       // gate and up (or fc)
  Activation,  // SiLU(gate) * up, or the GELU
  MlpOut,      // down
  Residual,    // residual additions
  Head,        // final norm and output head
  Sampling,    // the sampler chain choosing a token (decoder loops)
  kCount
};
constexpr int kOpCount = static_cast<int>(Op::kCount);
const char* op_name(Op op);

// Passes where every sequence adds one token (decode steps, batched or not), and the others
// (prompts, a speculative round's pass over its drafts).
enum class Phase : int { Prompt, Decode, kCount };
constexpr int kPhaseCount = static_cast<int>(Phase::kCount);

struct OpProfile {
  double seconds[kPhaseCount][kOpCount] = {};
  int64_t calls[kPhaseCount][kOpCount] = {};
  // Per phase: passes, token rows, bytes of weights the linear ops hold (read once per decode
  // pass), and multiply-adds per op; bytes of cache the attention read.
  int64_t passes[kPhaseCount] = {};
  int64_t rows[kPhaseCount] = {};
  double weight_bytes[kPhaseCount][kOpCount] = {};
  double macs[kPhaseCount][kOpCount] = {};
  double kv_bytes[kPhaseCount] = {};
};

// This thread's collector, or null (then nothing is timed).
OpProfile* current_op_profile();

// Installs `p` (or null) on this thread; returns what was there.
OpProfile* exchange_op_profile(OpProfile* p);

// The marks of one pass in one phase; does nothing without a collector.
class OpClock {
 public:
  explicit OpClock(Phase phase) : p_(current_op_profile()), ph_(static_cast<int>(phase)) {
    if (p_) t_ = std::chrono::steady_clock::now();
  }
  bool on() const { return p_ != nullptr; }
  // The time since the previous mark (or the clock's start) goes to `op`.
  void mark(Op op) {
    if (!p_) return;
    const auto t = std::chrono::steady_clock::now();
    const int o = static_cast<int>(op);
    p_->seconds[ph_][o] += std::chrono::duration<double>(t - t_).count();
    ++p_->calls[ph_][o];
    t_ = t;
  }
  OpProfile* profile() const { return p_; }
  int phase() const { return ph_; }

 private:
  OpProfile* p_;
  int ph_;
  std::chrono::steady_clock::time_point t_{};
};

}  // namespace decodelab
