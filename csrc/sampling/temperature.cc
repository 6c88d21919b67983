// Temperature: logits divided by T; T = 0 keeps only the most likely token (greedy).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "sampling/internal.h"

namespace decodelab {
namespace sampling {

namespace {

class Temperature : public Base<Temperature> {
 public:
  explicit Temperature(double t) : t_(t) {}
  std::string name() const override { return "temperature(" + num(t_) + ")"; }
  void apply(float* l, int n, const SampleContext&) override {
    if (t_ == 0.0) {  // the limit T -> 0: all mass on the most likely token
      const int top = argmax(l, n);
      if (top >= 0) keep_only(l, n, top);
      return;
    }
    // Divided, not multiplied by 1/T: the float32 quotient transformers, vLLM and llama.cpp compute.
    const float t = static_cast<float>(t_);
    for (int i = 0; i < n; ++i) l[i] /= t;
  }

 private:
  double t_;
};

}  // namespace

SamplerPtr new_temperature(double t) { return std::make_shared<Temperature>(t); }

}  // namespace sampling
}  // namespace decodelab
