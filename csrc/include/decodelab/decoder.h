// The decode loop: prefill, then one token per step through a sampler chain, entirely in C++.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "decodelab/kv_cache.h"
#include "decodelab/sampling.h"
#include "decodelab/step_stats.h"
#include "decodelab/transformer.h"

namespace decodelab {

struct DecodeOptions {
  int max_new_tokens = 0;
  std::vector<int32_t> eos_ids;
  uint64_t sequence = 0;     // which sample of this prompt: keys the random stream
  int logprobs = -1;         // < 0: none; N >= 0: the chosen token's logprob and the top N
  bool logprobs_processed = false;
  int trace = 0;             // 0 off, 1 per-stage summaries with the top tokens, 2 also full logits
  int trace_top = 20;
  // Classifier-free guidance (transformers' guidance_scale): 1 off. A second, unconditional
  // sequence (negative_prompt, or else the conditional input's last token) advances beside this
  // one with the same tokens; see classifier_free_guidance().
  float guidance_scale = 1.0f;
  std::vector<int32_t> negative_prompt;
  // Speculative decoding (SpeculativeDecoder): tokens drafted per round, and for prompt lookup
  // the longest n-gram of the text's end that is looked for earlier in it.
  int num_draft_tokens = 5;
  int prompt_lookup_max_ngram = 2;
  // A draft model's round ends where its most likely next token has less than this probability
  // (as llama.cpp's draft p-min): 0 off; num_draft_tokens is then the most per round.
  float draft_p_min = 0.0f;
};

struct GenerateResult {
  std::vector<int32_t> token_ids;   // generated tokens, the stopping EOS included
  std::string finish_reason;        // "stop" (EOS) or "length"
  double prefill_seconds = 0.0;
  double first_token_seconds = 0.0;  // prefill + choosing the first token
  double decode_seconds = 0.0;       // every later step
  int reused_prompt_tokens = 0;      // prompt tokens a scheduler took from its prefix cache
  std::vector<float> logprobs;                     // per token, when asked for
  std::vector<std::vector<int32_t>> top_ids;       // per token, top-N alternatives
  std::vector<std::vector<float>> top_logprobs;
  std::vector<StepTrace> trace;
};

// Appends token t's logprob under `probs` (a full distribution) and its `top` most likely
// alternatives to r: what a decode loop records per token when asked for logprobs.
void append_logprobs(GenerateResult& r, const std::vector<float>& probs, int32_t t, int top);

// The one rule for a generation's length: the prompt (tokens already cached included) and every
// new token but the last, which is never run through the model, fit the context window. Throws
// std::invalid_argument saying how many new tokens would fit.
void check_context_window(const Transformer& model, int64_t prompt_tokens, int64_t max_new_tokens);

// One sequence decoded a token at a time: the first step() prefills `prompt` (the tokens not yet
// in `cache`), each step() returns the next token, or -1 once finished. `chain` must end in a
// selector (Greedy, Dist, Mirostat). generate() runs the loop in C++; a Python stream drives
// step() itself.
class Decoder {
 public:
  Decoder(const Transformer& model, KVCache& cache, std::vector<int32_t> prompt, Chain& chain,
          const DecodeOptions& opts);
  int32_t step();
  // For a scheduler that runs the model itself: the prompt is the tokens it must prefill into
  // cache() first (prefill() then says whether that is done), pending() the token to run
  // through the model before each next choice (-1: none), and choose() picks the next token from
  // the logits of the cache's last position. Not with guidance.
  const std::vector<int32_t>& prompt() const { return prompt_; }
  bool started() const { return started_; }
  int32_t pending() const { return pending_; }
  int32_t choose(const float* logits);
  // Tokens and logprobs so far, movable out once finished.
  GenerateResult& result_mut() { return r_; }
  bool finished() const { return finished_; }
  const GenerateResult& result() const { return r_; }
  const Transformer& model() const { return model_; }
  KVCache& cache() const { return cache_; }

 private:
  void start(double prefill_seconds);
  int32_t select(std::chrono::steady_clock::time_point t0);  // the chain on raw_, after the model ran

  const Transformer& model_;
  KVCache& cache_;
  std::vector<int32_t> prompt_;
  Chain& chain_;
  DecodeOptions opts_;
  GenerateResult r_;
  std::vector<float> raw_, work_, before_, pb_, pa_, praw_, pproc_;
  std::shared_ptr<KVCache> uncond_cache_;  // guidance: the unconditional sequence
  std::vector<int32_t> uncond_prompt_;
  std::vector<float> uraw_, both_;
  std::vector<int32_t> history_;
  SampleContext ctx_;
  bool started_ = false;
  bool finished_ = false;
  int32_t pending_ = -1;  // the last token, not yet run through the model
};

GenerateResult generate(const Transformer& model, KVCache& cache, const std::vector<int32_t>& prompt, Chain& chain,
                        const DecodeOptions& opts, const std::function<void()>& poll);

}  // namespace decodelab
