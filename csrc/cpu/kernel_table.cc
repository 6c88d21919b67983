// This instruction set's kernel table (compiled once per variant, see cpu/isa.h).
#include "cpu/kernel_table.h"

#include "cpu/kernels.h"

#define DECODELAB_STR2(x) #x
#define DECODELAB_STR(x) DECODELAB_STR2(x)

namespace decodelab {
namespace DECODELAB_ISA {

const KernelTable& kernel_table() {
  static const KernelTable table{DECODELAB_STR(DECODELAB_ISA), &linear_many, &quantized_size, &linear_row_view,
                                 &quantize_linear, &pack_i4_blocks, &pack_i8_blocks, &pack_i5_blocks, &rmsnorm, &layernorm,
                                 &gelu_tanh_inplace, &gelu_erf_inplace, &gelu_tanh_mul, &softcap_inplace, &silu_mul,
                                 &add_inplace, &rope, &attention_paged, &store_kv};
  return table;
}

}  // namespace DECODELAB_ISA
}  // namespace decodelab
