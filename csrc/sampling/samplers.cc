#include <immintrin.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

#include "decodelab/aligned.h"
#include "decodelab/sampling.h"

namespace decodelab {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

uint64_t mix64(uint64_t z) {  // SplitMix64 finaliser
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

// The largest value, NaN ignored (-inf when there is none). In vectors: one running maximum of
// dependent scalar compares costs a compare's latency per logit, 87 us over GPT-2's vocabulary.
float max_logit(const float* l, int n) {
  float mx = kNegInf;
  int i = 0;
#if defined(__AVX512F__)
  __m512 m = _mm512_set1_ps(kNegInf);
  for (; i + 16 <= n; i += 16) m = _mm512_max_ps(_mm512_loadu_ps(l + i), m);  // a NaN gives m back
  mx = _mm512_reduce_max_ps(m);
#endif
  for (; i < n; ++i) mx = l[i] > mx ? l[i] : mx;  // NaN fails the compare
  return mx;
}

namespace {
// The first index whose value is >= v (NaN never is), or -1.
int first_at_least(const float* l, int n, float v) {
  int i = 0;
#if defined(__AVX512F__)
  const __m512 b = _mm512_set1_ps(v);
  for (; i + 16 <= n; i += 16) {
    const __mmask16 k = _mm512_cmp_ps_mask(_mm512_loadu_ps(l + i), b, _CMP_GE_OQ);
    if (k) return i + __builtin_ctz(k);
  }
#endif
  for (; i < n; ++i)
    if (l[i] >= v) return i;
  return -1;
}

// Index of the largest logit (NaN ignored, ties to the lowest id), or -1 if none is finite/+inf.
int argmax(const float* l, int n) {
  // The largest value first, then the first index holding it: two passes that vectorise, where one
  // pass keeping the index runs a compare and branch per logit (50,257 of them for GPT-2).
  const float bv = max_logit(l, n);
  if (!(bv > kNegInf)) return -1;
  return first_at_least(l, n, bv);
}

void keep_only(float* l, int n, int keep) {
  const bool inside = keep >= 0 && keep < n;
  const float v = inside ? l[keep] : kNegInf;
  std::fill(l, l + n, kNegInf);
  if (inside) l[keep] = v;
}

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

// Remove every token whose probability is below thr, but never the most likely one.
void remove_below(float* l, const float* probs, int n, float thr) {
  const int top = argmax(l, n);
  int i = 0;
#if defined(__AVX512F__)
  const __m512 t = _mm512_set1_ps(thr), gone = _mm512_set1_ps(kNegInf);
  for (; i + 16 <= n; i += 16) {
    __mmask16 m = _mm512_cmp_ps_mask(_mm512_loadu_ps(probs + i), t, _CMP_LT_OQ);
    if (top >= i && top < i + 16) m &= static_cast<__mmask16>(~(1u << (top - i)));
    _mm512_mask_storeu_ps(l + i, m, gone);
  }
#endif
  for (; i < n; ++i)
    if (probs[i] < thr && i != top) l[i] = kNegInf;
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

void check_token_ids(const std::vector<int64_t>& ids, int n, const char* what) {
  for (int64_t t : ids)
    if (t < 0 || t >= n)
      throw std::invalid_argument(std::string(what) + " token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                                  std::to_string(n) + ")");
}

template <typename Self>
class Base : public Sampler {
 public:
  SamplerPtr clone() const override { return std::make_shared<Self>(static_cast<const Self&>(*this)); }
};

// ---------------------------------------------------------------------------------------------
class Temperature : public Base<Temperature> {
 public:
  explicit Temperature(double t) : t_(t) {}
  std::string name() const override { return "temperature(" + num(t_) + ")"; }
  void apply(float* l, int n, const SampleContext&) override {
    if (t_ == 0.0) {  // the limit T -> 0: all mass on the most likely token
      const int top = argmax(l, n);
      if (top >= 0) keep_only(l, n, top);
      return;
    }
    const float inv = static_cast<float>(1.0 / t_);
    for (int i = 0; i < n; ++i) l[i] *= inv;
  }

 private:
  double t_;
};

class TopK : public Base<TopK> {
 public:
  explicit TopK(int64_t k) : k_(k) {}
  std::string name() const override { return "top_k(" + std::to_string(k_) + ")"; }
  void apply(float* l, int n, const SampleContext&) override {
    if (k_ <= 0 || k_ >= n) return;  // 0 disables, as in transformers
    // A floor for the k-th largest candidate (neither NaN nor -inf): the smallest of the maxima of
    // k disjoint runs, k values at least that large when each run holds a candidate (else -inf,
    // and every candidate passes). The candidates above it are gathered in one vector pass, and
    // the k-th is selected among those few. GPT-2's 50,257 logits at k = 40 took 130 us through
    // a copy of every candidate and nth_element; a heap of the k largest, 20 us on random logits
    // but 4 us on stories260K's 512 (201 pushes: its vocabulary starts with rare tokens).
    const int k = static_cast<int>(k_), run = n / k;
    float bar = std::numeric_limits<float>::infinity();
    for (int r = 0; r < k; ++r) bar = std::min(bar, max_logit(l + static_cast<size_t>(r) * run, run));
    buf_.resize(n);
    int m = 0, count = 0, i = 0;
#if defined(__AVX512F__)
    const __m512 lo = _mm512_set1_ps(bar), none = _mm512_set1_ps(kNegInf);
    for (; i + 16 <= n; i += 16) {
      const __m512 v = _mm512_loadu_ps(l + i);
      const __mmask16 cand = _mm512_cmp_ps_mask(v, none, _CMP_GT_OQ);
      const __mmask16 keep = _mm512_mask_cmp_ps_mask(cand, v, lo, _CMP_GE_OQ);
      _mm512_mask_compressstoreu_ps(buf_.data() + m, keep, v);
      m += __builtin_popcount(keep);
      count += __builtin_popcount(cand);
    }
#endif
    for (; i < n; ++i)
      if (!is_removed(l[i])) {
        ++count;
        if (l[i] >= bar) buf_[m++] = l[i];
      }
    if (count <= k) return;  // k candidates or fewer: nothing to remove
    // The k-th largest by partial selection; ties with it are kept, as transformers does.
    std::nth_element(buf_.begin(), buf_.begin() + (k - 1), buf_.begin() + m, std::greater<float>());
    const float kth = buf_[k - 1];
    for (int j = 0; j < n; ++j)
      if (l[j] < kth) l[j] = kNegInf;
  }

 private:
  int64_t k_;
  std::vector<float> buf_;
};

// transformers' TopPLogitsWarper: a token is removed when the probability mass of the tokens
// ranked at or below it is <= 1 - p (compared in float32, as torch does), so the token that
// crosses p is kept. The mass at or below a token is the total minus the mass ranked above it.
// No full sort: a histogram over the float bits of the probabilities (monotone for positive
// floats) finds the one bucket where the cumulative mass crosses, and only that bucket is sorted.
class TopP : public Base<TopP> {
 public:
  explicit TopP(double p) : p_(p) {}
  std::string name() const override { return "top_p(" + num(p_) + ")"; }
  void apply(float* l, int n, const SampleContext&) override {
    if (p_ >= 1.0) return;
    probs_.resize(n);
    if (!softmax(l, n, probs_.data())) return;
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
    // Descending probability; among equal ones the higher id first, mirroring an ascending stable
    // sort read backwards. Popped from a heap until the mass left at or below is <= 1 - p: a
    // peaked distribution stops after a few tokens, where sorting all 512 of stories260K's
    // candidates took 7 us.
    auto lower = [&](int x, int y) { return probs_[x] < probs_[y] || (probs_[x] == probs_[y] && x < y); };
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
  std::vector<float> probs_;
  std::vector<double> hist_, tables_;
  std::vector<int> idx_, cand_;
};

class MinP : public Base<MinP> {
 public:
  explicit MinP(double p) : p_(p) {}
  std::string name() const override { return "min_p(" + num(p_) + ")"; }
  void apply(float* l, int n, const SampleContext&) override {
    if (p_ <= 0.0) return;
    probs_.resize(n);
    if (!softmax(l, n, probs_.data())) return;
    const float top = max_logit(probs_.data(), n);
    const float thr = static_cast<float>(p_) * top;
    remove_below(l, probs_.data(), n, thr);
  }

 private:
  double p_;
  std::vector<float> probs_;
};

// Locally typical sampling (Meister et al. 2022), as transformers' TypicalLogitsWarper: rank by
// |-log p - H|, keep the smallest set reaching `mass` (the token that reaches it included). No full
// sort: the mass is histogrammed by the bits of each token's distance (monotone for non-negative
// doubles), by exponent and then by 11 more bits within the bucket where the mass crosses, and
// only the tokens of that last bucket are sorted (a stable sort of all 50,257 of GPT-2's tokens and
// a second log per token took 5.5 ms).
class TypicalP : public Base<TypicalP> {
 public:
  explicit TypicalP(double p) : p_(p) {}
  std::string name() const override { return "typical_p(" + num(p_) + ")"; }
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
    int typical = -1;  // the most typical token (smallest distance, lowest id): always kept
    for (int i = 0; i < n; ++i) {
      shift_[i] = probs_[i] > 0.0f ? std::fabs(-shift_[i] - H) : std::numeric_limits<double>::infinity();
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
    for (int i = 0; i < n; ++i)
      if (shift_[i] > cutoff && i != typical) l[i] = kNegInf;
  }

 private:
  static constexpr int kBuckets = 1 << 11;
  int key(int i, int shift) const {
    uint64_t u;
    std::memcpy(&u, &shift_[i], 8);
    return static_cast<int>((u >> shift) & (kBuckets - 1));
  }
  double p_;
  std::vector<float> probs_;
  std::vector<double> shift_, hist_, tables_;
  std::vector<int> idx_, cand_;
};

// Truncation sampling (Hewitt et al. 2022): epsilon removes p < epsilon; eta removes
// p < min(eta, sqrt(eta) * exp(-H)). transformers' EpsilonLogitsWarper / EtaLogitsWarper.
class Cutoff : public Base<Cutoff> {
 public:
  Cutoff(double e, bool eta) : e_(e), eta_(eta) {}
  std::string name() const override { return std::string(eta_ ? "eta_cutoff(" : "epsilon_cutoff(") + num(e_) + ")"; }
  void apply(float* l, int n, const SampleContext&) override {
    if (e_ <= 0.0) return;
    probs_.resize(n);
    if (!softmax(l, n, probs_.data())) return;
    float thr = static_cast<float>(e_);  // compared in float32, as torch does
    if (eta_) thr = std::min(thr, static_cast<float>(std::sqrt(e_) * std::exp(-entropy_of(probs_.data(), n))));
    remove_below(l, probs_.data(), n, thr);
  }

 private:
  double e_;
  bool eta_;
  std::vector<float> probs_;
};

// Top-n-sigma (Tang et al. 2024; llama.cpp): keep logits >= max - n * std over the candidates.
class TopNSigma : public Base<TopNSigma> {
 public:
  explicit TopNSigma(double n) : n_(n) {}
  std::string name() const override { return "top_n_sigma(" + num(n_) + ")"; }
  void apply(float* l, int n, const SampleContext&) override {
    if (n_ <= 0.0) return;
    // Sums over the finite logits in double, eight lanes per half vector added in a fixed order
    // (one running double sum took 100 us over GPT-2's vocabulary).
    double sum = 0.0, sq = 0.0, mx = -std::numeric_limits<double>::infinity();
    int cnt = 0, i = 0;
#if defined(__AVX512F__)
    __m512d s0 = _mm512_setzero_pd(), s1 = s0, q0 = s0, q1 = s0;
    __m512 m = _mm512_set1_ps(kNegInf);
    const __m512 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
    for (; i + 16 <= n; i += 16) {
      const __m512 v = _mm512_loadu_ps(l + i);
      const __mmask16 fin = _mm512_cmp_ps_mask(_mm512_abs_ps(v), inf, _CMP_LT_OQ);  // not NaN, not +-inf
      const __m512 f = _mm512_maskz_mov_ps(fin, v);
      const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
      const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1)));
      s0 = _mm512_add_pd(s0, lo), s1 = _mm512_add_pd(s1, hi);
      q0 = _mm512_fmadd_pd(lo, lo, q0), q1 = _mm512_fmadd_pd(hi, hi, q1);
      m = _mm512_mask_max_ps(m, fin, v, m);
      cnt += __builtin_popcount(fin);
    }
    sum = _mm512_reduce_add_pd(s0) + _mm512_reduce_add_pd(s1);
    sq = _mm512_reduce_add_pd(q0) + _mm512_reduce_add_pd(q1);
    mx = _mm512_reduce_max_ps(m);
#endif
    for (; i < n; ++i)
      if (std::isfinite(l[i])) {
        sum += l[i];
        sq += static_cast<double>(l[i]) * l[i];
        mx = std::max(mx, static_cast<double>(l[i]));
        ++cnt;
      }
    if (cnt <= 1) return;
    const double mean = sum / cnt;
    const double sd = std::sqrt(std::max(0.0, sq / cnt - mean * mean));
    const double thr = mx - n_ * sd;
    // A float x is below thr exactly when it is below the smallest float at or above thr, so the
    // removal runs in float vectors (-inf stays, NaN and +inf fail the compare).
    float t = static_cast<float>(thr);
    if (static_cast<double>(t) < thr) t = std::nextafter(t, std::numeric_limits<float>::infinity());
    int j = 0;
#if defined(__AVX512F__)
    for (; j + 16 <= n; j += 16)
      _mm512_mask_storeu_ps(l + j, _mm512_cmp_ps_mask(_mm512_loadu_ps(l + j), _mm512_set1_ps(t), _CMP_LT_OQ),
                            _mm512_set1_ps(kNegInf));
#endif
    for (; j < n; ++j)
      if (std::isfinite(l[j]) && l[j] < thr) l[j] = kNegInf;
  }

 private:
  double n_;
};

// Exclude Top Choices (XTC, llama.cpp): with the given probability, remove every token at or
// above the threshold except the least likely of them, when at least two are.
class XTC : public Base<XTC> {
 public:
  XTC(double prob, double thr, uint64_t seed) : prob_(prob), thr_(thr), seed_(seed) {}
  std::string name() const override { return "xtc(" + num(prob_) + ", " + num(thr_) + ")"; }
  void apply(float* l, int n, const SampleContext& ctx) override {
    if (prob_ <= 0.0 || thr_ > 0.5) return;
    if (counter_uniform(seed_, ctx.sequence, ctx.step, 0x787463) >= prob_) return;
    probs_.resize(n);
    if (!softmax(l, n, probs_.data())) return;
    int least = -1, count = 0;
    for (int i = 0; i < n; ++i)
      if (probs_[i] >= thr_) {
        ++count;
        if (least < 0 || probs_[i] < probs_[least]) least = i;
      }
    if (count < 2) return;
    for (int i = 0; i < n; ++i)
      if (probs_[i] >= thr_ && i != least) l[i] = kNegInf;
  }

 private:
  double prob_, thr_;
  uint64_t seed_;
  std::vector<float> probs_;
};

// CTRL repetition penalty (Keskar et al. 2019), transformers' semantics: every distinct token of
// the context (prompt included; the last `last_n` tokens if last_n > 0): logit < 0 ? logit * r :
// logit / r.
class RepetitionPenalty : public Base<RepetitionPenalty> {
 public:
  RepetitionPenalty(double r, int64_t last_n) : r_(r), last_n_(last_n) {}
  std::string name() const override { return "repetition_penalty(" + num(r_) + ")"; }
  void apply(float* l, int n, const SampleContext& ctx) override {
    if (r_ == 1.0) return;
    seen_.assign(n, 0);
    const int start = last_n_ > 0 ? std::max<int64_t>(0, ctx.n_tokens - last_n_) : 0;
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
// for a run of len >= allowed_length. Runs do not cross sequence-breaker tokens.
class DRY : public Base<DRY> {
 public:
  DRY(double mult, double base, int64_t allowed, std::vector<int64_t> breakers, int64_t last_n)
      : mult_(mult), base_(base), allowed_(allowed), breakers_(std::move(breakers)), last_n_(last_n) {}
  std::string name() const override { return "dry(" + num(mult_) + ", " + num(base_) + ")"; }
  void apply(float* l, int n, const SampleContext& ctx) override {
    if (mult_ == 0.0 || ctx.n_tokens < 2) return;
    const int start = last_n_ > 0 ? std::max<int64_t>(0, ctx.n_tokens - last_n_) : 0;
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
    for (int i = 0; i < n; ++i)
      if (best_[i] >= allowed_ && best_[i] > 0)
        l[i] -= static_cast<float>(mult_ * std::pow(base_, static_cast<double>(best_[i] - allowed_)));
  }

 private:
  double mult_, base_;
  int64_t allowed_;
  std::vector<int64_t> breakers_;
  int64_t last_n_;
  std::vector<int> best_;
};

// Draw from softmax(logits) with the counter-based generator: inverse CDF in token-id order.
// Sum of n <= 64 probabilities in double: eight running sums (lane j takes values j, j + 8, ...),
// then added in pairs. A fixed order, so a draw is the same on every machine and build.
double block_sum(const float* p, int n) {
  double a[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) a[j] += p[i + j];
  for (int j = 0; i < n; ++i, ++j) a[j] += p[i];
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

// The first token whose cumulative probability exceeds u x total; tokens of probability 0 are
// never drawn. Totals run per block of 64 tokens, then the walk adds whole blocks until the one
// where the sum crosses and steps through that block alone: two passes of one dependent double
// add per token took 130 us over GPT-2's vocabulary.
int draw(const float* probs, int n, double u) {
  constexpr int kBlock = 64;
  const int nb = (n + kBlock - 1) / kBlock;
  thread_local std::vector<double> sums;
  sums.resize(nb);
  double total = 0.0;
  for (int b = 0; b < nb; ++b) {
    sums[b] = block_sum(probs + static_cast<size_t>(b) * kBlock, std::min(kBlock, n - b * kBlock));
    total += sums[b];
  }
  const double target = u * total;
  double cum = 0.0;
  int last_block = -1;
  for (int b = 0; b < nb; ++b) {
    if (!(sums[b] > 0.0)) continue;
    last_block = b;
    if (cum + sums[b] > target) {  // crosses here, unless the token-by-token sum rounds lower
      double c = cum;
      for (int i = b * kBlock, end = std::min(n, i + kBlock); i < end; ++i) {
        if (probs[i] <= 0.0f) continue;
        c += probs[i];
        if (c > target) return i;
      }
    }
    cum += sums[b];
  }
  if (last_block < 0) return -1;
  for (int i = std::min(n, (last_block + 1) * kBlock) - 1; i >= last_block * kBlock; --i)  // rounding: the last one
    if (probs[i] > 0.0f) return i;
  return -1;
}

class Greedy : public Base<Greedy> {
 public:
  std::string name() const override { return "greedy"; }
  bool selects() const override { return true; }
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

void require(bool ok, const std::string& msg) {
  if (!ok) throw std::invalid_argument(msg);
}
// Finite once rounded to float32, the precision every sampler computes in: 1e300 passes a double
// check and becomes +inf in the logits.
bool finite(double v) { return std::isfinite(v) && std::isfinite(static_cast<float>(v)); }
// The smallest temperature and the range of repetition penalties whose scaling keeps logits of
// real models (magnitudes up to about 1e4) finite in float32.
constexpr double kMinTemperature = 1e-6, kMinRepetition = 1e-3, kMaxRepetition = 1e3;
}  // namespace

int first_kept(const float* logits, int n) {
  return first_at_least(logits, n, -std::numeric_limits<float>::max());
}

double counter_uniform(uint64_t seed, uint64_t sequence, uint64_t step, uint64_t salt) {
  const uint64_t h = mix64(mix64(mix64(mix64(seed) ^ sequence) ^ step) ^ salt);
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

bool softmax(const float* l, int n, float* p) {
  // NaN and -inf fail every comparison, so neither can be the maximum.
  constexpr float kPosInf = std::numeric_limits<float>::infinity();
  const float mx = max_logit(l, n);
  if (mx == kNegInf) {
    std::fill(p, p + n, 0.0f);
    return false;
  }
  float sum = 0.0f;
  if (mx == kPosInf) {  // +inf logits share all the mass
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < n; ++i) {
      p[i] = l[i] == kPosInf ? 1.0f : 0.0f;
      sum += p[i];
    }
  } else {
    // Eigen's vectorised exp. It clamps very negative inputs, so exp(-inf) comes out as a tiny
    // denormal rather than 0: removed tokens (-inf or NaN) are set to exactly 0 after. Written to
    // a 64-byte-aligned scratch first: Eigen takes the elements before the first aligned one of
    // its destination through the scalar std::exp and starts its sum there, so writing straight
    // into p made the probabilities differ in their last bit with p's address.
    thread_local FloatBuffer scratch;
    grow(scratch, static_cast<size_t>(n));
    Eigen::Map<const Eigen::ArrayXf> L(l, n);
    Eigen::Map<Eigen::ArrayXf, Eigen::Aligned64> P(scratch.data(), n);
    P = (L - mx).exp();
    P = (L > kNegInf).select(P, 0.0f);
    sum = P.sum();
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int i = 0; i < n; ++i) p[i] = scratch[i] * inv;  // normalised on the way out
    return true;
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int i = 0; i < n; ++i) p[i] *= inv;
  return true;
}

double entropy_of(const float* p, int n) {
  // Each log through Eigen's vectorised float log (a libm double log per token cost 240 us over
  // GPT-2's vocabulary), the products summed in double; tokens of probability 0 add nothing.
  // (A probability below the smallest normal float takes that one's log: 0 x log adds 0, and a
  // denormal adds under 1e-36.)
  thread_local Eigen::ArrayXf lq;
  lq = Eigen::Map<const Eigen::ArrayXf>(p, n).max(std::numeric_limits<float>::min()).log();
  double a[4] = {0.0, 0.0, 0.0, 0.0};  // four running sums, then in pairs: a fixed order
  int i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) a[j] -= static_cast<double>(p[i + j]) * lq[i + j];
  for (int j = 0; i < n; ++i, ++j) a[j] -= static_cast<double>(p[i]) * lq[i];
  return (a[0] + a[1]) + (a[2] + a[3]);
}

SamplerPtr Chain::clone() const {
  std::vector<SamplerPtr> c;
  for (const auto& s : stages_) c.push_back(s->clone());
  return std::make_shared<Chain>(std::move(c));
}

SamplerPtr make_temperature(double t) {
  require(finite(t) && (t == 0.0 || t >= kMinTemperature),
          "temperature must be 0 (greedy) or a finite number >= 1e-06 (smaller ones overflow float32 logits), got " +
              num(t));
  return std::make_shared<Temperature>(t);
}
SamplerPtr make_top_k(int64_t k) {
  require(k >= 0, "top_k must be >= 0 (0 disables it), got " + std::to_string(k));
  return std::make_shared<TopK>(k);
}
SamplerPtr make_top_p(double p) {
  require(finite(p) && p > 0.0 && p <= 1.0, "top_p must be in (0, 1], got " + num(p));
  return std::make_shared<TopP>(p);
}
SamplerPtr make_min_p(double p) {
  require(finite(p) && p >= 0.0 && p <= 1.0, "min_p must be in [0, 1], got " + num(p));
  return std::make_shared<MinP>(p);
}
SamplerPtr make_typical_p(double p) {
  require(finite(p) && p > 0.0 && p <= 1.0, "typical_p must be in (0, 1], got " + num(p));
  return std::make_shared<TypicalP>(p);
}
SamplerPtr make_epsilon_cutoff(double e) {
  require(finite(e) && e >= 0.0 && e < 1.0, "epsilon must be in [0, 1), got " + num(e));
  return std::make_shared<Cutoff>(e, false);
}
SamplerPtr make_eta_cutoff(double e) {
  require(finite(e) && e >= 0.0 && e < 1.0, "eta must be in [0, 1), got " + num(e));
  return std::make_shared<Cutoff>(e, true);
}
SamplerPtr make_top_n_sigma(double n) {
  require(finite(n) && n >= 0.0, "top_n_sigma n must be a finite number >= 0 (0 disables it), got " + num(n));
  return std::make_shared<TopNSigma>(n);
}
SamplerPtr make_xtc(double probability, double threshold, uint64_t seed) {
  require(finite(probability) && probability >= 0.0 && probability <= 1.0,
          "xtc probability must be in [0, 1], got " + num(probability));
  require(finite(threshold) && threshold >= 0.0 && threshold <= 1.0,
          "xtc threshold must be in [0, 1], got " + num(threshold));
  return std::make_shared<XTC>(probability, threshold, seed);
}
SamplerPtr make_repetition_penalty(double r, int64_t last_n) {
  require(finite(r) && r >= kMinRepetition && r <= kMaxRepetition,
          "repetition_penalty must be in [0.001, 1000] (further from 1 it overflows float32 logits), got " + num(r));
  require(last_n >= 0, "repetition_penalty last_n must be >= 0 (0: the whole context), got " + std::to_string(last_n));
  return std::make_shared<RepetitionPenalty>(r, last_n);
}
SamplerPtr make_presence_penalty(double v) {
  require(finite(v) && v >= -2.0 && v <= 2.0, "presence_penalty must be in [-2, 2], got " + num(v));
  return std::make_shared<CountPenalty>(v, true);
}
SamplerPtr make_frequency_penalty(double v) {
  require(finite(v) && v >= -2.0 && v <= 2.0, "frequency_penalty must be in [-2, 2], got " + num(v));
  return std::make_shared<CountPenalty>(v, false);
}
SamplerPtr make_no_repeat_ngram(int64_t n) {
  require(n >= 0, "no_repeat_ngram_size must be >= 0 (0 disables it), got " + std::to_string(n));
  return std::make_shared<NoRepeatNGram>(n);
}
SamplerPtr make_logit_bias(const std::unordered_map<int64_t, double>& bias) {
  for (const auto& kv : bias) {
    require(kv.first >= 0, "logit_bias token id must be >= 0, got " + std::to_string(kv.first));
    require(finite(kv.second) || kv.second == -std::numeric_limits<double>::infinity(),
            "logit_bias for token " + std::to_string(kv.first) + " must be finite in float32 or -inf, got " + num(kv.second));
  }
  return std::make_shared<LogitBias>(bias);
}
SamplerPtr make_suppress_tokens(const std::vector<int64_t>& ids) {
  for (int64_t t : ids) require(t >= 0, "suppress_tokens token id must be >= 0, got " + std::to_string(t));
  return std::make_shared<SuppressTokens>(ids);
}
SamplerPtr make_min_new_tokens(int64_t m, const std::vector<int64_t>& eos) {
  require(m >= 0, "min_new_tokens must be >= 0, got " + std::to_string(m));
  for (int64_t t : eos) require(t >= 0, "min_new_tokens EOS id must be >= 0, got " + std::to_string(t));
  return std::make_shared<MinNewTokens>(m, eos);
}
SamplerPtr make_dry(double mult, double base, int64_t allowed, const std::vector<int64_t>& breakers, int64_t last_n) {
  require(finite(mult) && mult >= 0.0, "dry multiplier must be a finite number >= 0, got " + num(mult));
  require(finite(base) && base >= 1.0, "dry base must be a finite number >= 1, got " + num(base));
  require(allowed >= 1, "dry allowed_length must be >= 1, got " + std::to_string(allowed));
  require(last_n >= 0, "dry last_n must be >= 0 (0: the whole context), got " + std::to_string(last_n));
  return std::make_shared<DRY>(mult, base, allowed, breakers, last_n);
}
SamplerPtr make_mirostat_v2(double tau, double eta, uint64_t seed) {
  require(finite(tau) && tau > 0.0, "mirostat tau must be a finite number > 0, got " + num(tau));
  require(finite(eta) && eta > 0.0 && eta <= 1.0, "mirostat eta must be in (0, 1], got " + num(eta));
  return std::make_shared<Mirostat>(tau, eta, seed);
}
SamplerPtr make_greedy() { return std::make_shared<Greedy>(); }
SamplerPtr make_dist(uint64_t seed) { return std::make_shared<Dist>(seed); }

}  // namespace decodelab
