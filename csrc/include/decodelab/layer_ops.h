// The per-row operations of a transformer layer: norms, activations, residual adds and RoPE.
#pragma once

#include <cstddef>

namespace decodelab {

void rmsnorm(const float* x, const float* w, int T, int dim, float eps, float* y);
void layernorm(const float* x, const float* w, const float* b, int T, int dim, float eps, float* y);
// GPT-2's gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_tanh_inplace(float* x, size_t n);
// The exact GELU (GPT-NeoX's "gelu"): 0.5 x (1 + erf(x / sqrt(2))).
void gelu_erf_inplace(float* x, size_t n);
// out = gelu_tanh(gate) * up, elementwise (Gemma's gated MLP).
void gelu_tanh_mul(const float* gate, const float* up, float* out, size_t n);
// x = cap tanh(x / cap), elementwise (Gemma 2's logit soft cap).
void softcap_inplace(float* x, size_t n, float cap);
// out = silu(gate) * up, elementwise.
void silu_mul(const float* gate, const float* up, float* out, size_t n);
void add_inplace(float* x, const float* y, size_t n);

// Rotary embedding of x (T, n_heads, head_dim) at positions p0 .. p0+T-1, on the first rot_dim
// values of each head (0: all; GPT-NeoX rotates a part). cos/sin tables are (max_position,
// rot_dim/2). Interleaved rotates pairs (2i, 2i+1) (llama2.c, Meta); otherwise pairs
// (i, i + rot_dim/2) (Hugging Face rotate_half).
void rope(float* x, int T, int n_heads, int head_dim, int p0, const float* cos_table,
          const float* sin_table, bool interleaved, int rot_dim = 0);

}  // namespace decodelab
