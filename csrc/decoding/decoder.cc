// The decode loop of one sequence (Decoder, generate) and the rule for a generation's length.
#include "decodelab/decoder.h"

#include "decodelab/op_profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace decodelab {

void check_context_window(const Transformer& model, int64_t prompt_tokens, int64_t max_new_tokens) {
  const int64_t ctx = model.config().max_position;
  if (prompt_tokens + max_new_tokens - 1 > ctx)
    throw std::invalid_argument("prompt of " + std::to_string(prompt_tokens) + " tokens + max_new_tokens=" +
                                std::to_string(max_new_tokens) + " exceeds the context window of " +
                                std::to_string(ctx) + " tokens (at most " +
                                std::to_string(std::max<int64_t>(ctx - prompt_tokens + 1, 0)) + " new tokens fit)");
}

void append_logprobs(GenerateResult& r, const std::vector<float>& probs, int32_t t, int top) {
  r.logprobs.push_back(log_of(probs[t]));
  std::vector<int32_t> ids;
  top_of(probs, top, ids);
  std::vector<float> lps(ids.size());
  for (size_t j = 0; j < ids.size(); ++j) lps[j] = log_of(probs[ids[j]]);
  r.top_ids.push_back(std::move(ids));
  r.top_logprobs.push_back(std::move(lps));
}

Decoder::Decoder(const Transformer& model, KVCache& cache, std::vector<int32_t> prompt, Chain& chain,
                 const DecodeOptions& opts)
    : model_(model), cache_(cache), prompt_(std::move(prompt)), chain_(chain), opts_(opts) {
  if (opts_.max_new_tokens < 0)
    throw std::invalid_argument("max_new_tokens must be >= 0, got " + std::to_string(opts_.max_new_tokens));
  if (opts_.logprobs < -1)
    throw std::invalid_argument("logprobs must be -1 (none) or >= 0, got " + std::to_string(opts_.logprobs));
  if (opts_.trace < 0 || opts_.trace > 2)
    throw std::invalid_argument("trace must be 0, 1 or 2, got " + std::to_string(opts_.trace));
  if (opts_.trace_top < 0) throw std::invalid_argument("trace_top must be >= 0, got " + std::to_string(opts_.trace_top));
  if (!chain_.selects())
    throw std::invalid_argument("the sampler chain must end with a selector (Greedy, Dist or Mirostat)");
  check_context_window(model_, static_cast<int64_t>(cache_.length()) + static_cast<int64_t>(prompt_.size()),
                       opts_.max_new_tokens);
  model_.check_tokens(prompt_.data(), static_cast<int>(prompt_.size()), cache_);
  if (!std::isfinite(opts_.guidance_scale))
    throw std::invalid_argument("guidance_scale must be finite, got " + std::to_string(opts_.guidance_scale));
  if (opts_.guidance_scale != 1.0f) {
    // The unconditional sequence: the negative prompt, or the conditional input's last token.
    uncond_prompt_ = opts_.negative_prompt;
    if (uncond_prompt_.empty()) {
      if (!prompt_.empty()) uncond_prompt_.push_back(prompt_.back());
      else if (cache_.length() > 0) uncond_prompt_.push_back(cache_.token_ids().back());
    }
    if (uncond_prompt_.empty()) throw std::invalid_argument("guidance needs a prompt or a negative prompt");
    check_context_window(model_, static_cast<int64_t>(uncond_prompt_.size()), opts_.max_new_tokens);
    const int64_t cap = static_cast<int64_t>(uncond_prompt_.size()) + std::max(opts_.max_new_tokens - 1, 0);
    uncond_cache_ = model_.new_cache(static_cast<int>(std::max<int64_t>(cap, 1)), cache_.pool().dtype(), false);
    model_.check_tokens(uncond_prompt_.data(), static_cast<int>(uncond_prompt_.size()), *uncond_cache_);
  } else if (!opts_.negative_prompt.empty()) {
    throw std::invalid_argument("a negative prompt needs guidance_scale != 1");
  }
  r_.finish_reason = "length";
}

int32_t Decoder::step() {
  using clock = std::chrono::steady_clock;
  if (finished_) return -1;
  const int V = model_.config().vocab_size;
  const auto t0 = clock::now();
  if (!started_) {
    if (opts_.max_new_tokens == 0) {
      started_ = finished_ = true;
      return -1;
    }
    raw_.resize(V);
    model_.forward(prompt_.data(), static_cast<int>(prompt_.size()), cache_, raw_.data(), false);
    if (uncond_cache_) {
      uraw_.resize(V);
      model_.forward(uncond_prompt_.data(), static_cast<int>(uncond_prompt_.size()), *uncond_cache_, uraw_.data(),
                     false);
    }
    start(std::chrono::duration<double>(clock::now() - t0).count());
  } else if (pending_ >= 0) {
    if (uncond_cache_) {  // both sequences take the token in one batched step
      const int32_t toks[2] = {pending_, pending_};
      KVCache* caches[2] = {&cache_, uncond_cache_.get()};
      both_.resize(2 * static_cast<size_t>(V));
      model_.decode_batch(toks, 2, caches, both_.data());
      std::copy(both_.begin(), both_.begin() + V, raw_.begin());
      std::copy(both_.begin() + V, both_.end(), uraw_.begin());
    } else {
      model_.forward(&pending_, 1, cache_, raw_.data(), false);
    }
    pending_ = -1;
  }
  return select(t0);
}

