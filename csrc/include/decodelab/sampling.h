// Sampler objects. A sampler rewrites a logits vector in place: removed tokens become -inf.
// Selectors (Greedy, Dist, Mirostat) leave exactly one finite entry, the chosen token. A Chain
// applies samplers in order and is itself a sampler.
//
// Conventions shared by every sampler: NaN logits count as removed; +inf logits take all the
// probability mass (shared equally); a filter always keeps at least the most likely token.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace decodelab {

// The convention above: a token is out of the running when its logit is NaN or -inf.
inline bool is_removed(float x) { return std::isnan(x) || x == -std::numeric_limits<float>::infinity(); }

struct SampleContext {
  const int32_t* tokens = nullptr;  // prompt followed by the tokens generated so far
  int n_tokens = 0;
  int n_prompt = 0;                 // tokens[0 : n_prompt] are the prompt
  uint64_t sequence = 0;            // which sample of this prompt (random streams differ)
  uint64_t step = 0;                // tokens generated so far (the random stream's counter)
  int n_generated() const { return n_tokens - n_prompt; }
};

// Counter-based random numbers: a uniform double in [0, 1) that depends only on
// (seed, sequence, step, salt), never on batch order, thread count or earlier draws.
double counter_uniform(uint64_t seed, uint64_t sequence, uint64_t step, uint64_t salt);

class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual std::string name() const = 0;
  virtual void apply(float* logits, int n, const SampleContext& ctx) = 0;
  virtual void accept(int32_t /*token*/) {}
  virtual void reset() {}
  virtual std::shared_ptr<Sampler> clone() const = 0;
  virtual bool selects() const { return false; }
  // For speculative decoding, which must know how a selector picks: the most likely token
  // (Greedy), a draw from the distribution (Dist), or another rule with its own state (Mirostat).
  enum class Pick { None, MostLikely, Draw, Other };
  virtual Pick pick() const { return Pick::None; }
  virtual uint64_t draw_seed() const { return 0; }  // Dist: its seed
};

using SamplerPtr = std::shared_ptr<Sampler>;

// Probability helpers used by samplers and traces. softmax writes probs (n) following the
// conventions above and returns false when no entry is finite.
bool softmax(const float* logits, int n, float* probs);
double entropy_of(const float* probs, int n);  // nats
// The largest logit, NaN ignored (-inf when none is larger).
float max_logit(const float* logits, int n);
// The first token a chain left in (its logit neither NaN nor -inf), or -1.
int first_kept(const float* logits, int n);
// The token Dist draws for uniform u from probabilities `probs` (not necessarily normalised):
// the first whose cumulative probability exceeds u x total, in token-id order; -1 if none.
int draw_token(const float* probs, int n, double u);

SamplerPtr make_temperature(double t);
SamplerPtr make_top_k(int64_t k, int64_t min_tokens_to_keep = 1);
SamplerPtr make_top_p(double p, int64_t min_tokens_to_keep = 1);
SamplerPtr make_min_p(double p, int64_t min_tokens_to_keep = 1);
SamplerPtr make_typical_p(double p, int64_t min_tokens_to_keep = 1);
SamplerPtr make_epsilon_cutoff(double epsilon, int64_t min_tokens_to_keep = 1);
SamplerPtr make_eta_cutoff(double epsilon, int64_t min_tokens_to_keep = 1);
SamplerPtr make_top_n_sigma(double n);
SamplerPtr make_xtc(double probability, double threshold, uint64_t seed);
SamplerPtr make_repetition_penalty(double penalty, int64_t last_n);
SamplerPtr make_presence_penalty(double penalty);
SamplerPtr make_frequency_penalty(double penalty);
SamplerPtr make_no_repeat_ngram(int64_t n);
SamplerPtr make_logit_bias(const std::unordered_map<int64_t, double>& bias);
SamplerPtr make_suppress_tokens(const std::vector<int64_t>& ids);
SamplerPtr make_min_new_tokens(int64_t min_new, const std::vector<int64_t>& eos_ids);
SamplerPtr make_dry(double multiplier, double base, int64_t allowed_length, const std::vector<int64_t>& breakers,
                    int64_t last_n);
