#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "decodelab/decoding.h"

namespace decodelab {

namespace {
bool is_removed(float x) { return std::isnan(x) || x == -std::numeric_limits<float>::infinity(); }

void top_of(const std::vector<float>& p, int top, std::vector<int32_t>& ids) {
  const int n = static_cast<int>(p.size());
  const int k = std::min(top, n);
  ids.resize(n);
  for (int i = 0; i < n; ++i) ids[i] = i;
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  ids.resize(k);
}

int rank_of(const std::vector<float>& p, int token) {
  int r = 1;
  for (float v : p) r += v > p[token];
  return r;
}

float log_of(float p) { return p > 0.0f ? std::log(p) : -std::numeric_limits<float>::infinity(); }
}  // namespace

void stage_stats(const float* before, const float* after, int n, int top, StageStats& out,
                 std::vector<float>& pb, std::vector<float>& pa) {
  pb.resize(n);
  pa.resize(n);
  softmax(before, n, pb.data());
  softmax(after, n, pa.data());
  out.n_kept = 0;
  out.mass_removed = 0.0;
  for (int i = 0; i < n; ++i) {
    const bool kept = !is_removed(after[i]);
    out.n_kept += kept;
    if (!kept && !is_removed(before[i])) out.mass_removed += pb[i];
  }
  out.entropy = entropy_of(pa.data(), n);
  top_of(pa, top, out.top_ids);
  out.top_probs.resize(out.top_ids.size());
  for (size_t j = 0; j < out.top_ids.size(); ++j) out.top_probs[j] = pa[out.top_ids[j]];
}

GenerateResult generate(const Transformer& model, KVCache& cache, const std::vector<int32_t>& prompt, Chain& chain,
                        const DecodeOptions& opts, const std::function<void()>& poll) {
  using clock = std::chrono::steady_clock;
  if (opts.max_new_tokens < 0)
    throw std::invalid_argument("max_new_tokens must be >= 0, got " + std::to_string(opts.max_new_tokens));
  if (!chain.selects())
    throw std::invalid_argument("the sampler chain must end with a selector (Greedy, Dist or Mirostat)");
  const int V = model.config().vocab_size;
  const int64_t total = static_cast<int64_t>(cache.length()) + static_cast<int64_t>(prompt.size()) + opts.max_new_tokens;
  if (total - 1 > model.config().max_position)
    throw std::invalid_argument(std::to_string(cache.length() + prompt.size()) + " prompt tokens + max_new_tokens " +
                                std::to_string(opts.max_new_tokens) + " exceed the context window of " +
                                std::to_string(model.config().max_position) + " positions");
  GenerateResult r;
  r.finish_reason = "length";
  if (opts.max_new_tokens == 0) return r;

  std::vector<float> raw(V), work(V), before(V), pb, pa, praw, pproc;
  const auto& stages = chain.stages();
  auto t0 = clock::now();
  model.forward(prompt.data(), static_cast<int>(prompt.size()), cache, raw.data(), false);
  auto t1 = clock::now();
  r.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();

  std::vector<int32_t> history(cache.token_ids());  // prompt (with any reused prefix), then output
  history.reserve(history.size() + opts.max_new_tokens);
  SampleContext ctx;
  ctx.n_prompt = static_cast<int>(history.size());
  ctx.sequence = opts.sequence;
  r.token_ids.reserve(opts.max_new_tokens);

  for (int step = 0; step < opts.max_new_tokens; ++step) {
    if (poll) poll();
    ctx.tokens = history.data();
    ctx.n_tokens = static_cast<int>(history.size());
    ctx.step = static_cast<uint64_t>(step);
    std::copy(raw.begin(), raw.end(), work.begin());
    StepTrace st;
    if (opts.trace) {
      StageStats s;
      s.name = "raw";
      stage_stats(raw.data(), raw.data(), V, opts.trace_top, s, pb, pa);
      if (opts.trace == 2) s.logits = raw;
      st.stages.push_back(std::move(s));
    }
    // Every stage but the selector; `work` then holds the processed distribution.
    for (size_t i = 0; i + 1 < stages.size(); ++i) {
      if (opts.trace) std::copy(work.begin(), work.end(), before.begin());
      stages[i]->apply(work.data(), V, ctx);
      if (opts.trace) {
        StageStats s;
        s.name = stages[i]->name();
        stage_stats(before.data(), work.data(), V, opts.trace_top, s, pb, pa);
        if (opts.trace == 2) s.logits = work;
        st.stages.push_back(std::move(s));
      }
    }
    const bool need_processed = opts.trace || (opts.logprobs >= 0 && opts.logprobs_processed);
    if (need_processed) {
      pproc.resize(V);
      softmax(work.data(), V, pproc.data());
    }
    if (opts.trace) std::copy(work.begin(), work.end(), before.begin());
    stages.back()->apply(work.data(), V, ctx);
    int32_t next = -1;
    for (int i = 0; i < V; ++i)
      if (!is_removed(work[i])) {
        next = i;
        break;
      }
    if (next < 0) throw std::invalid_argument("the sampler chain removed every token");
    chain.accept(next);

    if (opts.trace || opts.logprobs >= 0) {
      praw.resize(V);
      softmax(raw.data(), V, praw.data());
    }
    if (opts.trace) {
      StageStats s;
      s.name = stages.back()->name();
      stage_stats(before.data(), work.data(), V, opts.trace_top, s, pb, pa);
      if (opts.trace == 2) s.logits = work;
      st.stages.push_back(std::move(s));
      st.token = next;
      st.rank_raw = rank_of(praw, next);
      st.logprob_raw = log_of(praw[next]);
      st.rank_processed = rank_of(pproc, next);
      st.logprob_processed = log_of(pproc[next]);
      r.trace.push_back(std::move(st));
    }
    if (opts.logprobs >= 0) {
      const std::vector<float>& dist = opts.logprobs_processed ? pproc : praw;
      r.logprobs.push_back(log_of(dist[next]));
      std::vector<int32_t> ids;
      top_of(dist, opts.logprobs, ids);
      std::vector<float> lps(ids.size());
      for (size_t j = 0; j < ids.size(); ++j) lps[j] = log_of(dist[ids[j]]);
      r.top_ids.push_back(std::move(ids));
      r.top_logprobs.push_back(std::move(lps));
    }

    r.token_ids.push_back(next);
    history.push_back(next);
    if (std::find(opts.eos_ids.begin(), opts.eos_ids.end(), next) != opts.eos_ids.end()) {
      r.finish_reason = "stop";
      break;
    }
    if (step + 1 == opts.max_new_tokens) break;
    model.forward(&next, 1, cache, raw.data(), false);
  }
  r.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return r;
}

}  // namespace decodelab
