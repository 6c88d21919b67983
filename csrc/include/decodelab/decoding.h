// The decode loop: prefill, then one token per step through a sampler chain, entirely in C++.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "decodelab/kv_cache.h"
#include "decodelab/sampling.h"
#include "decodelab/transformer.h"

namespace decodelab {

// What one sampler stage did to the distribution.
struct StageStats {
  std::string name;
  int n_kept = 0;             // tokens with a finite logit after the stage
  double entropy = 0.0;       // nats, of the distribution after the stage
  double mass_removed = 0.0;  // probability (before the stage) of the tokens it removed
  std::vector<int32_t> top_ids;   // most likely tokens after the stage, best first
  std::vector<float> top_probs;
  std::vector<float> logits;      // the full logits after the stage, in "full" traces only
};

// Fills `out` from the logits before and after a stage. probs_* are scratch of size n.
void stage_stats(const float* before, const float* after, int n, int top, StageStats& out,
                 std::vector<float>& probs_before, std::vector<float>& probs_after);

struct StepTrace {
  std::vector<StageStats> stages;  // "raw" first, then one per sampler stage
  int32_t token = -1;
  int rank_raw = 0;                // 1 = the most likely token
  float logprob_raw = 0.0f;
  int rank_processed = 0;          // under the distribution the selector drew from
  float logprob_processed = 0.0f;
};

struct DecodeOptions {
  int max_new_tokens = 0;
  std::vector<int32_t> eos_ids;
  uint64_t sequence = 0;     // which sample of this prompt: keys the random stream
  int logprobs = -1;         // < 0: none; N >= 0: the chosen token's logprob and the top N
  bool logprobs_processed = false;
  int trace = 0;             // 0 off, 1 per-stage summaries with the top tokens, 2 also full logits
  int trace_top = 20;
};

struct GenerateResult {
  std::vector<int32_t> token_ids;   // generated tokens, the stopping EOS included
  std::string finish_reason;        // "stop" (EOS) or "length"
  double prefill_seconds = 0.0;
  double first_token_seconds = 0.0;  // prefill + choosing the first token
  double decode_seconds = 0.0;       // every later step
  std::vector<float> logprobs;                     // per token, when asked for
  std::vector<std::vector<int32_t>> top_ids;       // per token, top-N alternatives
  std::vector<std::vector<float>> top_logprobs;
  std::vector<StepTrace> trace;
};

// The one rule for a generation's length: the prompt (tokens already cached included) and every
// new token but the last, which is never run through the model, fit the context window. Throws
// std::invalid_argument saying how many new tokens would fit.
void check_context_window(const Transformer& model, int64_t prompt_tokens, int64_t max_new_tokens);

// One sequence decoded a token at a time: the first step() prefills `prompt` (the tokens not yet
// in `cache`), each step() returns the next token, or -1 once finished. `chain` must end in a
// selector (Greedy, Dist, Mirostat). generate() runs the loop in C++; a Python stream drives
// step() itself.
class Decoder {
 public:
  Decoder(const Transformer& model, KVCache& cache, std::vector<int32_t> prompt, Chain& chain,
          const DecodeOptions& opts);
  int32_t step();
  bool finished() const { return finished_; }
  const GenerateResult& result() const { return r_; }
  const Transformer& model() const { return model_; }
  KVCache& cache() const { return cache_; }

 private:
  const Transformer& model_;
  KVCache& cache_;
  std::vector<int32_t> prompt_;
  Chain& chain_;
  DecodeOptions opts_;
  GenerateResult r_;
  std::vector<float> raw_, work_, before_, pb_, pa_, praw_, pproc_;
  std::vector<int32_t> history_;
  SampleContext ctx_;
  bool started_ = false;
  bool finished_ = false;
  int32_t pending_ = -1;  // the last token, not yet run through the model
};

GenerateResult generate(const Transformer& model, KVCache& cache, const std::vector<int32_t>& prompt, Chain& chain,
                        const DecodeOptions& opts, const std::function<void()>& poll);

// Beam search as transformers' generate(num_beams=...) does it (generation/utils.py
// _beam_search): each step takes the top (1 + n_eos, at least 2) x num_beams continuations of
// all running beams by accumulated log-probability, keeps the best num_beams that did not stop
// as running beams, and offers those among the first num_beams that stopped (EOS or max length)
// to the finished set, scored sum_logprobs / generated_length ** length_penalty. Beams share
// their common prefix through forked caches.
struct BeamOptions {
  int num_beams = 4;
  int max_new_tokens = 0;
  double length_penalty = 1.0;
  int early_stopping = 0;   // 1: True, 0: False (heuristic), -1: "never"
  int num_return_sequences = 1;
  std::vector<int32_t> eos_ids;
  bool do_sample = false;   // draw continuations instead of taking the top ones
  uint64_t seed = 0;
  bool trace = false;
};

struct BeamHypothesis {
  std::vector<int32_t> token_ids;
  double score = 0.0;          // sum_logprobs / length ** length_penalty
  double sum_logprobs = 0.0;
  std::string finish_reason;   // "stop" or "length"
};

// One candidate considered at one step, for the beam tree.
struct BeamEvent {
  int step = 0;
  int node = -1;          // id of the new node (candidate)
  int parent = -1;        // id of the node it extends (-1: the prompt)
  int32_t token = -1;
  double sum_logprobs = 0.0;
  std::string status;     // "running", "pruned", "finished", "rejected" (stopped, not kept)
};

struct BeamResult {
  std::vector<BeamHypothesis> hypotheses;  // best first, num_return_sequences of them
  std::vector<BeamEvent> events;
  int steps = 0;
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  uint64_t peak_cache_bytes = 0;  // blocks in use at the peak, shared blocks counted once
};

BeamResult beam_search(const Transformer& model, KVCache& prompt_cache, const std::vector<int32_t>& prompt,
                       Chain& processors, const BeamOptions& opts, const std::function<void()>& poll);

}  // namespace decodelab
