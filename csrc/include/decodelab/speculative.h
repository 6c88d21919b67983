// Speculative decoding: a draft (a smaller model, or n-gram lookup in the text so far) proposes
// k tokens, the target checks them in one pass over k + 1 positions, and rejection sampling keeps
// a prefix of them plus one token of the target's own. The kept tokens follow the target's
// processed distribution exactly (Leviathan et al. 2023; Chen et al. 2023); greedy keeps exactly
// the tokens plain greedy decoding would choose.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "decodelab/decoder.h"

namespace decodelab {

// One round: what the draft proposed, how many of them the target kept, and the token the target
// added (a correction after a rejection, or a bonus after k acceptances).
struct SpeculationRound {
  std::vector<int32_t> draft;
  int accepted = 0;
  int32_t token = -1;
  bool bonus = false;
};

struct SpeculationStats {
  int64_t drafted = 0, accepted = 0;
  std::vector<int64_t> drafted_at, accepted_at;  // by position in the draft
  std::vector<SpeculationRound> rounds;
  double draft_seconds = 0.0, verify_seconds = 0.0;
};

class SpeculativeDecoder {
 public:
  // draft: null for prompt lookup; else a model with the target's vocabulary and draft_cache one
  // of its caches (empty or holding a prefix of the prompt). `chain` is the target's sampler chain
  // (its selector Greedy or Dist); the draft runs a clone of it. Throws std::invalid_argument for
  // options speculation does not take (guidance, traces, another selector).
  SpeculativeDecoder(const Transformer& target, KVCache& cache, std::vector<int32_t> prompt, Chain& chain,
                     const DecodeOptions& opts, const Transformer* draft, KVCache* draft_cache);
  // One round: the tokens it added (the first call: the prompt's first token); empty once finished.
  std::vector<int32_t> step();
  bool finished() const { return finished_; }
  const GenerateResult& result() const { return r_; }
  const SpeculationStats& stats() const { return stats_; }
  const Transformer& model() const { return model_; }
  KVCache& cache() const { return cache_; }
  KVCache* draft_cache() const { return draft_cache_; }

 private:
  int propose(int k, std::vector<int32_t>& out);  // drafts up to k tokens into out; q_ rows
  int lookup(int k, std::vector<int32_t>& out) const;
  // The chain's stages but the selector on `logits` as position `pos` of the output sees them,
  // with the drafted tokens before it in the history; writes the processed logits to `work`.
  void process(const Chain& chain, const float* logits, int pos, float* work);
  int32_t select(Chain& chain, float* work, int pos);  // the selector on processed logits
  bool emit(int32_t t, const float* raw, const float* processed);  // false once finished

  const Transformer& model_;
  KVCache& cache_;
  std::vector<int32_t> prompt_;
  Chain& chain_;
  std::shared_ptr<Chain> draft_chain_;
  DecodeOptions opts_;
  const Transformer* draft_;
  KVCache* draft_cache_;
  Sampler::Pick pick_;
  uint64_t seed_ = 0;
  GenerateResult r_;
  SpeculationStats stats_;
  std::vector<int32_t> history_;  // prompt (with any cached prefix), then output
  std::vector<float> logits_, work_, keep_, p_, q_, resid_, dlogits_, dist_;
  SampleContext ctx_;
  int32_t pending_ = -1;  // the last token, not yet in the target's cache
  int k_now_ = 0;         // this round's draft length, at most opts_.num_draft_tokens
  bool started_ = false, finished_ = false;
};

// The whole loop in C++: step() until finished.
GenerateResult generate_speculative(const Transformer& target, KVCache& cache, const std::vector<int32_t>& prompt,
                                    Chain& chain, const DecodeOptions& opts, const Transformer* draft,
                                    KVCache* draft_cache, SpeculationStats* stats, const std::function<void()>& poll);

}  // namespace decodelab
