// One instruction set's kernels as a table of function pointers: each variant's kernel_table.cc
// fills one, and cpu/dispatch.cc forwards every public entry point through the table it chose.
#pragma once

#include <cstddef>
#include <cstdint>

#include "decodelab/kernels.h"

namespace decodelab {

struct KernelTable {
  const char* name;  // the variant: generic, avx2, avx512 or avx512_vnni
  void (*linear_many)(const float*, int, const Linear* const*, float* const*, int);
  size_t (*quantized_size)(const Linear&, WeightType);
  bool (*linear_row_view)(const Linear&, int, int, Linear*);
  void (*quantize_linear)(Linear&, WeightType, QuantizedWeights&, uint8_t*, const RowSource*, const RowsDone*);
  void (*pack_i4_blocks)(Linear&, const BlockFormat&, const uint8_t*, QuantizedWeights&, uint8_t*, const RowsDone*);
  void (*pack_i8_blocks)(Linear&, const BlockFormat&, const uint8_t*, QuantizedWeights&, uint8_t*, const RowsDone*);
  void (*pack_i5_blocks)(Linear&, const BlockFormat&, const uint8_t*, QuantizedWeights&, uint8_t*, const RowsDone*);
  void (*rmsnorm)(const float*, const float*, int, int, float, float*);
  void (*layernorm)(const float*, const float*, const float*, int, int, float, float*);
  void (*gelu_tanh_inplace)(float*, size_t);
  void (*gelu_erf_inplace)(float*, size_t);
  void (*gelu_tanh_mul)(const float*, const float*, float*, size_t);
  void (*softcap_inplace)(float*, size_t, float);
  void (*silu_mul)(const float*, const float*, float*, size_t);
  void (*add_inplace)(float*, const float*, size_t);
  void (*rope)(float*, int, int, int, int, const float*, const float*, bool, int);
  void (*attention_paged)(const float*, const BlockPool&, const int*, int, int, int, int, float*, int,
                          const AttentionOptions&);
  void (*store_kv)(const float*, const float*, BlockPool&, const int*, int, int, int);
};

}  // namespace decodelab
