#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "decodelab/decoding.h"

namespace decodelab {

GenerateResult generate_greedy(const Transformer& model, KVCache& cache, const std::vector<int32_t>& prompt,
                               int max_new_tokens, const std::vector<int32_t>& eos_ids,
                               const std::function<void()>& poll) {
  using clock = std::chrono::steady_clock;
  if (max_new_tokens < 0)
    throw std::invalid_argument("max_new_tokens must be >= 0, got " + std::to_string(max_new_tokens));
  const int vocab = model.config().vocab_size;
  const int64_t total = static_cast<int64_t>(cache.length()) + static_cast<int64_t>(prompt.size()) + max_new_tokens;
  // The last generated token is never fed back, hence the - 1.
  if (total - 1 > model.config().max_position)
    throw std::invalid_argument("prompt of " + std::to_string(prompt.size()) + " tokens + max_new_tokens " +
                                std::to_string(max_new_tokens) + " exceeds the context window of " +
                                std::to_string(model.config().max_position) + " positions");
  GenerateResult r;
  r.finish_reason = "length";
  if (max_new_tokens == 0) return r;
  std::vector<float> logits(vocab);
  auto t0 = clock::now();
  model.forward(prompt.data(), static_cast<int>(prompt.size()), cache, logits.data(), false);
  auto t1 = clock::now();
  r.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  r.token_ids.reserve(max_new_tokens);
  for (int step = 0; step < max_new_tokens; ++step) {
    if (poll) poll();
    // Ties go to the lowest id, as torch.argmax does.
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    r.token_ids.push_back(next);
    if (std::find(eos_ids.begin(), eos_ids.end(), next) != eos_ids.end()) {
      r.finish_reason = "stop";
      break;
    }
    if (step + 1 == max_new_tokens) break;
    model.forward(&next, 1, cache, logits.data(), false);
  }
  r.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return r;
}

}  // namespace decodelab
