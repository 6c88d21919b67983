// Continuous batching: one scheduler owns the running requests of a model. Each step admits
// waiting requests, prefills prompts in chunks, and decodes every running sequence in one batched
// pass; requests join and leave between steps and share the model's KV block pool.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "decodelab/decoder.h"
#include "decodelab/kv_cache.h"
#include "decodelab/prefix_cache.h"
#include "decodelab/sampling.h"
#include "decodelab/transformer.h"

namespace decodelab {

struct SchedulerOptions {
  int max_running = 32;     // sequences decoding at once (more wait)
  int max_waiting = 256;    // requests queued beyond them; add() refuses more with QueueFull
  // Prompt tokens per forward pass: a prompt runs in chunks of this many from its first token
  // (the boundaries depend on the request alone), one chunk of each prefilling request per step
  // until prefill_budget tokens, so a long prompt does not stall the decode of the others.
  int prefill_chunk = 256;
  int prefill_budget = 512;
  // Full prompt blocks kept by content after their request ends, for later prompts that start
  // the same way (0: no prefix caching).
  int prefix_cache_blocks = 0;
  KVDType kv_dtype = KVDType::F32;
  void check() const;  // throws std::invalid_argument naming a value out of range
};

// add() when max_waiting requests already wait: the caller should come back later (HTTP 429).
class QueueFull : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What one step did to one request: tokens it produced (in order), and whether it finished.
struct RequestUpdate {
  int64_t id = 0;
  std::vector<int32_t> tokens;
  bool finished = false;
  std::string finish_reason;  // "stop", "length" or "cancelled", once finished
  // Per token, with DecodeOptions::logprobs >= 0: its logprob and the top alternatives.
  std::vector<float> logprobs;
  std::vector<std::vector<int32_t>> top_ids;
  std::vector<std::vector<float>> top_logprobs;
};

class Scheduler {
 public:
  Scheduler(const Transformer& model, const SchedulerOptions& opts);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request and returns its id. Checks everything a request can get wrong (the context
  // window, token ids, options) here and throws std::invalid_argument; QueueFull when full.
  // reuse_prefix: the prompt may start from cached blocks of earlier prompts (see PrefixCache);
  // off, its results depend on the request alone. Safe from any thread, beside step().
  int64_t add(std::vector<int32_t> prompt, std::shared_ptr<Chain> chain, const DecodeOptions& opts,
              bool reuse_prefix);
  // Ends a request at the next step (its update says "cancelled"); unknown ids are ignored.
  void cancel(int64_t id);
  // One iteration; the updates of every request that produced a token or finished.
  std::vector<RequestUpdate> step();
  // A finished request's result (tokens, logprobs, timings), once; throws for an unknown id.
  GenerateResult take_result(int64_t id);

  struct Stats {
    int running = 0, waiting = 0, prefilling = 0;
    int64_t steps = 0, prompt_tokens = 0, reused_tokens = 0, generated_tokens = 0;
    int64_t decode_rows = 0;  // sum over decode passes of their batch sizes
    int64_t cached_blocks = 0;
  };
  Stats stats() const;
  bool idle() const;
  const SchedulerOptions& options() const { return opts_; }
  const Transformer& model() const { return model_; }

 private:
  struct Request;
  using clock = std::chrono::steady_clock;
  void take_prefix(Request& r);  // cached blocks the prompt starts with, if it may reuse them
  void finish(Request& r, std::string reason, std::vector<RequestUpdate>& out);

  const Transformer& model_;
  SchedulerOptions opts_;
  mutable std::mutex mu_;  // guards incoming_, cancels_, done_, next_id_ and stats_
  std::deque<std::unique_ptr<Request>> incoming_;
  std::vector<int64_t> cancels_;
  std::map<int64_t, GenerateResult> done_;
  int64_t next_id_ = 1;
  Stats stats_;
  // Owned by the thread that calls step().
  std::deque<std::unique_ptr<Request>> waiting_;
  std::vector<std::unique_ptr<Request>> running_;
  std::unique_ptr<PrefixCache> prefix_;
  std::vector<float> logits_;
};

}  // namespace decodelab
