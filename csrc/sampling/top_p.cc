// Top-p (nucleus) and typical-p: truncation by cumulative probability mass, through a histogram
// of the probabilities instead of a full sort.
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

// transformers' TopPLogitsWarper: tokens ranked by logit (an ascending stable sort: equal logits,
// the higher id ranks first); a token is removed when the probability mass of the tokens ranked at
// or below it is <= 1 - p (compared in float32, as torch does), so the token that crosses p is
// kept, and so are the min_tokens_to_keep ranked first. The mass at or below a token is the total
// minus the mass ranked above it.
// No full sort: a histogram over the float bits of the probabilities (monotone for positive
// floats) finds the one bucket where the cumulative mass crosses, and only that bucket is sorted.
class TopP : public Base<TopP> {
 public:
  TopP(double p, int64_t keep) : p_(p), keep_(keep) {}
  std::string name() const override {
    return "top_p(" + num(p_) + (keep_ > 1 ? ", min_tokens_to_keep=" + std::to_string(keep_) : "") + ")";
  }
  void apply(float* l, int n, const SampleContext&) override {
    if (p_ >= 1.0) return;
    probs_.resize(n);
    if (!softmax(l, n, probs_.data())) return;
    if (keep_ > 1) orig_.assign(l, l + n);
    const float limit = static_cast<float>(1.0 - p_);
    // The total, and a floor the token where the mass crosses cannot lie below: the largest of
    // top x 2^-3k (k = 1..8) with at least the needed mass at or above it, summed in float with a
    // margin of 1e-3 over their worst rounding (2e-4 for 50,257 terms). Tokens below the floor
    // (or of probability 0) are removed unranked; the others, often few after top_k or min_p or
    // in a peaked distribution, are the candidates.
    // (The floors are summed only when more than kSortDirectly tokens have probability above 0.)
    float mass[kFloors], bars[kFloors];
    int positive = 0;
    const double total = masses(n, positive, bars, mass);
    const double target = total - static_cast<double>(limit);  // mass that must be ranked above
    float floor_p = 0.0f;
    for (int k = 0; k < kFloors && static_cast<size_t>(positive) > kSortDirectly; ++k)
      if (static_cast<double>(mass[k]) >= target + 1e-3) {
        floor_p = bars[k];
        break;
      }
    candidates(l, n, floor_p);
    double above = 0.0;
    const bool few = idx_.size() <= kSortDirectly;
    if (few) {
      cand_.swap(idx_);
    } else {
      histogram(idx_, kShift1);  // level 1: the candidates by their top 11 bits (exponent and 3 mantissa bits)
      const int b = crossing(above, target);
      // Tokens of buckets above b are kept, those below b removed; bucket b is decided below.
      for (int i : idx_) {
        const int bi = bucket(probs_[i], kShift1);
        if (bi == b) cand_.push_back(i);
        else if (bi < b) l[i] = kNegInf;
      }
    }
    if (cand_.size() > kSortDirectly) {  // level 2, within bucket b: the next 11 bits, so the sort stays short
      histogram(cand_, kShift2);
      const int b = crossing(above, target);
      idx_.clear();
      for (int i : cand_) {
        const int bi = bucket(probs_[i], kShift2) & (kBuckets - 1);
        if (bi == b) idx_.push_back(i);
        else if (bi < b) l[i] = kNegInf;
      }
      cand_.swap(idx_);
    }
    // Descending logit, among equal ones the higher id first, mirroring an ascending stable sort
    // read backwards (the buckets above are by probability, which rises with the logit; two
    // logits can round to one float32 probability, so the logit decides within a bucket). Popped
    // from a heap until the mass left at or below is <= 1 - p: a peaked distribution stops after a
    // few tokens, where sorting all 512 of stories260K's candidates took 7 us.
    auto lower = [&](int x, int y) { return l[x] < l[y] || (l[x] == l[y] && x < y); };
    std::make_heap(cand_.begin(), cand_.end(), lower);
    auto end = cand_.end();
    bool any_kept = above > 0.0;
    while (end != cand_.begin() && !(static_cast<float>(total - above) <= limit && any_kept)) {
      std::pop_heap(cand_.begin(), end, lower);
      --end;
      any_kept = true;  // at least the top token stays
      above += probs_[*end];
    }
    for (auto it = cand_.begin(); it != end; ++it) l[*it] = kNegInf;  // once the test holds it holds on
    if (keep_ > 1) keep_at_least(l, orig_.data(), n, keep_, true);
  }

