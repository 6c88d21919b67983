// The green-list watermark of Kirchenbauer et al. 2023, as transformers' WatermarkLogitsProcessor
// and WatermarkDetector define it, bit for bit: each step's green list is the first
// ratio x vocab ids of torch.randperm(vocab) under a torch CPU generator (MT19937) seeded from the
// preceding token(s). The processor adds `bias` to green tokens; the detector counts them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "sampling/internal.h"

namespace decodelab {

namespace {
constexpr int64_t kTableSize = 1000003;  // transformers' fixed_table for selfhash

// torch.randperm(n) on the CPU under manual_seed(seed): MT19937 seeded with the low 32 bits, then
// for i < n - 1 swap r[i] with r[i + draw % (n - i)] (ATen's randperm_cpu for n < 2^32 / 20).
void torch_randperm(int64_t n, uint64_t seed, std::vector<int32_t>& r) {
  std::mt19937 mt(static_cast<uint32_t>(seed & 0xffffffffu));
  r.resize(n);
  for (int64_t i = 0; i < n; ++i) r[i] = static_cast<int32_t>(i);
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t z = static_cast<int64_t>(mt()) % (n - i);
    std::swap(r[i], r[i + z]);
  }
}

// Python's seed % (2**64 - 1) for a signed 64-bit seed.
uint64_t mod_2_64_minus_1(__int128 s) {
  const __int128 m = (static_cast<__int128>(1) << 64) - 1;
  __int128 r = s % m;
  if (r < 0) r += m;
  return static_cast<uint64_t>(r);
}
}  // namespace

WatermarkScheme::WatermarkScheme(int64_t vocab, double ratio, uint64_t key, bool selfhash, int64_t width)
    : vocab_(vocab), green_(static_cast<int64_t>(static_cast<double>(vocab) * ratio)), key_(key),
      selfhash_(selfhash), width_(width) {
  if (selfhash_) torch_randperm(kTableSize, key_, table_);
}

uint64_t WatermarkScheme::seed(const int32_t* prefix, int len) const {
  const int start = std::max(0, len - static_cast<int>(width_));
  if (!selfhash_) return mod_2_64_minus_1(static_cast<__int128>(key_) * prefix[len - 1]);
  // (hash_key * a * b).min() over the window, in torch's wrapping int64 arithmetic.
  const int64_t b = static_cast<int64_t>(table_[prefix[len - 1] % kTableSize]) + 1;
  int64_t best = 0;
  for (int j = start; j < len; ++j) {
    const int64_t a = static_cast<int64_t>(table_[prefix[j] % kTableSize]) + 1;
    const uint64_t v = static_cast<uint64_t>(key_) * static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
    const int64_t sv = static_cast<int64_t>(v);
    if (j == start || sv < best) best = sv;
  }
  return mod_2_64_minus_1(best);
}

void WatermarkScheme::greenlist(const int32_t* prefix, int len, std::vector<int32_t>& out) const {
  torch_randperm(vocab_, seed(prefix, len), out);
  out.resize(static_cast<size_t>(green_));
}

bool WatermarkScheme::is_green(const int32_t* prefix, int len, int32_t target) const {
  thread_local std::vector<int32_t> g;
  greenlist(prefix, len, g);
  return std::find(g.begin(), g.end(), target) != g.end();
}

namespace sampling {
namespace {

class Watermark : public Base<Watermark> {
 public:
  Watermark(WatermarkScheme scheme, double bias) : scheme_(std::move(scheme)), bias_(bias) {}
  std::string name() const override {
    return "watermark(" + num(bias_) + ", " + (scheme_.selfhash() ? "selfhash" : "lefthash") + ")";
  }
  void apply(float* l, int n, const SampleContext& ctx) override {
    if (n != scheme_.vocab())
      throw std::invalid_argument("watermark vocab_size " + std::to_string(scheme_.vocab()) +
                                  " differs from the model's " + std::to_string(n) + " logits");
    if (ctx.n_tokens < scheme_.width()) return;  // too short to seed: transformers skips the step
    const float bias = static_cast<float>(bias_);
    if (!scheme_.selfhash()) {
      scheme_.greenlist(ctx.tokens, ctx.n_tokens, green_);
      for (int32_t t : green_) l[t] += bias;
      return;
    }
    // selfhash: the 40 highest-scoring candidates, each kept green when it lies in the green list
    // seeded with itself appended (transformers' _score_rejection_sampling).
    order_.resize(n);
    for (int i = 0; i < n; ++i) order_[i] = i;
    const int m = std::min(n, 40);
    std::partial_sort(order_.begin(), order_.begin() + m, order_.end(),
                      [&](int x, int y) { return l[x] > l[y] || (l[x] == l[y] && x < y); });
    seq_.assign(ctx.tokens, ctx.tokens + ctx.n_tokens);
    seq_.push_back(0);
    picked_.clear();
    for (int j = 0; j < m; ++j) {
      seq_.back() = order_[j];
      if (scheme_.is_green(seq_.data(), static_cast<int>(seq_.size()), order_[j])) picked_.push_back(order_[j]);
    }
    for (int t : picked_) l[t] += bias;
  }

 private:
  WatermarkScheme scheme_;
  double bias_;
  std::vector<int32_t> green_, seq_;
  std::vector<int> order_, picked_;
};

}  // namespace

SamplerPtr new_watermark(const WatermarkScheme& scheme, double bias) { return std::make_shared<Watermark>(scheme, bias); }

}  // namespace sampling

std::pair<int64_t, int64_t> watermark_score(const WatermarkScheme& scheme, const std::vector<int32_t>& ids,
                                            bool ignore_repeated_ngrams) {
  // transformers' _score_ngrams_in_passage: windows of width + 1 tokens (width with selfhash, whose
  // seed includes the scored token itself); each window's last token is green or not.
  const int n = scheme.selfhash() ? static_cast<int>(scheme.width()) : static_cast<int>(scheme.width()) + 1;
  const int len = static_cast<int>(ids.size());
  int64_t scored = 0, green = 0;
  std::set<std::vector<int32_t>> seen;
  for (int s = 0; s + n <= len; ++s) {
    std::vector<int32_t> w(ids.begin() + s, ids.begin() + s + n);
    const bool fresh = seen.insert(w).second;
    if (!fresh && ignore_repeated_ngrams) continue;
    const int plen = scheme.selfhash() ? n : n - 1;
    ++scored;
    green += scheme.is_green(w.data(), plen, w.back());
  }
  return {scored, green};
}

}  // namespace decodelab
