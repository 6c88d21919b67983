// Sampler objects. A sampler rewrites a logits vector in place: removed tokens become -inf.
// Selectors (Greedy, Dist, Mirostat) leave exactly one finite entry, the chosen token. A Chain
// applies samplers in order and is itself a sampler.
//
// Conventions shared by every sampler: NaN logits count as removed; +inf logits take all the
// probability mass (shared equally); a filter always keeps at least the most likely token.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
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
  const std::vector<SamplerPtr>& stages() const { return stages_; }

 private:
  std::vector<SamplerPtr> stages_;
};

}  // namespace decodelab
