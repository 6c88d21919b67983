// The architecture description that the engine runs: filled in by Python from config.json or a
// llama2.c header, validated here before any buffer is sized from it.
#pragma once

#include <string>

namespace decodelab {

struct ModelConfig {
  std::string arch;          // "llama" or "gpt2"
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

  bool is_llama() const { return arch == "llama"; }
  bool is_gpt2() const { return arch == "gpt2"; }
  // Throws std::invalid_argument naming the first field out of range.
  void validate() const;
};

}  // namespace decodelab
