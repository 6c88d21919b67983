// The public kernel entry points (decodelab/kernels.h), each forwarding to the variant chosen for
// this CPU: the one place that chooses an instruction set (see isa.h). A portable build holds a
// variant per instruction set (generic, avx2, avx512, avx512_vnni) and picks the best one the CPU
// runs, capped by DECODELAB_ISA; a native build (DECODELAB_NATIVE_ARCH) holds one.
#include <cstdlib>
#include <limits>
#include <oneapi/dnnl/dnnl.hpp>
#include <stdexcept>
#include <string>

#include "cpu/kernel_table.h"
#include "decodelab/cpu_info.h"
#include "decodelab/kernels.h"

// The variants this build holds, each namespace's kernel_table() (kernel_table.cc).
#if defined(DECODELAB_PORTABLE)
#define DECODELAB_VARIANT_LIST X(generic) X(avx2) X(avx512) X(avx512_vnni)
#else
#include "cpu/isa.h"
#define DECODELAB_VARIANT_LIST X(DECODELAB_ISA)
#endif

namespace decodelab {

#define X(v) \
  namespace v { \
  const KernelTable& kernel_table(); \
  }
DECODELAB_VARIANT_LIST
#undef X

namespace {

constexpr const char* kLevels[] = {"generic", "avx2", "avx512", "avx512_vnni"};

int level_of(const std::string& name) {
  for (int i = 0; i < 4; ++i)
    if (name == kLevels[i]) return i;
  return -1;
}

// The highest level this CPU runs: the instructions each variant's -march flags allow the compiler.
int cpu_level(std::vector<std::string>* features) {
  int level = 0;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const struct {
    const char* name;
    bool has;
  } f[] = {{"avx2", __builtin_cpu_supports("avx2") != 0},         {"fma", __builtin_cpu_supports("fma") != 0},
           {"f16c", __builtin_cpu_supports("f16c") != 0},         {"bmi2", __builtin_cpu_supports("bmi2") != 0},
           {"avx512f", __builtin_cpu_supports("avx512f") != 0},   {"avx512bw", __builtin_cpu_supports("avx512bw") != 0},
           {"avx512dq", __builtin_cpu_supports("avx512dq") != 0}, {"avx512vl", __builtin_cpu_supports("avx512vl") != 0},
           {"avx512vnni", __builtin_cpu_supports("avx512vnni") != 0},
           {"avx512bf16", __builtin_cpu_supports("avx512bf16") != 0}};
  bool has[10];
  for (int i = 0; i < 10; ++i) {
    has[i] = f[i].has;
    if (has[i]) features->push_back(f[i].name);
  }
  if (has[0] && has[1] && has[2] && has[3]) level = 1;
  if (level == 1 && has[4] && has[5] && has[6] && has[7]) level = 2;
  if (level == 2 && has[8]) level = 3;
#else
  (void)features;
#endif
  return level;
}

const KernelTable* table_of(const std::string& name) {
#define X(v) \
  if (name == #v) return &v::kernel_table();
  DECODELAB_VARIANT_LIST
#undef X
  return nullptr;
}

struct Choice {
  CpuInfo info;
  const KernelTable* table = nullptr;
};

Choice choose() {
  Choice c;
  CpuInfo& info = c.info;
#define X(v) info.compiled.push_back(#v);
  DECODELAB_VARIANT_LIST
#undef X
#if defined(DECODELAB_PORTABLE)
  info.portable = true;
#endif
  const int level = cpu_level(&info.detected);
  for (int i = 0; i <= level; ++i) info.supported.push_back(kLevels[i]);
  int cap = 3;
  if (const char* env = std::getenv("DECODELAB_ISA"); env && *env) {
    info.cap = env;
    cap = level_of(info.cap);
    if (cap < 0)
      throw std::invalid_argument("DECODELAB_ISA must be one of generic, avx2, avx512, avx512_vnni; got '" + info.cap +
                                  "'");
  }
  // The best compiled variant the CPU runs, at or below the cap.
  for (const std::string& v : info.compiled) {
    const int l = level_of(v);
    if (l >= 0 && l <= level && l <= cap && (info.chosen.empty() || l > level_of(info.chosen))) info.chosen = v;
  }
  if (info.chosen.empty()) {
    // A native build holds only the building machine's variant: it runs it, cap or not.
    if (info.compiled.size() == 1 && info.cap.empty()) info.chosen = info.compiled[0];
    else
      throw std::runtime_error("this build holds the " + info.compiled.front() +
                               " kernels only, which this CPU or DECODELAB_ISA=" + info.cap +
                               " does not allow; build with DECODELAB_NATIVE_ARCH=OFF for every instruction set");
  }
  c.table = table_of(info.chosen);
  // oneDNN's own kernels under the same cap (before it builds any primitive).
  if (!info.cap.empty()) {
    static const dnnl::cpu_isa isa[] = {dnnl::cpu_isa::sse41, dnnl::cpu_isa::avx2, dnnl::cpu_isa::avx512_core,
                                        dnnl::cpu_isa::avx512_core_vnni};
    try {
      dnnl::set_max_cpu_isa(isa[cap]);
    } catch (const dnnl::error&) {  // already fixed by an earlier primitive: leave it
    }
  }
  return c;
}

const Choice& choice() {
  static const Choice c = choose();
  return c;
}

inline const KernelTable& kernels() {
  static const KernelTable* t = choice().table;
  return *t;
}

}  // namespace

const CpuInfo& cpu_info() { return choice().info; }

void linear_many(const float* x, int T, const Linear* const* layers, float* const* ys, int n) {
  kernels().linear_many(x, T, layers, ys, n);
}
void linear(const float* x, int T, const Linear& L, float* y) {
  const Linear* layers[1] = {&L};
  float* ys[1] = {y};
  kernels().linear_many(x, T, layers, ys, 1);
}
size_t quantized_size(const Linear& L, WeightType type) { return kernels().quantized_size(L, type); }
bool linear_row_view(const Linear& L, int first, int count, Linear* view) {
  return kernels().linear_row_view(L, first, count, view);
}
void quantize_linear(Linear& L, WeightType type, QuantizedWeights& q, uint8_t* dst, const RowSource* source,
                     const RowsDone* done) {
  kernels().quantize_linear(L, type, q, dst, source, done);
}
void pack_i4_blocks(Linear& L, const BlockFormat& f, const uint8_t* src, QuantizedWeights& q, uint8_t* dst,
                    const RowsDone* done) {
  kernels().pack_i4_blocks(L, f, src, q, dst, done);
}
void pack_i8_blocks(Linear& L, const BlockFormat& f, const uint8_t* src, QuantizedWeights& q, uint8_t* dst,
                    const RowsDone* done) {
  kernels().pack_i8_blocks(L, f, src, q, dst, done);
}
void pack_i5_blocks(Linear& L, const BlockFormat& f, const uint8_t* src, QuantizedWeights& q, uint8_t* dst,
                    const RowsDone* done) {
  kernels().pack_i5_blocks(L, f, src, q, dst, done);
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
  // Under a DECODELAB_ISA cap oneDNN stops below its bf16 kernels, so bf16 products are emulated.
  static const bool native = __builtin_cpu_supports("avx512bf16") && cpu_info().cap.empty();
  return native;
#else
  return false;
#endif
}

void rmsnorm(const float* x, const float* w, int T, int dim, float eps, float* y) {
  kernels().rmsnorm(x, w, T, dim, eps, y);
}
void layernorm(const float* x, const float* w, const float* b, int T, int dim, float eps, float* y) {
  kernels().layernorm(x, w, b, T, dim, eps, y);
}
void gelu_tanh_inplace(float* x, size_t n) { kernels().gelu_tanh_inplace(x, n); }
void gelu_erf_inplace(float* x, size_t n) { kernels().gelu_erf_inplace(x, n); }
void gelu_tanh_mul(const float* gate, const float* up, float* out, size_t n) { kernels().gelu_tanh_mul(gate, up, out, n); }
void softcap_inplace(float* x, size_t n, float cap) { kernels().softcap_inplace(x, n, cap); }
void silu_mul(const float* gate, const float* up, float* out, size_t n) { kernels().silu_mul(gate, up, out, n); }
void add_inplace(float* x, const float* y, size_t n) { kernels().add_inplace(x, y, n); }
void rope(float* x, int T, int n_heads, int head_dim, int p0, const float* cos_table, const float* sin_table,
          bool interleaved, int rot_dim) {
  kernels().rope(x, T, n_heads, head_dim, p0, cos_table, sin_table, interleaved, rot_dim);
}

void attention_paged(const float* q, const BlockPool& pool, const int* block_table, int layer, int T, int p0,
                     int n_heads, float* out, int n_threads, const AttentionOptions& options) {
  kernels().attention_paged(q, pool, block_table, layer, T, p0, n_heads, out, n_threads, options);
}
void store_kv(const float* k, const float* v, BlockPool& pool, const int* block_table, int layer, int T, int p0) {
  kernels().store_kv(k, v, pool, block_table, layer, T, p0);
}

}  // namespace decodelab
