// The probability arithmetic every sampler and trace shares: softmax, entropy, the largest logit,
// the counter-based random numbers, drawing a token, and the small helpers of internal.h.
#include <immintrin.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "decodelab/aligned.h"
#include "sampling/internal.h"

namespace decodelab {
namespace sampling {

namespace {
uint64_t mix64(uint64_t z) {  // SplitMix64 finaliser
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

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

float kth_largest(const float* l, int n, int64_t k) {
  if (k <= 1) return max_logit(l, n);
  thread_local std::vector<float> kept;
  kept.clear();
  for (int i = 0; i < n; ++i)
    if (l[i] > kNegInf) kept.push_back(l[i]);
  if (static_cast<int64_t>(kept.size()) < k) return kNegInf;
  std::nth_element(kept.begin(), kept.begin() + (k - 1), kept.end(), std::greater<float>());
  return kept[k - 1];
}

void remove_below(float* l, const float* probs, int n, float thr, float spare) {
  int i = 0;
#if defined(__AVX512F__)
  const __m512 t = _mm512_set1_ps(thr), s = _mm512_set1_ps(spare), gone = _mm512_set1_ps(kNegInf);
  for (; i + 16 <= n; i += 16) {
    const __mmask16 m = _mm512_mask_cmp_ps_mask(_mm512_cmp_ps_mask(_mm512_loadu_ps(probs + i), t, _CMP_LT_OQ),
                                                _mm512_loadu_ps(l + i), s, _CMP_NGE_UQ);  // not >= spare
    _mm512_mask_storeu_ps(l + i, m, gone);
  }
#endif
  for (; i < n; ++i)
    if (probs[i] < thr && !(l[i] >= spare)) l[i] = kNegInf;
}

void keep_at_least(float* l, const float* orig, int n, int64_t k, bool higher_id_first) {
  if (k <= 1) return;  // every sampler keeps the top token by itself
  int64_t left = 0;
  for (int i = 0; i < n; ++i) left += l[i] > kNegInf;
  if (left >= k) return;
  thread_local std::vector<int> ids;
  ids.clear();
  for (int i = 0; i < n; ++i)
    if (orig[i] > kNegInf) ids.push_back(i);
  const size_t m = std::min<size_t>(ids.size(), static_cast<size_t>(k));
  std::partial_sort(ids.begin(), ids.begin() + m, ids.end(), [&](int x, int y) {
    if (orig[x] != orig[y]) return orig[x] > orig[y];
    return higher_id_first ? x > y : x < y;
  });
  for (size_t j = 0; j < m; ++j) l[ids[j]] = orig[ids[j]];
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

}  // namespace sampling

using sampling::kNegInf;
using sampling::mix64;

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

int first_kept(const float* logits, int n) {
  return sampling::first_at_least(logits, n, -std::numeric_limits<float>::max());
}

int draw_token(const float* probs, int n, double u) { return sampling::draw(probs, n, u); }

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

}  // namespace decodelab
