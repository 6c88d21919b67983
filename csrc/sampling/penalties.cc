// Samplers that shift logits by what the context holds: repetition, presence and frequency
// penalties, no-repeat n-grams, DRY, logit bias, suppressed tokens and a minimum length.
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

// CTRL repetition penalty (Keskar et al. 2019), transformers' semantics: every distinct token of
// the context (prompt included; with last_n > 0 the last last_n tokens, with -1 all of them):
// logit < 0 ? logit * r : logit / r.
class RepetitionPenalty : public Base<RepetitionPenalty> {
 public:
  RepetitionPenalty(double r, int64_t last_n) : r_(r), last_n_(last_n) {}
  std::string name() const override { return "repetition_penalty(" + num(r_) + ")"; }
  void apply(float* l, int n, const SampleContext& ctx) override {
    if (r_ == 1.0) return;
    seen_.assign(n, 0);
    const int start = last_n_ > 0 ? std::max<int64_t>(0, ctx.n_tokens - last_n_) : 0;  // -1: all of it
    const float r = static_cast<float>(r_);
    for (int j = start; j < ctx.n_tokens; ++j) {
      const int t = ctx.tokens[j];
      if (t < 0 || t >= n || seen_[t]) continue;
      seen_[t] = 1;
      l[t] = l[t] < 0 ? l[t] * r : l[t] / r;
    }
  }

 private:
  double r_;
  int64_t last_n_;
  std::vector<char> seen_;
};

// OpenAI / vLLM presence and frequency penalties over the generated tokens only:
// logit -= frequency * count + presence * (count > 0).
class CountPenalty : public Base<CountPenalty> {
 public:
  CountPenalty(double v, bool presence) : v_(v), presence_(presence) {}
  std::string name() const override {
    return std::string(presence_ ? "presence_penalty(" : "frequency_penalty(") + num(v_) + ")";
  }
  void apply(float* l, int n, const SampleContext& ctx) override {
    if (v_ == 0.0) return;
    // Work in the generated tokens only, not the vocabulary: counts_ is all zeros between calls
    // (each count is reset as its token is penalised), so a step zeroes and scans nothing else.
    if (static_cast<int>(counts_.size()) < n) counts_.resize(n, 0);
    for (int j = ctx.n_prompt; j < ctx.n_tokens; ++j) {
      const int t = ctx.tokens[j];
      if (t >= 0 && t < n) ++counts_[t];
    }
    for (int j = ctx.n_prompt; j < ctx.n_tokens; ++j) {
      const int t = ctx.tokens[j];
      if (t < 0 || t >= n || counts_[t] == 0) continue;  // outside, or done at an earlier position
      l[t] -= static_cast<float>(presence_ ? v_ : v_ * counts_[t]);
      counts_[t] = 0;
    }
  }

 private:
  double v_;
  bool presence_;
  std::vector<int> counts_;
};

// transformers' NoRepeatNGramLogitsProcessor: ban every token that would complete an n-gram that
// already occurs in the context.
class NoRepeatNGram : public Base<NoRepeatNGram> {
 public:
  explicit NoRepeatNGram(int64_t ng) : n_(ng) {}
  std::string name() const override { return "no_repeat_ngram(" + std::to_string(n_) + ")"; }
  void apply(float* l, int n, const SampleContext& ctx) override {
    if (n_ <= 0 || ctx.n_tokens + 1 < n_) return;
    const int L = ctx.n_tokens;
    const int m = static_cast<int>(n_) - 1;  // prefix length
    const int32_t* t = ctx.tokens;
    for (int i = 0; i + m < L; ++i) {
      bool match = true;
      for (int j = 0; j < m && match; ++j) match = t[i + j] == t[L - m + j];
      if (match && t[i + m] >= 0 && t[i + m] < n) l[t[i + m]] = kNegInf;
    }
  }

 private:
  int64_t n_;
};

class LogitBias : public Base<LogitBias> {
 public:
  explicit LogitBias(std::unordered_map<int64_t, double> b) : b_(std::move(b)) {}
  std::string name() const override { return "logit_bias(" + std::to_string(b_.size()) + " tokens)"; }
  void apply(float* l, int n, const SampleContext&) override {
    for (const auto& kv : b_) {
      if (kv.first < 0 || kv.first >= n)
        throw std::invalid_argument("logit_bias token id " + std::to_string(kv.first) +
                                    " is outside the vocabulary [0, " + std::to_string(n) + ")");
      l[kv.first] += static_cast<float>(kv.second);
    }
  }

 private:
  std::unordered_map<int64_t, double> b_;
};