 private:
  static constexpr int kShift1 = 20, kShift2 = 9, kBuckets = 1 << 11;  // sign bit is 0 for probabilities
  static constexpr size_t kSortDirectly = 1024;
  static constexpr int kFloors = 8;
  // The sum of the probabilities in double (eight lanes per half vector, then a fixed order) and
  // how many are above 0; when more than kSortDirectly are, mass[k]: the float sum of those at or
  // above bars[k] = top x 2^-3(k+1).
  double masses(int n, int& positive, float* bars, float* mass) const {
    const float* p = probs_.data();
    double total = 0.0;
    positive = 0;
    int i = 0;
#if defined(__AVX512F__)
    __m512d t0 = _mm512_setzero_pd(), t1 = t0;
    for (; i + 16 <= n; i += 16) {
      const __m512 v = _mm512_loadu_ps(p + i);
      t0 = _mm512_add_pd(t0, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
      t1 = _mm512_add_pd(t1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
      positive += __builtin_popcount(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ));
    }
    total = _mm512_reduce_add_pd(t0) + _mm512_reduce_add_pd(t1);
#endif
    for (int j = i; j < n; ++j) {
      total += p[j];
      positive += p[j] > 0.0f;
    }
    if (static_cast<size_t>(positive) <= kSortDirectly) return total;
    const float top = max_logit(p, n);
    for (int k = 0; k < kFloors; ++k) bars[k] = std::ldexp(top, -3 * (k + 1)), mass[k] = 0.0f;
    i = 0;
#if defined(__AVX512F__)
    __m512 mk[kFloors], bk[kFloors];
    for (int k = 0; k < kFloors; ++k) mk[k] = _mm512_setzero_ps(), bk[k] = _mm512_set1_ps(bars[k]);
    for (; i + 16 <= n; i += 16) {
      const __m512 v = _mm512_loadu_ps(p + i);
      for (int k = 0; k < kFloors; ++k)
        mk[k] = _mm512_mask_add_ps(mk[k], _mm512_cmp_ps_mask(v, bk[k], _CMP_GE_OQ), mk[k], v);
    }
    for (int k = 0; k < kFloors; ++k) mass[k] = _mm512_reduce_add_ps(mk[k]);
#endif
    for (; i < n; ++i)
      for (int k = 0; k < kFloors; ++k)
        if (p[i] >= bars[k]) mass[k] += p[i];
    return total;
  }
  // idx_: the tokens of probability above 0 and at least floor_p, in order; the others' logits
  // become -inf.
  void candidates(float* l, int n, float floor_p) {
    idx_.resize(n);
    cand_.clear();
    int m = 0, i = 0;
#if defined(__AVX512F__)
    const __m512i step = _mm512_set1_epi32(16);
    const __m512 lo = _mm512_set1_ps(floor_p);
    __m512i id = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (; i + 16 <= n; i += 16, id = _mm512_add_epi32(id, step)) {
      const __m512 v = _mm512_loadu_ps(probs_.data() + i);
      const __mmask16 k = _mm512_mask_cmp_ps_mask(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ), v, lo, _CMP_GE_OQ);
      _mm512_mask_storeu_ps(l + i, static_cast<__mmask16>(~k), _mm512_set1_ps(kNegInf));
      _mm512_mask_compressstoreu_epi32(idx_.data() + m, k, id);
      m += __builtin_popcount(k);
    }
#endif
    for (; i < n; ++i)
      if (probs_[i] > 0.0f && probs_[i] >= floor_p) idx_[m++] = i;
      else l[i] = kNegInf;
    idx_.resize(m);
  }
  static int bucket(float p, int shift) {
    uint32_t u;
    std::memcpy(&u, &p, 4);
    return static_cast<int>(u >> shift);
  }
  // hist_[k]: the mass of the tokens in ids whose bits above `shift` end in k.
  void histogram(const std::vector<int>& ids, int shift) {
    interleaved_histogram(ids, probs_.data(), kBuckets,
                          [&](int i) { return bucket(probs_[i], shift) & (kBuckets - 1); }, tables_, hist_);
  }
  // From the top bucket down, adds each bucket's mass to `above` until the one whose mass takes
  // it to `target`; returns that bucket (0 at the latest).
  int crossing(double& above, double target) const {
    int b = kBuckets - 1;
    for (; b > 0; --b) {
      if (hist_[b] > 0.0 && above + hist_[b] >= target) break;
      above += hist_[b];
    }
    return b;
  }
  double p_;
  int64_t keep_;
  std::vector<float> probs_, orig_;
  std::vector<double> hist_, tables_;
  std::vector<int> idx_, cand_;
};

