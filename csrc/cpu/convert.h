// fp32 rows for the bf16 kernels of linear layers and attention: bf16 widened to fp32, and
// activations in the even/odd order the bf16 kernels read.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/isa.h"
#include "decodelab/aligned.h"

namespace decodelab {
namespace DECODELAB_ISA {

// Activation rows in the order the bf16 kernels read them: per 16 values, the 8 even-indexed, then
// the 8 odd-indexed, each row zero-padded to a multiple of 16 (the padded weight columns are zero
// too, and zero times a zero pad stays zero where garbage times zero might be NaN). Row t of x
// (T, n) at xd[t * ld ...], ld = n rounded up to 16.
void split_even_odd(const float* x, int T, int n, FloatBuffer& xd);

// n values to fp32: a copy, or bf16 bits made the upper half of fp32 ones (vectorised).
void widen(const float* src, size_t n, float* dst);
void widen(const uint16_t* src, size_t n, float* dst);

}  // namespace DECODELAB_ISA
}  // namespace decodelab
