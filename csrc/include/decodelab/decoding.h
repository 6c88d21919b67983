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
  double decode_seconds = 0.0;
  std::vector<float> logprobs;                     // per token, when asked for
  std::vector<std::vector<int32_t>> top_ids;       // per token, top-N alternatives
  std::vector<std::vector<float>> top_logprobs;
  std::vector<StepTrace> trace;
};

// Prefill `prompt` (the tokens not yet in `cache`) and decode with `chain`, which must end in a
// selector (Greedy, Dist, Mirostat). `poll` runs once per step and may throw (Ctrl-C).
GenerateResult generate(const Transformer& model, KVCache& cache, const std::vector<int32_t>& prompt, Chain& chain,
                        const DecodeOptions& opts, const std::function<void()>& poll);

}  // namespace decodelab
