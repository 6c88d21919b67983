// Selectors, the last stage of a chain, which leave exactly one token: greedy, a draw from the
// distribution, and Mirostat 2.0.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "sampling/internal.h"

namespace decodelab {
namespace sampling {

namespace {

class Greedy : public Base<Greedy> {
 public:
  std::string name() const override { return "greedy"; }
  bool selects() const override { return true; }
  Pick pick() const override { return Pick::MostLikely; }
  void apply(float* l, int n, const SampleContext&) override {
    const int top = argmax(l, n);
    if (top < 0) throw std::invalid_argument("no candidate token has a finite logit");
    keep_only(l, n, top);
  }
};

class Dist : public Base<Dist> {
 public:
  explicit Dist(uint64_t seed) : seed_(seed) {}
  std::string name() const override { return "dist(seed=" + std::to_string(seed_) + ")"; }
  bool selects() const override { return true; }
  Pick pick() const override { return Pick::Draw; }
  uint64_t draw_seed() const override { return seed_; }
  void apply(float* l, int n, const SampleContext& ctx) override {
    probs_.resize(n);
    if (!softmax(l, n, probs_.data())) throw std::invalid_argument("no candidate token has a finite logit");
    const int t = draw(probs_.data(), n, counter_uniform(seed_, ctx.sequence, ctx.step, 0x64697374));
    keep_only(l, n, t);
  }

 private:
  uint64_t seed_;
  std::vector<float> probs_;
};

// Mirostat 2.0 (Basu et al. 2021), as llama.cpp: keep tokens with surprise -log2 p <= mu
// (at least the top one), draw from them, then mu -= eta * (surprise of the accepted token - tau).
class Mirostat : public Base<Mirostat> {
 public:
  Mirostat(double tau, double eta, uint64_t seed) : tau_(tau), eta_(eta), seed_(seed), mu_(2 * tau) {}
  std::string name() const override { return "mirostat_v2(tau=" + num(tau_) + ", eta=" + num(eta_) + ")"; }
  bool selects() const override { return true; }
  Pick pick() const override { return Pick::Other; }
  void apply(float* l, int n, const SampleContext& ctx) override {
    probs_.resize(n);
    if (!softmax(l, n, probs_.data())) throw std::invalid_argument("no candidate token has a finite logit");
    const int top = argmax(probs_.data(), n);
    // Surprise -log2 p above mu is p below 2^-mu: one compare per token instead of a log.
    const double bar = std::exp2(-mu_);
    for (int i = 0; i < n; ++i)
      if (i != top && (probs_[i] <= 0.0f || static_cast<double>(probs_[i]) < bar)) l[i] = kNegInf;
    softmax(l, n, probs_.data());  // renormalised over the kept tokens
    const int t = draw(probs_.data(), n, counter_uniform(seed_, ctx.sequence, ctx.step, 0x6d69726f));
    kept_.swap(probs_);  // for accept(); probs_ is rewritten next step
    keep_only(l, n, t);
  }
  void accept(int32_t token) override {
    if (token < 0 || token >= static_cast<int32_t>(kept_.size()) || kept_[token] <= 0.0f) return;
    mu_ -= eta_ * (-std::log2(static_cast<double>(kept_[token])) - tau_);
  }
  void reset() override { mu_ = 2 * tau_; }

 private:
  double tau_, eta_;
  uint64_t seed_;
  double mu_;
  std::vector<float> probs_, kept_;
};

}  // namespace

SamplerPtr new_greedy() { return std::make_shared<Greedy>(); }
SamplerPtr new_dist(uint64_t seed) { return std::make_shared<Dist>(seed); }
SamplerPtr new_mirostat_v2(double tau, double eta, uint64_t seed) { return std::make_shared<Mirostat>(tau, eta, seed); }

}  // namespace sampling
}  // namespace decodelab