SamplerPtr make_mirostat_v2(double tau, double eta, uint64_t seed);
SamplerPtr make_top_h(double top_h);
// sequence_bias: each sequence's bias (finite or -inf); bad_words: -inf, one-token EOS sequences left out.
SamplerPtr make_sequence_bias(const std::vector<std::vector<int64_t>>& sequences, const std::vector<double>& biases);
SamplerPtr make_bad_words(const std::vector<std::vector<int64_t>>& sequences, const std::vector<int64_t>& eos_ids);
SamplerPtr make_exponential_decay_length_penalty(int64_t start, double factor, const std::vector<int64_t>& eos_ids);
SamplerPtr make_forced_bos(int64_t token_id);
SamplerPtr make_forced_eos(int64_t max_length, const std::vector<int64_t>& eos_ids);

// The green-list watermark's key (Kirchenbauer et al. 2023; transformers' WatermarkLogitsProcessor):
// which ids are green after a prefix. Shared by the Watermark sampler and the detector.
class WatermarkScheme {
 public:
  WatermarkScheme(int64_t vocab, double greenlist_ratio, uint64_t hashing_key, bool selfhash, int64_t context_width);
  uint64_t seed(const int32_t* prefix, int len) const;  // the generator seed after prefix[0:len]
  void greenlist(const int32_t* prefix, int len, std::vector<int32_t>& out) const;
  bool is_green(const int32_t* prefix, int len, int32_t target) const;
  int64_t vocab() const { return vocab_; }
  int64_t width() const { return width_; }
  bool selfhash() const { return selfhash_; }

 private:
  int64_t vocab_, green_;
  uint64_t key_;
  bool selfhash_;
  int64_t width_;
  std::vector<int32_t> table_;  // selfhash: torch.randperm(1_000_003) under the key
};
WatermarkScheme make_watermark_scheme(int64_t vocab, double greenlist_ratio, uint64_t hashing_key,
                                      const std::string& seeding_scheme, int64_t context_width);
SamplerPtr make_watermark(const WatermarkScheme& scheme, double bias);
// Classifier-free guidance: out = scale x (log_softmax(cond) - log_softmax(uncond)) +
// log_softmax(uncond), as transformers computes it (out = log_softmax(cond) when scale is 1).
void classifier_free_guidance(const float* cond, const float* uncond, int n, float scale, float* out);

// (tokens scored, green tokens) of a passage, as transformers' WatermarkDetector counts them.
std::pair<int64_t, int64_t> watermark_score(const WatermarkScheme& scheme, const std::vector<int32_t>& ids,
                                            bool ignore_repeated_ngrams);
// A rule that fills `words` (n_words x 32 bits, zeroed) with the tokens allowed after ctx; the
// stage removes every other token (a grammar's mask: decodelab.constraints).
using TokenMaskFn = std::function<void(const SampleContext& ctx, uint32_t* words, int n_words)>;
SamplerPtr make_token_mask(TokenMaskFn fn, const std::string& label);
SamplerPtr make_greedy();
SamplerPtr make_dist(uint64_t seed);

class Chain : public Sampler {
 public:
  explicit Chain(std::vector<SamplerPtr> stages) : stages_(std::move(stages)) {}
  std::string name() const override { return "chain"; }
  void apply(float* logits, int n, const SampleContext& ctx) override {
    for (auto& s : stages_) s->apply(logits, n, ctx);
  }
  void accept(int32_t t) override {
    for (auto& s : stages_) s->accept(t);
  }
  void reset() override {
    for (auto& s : stages_) s->reset();
  }
  SamplerPtr clone() const override;
  bool selects() const override { return !stages_.empty() && stages_.back()->selects(); }
  Pick pick() const override { return stages_.empty() ? Pick::None : stages_.back()->pick(); }
  uint64_t draw_seed() const override { return stages_.empty() ? 0 : stages_.back()->draw_seed(); }
  const std::vector<SamplerPtr>& stages() const { return stages_; }

 private:
  std::vector<SamplerPtr> stages_;
};

}  // namespace decodelab
