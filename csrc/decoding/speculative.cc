// SpeculativeDecoder: drafting (a draft model or prompt lookup), verification of the draft in one
// pass of the target, exact rejection sampling, and the rollback of both caches.
#include "decodelab/speculative.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

namespace decodelab {

namespace {
// Salts of the counter random streams a round draws from (the selector's own keeps "dist").
constexpr uint64_t kSaltDraft = 0x7370642d64726166;   // the draft's token
constexpr uint64_t kSaltAccept = 0x7370642d61636370;  // accept or reject a drafted token
constexpr uint64_t kSaltResidual = 0x7370642d72657364;  // the token after a rejection
constexpr int kMaxDraftTokens = 64;
constexpr int kMaxNgram = 16;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

SpeculativeDecoder::SpeculativeDecoder(const Transformer& target, KVCache& cache, std::vector<int32_t> prompt,
                                       Chain& chain, const DecodeOptions& opts, const Transformer* draft,
                                       KVCache* draft_cache)
    : model_(target), cache_(cache), prompt_(std::move(prompt)), chain_(chain), opts_(opts), draft_(draft),
      draft_cache_(draft_cache), pick_(chain.pick()) {
  if (opts_.max_new_tokens < 0)
    throw std::invalid_argument("max_new_tokens must be >= 0, got " + std::to_string(opts_.max_new_tokens));
  if (opts_.logprobs < -1)
    throw std::invalid_argument("logprobs must be -1 (none) or >= 0, got " + std::to_string(opts_.logprobs));
  if (opts_.num_draft_tokens < 1 || opts_.num_draft_tokens > kMaxDraftTokens)
    throw std::invalid_argument("num_draft_tokens must be in [1, " + std::to_string(kMaxDraftTokens) + "], got " +
                                std::to_string(opts_.num_draft_tokens));
  if (opts_.prompt_lookup_max_ngram < 1 || opts_.prompt_lookup_max_ngram > kMaxNgram)
    throw std::invalid_argument("prompt_lookup_max_ngram must be in [1, " + std::to_string(kMaxNgram) + "], got " +
                                std::to_string(opts_.prompt_lookup_max_ngram));
  if (!(opts_.draft_p_min >= 0.0f && opts_.draft_p_min <= 1.0f))
    throw std::invalid_argument("draft_p_min must be in [0, 1], got " + std::to_string(opts_.draft_p_min));
  if (opts_.draft_p_min > 0.0f && !draft)
    throw std::invalid_argument("draft_p_min needs a draft model: prompt lookup has no probabilities");
  if (opts_.trace) throw std::invalid_argument("trace is not supported with a draft; Generation.speculation records "
                                               "each round");
  if (opts_.guidance_scale != 1.0f || !opts_.negative_prompt.empty())
    throw std::invalid_argument("guidance_scale is not supported with a draft");
  if (pick_ != Sampler::Pick::MostLikely && pick_ != Sampler::Pick::Draw)
    throw std::invalid_argument("speculative decoding needs a chain ending in Greedy or Dist (the processed "
                                "distribution must be drawn from directly), got " +
                                (chain.stages().empty() ? std::string("an empty chain") : chain.stages().back()->name()));
  if (prompt_.empty()) throw std::invalid_argument("speculative decoding needs at least one prompt token to run");
  seed_ = chain.draw_seed();
  check_context_window(model_, static_cast<int64_t>(cache_.length()) + static_cast<int64_t>(prompt_.size()),
                       opts_.max_new_tokens);
  model_.check_tokens(prompt_.data(), static_cast<int>(prompt_.size()), cache_);
  if (draft_) {
    if (!draft_cache_) throw std::invalid_argument("a draft model needs a cache of its own");
    if (draft_->config().vocab_size != model_.config().vocab_size)
      throw std::invalid_argument("the draft's vocabulary has " + std::to_string(draft_->config().vocab_size) +
                                  " tokens, the model's " + std::to_string(model_.config().vocab_size) +
                                  ": a draft must share the model's vocabulary");
    if (draft_cache_->length() != 0) throw std::invalid_argument("the draft's cache must start empty");
    check_context_window(*draft_, static_cast<int64_t>(cache_.length()) + static_cast<int64_t>(prompt_.size()),
                         opts_.max_new_tokens);
    draft_->check_tokens(prompt_.data(), 1, *draft_cache_);  // and the cache is the draft's
    draft_chain_ = std::static_pointer_cast<Chain>(chain.clone());
  }
  k_now_ = opts_.num_draft_tokens;
  r_.finish_reason = "length";
}

void SpeculativeDecoder::process(const Chain& chain, const float* logits, int pos, float* work) {
  const int V = model_.config().vocab_size;
  std::copy(logits, logits + V, work);
  ctx_.tokens = history_.data();
  ctx_.n_tokens = static_cast<int>(history_.size());
  ctx_.step = static_cast<uint64_t>(pos);
  const auto& stages = chain.stages();
  for (size_t i = 0; i + 1 < stages.size(); ++i) stages[i]->apply(work, V, ctx_);
}

int32_t SpeculativeDecoder::select(Chain& chain, float* work, int pos) {
  const int V = model_.config().vocab_size;
  ctx_.step = static_cast<uint64_t>(pos);
  chain.stages().back()->apply(work, V, ctx_);
  const int32_t t = first_kept(work, V);
  if (t < 0) throw std::invalid_argument("the sampler chain removed every token");
  return t;
}

bool SpeculativeDecoder::emit(int32_t t, const float* raw, const float* processed) {
  const int V = model_.config().vocab_size;
  chain_.accept(t);
  if (draft_chain_) draft_chain_->accept(t);
  if (opts_.logprobs >= 0) {
    dist_.resize(V);
    softmax(opts_.logprobs_processed ? processed : raw, V, dist_.data());
    append_logprobs(r_, dist_, t, opts_.logprobs);
  }
  r_.token_ids.push_back(t);
  history_.push_back(t);
  if (std::find(opts_.eos_ids.begin(), opts_.eos_ids.end(), t) != opts_.eos_ids.end()) {
    r_.finish_reason = "stop";
    finished_ = true;
  } else if (static_cast<int>(r_.token_ids.size()) == opts_.max_new_tokens) {
    finished_ = true;
  }
  return !finished_;
}

int SpeculativeDecoder::lookup(int k, std::vector<int32_t>& out) const {
  // As transformers' prompt lookup: the text's last n tokens (n from the longest down), found at
  // their first earlier place; the tokens that followed them there are the draft.
  const int H = static_cast<int>(history_.size());
  for (int n = std::min(opts_.prompt_lookup_max_ngram, H - 1); n >= 1; --n) {
    const int32_t* pat = history_.data() + H - n;
    for (int i = 0; i + n < H; ++i) {
      if (!std::equal(pat, pat + n, history_.data() + i)) continue;
      for (int j = i + n; j < H && static_cast<int>(out.size()) < k; ++j) {
        out.push_back(history_[j]);
        if (std::find(opts_.eos_ids.begin(), opts_.eos_ids.end(), history_[j]) != opts_.eos_ids.end()) break;
      }
      return static_cast<int>(out.size());
    }
  }
  return 0;
}

int SpeculativeDecoder::propose(int k, std::vector<int32_t>& out) {
  if (!draft_) return lookup(k, out);
  const int V = model_.config().vocab_size;
  const size_t H = history_.size();
  // Bring the draft's cache up to the text so far (after a rollback, or the prompt at first).
  const int have = draft_cache_->length();
  dlogits_.resize(V);
  draft_->forward(history_.data() + have, static_cast<int>(H) - have, *draft_cache_, dlogits_.data(), false);
  q_.resize(static_cast<size_t>(k) * V);
  const int gen = static_cast<int>(r_.token_ids.size());
  for (int j = 0; j < k; ++j) {
    const int pos = gen + j;
    process(*draft_chain_, dlogits_.data(), pos, work_.data());
    float* q = q_.data() + static_cast<size_t>(j) * V;
    if (pick_ == Sampler::Pick::Draw || opts_.draft_p_min > 0.0f) softmax(work_.data(), V, q);
    // Where the draft is unsure of its next token, that token is likely rejected: the round ends
    // before it and the target's pass spends no row on it. The rule reads the draft's distribution
    // before a token is drawn from it, never the token, so sampled output keeps its distribution
    // (a rule that looked at the drawn token would skew it).
    if (opts_.draft_p_min > 0.0f && *std::max_element(q, q + V) < opts_.draft_p_min) break;
    const int32_t d = pick_ == Sampler::Pick::MostLikely
                          ? select(*draft_chain_, work_.data(), pos)
                          : draw_token(q, V, counter_uniform(seed_, opts_.sequence, pos, kSaltDraft));
    out.push_back(d);
    history_.push_back(d);  // the next draft position sees it; taken back below
    if (j + 1 == k || std::find(opts_.eos_ids.begin(), opts_.eos_ids.end(), d) != opts_.eos_ids.end()) break;
    draft_->forward(&d, 1, *draft_cache_, dlogits_.data(), false);
  }
  history_.resize(H);
  return static_cast<int>(out.size());
}

std::vector<int32_t> SpeculativeDecoder::step() {
  std::vector<int32_t> out;
  if (finished_) return out;
  const int V = model_.config().vocab_size;
  work_.resize(V);
  p_.resize(V);
  const auto t0 = std::chrono::steady_clock::now();
  const int gen = static_cast<int>(r_.token_ids.size());
  if (!started_) {
    started_ = true;
    if (opts_.max_new_tokens == 0) {
      finished_ = true;
      return out;
    }
    logits_.resize(V);
    model_.forward(prompt_.data(), static_cast<int>(prompt_.size()), cache_, logits_.data(), false);
    r_.prefill_seconds = seconds_since(t0);
    history_ = cache_.token_ids();
    history_.reserve(history_.size() + opts_.max_new_tokens + kMaxDraftTokens);
    ctx_.n_prompt = static_cast<int>(history_.size());
    ctx_.sequence = opts_.sequence;
    process(chain_, logits_.data(), 0, work_.data());
    keep_.assign(work_.begin(), work_.end());  // the selector rewrites work_
    const int32_t t = select(chain_, work_.data(), 0);
    emit(t, logits_.data(), keep_.data());
    if (!finished_) pending_ = t;
    r_.first_token_seconds = seconds_since(t0);
    out.push_back(t);
    return out;
  }
  // Drafts never run past max_new_tokens: k accepted plus the target's own token fit.
  const int n_before = static_cast<int>(history_.size());  // the pending token included
  const int room = opts_.max_new_tokens - gen;
  std::vector<int32_t> drafted;
  const auto td = std::chrono::steady_clock::now();
  const int k = room > 1 ? propose(std::min(k_now_, room - 1), drafted) : 0;
  stats_.draft_seconds += seconds_since(td);
  const auto tv = std::chrono::steady_clock::now();
  std::vector<int32_t> toks(1, pending_);
  toks.insert(toks.end(), drafted.begin(), drafted.end());
  logits_.resize(static_cast<size_t>(k + 1) * V);
  model_.forward(toks.data(), k + 1, cache_, logits_.data(), true);
  SpeculationRound round;
  round.draft = drafted;
  if (static_cast<int>(stats_.drafted_at.size()) < k) {
    stats_.drafted_at.resize(k, 0);
    stats_.accepted_at.resize(k, 0);
  }
  int m = 0;
  bool rejected = false;
  for (int j = 0; j < k && !finished_; ++j) {
    const int pos = gen + j;
    const float* raw = logits_.data() + static_cast<size_t>(j) * V;
    process(chain_, raw, pos, work_.data());
    const int32_t x = drafted[j];
    ++stats_.drafted_at[j];
    int32_t replacement = -1;
    bool accept;
    if (pick_ == Sampler::Pick::MostLikely) {
      keep_.assign(work_.begin(), work_.end());
      replacement = select(chain_, keep_.data(), pos);
      accept = x == replacement;
    } else {
      softmax(work_.data(), V, p_.data());
      const float qx = draft_ ? q_[static_cast<size_t>(j) * V + x] : 1.0f;
      accept = counter_uniform(seed_, opts_.sequence, pos, kSaltAccept) * qx < p_[x];
      if (!accept) {  // from max(p - q, 0), renormalised (a lookup's q: all its mass on x)
        resid_.assign(p_.begin(), p_.end());
        if (draft_) {
          const float* q = q_.data() + static_cast<size_t>(j) * V;
          for (int i = 0; i < V; ++i) resid_[i] = std::max(resid_[i] - q[i], 0.0f);
        } else {
          resid_[x] = 0.0f;
        }
        replacement = draw_token(resid_.data(), V, counter_uniform(seed_, opts_.sequence, pos, kSaltResidual));
        if (replacement < 0) replacement = x;  // p == q to the last bit: nothing to correct
      }
    }
    if (accept) {
      ++m;
      ++stats_.accepted_at[j];
      out.push_back(x);
      emit(x, raw, work_.data());
    } else {
      rejected = true;
      round.token = replacement;
      out.push_back(replacement);
      emit(replacement, raw, work_.data());
      break;
    }
  }
  if (!rejected && !finished_) {  // every draft token kept: the target's next token comes free
    const int pos = gen + k;
    const float* raw = logits_.data() + static_cast<size_t>(k) * V;
    process(chain_, raw, pos, work_.data());
    keep_.assign(work_.begin(), work_.end());
    const int32_t t = select(chain_, work_.data(), pos);
    round.token = t;
    round.bonus = true;
    out.push_back(t);
    emit(t, raw, keep_.data());
  }
  round.accepted = m;
  // Prompt lookup's next draft length: two more after a round that kept every draft, else one
  // more than this round kept, so lookups that keep failing cost few rows of the model's pass. A
  // draft model keeps k: its acceptance does not run in streaks, and shorter drafts kept fewer
  // tokens per round there.
  if (!draft_ && k > 0) k_now_ = m == k ? std::min(k_now_ + 2, opts_.num_draft_tokens) : std::max(1, m + 1);
  stats_.drafted += k;
  stats_.accepted += m;
  stats_.rounds.push_back(std::move(round));
  // The target keeps the pending token and the accepted drafts; the draft what it holds of them.
  // Truncation releases only blocks past the kept length: no accepted block is copied.
  cache_.truncate(n_before + m);
  if (draft_cache_ && draft_cache_->length() > n_before + m) draft_cache_->truncate(n_before + m);
  pending_ = finished_ ? -1 : out.back();
  stats_.verify_seconds += seconds_since(tv);
  r_.decode_seconds += seconds_since(t0);
  return out;
}

GenerateResult generate_speculative(const Transformer& target, KVCache& cache, const std::vector<int32_t>& prompt,
                                    Chain& chain, const DecodeOptions& opts, const Transformer* draft,
                                    KVCache* draft_cache, SpeculationStats* stats, const std::function<void()>& poll) {
  SpeculativeDecoder d(target, cache, prompt, chain, opts, draft, draft_cache);
  while (!d.finished()) {
    if (poll) poll();
    d.step();
  }
  if (stats) *stats = d.stats();
  return d.result();
}

}  // namespace decodelab
