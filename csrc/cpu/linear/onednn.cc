// oneDNN matmuls for prompts: one cached primitive per weight shape, fp32 or bf16, scales inside.
#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "decodelab/linear.h"

namespace decodelab {

namespace {
dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// One matmul primitive per weight shape, with the number of rows M left to run time: a prompt of
// a length not seen before would otherwise create (and JIT-compile) new kernels, which cost tens
// of milliseconds on the first request of each length. Null where oneDNN has no implementation
// (per-column weight scales on a CPU whose bf16 kernels lack them), remembered as such.
const dnnl::matmul* primitive(int K, int N, bool bias, bool bf16, bool w_in_major, bool scaled) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  static std::mutex mu;
  static std::map<std::tuple<int, int, bool, bool, bool, bool>, std::unique_ptr<dnnl::matmul>> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(K, N, bias, bf16, w_in_major, scaled);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second.get();
  const auto M = DNNL_RUNTIME_DIM_VAL;
  const dt in_type = bf16 ? dt::bf16 : dt::f32;
  dnnl::memory::desc src_md({M, K}, in_type, tag::ab);
  // Logical weights are (K, N): W (N, K) stored row-major is (K, N) in "ba" order, W^T stored
  // row-major (w_in_major) in "ab" order.
  dnnl::memory::desc wei_md({K, N}, in_type, w_in_major ? tag::ab : tag::ba);
  dnnl::memory::desc dst_md({M, N}, dt::f32, tag::ab);
  // Scales and bias are applied inside the matmul, while each output tile is still in registers,
  // rather than in a pass over the whole output afterwards: y = scale * (x W^T) + b.
  dnnl::primitive_attr attr;
  if (scaled) attr.set_scales_mask(DNNL_ARG_WEIGHTS, 1 << 1);
  std::unique_ptr<dnnl::matmul> prim;
  try {
    dnnl::matmul::primitive_desc pd =
        bias ? dnnl::matmul::primitive_desc(cpu_engine(), src_md, wei_md, dnnl::memory::desc({1, N}, dt::f32, tag::ab),
                                            dst_md, attr)
             : dnnl::matmul::primitive_desc(cpu_engine(), src_md, wei_md, dst_md, attr);
    prim = std::make_unique<dnnl::matmul>(pd);
  } catch (const dnnl::error&) {
    if (!scaled) throw;  // plain fp32 / bf16 matmuls exist on every CPU oneDNN runs on
  }
  return cache.emplace(key, std::move(prim)).first->second.get();
}

// Runs the cached primitive for (K, N, bias, bf16, w_in_major, scales) on x (M, K), W (N, K)
// stored row-major (or W^T, (K, N), with w_in_major), y (M, N). False, doing nothing, where there
// is none.
bool execute(const void* x, int M, int K, const void* w, int N, float* y, const float* b, bool bf16,
             bool w_in_major, const float* scales) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  auto& eng = cpu_engine();
  const dnnl::matmul* prim = primitive(K, N, b != nullptr, bf16, w_in_major, scales != nullptr);
  if (!prim) return false;
  const dt in_type = bf16 ? dt::bf16 : dt::f32;
  dnnl::memory src_m({{M, K}, in_type, tag::ab}, eng, const_cast<void*>(x));
  dnnl::memory wei_m({{K, N}, in_type, w_in_major ? tag::ab : tag::ba}, eng, const_cast<void*>(w));
  dnnl::memory dst_m({{M, N}, dt::f32, tag::ab}, eng, y);
  dnnl::stream stream(eng);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, src_m}, {DNNL_ARG_WEIGHTS, wei_m}, {DNNL_ARG_DST, dst_m}};
  if (b) args.emplace(DNNL_ARG_BIAS, dnnl::memory({{1, N}, dt::f32, tag::ab}, eng, const_cast<float*>(b)));
  if (scales)
    args.emplace(DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS, dnnl::memory({{N}, dt::f32, tag::a}, eng, const_cast<float*>(scales)));
  prim->execute(stream, args);
  stream.wait();
  return true;
}
}  // namespace

void matmul_onednn(const float* x, int M, int K, const float* w, int N, float* y, const float* b) {
  execute(x, M, K, w, N, y, b, false, false, nullptr);
}

void matmul_onednn_bf16(const uint16_t* x, int M, int K, const uint16_t* w, int N, float* y, const float* b,
                        bool w_in_major) {
  execute(x, M, K, w, N, y, b, true, w_in_major, nullptr);
}

bool matmul_onednn_bf16_scaled(const uint16_t* x, int M, int K, const uint16_t* w, int N, const float* scales,
                               float* y, const float* b, bool w_in_major) {
  return execute(x, M, K, w, N, y, b, true, w_in_major, scales);
}

void matmul_onednn_prepare(const float* w, int K, int N, const float* b) {
  // One run on the fewest rows that take this path: oneDNN generates its kernels at the first
  // execution in a process (about 25 ms for stories260K), which would otherwise land on the first
  // prompt that long.
  constexpr int M = kGemmMinRowsF32;
  std::vector<float> x(static_cast<size_t>(M) * K, 0.0f), y(static_cast<size_t>(M) * N);
  matmul_onednn(x.data(), M, K, w, N, y.data(), b);
}

}  // namespace decodelab
