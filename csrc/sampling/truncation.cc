// Truncation samplers that remove tokens by rank or probability: top-k, min-p, epsilon and eta
// cutoffs, top-n-sigma, and XTC.
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

// The name of a truncation sampler: its argument, and min_tokens_to_keep when it is not 1.
std::string with_keep(const std::string& head, int64_t keep) {
  return head + (keep > 1 ? ", min_tokens_to_keep=" + std::to_string(keep) : "") + ")";
}

// transformers' TopKLogitsWarper: k is at least min_tokens_to_keep.
class TopK : public Base<TopK> {
 public:
  TopK(int64_t k, int64_t keep) : k_(k), keep_(keep) {}
  std::string name() const override { return with_keep("top_k(" + std::to_string(k_), keep_); }
  void apply(float* l, int n, const SampleContext&) override {
    if (k_ <= 0) return;  // 0 disables, as in transformers
    const int64_t k_eff = std::max(k_, keep_);
    if (k_eff >= n) return;
    // A floor for the k-th largest candidate (neither NaN nor -inf): the smallest of the maxima of
    // k disjoint runs, k values at least that large when each run holds a candidate (else -inf,
    // and every candidate passes). The candidates above it are gathered in one vector pass, and
    // the k-th is selected among those few. GPT-2's 50,257 logits at k = 40 took 130 us through
    // a copy of every candidate and nth_element; a heap of the k largest, 20 us on random logits
    // but 4 us on stories260K's 512 (201 pushes: its vocabulary starts with rare tokens).
    const int k = static_cast<int>(k_eff), run = n / k;
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
  int64_t k_, keep_;
  std::vector<float> buf_;
};

// transformers' MinPLogitsWarper: remove p < min_p x top; then the first min_tokens_to_keep of a
// descending stable sort by logit (equal logits: the lower id first) are kept.
class MinP : public Base<MinP> {
 public:
  MinP(double p, int64_t keep) : p_(p), keep_(keep) {}
  std::string name() const override { return with_keep("min_p(" + num(p_), keep_); }
  void apply(float* l, int n, const SampleContext&) override {
    if (p_ <= 0.0) return;
    probs_.resize(n);
    if (!softmax(l, n, probs_.data())) return;
    const float top = max_logit(probs_.data(), n);
    const float thr = static_cast<float>(p_) * top;
    if (keep_ > 1) orig_.assign(l, l + n);
    // Ties with the top token have its probability, so p <= 1 never removes them.
    remove_below(l, probs_.data(), n, thr, std::numeric_limits<float>::infinity());
    if (keep_ > 1) keep_at_least(l, orig_.data(), n, keep_, false);
  }

 private:
  double p_;
  int64_t keep_;
  std::vector<float> probs_, orig_;
};

// Truncation sampling (Hewitt et al. 2022): epsilon removes p < epsilon; eta removes
// p < min(eta, sqrt(eta) * exp(-H)). transformers' EpsilonLogitsWarper / EtaLogitsWarper: a token
// whose logit is at least the min_tokens_to_keep-th largest is never removed, so a flat top stays whole.
class Cutoff : public Base<Cutoff> {
 public:
  Cutoff(double e, bool eta, int64_t keep) : e_(e), eta_(eta), keep_(keep) {}
  std::string name() const override { return with_keep(std::string(eta_ ? "eta_cutoff(" : "epsilon_cutoff(") + num(e_), keep_); }
  void apply(float* l, int n, const SampleContext&) override {
    if (e_ <= 0.0) return;
    probs_.resize(n);
    if (!softmax(l, n, probs_.data())) return;
    float thr = static_cast<float>(e_);  // compared in float32, as torch does
    if (eta_) thr = std::min(thr, static_cast<float>(std::sqrt(e_) * std::exp(-entropy_of(probs_.data(), n))));
    remove_below(l, probs_.data(), n, thr, kth_largest(l, n, keep_));
  }

 private:
  double e_;
  bool eta_;
  int64_t keep_;
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

// Top-H (transformers' TopHLogitsWarper): among the 100 highest logits (their own softmax), keep
// tokens in rank order while the running sum of -p log p stays <= top_h x their entropy; the
// first is always kept. Equal logits rank the lower id first.
class TopH : public Base<TopH> {
 public:
  explicit TopH(double h) : h_(h) {}
  std::string name() const override { return "top_h(" + num(h_) + ")"; }
  void apply(float* l, int n, const SampleContext&) override {
    const int m = std::min(n, kTopN);
    idx_.resize(n);
    std::iota(idx_.begin(), idx_.end(), 0);
    auto higher = [&](int x, int y) {
      const bool kx = l[x] > kNegInf, ky = l[y] > kNegInf;  // removed ones (NaN, -inf) last
      if (kx != ky) return kx;
      if (kx && l[x] != l[y]) return l[x] > l[y];
      return x < y;
    };
    std::partial_sort(idx_.begin(), idx_.begin() + m, idx_.end(), higher);
    top_.resize(m);
    probs_.resize(m);
    for (int j = 0; j < m; ++j) top_[j] = l[idx_[j]];
    if (!softmax(top_.data(), m, probs_.data())) return;
    const double mx = top_[0];
    double sum = 0.0;
    for (int j = 0; j < m; ++j) sum += top_[j] > kNegInf ? std::exp(static_cast<double>(top_[j]) - mx) : 0.0;
    const double lse = mx + std::log(sum);
    double H = 0.0;
    for (int j = 0; j < m; ++j)
      if (probs_[j] > 0.0f) H -= (static_cast<double>(top_[j]) - lse) * probs_[j];
    const float tau = static_cast<float>(H * h_);
    keep_.assign(n, 0);
    keep_[idx_[0]] = 1;
    double cum = 0.0;
    for (int j = 0; j < m; ++j) {
      if (!(probs_[j] > 0.0f)) break;  // transformers' 0 x log 0 is NaN: nothing after it is kept
      cum += -probs_[j] * std::log(probs_[j]);
      if (static_cast<float>(cum) <= tau) keep_[idx_[j]] = 1;
    }
    for (int i = 0; i < n; ++i)
      if (!keep_[i]) l[i] = kNegInf;
  }

 private:
  static constexpr int kTopN = 100;
  double h_;
  std::vector<int> idx_;
  std::vector<float> top_, probs_;
  std::vector<char> keep_;
};

}  // namespace

SamplerPtr new_top_h(double h) { return std::make_shared<TopH>(h); }
SamplerPtr new_top_k(int64_t k, int64_t min_keep) { return std::make_shared<TopK>(k, min_keep); }
SamplerPtr new_min_p(double p, int64_t min_keep) { return std::make_shared<MinP>(p, min_keep); }
SamplerPtr new_cutoff(double e, bool eta, int64_t min_keep) { return std::make_shared<Cutoff>(e, eta, min_keep); }
SamplerPtr new_top_n_sigma(double n) { return std::make_shared<TopNSigma>(n); }
SamplerPtr new_xtc(double probability, double threshold, uint64_t seed) {
  return std::make_shared<XTC>(probability, threshold, seed);
}

}  // namespace sampling
}  // namespace decodelab
