// What each sampler stage did to one step's distribution, for traces and logprobs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

// Ids of the `top` most likely entries of p, best first (ties to the lower id).
void top_of(const std::vector<float>& p, int top, std::vector<int32_t>& ids);
// 1 + the number of entries of p above p[token]: 1 is the most likely.
int rank_of(const std::vector<float>& p, int token);
// log p, -inf for p = 0.
float log_of(float p);

}  // namespace decodelab
