// The public kernel entry points (decodelab/kernels.h), each forwarding to the variant for this
// CPU: the one place that chooses an instruction set (see isa.h). This build holds one variant.
#include <limits>

#include "cpu/kernels.h"

namespace decodelab {

namespace isa = DECODELAB_ISA;

void linear_many(const float* x, int T, const Linear* const* layers, float* const* ys, int n) {
  isa::linear_many(x, T, layers, ys, n);
}
void linear(const float* x, int T, const Linear& L, float* y) {
  const Linear* layers[1] = {&L};
  float* ys[1] = {y};
  isa::linear_many(x, T, layers, ys, 1);
}
size_t quantized_size(const Linear& L, WeightType type) { return isa::quantized_size(L, type); }
bool linear_row_view(const Linear& L, int first, int count, Linear* view) {
  return isa::linear_row_view(L, first, count, view);
}
void quantize_linear(Linear& L, WeightType type, QuantizedWeights& q, uint8_t* dst, const RowSource* source) {
  isa::quantize_linear(L, type, q, dst, source);
}
void pack_i4_blocks(Linear& L, const BlockFormat& f, const uint8_t* src, QuantizedWeights& q, uint8_t* dst) {
  isa::pack_i4_blocks(L, f, src, q, dst);
}
void pack_i8_blocks(Linear& L, const BlockFormat& f, const uint8_t* src, QuantizedWeights& q, uint8_t* dst) {
  isa::pack_i8_blocks(L, f, src, q, dst);
}

namespace {
thread_local bool fixed_rows = false;
}
FixedRowArithmetic::FixedRowArithmetic() : was_(fixed_rows) { fixed_rows = true; }
FixedRowArithmetic::~FixedRowArithmetic() { fixed_rows = was_; }
bool FixedRowArithmetic::on() { return fixed_rows; }

int gemm_min_rows(WeightType type) {
  switch (type) {
    case WeightType::F32: return kGemmMinRowsF32;
    case WeightType::BF16: return kGemmMinRowsBf16;
    case WeightType::I8: return kGemmMinRowsI8;
    default: return std::numeric_limits<int>::max();
  }
}

bool bf16_matmul_native() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool native = __builtin_cpu_supports("avx512bf16");
  return native;
#else
  return false;
#endif
}

void rmsnorm(const float* x, const float* w, int T, int dim, float eps, float* y) { isa::rmsnorm(x, w, T, dim, eps, y); }
void layernorm(const float* x, const float* w, const float* b, int T, int dim, float eps, float* y) {
  isa::layernorm(x, w, b, T, dim, eps, y);
}
void gelu_tanh_inplace(float* x, size_t n) { isa::gelu_tanh_inplace(x, n); }
void gelu_erf_inplace(float* x, size_t n) { isa::gelu_erf_inplace(x, n); }
void gelu_tanh_mul(const float* gate, const float* up, float* out, size_t n) { isa::gelu_tanh_mul(gate, up, out, n); }
void softcap_inplace(float* x, size_t n, float cap) { isa::softcap_inplace(x, n, cap); }
void silu_mul(const float* gate, const float* up, float* out, size_t n) { isa::silu_mul(gate, up, out, n); }
void add_inplace(float* x, const float* y, size_t n) { isa::add_inplace(x, y, n); }
void rope(float* x, int T, int n_heads, int head_dim, int p0, const float* cos_table, const float* sin_table,
          bool interleaved, int rot_dim) {
  isa::rope(x, T, n_heads, head_dim, p0, cos_table, sin_table, interleaved, rot_dim);
}

void attention_paged(const float* q, const BlockPool& pool, const int* block_table, int layer, int T, int p0,
                     int n_heads, float* out, float* scratch, int scratch_stride, float* gather, int n_threads,
                     const AttentionOptions& options) {
  isa::attention_paged(q, pool, block_table, layer, T, p0, n_heads, out, scratch, scratch_stride, gather, n_threads,
                       options);
}
void store_kv(const float* k, const float* v, BlockPool& pool, const int* block_table, int layer, int T, int p0) {
  isa::store_kv(k, v, pool, block_table, layer, T, p0);
}

}  // namespace decodelab
