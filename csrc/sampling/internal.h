// Helpers the sampler families share, and each family's constructors: the factory (factory.cc)
// checks every argument, then calls these. Internal to csrc/sampling/.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "decodelab/sampling.h"

namespace decodelab {
namespace sampling {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The first index whose value is >= v (NaN never is), or -1.
int first_at_least(const float* l, int n, float v);
// Index of the largest logit (NaN ignored, ties to the lowest id), or -1 if none is finite/+inf.
int argmax(const float* l, int n);
// Every logit but l[keep] set to -inf.
void keep_only(float* l, int n, int keep);
// The k-th largest logit (NaN and -inf never count; k >= 1), or -inf if fewer than k are left.
float kth_largest(const float* l, int n, int64_t k);
// Remove every token whose probability is below thr, except those whose logit is at least
// `spare` (transformers' cutoffs: kth_largest(min_tokens_to_keep), so ties with it stay).
void remove_below(float* l, const float* probs, int n, float thr, float spare);
// min_tokens_to_keep for samplers that rank by a sort: when fewer than k tokens of l are left,
// restore the k largest of `orig` (the logits before the stage), equal logits ranked by id, the
// higher first when `higher_id_first` (an ascending stable sort read from its end) else the lower.
void keep_at_least(float* l, const float* orig, int n, int64_t k, bool higher_id_first);
// The first token whose cumulative probability exceeds u x total (probabilities of 0 never), in
// token-id order with fixed-order sums, so a draw is the same on every machine; -1 if none.
int draw(const float* probs, int n, double u);
// v as printf's %g: how sampler names and messages print their arguments.
std::string num(double v);
// Throws std::invalid_argument naming `what` for an id outside [0, n).
void check_token_ids(const std::vector<int64_t>& ids, int n, const char* what);

// hist[k] for k < buckets: the mass (double) of the tokens in ids whose key is k. Four tables
// take alternate tokens, then are added in a fixed order, so that runs of tokens in one bucket do
// not wait on each other's adds (one dependent add per token had made top_p's histogram 200 us
// over GPT-2's vocabulary).
template <class Key>
void interleaved_histogram(const std::vector<int>& ids, const float* mass, int buckets, Key key,
                           std::vector<double>& tables, std::vector<double>& hist) {
  tables.assign(4 * static_cast<size_t>(buckets), 0.0);
  for (size_t j = 0; j < ids.size(); ++j) tables[(j & 3) * buckets + key(ids[j])] += mass[ids[j]];
  hist.resize(buckets);
  for (int k = 0; k < buckets; ++k)
    hist[k] = (tables[k] + tables[buckets + k]) + (tables[2 * buckets + k] + tables[3 * buckets + k]);
}

template <typename Self>
class Base : public Sampler {
 public:
  SamplerPtr clone() const override { return std::make_shared<Self>(static_cast<const Self&>(*this)); }
};

// Unchecked constructors, one family per file (factory.cc checks the arguments first).
SamplerPtr new_temperature(double t);
SamplerPtr new_top_k(int64_t k, int64_t min_keep);
SamplerPtr new_min_p(double p, int64_t min_keep);
SamplerPtr new_cutoff(double e, bool eta, int64_t min_keep);
SamplerPtr new_top_n_sigma(double n);
SamplerPtr new_xtc(double probability, double threshold, uint64_t seed);
SamplerPtr new_top_p(double p, int64_t min_keep);
SamplerPtr new_typical_p(double p, int64_t min_keep);
SamplerPtr new_repetition_penalty(double r, int64_t last_n);
SamplerPtr new_count_penalty(double v, bool presence);
SamplerPtr new_no_repeat_ngram(int64_t n);
SamplerPtr new_logit_bias(const std::unordered_map<int64_t, double>& bias);
SamplerPtr new_suppress_tokens(const std::vector<int64_t>& ids);
SamplerPtr new_min_new_tokens(int64_t m, const std::vector<int64_t>& eos);
SamplerPtr new_dry(double mult, double base, int64_t allowed, const std::vector<int64_t>& breakers, int64_t last_n);
SamplerPtr new_greedy();
SamplerPtr new_dist(uint64_t seed);
SamplerPtr new_mirostat_v2(double tau, double eta, uint64_t seed);
SamplerPtr new_top_h(double h);
SamplerPtr new_sequence_bias(const std::vector<std::vector<int64_t>>& seqs, const std::vector<double>& biases,
                             const std::string& label);
SamplerPtr new_exponential_decay_length(int64_t start, double factor, const std::vector<int64_t>& eos);
SamplerPtr new_forced(const std::vector<int64_t>& ids, int64_t at_length, const std::string& label);
SamplerPtr new_watermark(const WatermarkScheme& scheme, double bias);

}  // namespace sampling
}  // namespace decodelab
