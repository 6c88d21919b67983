// Decode loops that run entirely in C++.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "decodelab/kv_cache.h"
#include "decodelab/transformer.h"

namespace decodelab {

struct GenerateResult {
  std::vector<int32_t> token_ids;   // generated tokens, the stopping EOS included
  std::string finish_reason;        // "stop" (EOS) or "length"
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
};

// Greedy decoding: prefill `prompt` into `cache`, then take the argmax token until an EOS id or
// max_new_tokens. `poll` runs once per step (it may throw to stop, e.g. on Ctrl-C).
GenerateResult generate_greedy(const Transformer& model, KVCache& cache,
                               const std::vector<int32_t>& prompt, int max_new_tokens,
                               const std::vector<int32_t>& eos_ids,
                               const std::function<void()>& poll);

}  // namespace decodelab
