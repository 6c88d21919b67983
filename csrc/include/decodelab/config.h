// The architecture description that the engine runs: filled in by Python from config.json or a
// llama2.c header, validated here before any buffer is sized from it.
#pragma once

#include <string>
#include <vector>

namespace decodelab {

struct ModelConfig {
  std::string arch;          // "llama", "gpt2" or "gpt_neox"
  int n_layers = 0;
  int dim = 0;               // hidden size
  int n_heads = 0;
  int n_kv_heads = 0;        // grouped-query attention: n_heads % n_kv_heads == 0
  int head_dim = 0;
  int hidden_dim = 0;        // MLP inner size
  int vocab_size = 0;
  int max_position = 0;      // context window
  float norm_eps = 1e-5f;
  double rope_theta = 10000.0;
  bool rope_interleaved = false;  // llama2.c / Meta order: rotate pairs (2i, 2i+1)
  bool tie_word_embeddings = false;
  // Llama-family variants (Qwen2, Qwen3, Mistral, Llama 3), as transformers defines them:
  bool qkv_bias = false;         // q, k and v projections with biases (Qwen2, attention_bias)
  bool o_bias = false;           // the output projection too (Llama's attention_bias)
  bool qk_norm = false;          // each query and key head RMS-normalised before RoPE (Qwen3)
  std::vector<int> sliding_window;  // per layer: a query sees this many latest keys (0: all); empty: all
  std::vector<float> rope_inv_freq;  // head_dim / 2 RoPE frequencies (scaled RoPE); empty: from rope_theta
  float rope_attention_factor = 1.0f;  // cos and sin scaled by it (YaRN)
  // Dynamic NTK RoPE: its factor (0: off). A call reaching past max_position takes frequencies
  // from a base stretched for its own length, as transformers recomputes them per forward pass.
  float rope_dynamic_factor = 0.0f;
  int rope_original_max = 0;  // dynamic NTK, longrope: the length past which a call's frequencies change
  std::vector<float> rope_long_inv_freq;  // longrope: the frequencies of calls past rope_original_max
  // GPT-NeoX (Pythia): RoPE on the first rotary_dim values of each head (0: all of them), and the
  // parallel residual x + attn(ln1(x)) + mlp(ln2(x)) (false: one after the other).
  int rotary_dim = 0;
  bool parallel_residual = true;
  bool qkv_per_head = true;  // GPT-NeoX: the fused rows go [q_h | k_h | v_h] per head (Hugging Face),
                             // else [q | k | v] (llama.cpp's GGUF)
  // Gemma 2 and 3 (Llama family): embeddings times embed_scale (0: none); RMSNorm weights applied
  // as 1 + w; sandwich norms (the attention's and the MLP's outputs normalised too, the MLP's input
  // by pre_feedforward_layernorm); the MLP gate through tanh-GELU instead of SiLU; scores scaled by
  // attn_scale (0: 1/sqrt(head_dim)) and soft-capped at attn_softcap, the logits at final_softcap
  // (0: none); sliding layers' RoPE frequencies from rope_local_inv_freq (empty: the global ones).
  float embed_scale = 0.0f;
  bool norm_plus_one = false;
  bool sandwich_norms = false;
  bool gelu_gate = false;
  float attn_scale = 0.0f;
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  std::vector<float> rope_local_inv_freq;

  bool is_llama() const { return arch == "llama"; }
  bool is_gpt2() const { return arch == "gpt2"; }
  bool is_neox() const { return arch == "gpt_neox"; }
  bool has_rope() const { return is_llama() || is_neox(); }
  int rope_dim() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  // Throws std::invalid_argument naming the first field out of range.
  void validate() const;
};

}  // namespace decodelab
