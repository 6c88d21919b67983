#include <Python.h>
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <stdexcept>

#include "decodelab/decoding.h"
#include "decodelab/device.h"
#include "decodelab/kv_cache.h"
#include "decodelab/transformer.h"
#include "decodelab/weights.h"

namespace py = pybind11;

namespace decodelab {

namespace {

using TensorTuple = std::tuple<std::string, std::string, std::vector<int64_t>, int, uint64_t, uint64_t>;

std::vector<int32_t> to_ids(const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& a) {
  if (a.ndim() != 1) throw std::invalid_argument("token ids must be 1-D, got " + std::to_string(a.ndim()) + " dimensions");
  std::vector<int32_t> ids(a.size());
  auto r = a.unchecked<1>();
  for (py::ssize_t i = 0; i < a.size(); ++i) {
    if (r(i) < 0 || r(i) > INT32_MAX)
      throw std::invalid_argument("token id " + std::to_string(r(i)) + " at index " + std::to_string(i) +
                                  " is negative or too large");
    ids[i] = static_cast<int32_t>(r(i));
  }
  return ids;
}

// Ctrl-C in a notebook: check for a pending signal once per decode step; the KeyboardInterrupt
// propagates as a Python exception and the model stays usable.
void poll_signals() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// Read-only numpy view of the first `length` positions of a (n_kv_heads, capacity, head_dim)
// buffer, kept alive by the cache object.
py::array cache_view(py::object owner, const float* base, const KVCache& c) {
  const py::ssize_t f = sizeof(float);
  py::array a(py::dtype::of<float>(),
              {static_cast<py::ssize_t>(c.n_kv_heads()), static_cast<py::ssize_t>(c.length()),
               static_cast<py::ssize_t>(c.head_dim())},
              {static_cast<py::ssize_t>(c.capacity()) * c.head_dim() * f, static_cast<py::ssize_t>(c.head_dim()) * f, f},
              base, owner);
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

int checked_layer(const KVCache& c, int layer) {
  if (layer < 0 || layer >= c.n_layers())
    throw py::index_error("layer " + std::to_string(layer) + " is out of range [0, " + std::to_string(c.n_layers()) + ")");
  return layer;
}

}  // namespace

void register_device(py::module_& m) {
  m.def("built_with_cuda", &built_with_cuda, "True when this build has the CUDA path.");
  m.def("cuda_device_count", &cuda_device_count, "Visible CUDA devices; RuntimeError in a build without CUDA.");
}

void register_model(py::module_& m) {
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
      .def("validate", &ModelConfig::validate);

  py::class_<KVCache, std::shared_ptr<KVCache>>(m, "KVCache")
      .def_property_readonly("length", &KVCache::length)
      .def("__len__", &KVCache::length)
      .def_property_readonly("capacity", &KVCache::capacity)
      .def_property_readonly("nbytes", &KVCache::nbytes, "Bytes allocated for keys and values.")
      .def_property_readonly("n_layers", &KVCache::n_layers)
      .def_property_readonly("n_kv_heads", &KVCache::n_kv_heads)
      .def_property_readonly("head_dim", &KVCache::head_dim)
      .def_property_readonly("token_ids", [](const KVCache& c) { return c.token_ids(); })
      .def("clear", &KVCache::clear)
      .def(
          "keys",
          [](py::object self, int layer) {
            const KVCache& c = self.cast<const KVCache&>();
            return cache_view(self, c.k(checked_layer(c, layer)), c);
          },
          py::arg("layer"), "Read-only view (n_kv_heads, len, head_dim) of one layer's keys.")
      .def(
          "values",
          [](py::object self, int layer) {
            const KVCache& c = self.cast<const KVCache&>();
            return cache_view(self, c.v(checked_layer(c, layer)), c);
          },
          py::arg("layer"), "Read-only view (n_kv_heads, len, head_dim) of one layer's values.");

  py::class_<Transformer, std::shared_ptr<Transformer>>(m, "Engine")
      .def(py::init([](const ModelConfig& cfg, const std::vector<std::string>& files,
                       const std::vector<TensorTuple>& tensors, int n_threads) {
             std::vector<TensorInfo> infos;
             infos.reserve(tensors.size());
             for (const auto& t : tensors) {
               TensorInfo i;
               std::tie(i.name, i.dtype, i.shape, i.file, i.offset, i.nbytes) = t;
               infos.push_back(std::move(i));
             }
             auto store = std::make_shared<WeightStore>(files, infos);
             return std::make_shared<Transformer>(cfg, store, n_threads);
           }),
           py::arg("config"), py::arg("files"), py::arg("tensors"), py::arg("n_threads"))
      .def_property("n_threads", &Transformer::n_threads, &Transformer::set_n_threads)
      .def_property_readonly("config", &Transformer::config)
      .def_property_readonly(
          "mapped_bytes", [](const Transformer& e) { return e.weights().mapped_bytes(); },
          "Bytes of the memory-mapped weight files.")
      .def_property_readonly(
          "owned_bytes", [](const Transformer& e) { return e.weights().owned_bytes(); },
          "Bytes of weights converted into owned fp32 buffers (f16/bf16 or unaligned data); 0 when every "
          "weight is used in place from the mapping.")
      .def(
          "new_cache",
          [](const Transformer& e, int capacity) { return std::make_shared<KVCache>(e.config(), capacity); },
          py::arg("capacity"))
      .def(
          "forward",
          [](const Transformer& e, const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& tokens,
             KVCache& cache, bool all_logits) {
            std::vector<int32_t> ids = to_ids(tokens);
            e.check_tokens(ids.data(), static_cast<int>(ids.size()), cache);
            const py::ssize_t rows = all_logits ? static_cast<py::ssize_t>(ids.size()) : 1;
            py::array_t<float> out({rows, static_cast<py::ssize_t>(e.config().vocab_size)});
            float* dst = out.mutable_data();
            {
              py::gil_scoped_release nogil;
              e.forward(ids.data(), static_cast<int>(ids.size()), cache, dst, all_logits);
            }
            return out;
          },
          py::arg("tokens"), py::arg("cache"), py::arg("all_logits"),
          "Run tokens through the model, appending them to the cache; logits (rows, vocab).")
      .def(
          "generate_greedy",
          [](const Transformer& e, const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& prompt,
             int max_new_tokens, const std::vector<int32_t>& eos_ids, KVCache& cache) {
            std::vector<int32_t> ids = to_ids(prompt);
            e.check_tokens(ids.data(), static_cast<int>(ids.size()), cache);
            GenerateResult r;
            {
              py::gil_scoped_release nogil;
              r = generate_greedy(e, cache, ids, max_new_tokens, eos_ids, poll_signals);
            }
            py::dict d;
            d["token_ids"] = r.token_ids;
            d["finish_reason"] = r.finish_reason;
            d["prefill_seconds"] = r.prefill_seconds;
            d["decode_seconds"] = r.decode_seconds;
            return d;
          },
          py::arg("prompt"), py::arg("max_new_tokens"), py::arg("eos_ids"), py::arg("cache"));
}

}  // namespace decodelab