// Locally typical sampling (Meister et al. 2022), as transformers' TypicalLogitsWarper: rank by
// |-log p - H|, keep the smallest set reaching `mass` (the token that reaches it included). No full
// sort: the mass is histogrammed by the bits of each token's distance (monotone for non-negative
// doubles), by exponent and then by 11 more bits within the bucket where the mass crosses, and
// only the tokens of that last bucket are sorted (a stable sort of all 50,257 of GPT-2's tokens and
// a second log per token took 5.5 ms).
class TypicalP : public Base<TypicalP> {
 public:
  TypicalP(double p, int64_t keep) : p_(p), keep_(keep) {}
  std::string name() const override {
    return "typical_p(" + num(p_) + (keep_ > 1 ? ", min_tokens_to_keep=" + std::to_string(keep_) : "") + ")";
  }
  void apply(float* l, int n, const SampleContext&) override {
    if (p_ >= 1.0) return;
    probs_.resize(n);
    if (!softmax(l, n, probs_.data())) return;
    shift_.resize(n);
    double H = 0.0;
    for (int i = 0; i < n; ++i) {
      const double lp = probs_[i] > 0.0f ? std::log(static_cast<double>(probs_[i])) : 0.0;
      shift_[i] = lp;
      if (probs_[i] > 0.0f) H -= probs_[i] * lp;
    }
    // A token whose probability underflows to 0 still has a finite log-softmax, (l - max) + log
    // p_top, and so a distance (transformers ranks it so for min_tokens_to_keep); removed ones none.
    const int top = argmax(l, n);
    const double top_l = l[top], log_top = std::log(static_cast<double>(probs_[top]));
    int typical = -1;  // the most typical token (smallest distance, lowest id): always kept
    for (int i = 0; i < n; ++i) {
      if (probs_[i] > 0.0f) shift_[i] = std::fabs(-shift_[i] - H);
      else if (l[i] > kNegInf && std::isfinite(top_l)) shift_[i] = std::fabs(-((l[i] - top_l) + log_top) - H);
      else shift_[i] = std::numeric_limits<double>::infinity();
      if (typical < 0 || shift_[i] < shift_[typical]) typical = i;
    }
    // Buckets from the smallest distance up: the mass before the bucket where it reaches p, then
    // that bucket's tokens one by one in (distance, id) order, as a stable sort ranks them.
    idx_.resize(n);
    std::iota(idx_.begin(), idx_.end(), 0);
    double cum = 0.0;
    double cutoff = std::numeric_limits<double>::infinity();  // nothing crosses: nothing removed
    for (int level = 0; level < 2 && cutoff == std::numeric_limits<double>::infinity(); ++level) {
      const int shift = level == 0 ? 52 : 41;
      interleaved_histogram(idx_, probs_.data(), kBuckets, [&](int i) { return key(i, shift); }, tables_, hist_);
      int b = 0, last = -1;
      double before_last = cum;
      for (; b < kBuckets; ++b) {
        if (hist_[b] > 0.0) last = b, before_last = cum;
        if (cum + hist_[b] >= p_) break;
        cum += hist_[b];
      }
      if (b == kBuckets) {
        if (level == 0 || last < 0) break;  // the whole mass is below p: nothing is removed
        b = last, cum = before_last;        // within the bucket found above, up to rounding
      }
      cand_.clear();
      for (int i : idx_)
        if (key(i, shift) == b) cand_.push_back(i);
      idx_.swap(cand_);
      if (idx_.size() > 64 && level == 0) continue;  // the next 11 bits within bucket b
      std::sort(idx_.begin(), idx_.end(),
                [&](int x, int y) { return shift_[x] < shift_[y] || (shift_[x] == shift_[y] && x < y); });
      cutoff = shift_[idx_.back()];  // the bucket's last, should rounding keep the mass below p
      for (int i : idx_) {  // the first token whose inclusive mass reaches p sets the cutoff
        cum += probs_[i];
        if (!(cum < p_)) {
          cutoff = shift_[i];
          break;
        }
      }
      break;
    }
    // min_tokens_to_keep: the first of a stable ascending sort by distance (the lower id first).
    kept_.assign(n, 0);
    if (keep_ > 1) {
      idx_.clear();
      for (int i = 0; i < n; ++i)
        if (shift_[i] < std::numeric_limits<double>::infinity()) idx_.push_back(i);
      const size_t m = std::min<size_t>(idx_.size(), static_cast<size_t>(keep_));
      std::partial_sort(idx_.begin(), idx_.begin() + m, idx_.end(),
                        [&](int x, int y) { return shift_[x] < shift_[y] || (shift_[x] == shift_[y] && x < y); });
      for (size_t j = 0; j < m; ++j) kept_[idx_[j]] = 1;
    }
    for (int i = 0; i < n; ++i)
      if (shift_[i] > cutoff && i != typical && !kept_[i]) l[i] = kNegInf;
  }

 private:
  static constexpr int kBuckets = 1 << 11;
  int key(int i, int shift) const {
    uint64_t u;
    std::memcpy(&u, &shift_[i], 8);
    return static_cast<int>((u >> shift) & (kBuckets - 1));
  }
  double p_;
  int64_t keep_;
  std::vector<float> probs_;
  std::vector<double> shift_, hist_, tables_;
  std::vector<int> idx_, cand_;
  std::vector<char> kept_;
};

}  // namespace

SamplerPtr new_top_p(double p, int64_t min_keep) { return std::make_shared<TopP>(p, min_keep); }
SamplerPtr new_typical_p(double p, int64_t min_keep) { return std::make_shared<TypicalP>(p, min_keep); }

}  // namespace sampling
}  // namespace decodelab
