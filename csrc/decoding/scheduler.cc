// The continuous-batching Scheduler: admission, chunked prefill, one batched decode pass per
// step, cancellation and prefix reuse.
#include "decodelab/scheduler.h"

#include <algorithm>

namespace decodelab {

void SchedulerOptions::check() const {
  auto at_least = [](const char* name, int v, int lo) {
    if (v < lo)
      throw std::invalid_argument(std::string(name) + " must be >= " + std::to_string(lo) + ", got " +
                                  std::to_string(v));
  };
  at_least("max_running", max_running, 1);
  at_least("max_waiting", max_waiting, 0);
  at_least("prefill_chunk", prefill_chunk, 1);
  at_least("prefill_budget", prefill_budget, 1);
  at_least("prefix_cache_blocks", prefix_cache_blocks, 0);
}

struct Scheduler::Request {
  int64_t id = 0;
  std::vector<int32_t> prompt;
  std::shared_ptr<Chain> chain;
  std::shared_ptr<KVCache> cache;
  std::unique_ptr<Decoder> dec;  // after cache: refers to it, so goes first
  int max_new_tokens = 0;
  bool reuse_prefix = false;
  bool cancelled = false;
  int done = 0;       // prompt tokens in the cache
  int reused = 0;     // of them, taken from the prefix cache
  int emitted = 0;    // tokens handed out in updates
  double prefill_seconds = 0.0;
  clock::time_point queued, first_token, last_token;
};

Scheduler::Scheduler(const Transformer& model, const SchedulerOptions& opts) : model_(model), opts_(opts) {
  opts_.check();
}

Scheduler::~Scheduler() = default;

int64_t Scheduler::add(std::vector<int32_t> prompt, std::shared_ptr<Chain> chain, const DecodeOptions& opts,
                       bool reuse_prefix) {
  if (!chain) throw std::invalid_argument("a request needs a sampler chain");
  if (prompt.empty()) throw std::invalid_argument("a request needs at least one prompt token");
  if (opts.guidance_scale != 1.0f || !opts.negative_prompt.empty())
    throw std::invalid_argument("guidance_scale is not supported by the batch scheduler");
  auto r = std::make_unique<Request>();
  r->prompt = std::move(prompt);
  r->chain = std::move(chain);
  r->reuse_prefix = reuse_prefix;
  r->max_new_tokens = opts.max_new_tokens;
  check_context_window(model_, static_cast<int64_t>(r->prompt.size()), opts.max_new_tokens);
  const int64_t need = static_cast<int64_t>(r->prompt.size()) + std::max(opts.max_new_tokens - 1, 0);
  r->cache = model_.new_cache(static_cast<int>(std::max<int64_t>(need, 1)), opts_.kv_dtype, false);
  r->dec = std::make_unique<Decoder>(model_, *r->cache, r->prompt, *r->chain, opts);  // checks the rest
  r->queued = clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  // Free running slots take requests at once; beyond them at most max_waiting wait.
  const int64_t queued = static_cast<int64_t>(incoming_.size()) + stats_.waiting;
  if (queued >= opts_.max_waiting + std::max(0, opts_.max_running - stats_.running))
    throw QueueFull("the queue is full: " + std::to_string(opts_.max_waiting) + " requests wait already");
  r->id = next_id_++;
  const int64_t id = r->id;
  incoming_.push_back(std::move(r));
  return id;
}

void Scheduler::cancel(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancels_.push_back(id);
}

bool Scheduler::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return incoming_.empty() && stats_.waiting == 0 && stats_.running == 0;
}

Scheduler::Stats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.waiting += static_cast<int>(incoming_.size());
  return s;
}

GenerateResult Scheduler::take_result(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = done_.find(id);
  if (it == done_.end()) throw std::invalid_argument("no finished request " + std::to_string(id));
  GenerateResult r = std::move(it->second);
  done_.erase(it);
  return r;
}

void Scheduler::finish(Request& r, std::string reason, std::vector<RequestUpdate>& out) {
  GenerateResult res = std::move(r.dec->result_mut());
  res.finish_reason = reason;
  res.prefill_seconds = r.prefill_seconds;
  res.reused_prompt_tokens = r.reused;
  if (!res.token_ids.empty()) {
    res.first_token_seconds = std::chrono::duration<double>(r.first_token - r.queued).count();
    res.decode_seconds = std::chrono::duration<double>(r.last_token - r.first_token).count();
  }
  RequestUpdate u;
  u.id = r.id;
  u.finished = true;
  u.finish_reason = reason;
  out.push_back(std::move(u));
  r.dec.reset();
  r.cache.reset();  // its blocks go back to the pool (or stay shared with the prefix cache)
  std::lock_guard<std::mutex> lock(mu_);
  done_[r.id] = std::move(res);
}

void Scheduler::take_prefix(Request& r) {
  if (!r.reuse_prefix || opts_.prefix_cache_blocks == 0) return;
  if (!prefix_) prefix_ = std::make_unique<PrefixCache>(r.cache->pool_ptr(), opts_.prefix_cache_blocks);
  // The last prompt token always runs, for the logits of the first choice.
  const std::vector<int> blocks = prefix_->match(r.prompt.data(), static_cast<int>(r.prompt.size()) - 1);
  if (blocks.empty()) return;
  r.cache->adopt_prefix(blocks, r.prompt.data());
  r.done = r.reused = r.cache->length();
}

