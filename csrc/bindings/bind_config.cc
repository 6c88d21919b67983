// ModelConfig: the architecture the engine runs, filled from Python's config readers.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "decodelab/config.h"

namespace py = pybind11;

namespace decodelab {

void register_config(py::module_& m) {
  py::class_<ModelConfig>(m, "ModelConfig")
      .def(py::init<>())
      .def_readwrite("arch", &ModelConfig::arch)
      .def_readwrite("n_layers", &ModelConfig::n_layers)
      .def_readwrite("dim", &ModelConfig::dim)
      .def_readwrite("n_heads", &ModelConfig::n_heads)
      .def_readwrite("n_kv_heads", &ModelConfig::n_kv_heads)
      .def_readwrite("head_dim", &ModelConfig::head_dim)
      .def_readwrite("hidden_dim", &ModelConfig::hidden_dim)
      .def_readwrite("vocab_size", &ModelConfig::vocab_size)
      .def_readwrite("max_position", &ModelConfig::max_position)
      .def_readwrite("norm_eps", &ModelConfig::norm_eps)
      .def_readwrite("rope_theta", &ModelConfig::rope_theta)
      .def_readwrite("rope_interleaved", &ModelConfig::rope_interleaved)
      .def_readwrite("tie_word_embeddings", &ModelConfig::tie_word_embeddings)
      .def_readwrite("qkv_bias", &ModelConfig::qkv_bias)
      .def_readwrite("o_bias", &ModelConfig::o_bias)
      .def_readwrite("qk_norm", &ModelConfig::qk_norm)
      .def_readwrite("sliding_window", &ModelConfig::sliding_window)
      .def_readwrite("rope_inv_freq", &ModelConfig::rope_inv_freq)
      .def_readwrite("rope_attention_factor", &ModelConfig::rope_attention_factor)
      .def_readwrite("rope_dynamic_factor", &ModelConfig::rope_dynamic_factor)
      .def_readwrite("rope_original_max", &ModelConfig::rope_original_max)
      .def_readwrite("rope_long_inv_freq", &ModelConfig::rope_long_inv_freq)
      .def_readwrite("rotary_dim", &ModelConfig::rotary_dim)
      .def_readwrite("parallel_residual", &ModelConfig::parallel_residual)
      .def_readwrite("qkv_per_head", &ModelConfig::qkv_per_head)
      .def_readwrite("embed_scale", &ModelConfig::embed_scale)
      .def_readwrite("norm_plus_one", &ModelConfig::norm_plus_one)
      .def_readwrite("sandwich_norms", &ModelConfig::sandwich_norms)
      .def_readwrite("gelu_gate", &ModelConfig::gelu_gate)
      .def_readwrite("attn_scale", &ModelConfig::attn_scale)
      .def_readwrite("attn_softcap", &ModelConfig::attn_softcap)
      .def_readwrite("final_softcap", &ModelConfig::final_softcap)
      .def_readwrite("rope_local_inv_freq", &ModelConfig::rope_local_inv_freq)
      .def("validate", &ModelConfig::validate);
}

}  // namespace decodelab