class SuppressTokens : public Base<SuppressTokens> {
 public:
  explicit SuppressTokens(std::vector<int64_t> ids) : ids_(std::move(ids)) {}
  std::string name() const override { return "suppress_tokens(" + std::to_string(ids_.size()) + ")"; }
  void apply(float* l, int n, const SampleContext&) override {
    check_token_ids(ids_, n, "suppress_tokens");
    for (int64_t t : ids_) l[t] = kNegInf;
  }

 private:
  std::vector<int64_t> ids_;
};

class MinNewTokens : public Base<MinNewTokens> {
 public:
  MinNewTokens(int64_t m, std::vector<int64_t> eos) : m_(m), eos_(std::move(eos)) {}
  std::string name() const override { return "min_new_tokens(" + std::to_string(m_) + ")"; }
  void apply(float* l, int n, const SampleContext& ctx) override {
    check_token_ids(eos_, n, "min_new_tokens EOS");
    if (ctx.n_generated() >= m_) return;
    for (int64_t t : eos_) l[t] = kNegInf;
  }

 private:
  int64_t m_;
  std::vector<int64_t> eos_;
};

// DRY, "don't repeat yourself" (p-e-w, 2024; llama.cpp): if the context's last tokens repeat an
// earlier run that was followed by token x, penalise x by multiplier * base^(len - allowed_length)
// for a run of len >= allowed_length. Runs do not cross sequence-breaker tokens. As llama.cpp, the
// exponent stops at floor(88.7228391 / ln base), where base^exponent would pass float32's range.
class DRY : public Base<DRY> {
 public:
  DRY(double mult, double base, int64_t allowed, std::vector<int64_t> breakers, int64_t last_n)
      : mult_(mult), base_(base), allowed_(allowed), breakers_(std::move(breakers)), last_n_(last_n) {}
  std::string name() const override { return "dry(" + num(mult_) + ", " + num(base_) + ")"; }
  void apply(float* l, int n, const SampleContext& ctx) override {
    if (mult_ == 0.0 || ctx.n_tokens < 2) return;
    const int start = last_n_ > 0 ? std::max<int64_t>(0, ctx.n_tokens - last_n_) : 0;  // -1: all of it
    const int32_t* t = ctx.tokens + start;
    const int L = ctx.n_tokens - start;
    auto is_breaker = [&](int32_t x) { return std::find(breakers_.begin(), breakers_.end(), x) != breakers_.end(); };
    best_.assign(n, 0);
    // For each earlier position j, the length of the run ending at j that equals the run ending
    // at the last token; token t[j + 1] followed that run.
    for (int j = L - 2; j >= 0; --j) {
      int len = 0;
      while (len <= j && t[j - len] == t[L - 1 - len] && !is_breaker(t[j - len])) ++len;
      const int32_t next = t[j + 1];
      if (len > 0 && next >= 0 && next < n && !is_breaker(next)) best_[next] = std::max(best_[next], len);
    }
    const float base = static_cast<float>(base_), mult = static_cast<float>(mult_);
    const int max_exponent = base > 1.000001f ? static_cast<int>(88.7228391f / std::log(base)) : 0;
    for (int i = 0; i < n; ++i)
      if (best_[i] >= allowed_ && best_[i] > 0) {
        int e = static_cast<int>(best_[i] - allowed_);
        if (max_exponent > 0 && e > max_exponent) e = max_exponent;
        l[i] -= static_cast<float>(mult * std::pow(base, e));
      }
  }

 private:
  double mult_, base_;
  int64_t allowed_;
  std::vector<int64_t> breakers_;
  int64_t last_n_;
  std::vector<int> best_;
};

}  // namespace

SamplerPtr new_repetition_penalty(double r, int64_t last_n) { return std::make_shared<RepetitionPenalty>(r, last_n); }
SamplerPtr new_count_penalty(double v, bool presence) { return std::make_shared<CountPenalty>(v, presence); }
SamplerPtr new_no_repeat_ngram(int64_t n) { return std::make_shared<NoRepeatNGram>(n); }
SamplerPtr new_logit_bias(const std::unordered_map<int64_t, double>& bias) { return std::make_shared<LogitBias>(bias); }
SamplerPtr new_suppress_tokens(const std::vector<int64_t>& ids) { return std::make_shared<SuppressTokens>(ids); }
SamplerPtr new_min_new_tokens(int64_t m, const std::vector<int64_t>& eos) { return std::make_shared<MinNewTokens>(m, eos); }
SamplerPtr new_dry(double mult, double base, int64_t allowed, const std::vector<int64_t>& breakers, int64_t last_n) {
  return std::make_shared<DRY>(mult, base, allowed, breakers, last_n);
}

}  // namespace sampling
}  // namespace decodelab
