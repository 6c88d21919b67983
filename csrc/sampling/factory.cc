// The samplers' factory: the one place each argument's range is checked, with a message that names
// the value and the limit; then each family's constructor.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "sampling/internal.h"

namespace decodelab {

namespace {
using sampling::num;
void require(bool ok, const std::string& msg) {
  if (!ok) throw std::invalid_argument(msg);
}
// Finite once rounded to float32, the precision every sampler computes in: 1e300 passes a double
// check and becomes +inf in the logits.
bool finite(double v) { return std::isfinite(v) && std::isfinite(static_cast<float>(v)); }
// The smallest temperature and the range of repetition penalties whose scaling keeps logits of
// real models (magnitudes up to about 1e4) finite in float32.
constexpr double kMinTemperature = 1e-6, kMinRepetition = 1e-3, kMaxRepetition = 1e3;
void require_keep(int64_t keep, const char* what) {
  require(keep >= 1, std::string(what) + " min_tokens_to_keep must be >= 1, got " + std::to_string(keep));
}
// A penalty window: -1 the whole context, n > 0 the last n tokens. 0 is refused: llama.cpp reads
// it as "off", and a whole-context reading would silently differ for settings ported from it.
void require_window(int64_t last_n, const char* what) {
  require(last_n == -1 || last_n > 0,
          std::string(what) + " last_n must be -1 (the whole context) or > 0 (the last n tokens), got " +
              std::to_string(last_n) +
              (last_n == 0 ? " (llama.cpp reads 0 as 'off': to turn the penalty off, leave it out or set it to "
                             "its no-op value)"
                           : ""));
}
}  // namespace

SamplerPtr make_temperature(double t) {
  require(finite(t) && (t == 0.0 || t >= kMinTemperature),
          "temperature must be 0 (greedy) or a finite number >= 1e-06 (smaller ones overflow float32 logits), got " +
              num(t));
  return sampling::new_temperature(t);
}
SamplerPtr make_top_k(int64_t k, int64_t min_keep) {
  require(k >= 0, "top_k must be >= 0 (0 disables it), got " + std::to_string(k));
  require_keep(min_keep, "top_k");
  return sampling::new_top_k(k, min_keep);
}
SamplerPtr make_top_p(double p, int64_t min_keep) {
  require(finite(p) && p > 0.0 && p <= 1.0, "top_p must be in (0, 1], got " + num(p));
  require_keep(min_keep, "top_p");
  return sampling::new_top_p(p, min_keep);
}
SamplerPtr make_min_p(double p, int64_t min_keep) {
  require(finite(p) && p >= 0.0 && p <= 1.0, "min_p must be in [0, 1], got " + num(p));
  require_keep(min_keep, "min_p");
  return sampling::new_min_p(p, min_keep);
}
SamplerPtr make_typical_p(double p, int64_t min_keep) {
  require(finite(p) && p > 0.0 && p <= 1.0, "typical_p must be in (0, 1], got " + num(p));
  require_keep(min_keep, "typical_p");
  return sampling::new_typical_p(p, min_keep);
}
SamplerPtr make_epsilon_cutoff(double e, int64_t min_keep) {
  require(finite(e) && e >= 0.0 && e < 1.0, "epsilon must be in [0, 1), got " + num(e));
  require_keep(min_keep, "epsilon_cutoff");
  return sampling::new_cutoff(e, false, min_keep);
}
SamplerPtr make_eta_cutoff(double e, int64_t min_keep) {
  require(finite(e) && e >= 0.0 && e < 1.0, "eta must be in [0, 1), got " + num(e));
  require_keep(min_keep, "eta_cutoff");
  return sampling::new_cutoff(e, true, min_keep);
}
SamplerPtr make_top_n_sigma(double n) {
  require(finite(n) && n >= 0.0, "top_n_sigma n must be a finite number >= 0 (0 disables it), got " + num(n));
  return sampling::new_top_n_sigma(n);
}
SamplerPtr make_xtc(double probability, double threshold, uint64_t seed) {
  require(finite(probability) && probability >= 0.0 && probability <= 1.0,
          "xtc probability must be in [0, 1], got " + num(probability));
  require(finite(threshold) && threshold >= 0.0 && threshold <= 1.0,
          "xtc threshold must be in [0, 1], got " + num(threshold));
  return sampling::new_xtc(probability, threshold, seed);
}
SamplerPtr make_repetition_penalty(double r, int64_t last_n) {
  require(finite(r) && r >= kMinRepetition && r <= kMaxRepetition,
          "repetition_penalty must be in [0.001, 1000] (further from 1 it overflows float32 logits), got " + num(r));
  require_window(last_n, "repetition_penalty");
  return sampling::new_repetition_penalty(r, last_n);
}
SamplerPtr make_presence_penalty(double v) {
  require(finite(v) && v >= -2.0 && v <= 2.0, "presence_penalty must be in [-2, 2], got " + num(v));
  return sampling::new_count_penalty(v, true);
}
SamplerPtr make_frequency_penalty(double v) {
  require(finite(v) && v >= -2.0 && v <= 2.0, "frequency_penalty must be in [-2, 2], got " + num(v));
  return sampling::new_count_penalty(v, false);
}
SamplerPtr make_no_repeat_ngram(int64_t n) {
  require(n >= 0, "no_repeat_ngram_size must be >= 0 (0 disables it), got " + std::to_string(n));
  return sampling::new_no_repeat_ngram(n);
}
SamplerPtr make_logit_bias(const std::unordered_map<int64_t, double>& bias) {
  for (const auto& kv : bias) {
    require(kv.first >= 0, "logit_bias token id must be >= 0, got " + std::to_string(kv.first));
    require(finite(kv.second) || kv.second == -std::numeric_limits<double>::infinity(),
            "logit_bias for token " + std::to_string(kv.first) + " must be finite in float32 or -inf, got " + num(kv.second));
  }
  return sampling::new_logit_bias(bias);
}
SamplerPtr make_suppress_tokens(const std::vector<int64_t>& ids) {
  for (int64_t t : ids) require(t >= 0, "suppress_tokens token id must be >= 0, got " + std::to_string(t));
  return sampling::new_suppress_tokens(ids);
}
SamplerPtr make_min_new_tokens(int64_t m, const std::vector<int64_t>& eos) {
  require(m >= 0, "min_new_tokens must be >= 0, got " + std::to_string(m));
  for (int64_t t : eos) require(t >= 0, "min_new_tokens EOS id must be >= 0, got " + std::to_string(t));
  return sampling::new_min_new_tokens(m, eos);
}
SamplerPtr make_dry(double mult, double base, int64_t allowed, const std::vector<int64_t>& breakers, int64_t last_n) {
  require(finite(mult) && mult >= 0.0, "dry multiplier must be a finite number >= 0, got " + num(mult));
  require(finite(base) && base >= 1.0, "dry base must be a finite number >= 1, got " + num(base));
  require(allowed >= 1, "dry allowed_length must be >= 1, got " + std::to_string(allowed));
  require_window(last_n, "dry");
  return sampling::new_dry(mult, base, allowed, breakers, last_n);
}
SamplerPtr make_mirostat_v2(double tau, double eta, uint64_t seed) {
  require(finite(tau) && tau > 0.0, "mirostat tau must be a finite number > 0, got " + num(tau));
  require(finite(eta) && eta > 0.0 && eta <= 1.0, "mirostat eta must be in (0, 1], got " + num(eta));
  return sampling::new_mirostat_v2(tau, eta, seed);
}
SamplerPtr make_top_h(double h) {
  require(finite(h) && h > 0.0 && h <= 1.0, "top_h must be in (0, 1], got " + num(h));
  return sampling::new_top_h(h);
}
namespace {
void require_sequences(const std::vector<std::vector<int64_t>>& seqs, const char* what) {
  require(!seqs.empty(), std::string(what) + " needs at least one token sequence");
  for (size_t i = 0; i < seqs.size(); ++i) {
    require(!seqs[i].empty(), std::string(what) + " sequence " + std::to_string(i) + " is empty");
    for (int64_t t : seqs[i])
      require(t >= 0, std::string(what) + " sequence " + std::to_string(i) + " holds token id " + std::to_string(t) +
                          ", which is < 0");
  }
}
void require_eos(const std::vector<int64_t>& eos, const char* what, bool nonempty) {
  require(!nonempty || !eos.empty(), std::string(what) + " needs at least one EOS id");
  for (int64_t t : eos) require(t >= 0, std::string(what) + " EOS id must be >= 0, got " + std::to_string(t));
}
}  // namespace
SamplerPtr make_sequence_bias(const std::vector<std::vector<int64_t>>& seqs, const std::vector<double>& biases) {
  require_sequences(seqs, "sequence_bias");
  require(seqs.size() == biases.size(), "sequence_bias has " + std::to_string(seqs.size()) + " sequences but " +
                                            std::to_string(biases.size()) + " biases");
  for (size_t i = 0; i < biases.size(); ++i)
    require(finite(biases[i]) || biases[i] == -std::numeric_limits<double>::infinity(),
            "sequence_bias bias " + std::to_string(i) + " must be finite in float32 or -inf, got " + num(biases[i]));
  return sampling::new_sequence_bias(seqs, biases, "sequence_bias");
}
SamplerPtr make_bad_words(const std::vector<std::vector<int64_t>>& seqs, const std::vector<int64_t>& eos) {
  require_sequences(seqs, "bad_words_ids");
  require_eos(eos, "bad_words_ids", false);
  std::vector<std::vector<int64_t>> kept;  // a banned EOS alone would stop nothing: transformers drops it
  for (const auto& s : seqs)
    if (!(s.size() == 1 && std::find(eos.begin(), eos.end(), s[0]) != eos.end())) kept.push_back(s);
  return sampling::new_sequence_bias(kept, std::vector<double>(kept.size(), -std::numeric_limits<double>::infinity()),
                                     "bad_words");
}
SamplerPtr make_exponential_decay_length_penalty(int64_t start, double factor, const std::vector<int64_t>& eos) {
  require(start >= 0, "exponential_decay_length_penalty start must be >= 0, got " + std::to_string(start));
  require(finite(factor) && factor > 0.0,
          "exponential_decay_length_penalty factor must be a finite number > 0, got " + num(factor));
  require_eos(eos, "exponential_decay_length_penalty", true);
  return sampling::new_exponential_decay_length(start, factor, eos);
}
SamplerPtr make_forced_bos(int64_t token_id) {
  require(token_id >= 0, "forced_bos_token_id must be >= 0, got " + std::to_string(token_id));
  return sampling::new_forced({token_id}, 1, "forced_bos(" + std::to_string(token_id) + ")");
}
SamplerPtr make_forced_eos(int64_t max_length, const std::vector<int64_t>& eos) {
  require(max_length >= 2, "forced_eos max_length must be >= 2, got " + std::to_string(max_length));
  require_eos(eos, "forced_eos", true);
  return sampling::new_forced(eos, max_length - 1, "forced_eos(" + std::to_string(max_length) + ")");
}
WatermarkScheme make_watermark_scheme(int64_t vocab, double ratio, uint64_t key, const std::string& scheme,
                                      int64_t width) {
  require(vocab >= 1 && vocab <= (int64_t{1} << 24), "watermark vocab_size must be in [1, 16777216], got " +
                                                         std::to_string(vocab));
  require(finite(ratio) && ratio > 0.0 && ratio < 1.0, "watermark greenlist_ratio must be in (0, 1), got " + num(ratio));
  require(scheme == "lefthash" || scheme == "selfhash",
          "watermark seeding_scheme must be 'lefthash' or 'selfhash', got '" + scheme + "'");
  require(width >= 1 && width <= 1024, "watermark context_width must be in [1, 1024], got " + std::to_string(width));
  return WatermarkScheme(vocab, ratio, key, scheme == "selfhash", width);
}
SamplerPtr make_watermark(const WatermarkScheme& scheme, double bias) {
  require(finite(bias), "watermark bias must be finite in float32, got " + num(bias));
  return sampling::new_watermark(scheme, bias);
}
SamplerPtr make_greedy() { return sampling::new_greedy(); }
SamplerPtr make_dist(uint64_t seed) { return sampling::new_dist(seed); }

}  // namespace decodelab