void Decoder::start(double prefill_seconds) {
  started_ = true;
  const int V = model_.config().vocab_size;
  raw_.resize(V);
  work_.resize(V);
  before_.resize(V);
  r_.prefill_seconds = prefill_seconds;
  history_ = cache_.token_ids();  // prompt (with any reused prefix), then output
  history_.reserve(history_.size() + opts_.max_new_tokens);
  ctx_.n_prompt = static_cast<int>(history_.size());
  ctx_.sequence = opts_.sequence;
  r_.token_ids.reserve(opts_.max_new_tokens);
}

int32_t Decoder::choose(const float* logits) {
  if (finished_) return -1;
  if (uncond_cache_) throw std::invalid_argument("a decoder with guidance runs the model itself (step())");
  const auto t0 = std::chrono::steady_clock::now();
  if (!started_) start(0.0);
  std::copy(logits, logits + model_.config().vocab_size, raw_.begin());
  pending_ = -1;
  return select(t0);
}

int32_t Decoder::select(std::chrono::steady_clock::time_point t0) {
  using clock = std::chrono::steady_clock;
  OpClock clk(Phase::Decode);
  const int V = model_.config().vocab_size;
  const auto& stages = chain_.stages();
  const int step = static_cast<int>(r_.token_ids.size());
  ctx_.tokens = history_.data();
  ctx_.n_tokens = static_cast<int>(history_.size());
  ctx_.step = static_cast<uint64_t>(step);
  std::copy(raw_.begin(), raw_.end(), work_.begin());
  StepTrace st;
  if (opts_.trace) {
    StageStats s;
    s.name = "raw";
    stage_stats(raw_.data(), raw_.data(), V, opts_.trace_top, s, pb_, pa_);
    if (opts_.trace == 2) s.logits = raw_;
    st.stages.push_back(std::move(s));
  }
  if (uncond_cache_) {  // guidance comes first, as in transformers' processor list
    classifier_free_guidance(raw_.data(), uraw_.data(), V, opts_.guidance_scale, work_.data());
    if (opts_.trace) {
      StageStats s;
      s.name = "classifier_free_guidance(" + std::to_string(opts_.guidance_scale) + ")";
      stage_stats(raw_.data(), work_.data(), V, opts_.trace_top, s, pb_, pa_);
      if (opts_.trace == 2) s.logits = work_;
      st.stages.push_back(std::move(s));
    }
  }
  // Every stage but the selector; `work_` then holds the processed distribution.
  for (size_t i = 0; i + 1 < stages.size(); ++i) {
    if (opts_.trace) std::copy(work_.begin(), work_.end(), before_.begin());
    stages[i]->apply(work_.data(), V, ctx_);
    if (opts_.trace) {
      StageStats s;
      s.name = stages[i]->name();
      stage_stats(before_.data(), work_.data(), V, opts_.trace_top, s, pb_, pa_);
      if (opts_.trace == 2) s.logits = work_;
      st.stages.push_back(std::move(s));
    }
  }
  const bool need_processed = opts_.trace || (opts_.logprobs >= 0 && opts_.logprobs_processed);
  if (need_processed) {
    pproc_.resize(V);
    softmax(work_.data(), V, pproc_.data());
  }
  if (opts_.trace) std::copy(work_.begin(), work_.end(), before_.begin());
  stages.back()->apply(work_.data(), V, ctx_);
  const int32_t next = first_kept(work_.data(), V);
  if (next < 0) throw std::invalid_argument("the sampler chain removed every token");
  chain_.accept(next);

  if (opts_.trace || opts_.logprobs >= 0) {
    praw_.resize(V);
    softmax(raw_.data(), V, praw_.data());
  }
  if (opts_.trace) {
    StageStats s;
    s.name = stages.back()->name();
    stage_stats(before_.data(), work_.data(), V, opts_.trace_top, s, pb_, pa_);
    if (opts_.trace == 2) s.logits = work_;
    st.stages.push_back(std::move(s));
    st.token = next;
    st.rank_raw = rank_of(praw_, next);
    st.logprob_raw = log_of(praw_[next]);
    st.rank_processed = rank_of(pproc_, next);
    st.logprob_processed = log_of(pproc_[next]);
    r_.trace.push_back(std::move(st));
  }
  if (opts_.logprobs >= 0) append_logprobs(r_, opts_.logprobs_processed ? pproc_ : praw_, next, opts_.logprobs);
  r_.token_ids.push_back(next);
  history_.push_back(next);
  if (std::find(opts_.eos_ids.begin(), opts_.eos_ids.end(), next) != opts_.eos_ids.end()) {
    r_.finish_reason = "stop";
    finished_ = true;
  } else if (static_cast<int>(r_.token_ids.size()) == opts_.max_new_tokens) {
    finished_ = true;
  } else {
    pending_ = next;  // run through the model at the next step, only if there is one
  }
  clk.mark(Op::Sampling);
  const double dt = std::chrono::duration<double>(clock::now() - t0).count();
  if (step == 0) r_.first_token_seconds = dt;
  else r_.decode_seconds += dt;
  return next;
}

GenerateResult generate(const Transformer& model, KVCache& cache, const std::vector<int32_t>& prompt, Chain& chain,
                        const DecodeOptions& opts, const std::function<void()>& poll) {
  Decoder d(model, cache, prompt, chain, opts);
  while (!d.finished()) {
    if (poll) poll();
    d.step();
  }
  return d.result();
}

}  // namespace decodelab