std::vector<RequestUpdate> Scheduler::step() {
  std::vector<RequestUpdate> out;
  std::vector<int64_t> cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!incoming_.empty()) {
      waiting_.push_back(std::move(incoming_.front()));
      incoming_.pop_front();
    }
    cancels.swap(cancels_);
    ++stats_.steps;
  }
  for (int64_t id : cancels) {
    for (auto& r : waiting_)
      if (r->id == id) r->cancelled = true;
    for (auto& r : running_)
      if (r->id == id) r->cancelled = true;
  }
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if ((*it)->cancelled) {
      finish(**it, "cancelled", out);
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& r : running_)
    if (r->cancelled) finish(*r, "cancelled", out);
  running_.erase(std::remove_if(running_.begin(), running_.end(), [](const auto& r) { return !r->dec; }),
                 running_.end());
  while (static_cast<int>(running_.size()) < opts_.max_running && !waiting_.empty()) {
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }

  const size_t V = static_cast<size_t>(model_.config().vocab_size);
  logits_.resize(std::max<size_t>(logits_.size(), V));
  // A token chosen: into this step's update of the request, with its logprobs when asked for.
  std::map<int64_t, size_t> slot;
  auto emit = [&](Request& r, int32_t t) {
    if (t < 0) return;
    const auto now = clock::now();
    if (r.emitted == 0) r.first_token = now;
    r.last_token = now;
    auto at = slot.find(r.id);
    if (at == slot.end()) {
      at = slot.emplace(r.id, out.size()).first;
      out.emplace_back();
      out.back().id = r.id;
    }
    RequestUpdate& u = out[at->second];
    u.tokens.push_back(t);
    const GenerateResult& res = r.dec->result();
    if (res.logprobs.size() > static_cast<size_t>(r.emitted)) {
      u.logprobs.push_back(res.logprobs[r.emitted]);
      u.top_ids.push_back(res.top_ids[r.emitted]);
      u.top_logprobs.push_back(res.top_logprobs[r.emitted]);
    }
    ++r.emitted;
  };
  int64_t prompt_tokens = 0, reused = 0, generated = 0;

  // Prefill: chunks of the prompts still being read, first come first, up to the step's budget.
  int budget = opts_.prefill_budget;
  for (auto& rp : running_) {
    Request& r = *rp;
    const int P = static_cast<int>(r.prompt.size());
    if (budget <= 0) break;
    if (r.done == P || r.max_new_tokens == 0) continue;
    if (r.done == 0) {
      take_prefix(r);
      reused += r.reused;
    }
    // Chunk boundaries at multiples of prefill_chunk from where this request's own prefill began.
    const int n = std::min(opts_.prefill_chunk, P - r.done);
    const auto t0 = clock::now();
    model_.forward(r.prompt.data() + r.done, n, *r.cache, logits_.data(), false);
    r.prefill_seconds += std::chrono::duration<double>(clock::now() - t0).count();
    r.done += n;
    budget -= n;
    prompt_tokens += n;
    if (r.done == P) {
      if (opts_.prefix_cache_blocks > 0) {
        if (!prefix_) prefix_ = std::make_unique<PrefixCache>(r.cache->pool_ptr(), opts_.prefix_cache_blocks);
        prefix_->insert(*r.cache, P);
      }
      emit(r, r.dec->choose(logits_.data()));
      ++generated;
    }
  }

  // Decode: every sequence with a token to run takes it in one batched pass.
  std::vector<Request*> batch;
  std::vector<int32_t> tokens;
  std::vector<KVCache*> caches;
  for (auto& r : running_)
    if (!r->dec->finished() && r->done == static_cast<int>(r->prompt.size()) && r->dec->pending() >= 0) {
      batch.push_back(r.get());
      tokens.push_back(r->dec->pending());
      caches.push_back(r->cache.get());
    }
  if (!batch.empty()) {
    const int B = static_cast<int>(batch.size());
    logits_.resize(std::max(logits_.size(), B * V));
    model_.decode_batch(tokens.data(), B, caches.data(), logits_.data(), true);
    for (int b = 0; b < B; ++b) {
      emit(*batch[b], batch[b]->dec->choose(logits_.data() + b * V));
      ++generated;
    }
  }

  // max_new_tokens 0 finishes before any prefill; others on EOS or their length.
  for (auto& r : running_) {
    if (r->max_new_tokens == 0) {
      finish(*r, "length", out);
    } else if (r->dec->finished()) {
      finish(*r, r->dec->result().finish_reason, out);
    }
  }
  int prefilling = 0;
  running_.erase(std::remove_if(running_.begin(), running_.end(), [](const auto& r) { return !r->dec; }),
                 running_.end());
  for (auto& r : running_) prefilling += r->done < static_cast<int>(r->prompt.size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.running = static_cast<int>(running_.size());
    stats_.waiting = static_cast<int>(waiting_.size());
    stats_.prefilling = prefilling;
    stats_.prompt_tokens += prompt_tokens;
    stats_.reused_tokens += reused;
    stats_.generated_tokens += generated;
    stats_.decode_rows += static_cast<int64_t>(batch.size());
    stats_.cached_blocks = prefix_ ? prefix_->size() : 0;
  }
  return out;
}

}  // namespace decodelab
