// Beam search, step for step as transformers' _beam_search, over caches forked per beam.
#include "decodelab/beam_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "decodelab/decoder.h"

namespace decodelab {

namespace {
struct Candidate {
  double score;   // accumulated log-probability
  int beam;
  int32_t token;
};
}  // namespace

BeamResult beam_search(const Transformer& model, KVCache& prompt_cache, const std::vector<int32_t>& prompt,
                       Chain& processors, const BeamOptions& o, const std::function<void()>& poll) {
  using clock = std::chrono::steady_clock;
  const int V = model.config().vocab_size;
  const int B = o.num_beams;
  if (B < 1) throw std::invalid_argument("num_beams must be >= 1, got " + std::to_string(B));
  if (o.num_return_sequences < 1 || o.num_return_sequences > B)
    throw std::invalid_argument("num_return_sequences must be in [1, num_beams = " + std::to_string(B) + "], got " +
                                std::to_string(o.num_return_sequences));
  if (o.max_new_tokens < 1) throw std::invalid_argument("beam search needs max_new_tokens >= 1");
  if (o.early_stopping < -1 || o.early_stopping > 1)
    throw std::invalid_argument("early_stopping must be 1 (True), 0 (False) or -1 (\"never\"), got " +
                                std::to_string(o.early_stopping));
  if (!std::isfinite(o.length_penalty))
    throw std::invalid_argument("length_penalty must be finite, got " + std::to_string(o.length_penalty));
  if (processors.selects())
    throw std::invalid_argument("beam search takes processors only; the beams choose the tokens");
  check_context_window(model, static_cast<int64_t>(prompt_cache.length()) + static_cast<int64_t>(prompt.size()),
                       o.max_new_tokens);
  // Candidates kept per step: (1 + EOS ids, at least 2) x beams, in 64 bits (many EOS ids times
  // many beams overflows an int), and never more than there are (beam, token) pairs.
  const int64_t n_eos = static_cast<int64_t>(o.eos_ids.size());
  const int64_t K = std::min<int64_t>(std::max<int64_t>(2, 1 + n_eos) * B, static_cast<int64_t>(B) * V);
  auto is_eos = [&](int32_t t) { return std::find(o.eos_ids.begin(), o.eos_ids.end(), t) != o.eos_ids.end(); };
  auto pool = prompt_cache.pool_ptr();
  auto in_use = [&] { return static_cast<uint64_t>(pool->stats().blocks_in_use) * pool->block_bytes(); };

  BeamResult res;
  struct Beam {
    std::shared_ptr<KVCache> cache;
    std::vector<int32_t> tokens;  // generated so far
    double score = 0.0;
    int node = -1;
  };
  // Row b of `logits` holds the next-token logits of running[b]; the next step's rows are
  // written into `next_logits` and the buffers swapped, so no step allocates them anew.
  std::vector<float> logits(V), next_logits;
  const auto t0 = clock::now();
  Beam root;
  root.cache = prompt_cache.fork();
  model.forward(prompt.data(), static_cast<int>(prompt.size()), *root.cache, logits.data(), false);
  res.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  res.peak_cache_bytes = in_use();
  const int n_prompt_all = root.cache->length();
  std::vector<Beam> running;
  running.push_back(std::move(root));
  std::vector<BeamHypothesis> finished;  // best first, at most B
  bool unsatisfied = true;               // transformers' is_early_stop_heuristic_unsatisfied
  int next_node = 0;
  std::vector<float> lp(V);
  std::vector<Candidate> cands;
  const auto t1 = clock::now();

  for (int cur = 0;; ++cur) {  // cur: tokens generated so far
    if (poll) poll();
    cands.clear();
    for (int b = 0; b < static_cast<int>(running.size()); ++b) {
      Beam& beam = running[b];
      // log_softmax, then the processors on log-probabilities, as transformers' beam search.
      softmax(logits.data() + static_cast<size_t>(b) * V, V, lp.data());
      for (int i = 0; i < V; ++i) lp[i] = lp[i] > 0.0f ? std::log(lp[i]) : -std::numeric_limits<float>::infinity();
      // The beam's cache holds its whole context: the prompt and every token it generated.
      const std::vector<int32_t>& context = beam.cache->token_ids();
      SampleContext ctx;
      ctx.tokens = context.data();
      ctx.n_tokens = static_cast<int>(context.size());
      ctx.n_prompt = n_prompt_all;
      ctx.step = static_cast<uint64_t>(cur);
      ctx.sequence = static_cast<uint64_t>(b);
      processors.apply(lp.data(), V, ctx);
      for (int i = 0; i < V; ++i)
        if (!is_removed(lp[i])) cands.push_back({beam.score + lp[i], b, i});
    }
    const int k = static_cast<int>(std::min<int64_t>(K, static_cast<int64_t>(cands.size())));
    if (k == 0) break;
    if (o.do_sample) {
      // Sampling K continuations without replacement from softmax(scores): Gumbel top-k, with
      // the counter-based generator keyed by (seed, candidate index, step).
      std::vector<std::pair<double, int>> keyed(cands.size());
      for (size_t c = 0; c < cands.size(); ++c) {
        const double u = std::max(counter_uniform(o.seed, static_cast<uint64_t>(cands[c].beam) * V + cands[c].token,
                                                  static_cast<uint64_t>(cur), 0x6265616d),
                                  1e-300);
        keyed[c] = {cands[c].score - std::log(-std::log(u)), static_cast<int>(c)};
      }
      std::partial_sort(keyed.begin(), keyed.begin() + k, keyed.end(),
                        [](const auto& a, const auto& b) { return a.first > b.first; });
      std::vector<Candidate> picked(k);
      for (int j = 0; j < k; ++j) picked[j] = cands[keyed[j].second];
      cands.swap(picked);
    } else {
      // Highest accumulated log-probability first; ties to the lower flat index (beam, token).
      std::partial_sort(cands.begin(), cands.begin() + k, cands.end(), [&](const Candidate& a, const Candidate& b) {
        if (a.score != b.score) return a.score > b.score;
        return static_cast<int64_t>(a.beam) * V + a.token < static_cast<int64_t>(b.beam) * V + b.token;
      });
    }
    cands.resize(k);
    const int gen_len = cur + 1;
    std::vector<char> hits(k);
    bool all_hit = true;
    for (int j = 0; j < k; ++j) {
      hits[j] = is_eos(cands[j].token) || gen_len >= o.max_new_tokens;
      all_hit = all_hit && hits[j];
    }
    std::vector<std::string> status(k, "pruned");
    // Finished hypotheses: stopped candidates among the first B, unless the set is closed.
    const bool full_and_final = static_cast<int>(finished.size()) == B && o.early_stopping == 1;
    if (!full_and_final && unsatisfied) {
      for (int j = 0; j < std::min(k, B); ++j) {
        if (!hits[j]) continue;
        BeamHypothesis h;
        h.token_ids = running[cands[j].beam].tokens;
        h.token_ids.push_back(cands[j].token);
        h.sum_logprobs = cands[j].score;
        h.score = cands[j].score / std::pow(static_cast<double>(gen_len), o.length_penalty);
        h.finish_reason = is_eos(cands[j].token) ? "stop" : "length";
        // Insert keeping the best B; an equal score does not displace an earlier hypothesis.
        auto pos = std::upper_bound(finished.begin(), finished.end(), h.score,
                                    [](double s, const BeamHypothesis& x) { return s > x.score; });
        if (static_cast<int>(pos - finished.begin()) < B) {
          finished.insert(pos, std::move(h));
          status[j] = "finished";
          if (static_cast<int>(finished.size()) > B) finished.pop_back();
        } else {
          status[j] = "rejected";
        }
      }
    }
    for (int j = 0; j < k; ++j)
      if (hits[j] && status[j] == "pruned") status[j] = "rejected";
    // Running beams for the next step: the best B candidates that did not stop.
    std::vector<int> chosen;
    for (int j = 0; j < k && static_cast<int>(chosen.size()) < B; ++j)
      if (!hits[j]) {
        chosen.push_back(j);
        status[j] = "running";
      }
    std::vector<int> node_ids(k);
    for (int j = 0; j < k; ++j) {
      node_ids[j] = next_node++;
      if (o.trace)
        res.events.push_back({cur, node_ids[j], running[cands[j].beam].node, cands[j].token, cands[j].score, status[j]});
    }
    res.steps = gen_len;
    // Early-stop heuristic (transformers' _check_early_stop_heuristic).
    if (!chosen.empty()) {
      const double best_len = (o.early_stopping == -1 && o.length_penalty > 0.0) ? o.max_new_tokens : gen_len;
      const double best_possible = cands[chosen[0]].score / std::pow(best_len, o.length_penalty);
      const double worst_finished = static_cast<int>(finished.size()) == B ? finished.back().score : -1.0e9;
      unsatisfied = unsatisfied && best_possible > worst_finished;
    }
    const bool closed = static_cast<int>(finished.size()) == B && o.early_stopping == 1;
    if (!unsatisfied || closed || all_hit || chosen.empty()) break;

    std::vector<Beam> next;
    next.reserve(chosen.size());
    for (int j : chosen) {
      const Beam& parent = running[cands[j].beam];
      Beam child;
      child.cache = parent.cache->fork();  // shares every block of the parent
      child.tokens = parent.tokens;
      child.tokens.push_back(cands[j].token);
      child.score = cands[j].score;
      child.node = node_ids[j];
      next.push_back(std::move(child));
    }
    running.clear();  // parents release their blocks; children keep the shared ones
    // All beams advance in one batched step: the weights are read once, not once per beam.
    std::vector<int32_t> toks;
    std::vector<KVCache*> caches;
    for (Beam& child : next) {
      toks.push_back(child.tokens.back());
      caches.push_back(child.cache.get());
    }
    next_logits.resize(static_cast<size_t>(next.size()) * V);
    model.decode_batch(toks.data(), static_cast<int>(next.size()), caches.data(), next_logits.data());
    logits.swap(next_logits);
    running.swap(next);
    res.peak_cache_bytes = std::max(res.peak_cache_bytes, in_use());
  }
  res.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  if (finished.empty())
    throw std::invalid_argument(
        "beam search ended with no finished hypothesis: every continuation was removed (the processors left no "
        "token, or the model's logits are not finite)");
  const int n = std::min<int>(o.num_return_sequences, static_cast<int>(finished.size()));
  res.hypotheses.assign(finished.begin(), finished.begin() + n);
  return res;
}

}  // namespace decodelab
