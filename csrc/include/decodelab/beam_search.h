// Beam search over forked KV caches, as transformers' generate(num_beams=...) does it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "decodelab/kv_cache.h"
#include "decodelab/sampling.h"
#include "decodelab/transformer.h"

namespace decodelab {

// Beam search as transformers' generate(num_beams=...) does it (generation/utils.py
// _beam_search): each step takes the top (1 + n_eos, at least 2) x num_beams continuations of
// all running beams by accumulated log-probability, keeps the best num_beams that did not stop
// as running beams, and offers those among the first num_beams that stopped (EOS or max length)
// to the finished set, scored sum_logprobs / generated_length ** length_penalty. Beams share
// their common prefix through forked caches.
struct BeamOptions {
  int num_beams = 4;
  int max_new_tokens = 0;
  double length_penalty = 1.0;
  int early_stopping = 0;   // 1: True, 0: False (heuristic), -1: "never"
  int num_return_sequences = 1;
  std::vector<int32_t> eos_ids;
  bool do_sample = false;   // draw continuations instead of taking the top ones
  uint64_t seed = 0;
  bool trace = false;
};

struct BeamHypothesis {
  std::vector<int32_t> token_ids;
  double score = 0.0;          // sum_logprobs / length ** length_penalty
  double sum_logprobs = 0.0;
  std::string finish_reason;   // "stop" or "length"
};

// One candidate considered at one step, for the beam tree.
struct BeamEvent {
  int step = 0;
  int node = -1;          // id of the new node (candidate)
  int parent = -1;        // id of the node it extends (-1: the prompt)
  int32_t token = -1;
  double sum_logprobs = 0.0;
  std::string status;     // "running", "pruned", "finished", "rejected" (stopped, not kept)
};

struct BeamResult {
  std::vector<BeamHypothesis> hypotheses;  // best first, num_return_sequences of them
  std::vector<BeamEvent> events;
  int steps = 0;
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  uint64_t peak_cache_bytes = 0;  // blocks in use at the peak, shared blocks counted once
};

BeamResult beam_search(const Transformer& model, KVCache& prompt_cache, const std::vector<int32_t>& prompt,
                       Chain& processors, const BeamOptions& opts, const std::function<void()>& poll);

}  // namespace decodelab
