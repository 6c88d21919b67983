// ModelConfig::validate: the ranges a model's shape must lie in before any buffer is sized from it.
#include <cmath>
#include <stdexcept>
#include <string>

#include "decodelab/config.h"

namespace decodelab {

namespace {
void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("invalid model config: " + what);
}
std::string L(int i) { return std::to_string(i); }
}  // namespace

void ModelConfig::validate() const {
  require(arch == "llama" || arch == "gpt2" || arch == "gpt_neox",
          "arch must be 'llama', 'gpt2' or 'gpt_neox', got '" + arch + "'");
  require(n_layers >= 1 && n_layers <= 1024, "n_layers must be in [1, 1024], got " + L(n_layers));
  require(dim >= 1 && dim <= 65536, "hidden size must be in [1, 65536], got " + L(dim));
  require(n_heads >= 1 && n_heads <= 1024, "n_heads must be in [1, 1024], got " + L(n_heads));
  require(n_kv_heads >= 1 && n_kv_heads <= n_heads && n_heads % n_kv_heads == 0,
          "n_kv_heads must divide n_heads = " + L(n_heads) + ", got " + L(n_kv_heads));
  require(head_dim >= 2 && head_dim <= 1024 && head_dim % 2 == 0,
          "head_dim must be even and in [2, 1024], got " + L(head_dim));
  require(hidden_dim >= 1 && hidden_dim <= 1 << 20, "intermediate size must be in [1, 2^20], got " + L(hidden_dim));
  require(vocab_size >= 1 && vocab_size <= 1 << 24, "vocab_size must be in [1, 2^24], got " + L(vocab_size));
  require(max_position >= 1 && max_position <= 1 << 22,
          "max_position_embeddings must be in [1, 2^22], got " + L(max_position));
  require(norm_eps > 0.0f && norm_eps < 1.0f, "norm epsilon must be in (0, 1), got " + std::to_string(norm_eps));
  require(rope_theta > 0.0, "rope_theta must be > 0, got " + std::to_string(rope_theta));
  if (is_gpt2() || is_neox())
    require(n_kv_heads == n_heads && n_heads * head_dim == dim, arch + " needs n_heads * head_dim == hidden size");
  require(rotary_dim >= 0 && rotary_dim <= head_dim && rotary_dim % 2 == 0,
          "rotary_dim must be even and in [0, head_dim = " + L(head_dim) + "], got " + L(rotary_dim));
  require(rotary_dim == 0 || is_neox(), "rotary_dim (partial RoPE) is for gpt_neox only");
  require(rope_inv_freq.empty() || static_cast<int>(rope_inv_freq.size()) == rope_dim() / 2,
          "rope_inv_freq must hold rotary_dim / 2 = " + L(rope_dim() / 2) + " frequencies, got " +
              L(static_cast<int>(rope_inv_freq.size())));
  require(is_llama() || (!qkv_bias && !o_bias && !qk_norm && sliding_window.empty()),
          arch + " takes none of the Llama-family options (q/k/v biases, qk_norm, sliding_window)");
  require(!is_gpt2() || (rope_inv_freq.empty() && rope_dynamic_factor == 0.0f && rope_long_inv_freq.empty()),
          "GPT-2 has no RoPE to scale");
  require(sliding_window.empty() || static_cast<int>(sliding_window.size()) == n_layers,
          "sliding_window must give one window per layer (" + L(n_layers) + "), got " + L(static_cast<int>(sliding_window.size())));
  for (int w : sliding_window) require(w >= 0, "a sliding window must be >= 0 (0: none), got " + L(w));
  for (float f : rope_inv_freq)
    require(std::isfinite(f) && f > 0.0f, "RoPE frequencies must be finite and > 0, got " + std::to_string(f));
  require(std::isfinite(rope_attention_factor) && rope_attention_factor > 0.0f,
          "rope_attention_factor must be finite and > 0, got " + std::to_string(rope_attention_factor));
  require(rope_dynamic_factor == 0.0f || (std::isfinite(rope_dynamic_factor) && rope_dynamic_factor >= 1.0f),
          "rope_dynamic_factor must be 0 (off) or >= 1, got " + std::to_string(rope_dynamic_factor));
  require(rope_dynamic_factor == 0.0f || rope_inv_freq.empty(), "a dynamic RoPE takes no fixed frequencies");
  for (float v : {embed_scale, attn_scale, attn_softcap, final_softcap})
    require(std::isfinite(v) && v >= 0.0f, "embed_scale, attn_scale and the soft caps must be finite and >= 0 (0: "
                                           "none), got " + std::to_string(v));
  require(is_llama() || (embed_scale == 0.0f && !norm_plus_one && !sandwich_norms && !gelu_gate &&
                         attn_scale == 0.0f && attn_softcap == 0.0f && final_softcap == 0.0f &&
                         rope_local_inv_freq.empty()),
          arch + " takes none of Gemma's options");
  require(rope_local_inv_freq.empty() || static_cast<int>(rope_local_inv_freq.size()) == rope_dim() / 2,
          "rope_local_inv_freq must hold head_dim / 2 frequencies");
  for (float f : rope_local_inv_freq)
    require(std::isfinite(f) && f > 0.0f, "RoPE frequencies must be finite and > 0, got " + std::to_string(f));
  require(rope_dynamic_factor == 0.0f || rope_dim() > 2, "a dynamic RoPE needs more than 2 rotary dimensions");
  require(rope_dynamic_factor == 0.0f || (rope_original_max >= 1 && rope_original_max <= max_position),
          "a dynamic RoPE needs rope_original_max in [1, max_position], got " + L(rope_original_max));
  require(rope_long_inv_freq.empty() || (rope_long_inv_freq.size() == rope_inv_freq.size() && rope_original_max >= 1),
          "longrope needs as many long frequencies as short ones and rope_original_max >= 1");
  for (float f : rope_long_inv_freq)
    require(std::isfinite(f) && f > 0.0f, "RoPE frequencies must be finite and > 0, got " + std::to_string(f));
}

}  // namespace decodelab
