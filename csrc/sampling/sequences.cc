// Processors that act on token sequences and lengths, as transformers defines them: sequence bias
// (and bad words, its -inf case), the exponential decay length penalty, forced BOS and EOS.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "sampling/internal.h"

namespace decodelab {
namespace sampling {

namespace {

// transformers' SequenceBiasLogitsProcessor: a one-token sequence's bias always applies; a longer
// one's applies to its last token when the context ends with the rest. The biases are summed in
// float32 in transformers' order (one-token ones first, then by prefix length in order of first
// appearance), then added to the logits.
class SequenceBias : public Base<SequenceBias> {
 public:
  SequenceBias(std::vector<std::vector<int64_t>> seqs, std::vector<double> biases, std::string label)
      : label_(std::move(label)) {
    std::vector<size_t> order;
    for (size_t i = 0; i < seqs.size(); ++i)
      if (seqs[i].size() == 1) order.push_back(i);
    std::vector<size_t> lengths;
    for (const auto& s : seqs)
      if (s.size() > 1 && std::find(lengths.begin(), lengths.end(), s.size()) == lengths.end()) lengths.push_back(s.size());
    for (size_t len : lengths)
      for (size_t i = 0; i < seqs.size(); ++i)
        if (seqs[i].size() == len) order.push_back(i);
    for (size_t i : order) entries_.push_back({seqs[i], static_cast<float>(biases[i])});
  }
  std::string name() const override { return label_ + "(" + std::to_string(entries_.size()) + " sequences)"; }
  void apply(float* l, int n, const SampleContext& ctx) override {
    for (const auto& e : entries_) check_token_ids(e.ids, n, label_.c_str());
    touched_.clear();
    bias_.resize(n);
    for (const auto& e : entries_) {
      const int m = static_cast<int>(e.ids.size()) - 1;  // prefix length
      if (m > ctx.n_tokens) continue;
      bool match = true;
      for (int j = 0; j < m && match; ++j) match = ctx.tokens[ctx.n_tokens - m + j] == e.ids[j];
      if (!match) continue;
      const int t = static_cast<int>(e.ids.back());
      if (std::find(touched_.begin(), touched_.end(), t) == touched_.end()) touched_.push_back(t), bias_[t] = 0.0f;
      bias_[t] += e.bias;
    }
    for (int t : touched_) l[t] += bias_[t];
  }

 private:
  struct Entry {
    std::vector<int64_t> ids;
    float bias;
  };
  std::string label_;
  std::vector<Entry> entries_;
  std::vector<int> touched_;
  std::vector<float> bias_;
};

// transformers' ExponentialDecayLengthPenalty: once the context is longer than the prompt + start
// tokens, each EOS logit grows by |logit| x (factor^(length - prompt - start) - 1).
class ExponentialDecayLength : public Base<ExponentialDecayLength> {
 public:
  ExponentialDecayLength(int64_t start, double factor, std::vector<int64_t> eos)
      : start_(start), factor_(factor), eos_(std::move(eos)) {}
  std::string name() const override {
    return "exponential_decay_length_penalty(" + std::to_string(start_) + ", " + num(factor_) + ")";
  }
  void apply(float* l, int n, const SampleContext& ctx) override {
    check_token_ids(eos_, n, "exponential_decay_length_penalty EOS");
    const int64_t start = start_ + ctx.n_prompt;
    if (ctx.n_tokens <= start) return;
    const float grow = static_cast<float>(std::pow(factor_, static_cast<double>(ctx.n_tokens - start)) - 1.0);
    for (int64_t t : eos_)
      if (std::isfinite(l[t])) l[t] += std::fabs(l[t]) * grow;
  }

 private:
  int64_t start_;
  double factor_;
  std::vector<int64_t> eos_;
};

// transformers' ForcedBOSTokenLogitsProcessor (a context of one token: only `token` can follow)
// and ForcedEOSTokenLogitsProcessor (a context of max_length - 1 tokens: only the EOS ids).
class Forced : public Base<Forced> {
 public:
  Forced(std::vector<int64_t> ids, int64_t at_length, std::string label)
      : ids_(std::move(ids)), at_(at_length), label_(std::move(label)) {}
  std::string name() const override { return label_; }
  void apply(float* l, int n, const SampleContext& ctx) override {
    check_token_ids(ids_, n, label_.c_str());
    if (ctx.n_tokens != at_) return;
    std::fill(l, l + n, kNegInf);
    for (int64_t t : ids_) l[t] = 0.0f;
  }

 private:
  std::vector<int64_t> ids_;
  int64_t at_;
  std::string label_;
};

}  // namespace

SamplerPtr new_sequence_bias(const std::vector<std::vector<int64_t>>& seqs, const std::vector<double>& biases,
                             const std::string& label) {
  return std::make_shared<SequenceBias>(seqs, biases, label);
}
SamplerPtr new_exponential_decay_length(int64_t start, double factor, const std::vector<int64_t>& eos) {
  return std::make_shared<ExponentialDecayLength>(start, factor, eos);
}
SamplerPtr new_forced(const std::vector<int64_t>& ids, int64_t at_length, const std::string& label) {
  return std::make_shared<Forced>(ids, at_length, label);
}

}  // namespace sampling
}  // namespace decodelab
