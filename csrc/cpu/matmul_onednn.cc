#include <oneapi/dnnl/dnnl.hpp>

#include "decodelab/kernels.h"

namespace decodelab {

namespace {
dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}
}  // namespace

// oneDNN keeps its own cache of created primitives keyed by their descriptors, so building the
// primitive per call costs a lookup once a shape has been seen.
void matmul_onednn(const float* x, int M, int K, const float* w, int N, bool w_in_major, float* y) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  auto& eng = cpu_engine();
  dnnl::memory::desc src_md({M, K}, dt::f32, tag::ab);
  // Logical weights are (K, N): W (N, K) stored row-major is (K, N) in "ba" order.
  dnnl::memory::desc wei_md({K, N}, dt::f32, w_in_major ? tag::ab : tag::ba);
  dnnl::memory::desc dst_md({M, N}, dt::f32, tag::ab);
  dnnl::matmul::primitive_desc pd(eng, src_md, wei_md, dst_md);
  dnnl::matmul prim(pd);
  dnnl::memory src_m(src_md, eng, const_cast<float*>(x));
  dnnl::memory wei_m(wei_md, eng, const_cast<float*>(w));
  dnnl::memory dst_m(dst_md, eng, y);
  dnnl::stream stream(eng);
  prim.execute(stream, {{DNNL_ARG_SRC, src_m}, {DNNL_ARG_WEIGHTS, wei_m}, {DNNL_ARG_DST, dst_m}});
  stream.wait();
}

}  // namespace decodelab
