// A token mask stage: at each step a rule outside the engine (a grammar matcher, in Python) says
// which tokens may come next, one bit per token (bit i % 32 of word i / 32, llguidance's layout),
// and every token whose bit is clear is removed. The rule sees the stage's SampleContext, so the
// same stage serves plain decoding, samples, beams and the positions a speculative round checks.
#include <limits>
#include <stdexcept>
#include <utility>

#include "sampling/internal.h"

namespace decodelab {

namespace {

class TokenMask : public Sampler {
 public:
  TokenMask(TokenMaskFn fn, std::string label) : fn_(std::move(fn)), label_(std::move(label)) {}
  std::string name() const override { return label_; }
  void apply(float* logits, int n, const SampleContext& ctx) override {
    const int words = (n + 31) / 32;
    mask_.assign(static_cast<size_t>(words), 0u);
    fn_(ctx, mask_.data(), words);
    for (int i = 0; i < n; ++i)
      if (!((mask_[static_cast<size_t>(i) >> 5] >> (i & 31)) & 1u)) logits[i] = -std::numeric_limits<float>::infinity();
  }
  // The rule keeps its own state per sequence, keyed by the context it is shown: clones share it.
  SamplerPtr clone() const override { return std::make_shared<TokenMask>(fn_, label_); }

 private:
  TokenMaskFn fn_;
  std::string label_;
  std::vector<uint32_t> mask_;
};

}  // namespace

SamplerPtr make_token_mask(TokenMaskFn fn, const std::string& label) {
  if (!fn) throw std::invalid_argument("a token mask needs a rule to call");
  return std::make_shared<TokenMask>(std::move(fn), label);
}

}  // namespace decodelab
