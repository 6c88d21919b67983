// Engine: a loaded model, its caches and the calls that run it (the decode loops: bind_decoding.cc).
#include <Python.h>
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <cmath>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <stdexcept>
#include <tuple>

#include "common.h"
#include "decodelab/decoding.h"
#include "decodelab/kv_cache.h"
#include "decodelab/transformer.h"
#include "decodelab/weights.h"
#include "without_gil.h"

namespace decodelab {

namespace {

using TensorTuple = std::tuple<std::string, std::string, std::vector<int64_t>, int, uint64_t, uint64_t>;

py::dict pool_stats(const std::shared_ptr<BlockPool>& p) {
  py::dict d;
  const auto s = p->stats();
  d["dtype"] = kv_type_name(p->dtype());
  d["block_size"] = p->block_size();
  d["block_bytes"] = p->block_bytes();
  d["blocks_allocated"] = s.blocks_allocated;
  d["blocks_in_use"] = s.blocks_in_use;
  d["blocks_shared"] = s.blocks_shared;
  d["bytes_allocated"] = static_cast<uint64_t>(s.blocks_allocated) * p->block_bytes();
  d["bytes_in_use"] = static_cast<uint64_t>(s.blocks_in_use) * p->block_bytes();
  d["bytes_referenced"] = static_cast<uint64_t>(s.references) * p->block_bytes();
  return d;
}

}  // namespace

void register_engine(py::module_& m) {
  py::class_<Transformer, std::shared_ptr<Transformer>>(m, "Engine")
      .def(py::init([](const ModelConfig& cfg, const std::vector<std::string>& files,
                       const std::vector<TensorTuple>& tensors, int n_threads, const std::string& weight_dtype,
                       bool zero_copy, int kv_block_size, bool bf16_matmul) {
             std::vector<TensorInfo> infos;
             infos.reserve(tensors.size());
             for (const auto& t : tensors) {
               TensorInfo i;
               std::tie(i.name, i.dtype, i.shape, i.file, i.offset, i.nbytes) = t;
               infos.push_back(std::move(i));
             }
             const WeightType wt = parse_weight_type(weight_dtype);
             auto store = std::make_shared<WeightStore>(files, infos);
             return without_gil([&] {
               return std::make_shared<Transformer>(cfg, store, n_threads, wt, zero_copy, kv_block_size, bf16_matmul);
             });
           }),
           py::arg("config"), py::arg("files"), py::arg("tensors"), py::arg("n_threads"),
           py::arg("weight_dtype") = "float32", py::arg("zero_copy") = false,
           py::arg("kv_block_size") = Transformer::kDefaultBlockSize, py::arg("bf16_matmul") = true)
      .def_property_readonly("bf16_matmul", &Transformer::bf16_matmul,
                             "Prompt matmuls round their inputs to bf16 (bf16 or int8 weights where bf16_matmul_native(); see load()).")
      .def_property_readonly("weight_dtype", [](const Transformer& e) { return weight_type_name(e.weight_type()); })
      .def_property_readonly("quantized_bytes", &Transformer::quantized_bytes,
                             "Bytes of the bf16 / int8 copies of the linear layers (0 in float32).")
      .def_property("n_threads", &Transformer::n_threads, &Transformer::set_n_threads)
      .def_property("auto_threads", &Transformer::auto_threads, &Transformer::set_auto_threads,
                    "Run each pass on n_threads less the cores other programs keep busy (see load()).")
      .def_property_readonly("threads_now", &Transformer::threads_now, "The threads the next pass runs on.")
      .def_property_readonly("config", &Transformer::config)
      .def_property_readonly(
          "mapped_bytes", [](const Transformer& e) { return e.weights().mapped_bytes(); },
          "Bytes of the memory-mapped weight files.")
      .def_property_readonly(
          "owned_bytes", &Transformer::owned_bytes,
          "Bytes of fp32 copies of weights: f16/bf16 or unaligned data, with fp32 weights the linear layers and "
          "head copied from the mapping (GPT-2 Conv1D weights transposed), and with packed layers the norm and "
          "bias vectors (read with pread); 0 when every weight is read in place.")
      .def(
          "new_cache",
          [](const Transformer& e, int capacity, const std::string& dtype, bool grow) {
            return e.new_cache(capacity, parse_kv_type(dtype), grow);
          },
          py::arg("capacity"), py::arg("dtype") = "float32", py::arg("grow") = false)
      .def_property_readonly("block_size", &Transformer::block_size, "Tokens per KV-cache block.")
      .def("check_context_window", &check_context_window, py::arg("prompt_tokens"), py::arg("max_new_tokens"),
           "ValueError unless a prompt of prompt_tokens and max_new_tokens new tokens fit the context window.")
      .def(
          "pool_stats",
          [](const Transformer& e) {
            py::list out;
            for (KVDType d : {KVDType::F32, KVDType::BF16, KVDType::I8})
              if (auto p = e.pool(d)) out.append(pool_stats(p));
            return out;
          },
          "Block-pool statistics per cache dtype; shared blocks are counted once in bytes_in_use.")
      .def(
          "forward",
          [](const Transformer& e, const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& tokens,
             KVCache& cache, bool all_logits) {
            std::vector<int32_t> ids = to_ids(tokens);
            KVCache::Use use(cache);
            Transformer::Activity busy(e);
            e.check_tokens(ids.data(), static_cast<int>(ids.size()), cache);
            const py::ssize_t rows = all_logits ? static_cast<py::ssize_t>(ids.size()) : 1;
            py::array_t<float> out({rows, static_cast<py::ssize_t>(e.config().vocab_size)});
            float* dst = out.mutable_data();
            without_gil([&] {
              e.forward(ids.data(), static_cast<int>(ids.size()), cache, dst, all_logits);
              return 0;
            });
            return out;
          },
          py::arg("tokens"), py::arg("cache"), py::arg("all_logits"),
          "Run tokens through the model, appending them to the cache; logits (rows, vocab).")
      .def(
          "forward_hidden",
          [](const Transformer& e, const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& tokens,
             KVCache& cache, bool attentions) {
            std::vector<int32_t> ids = to_ids(tokens);
            KVCache::Use use(cache);
            Transformer::Activity busy(e);
            e.check_tokens(ids.data(), static_cast<int>(ids.size()), cache);
            const auto T = static_cast<py::ssize_t>(ids.size());
            const auto L = static_cast<py::ssize_t>(e.config().n_layers);
            py::array_t<float> logits({T, static_cast<py::ssize_t>(e.config().vocab_size)});
            py::array_t<float> hidden({L + 1, T, static_cast<py::ssize_t>(e.config().dim)});
            py::array_t<float> probs(attentions ? std::vector<py::ssize_t>{L, e.config().n_heads, T, T}
                                                : std::vector<py::ssize_t>{0});
            float* lg = logits.mutable_data();
            float* hd = hidden.mutable_data();
            float* pr = attentions ? probs.mutable_data() : nullptr;
            without_gil([&] {
              e.forward_hidden(ids.data(), static_cast<int>(ids.size()), cache, lg, hd, pr);
              return 0;
            });
            if (attentions) return py::tuple(py::make_tuple(logits, hidden, probs));
            return py::tuple(py::make_tuple(logits, hidden));
          },
          py::arg("tokens"), py::arg("cache"), py::arg("attentions") = false,
          "forward() with all logits and the residual stream: (logits (T, vocab), hidden (layers + 1, T, dim));\n"
          "attentions=True (an empty cache) adds each layer's attention probabilities (layers, heads, T, T).")
      .def(
          "head",
          [](const Transformer& e, const py::array_t<float, py::array::c_style | py::array::forcecast>& hidden) {
            if (hidden.ndim() != 2 || hidden.shape(1) != e.config().dim || hidden.shape(0) < 1)
              throw std::invalid_argument("head takes rows of the residual stream, shape (rows >= 1, " +
                                          std::to_string(e.config().dim) + ")");
            for (py::ssize_t i = 0; i < hidden.size(); ++i)
              if (!std::isfinite(hidden.data()[i]))
                throw std::invalid_argument("head: the residual stream holds a value that is not finite");
            Transformer::Activity busy(e);
            const auto R = hidden.shape(0);
            py::array_t<float> out({R, static_cast<py::ssize_t>(e.config().vocab_size)});
            const float* src = hidden.data();
            float* dst = out.mutable_data();
            without_gil([&] {
              e.head(src, static_cast<int>(R), dst);
              return 0;
            });
            return out;
          },
          py::arg("hidden"), "The final norm and the output head on rows of the residual stream (a logit lens).")
      .def(
          "decode_batch",
          [](const Transformer& e, const std::vector<int32_t>& tokens, const std::vector<KVCache*>& caches,
             bool fixed_rows) {
            if (tokens.size() != caches.size())
              throw std::invalid_argument("decode_batch: " + std::to_string(tokens.size()) + " tokens for " +
                                          std::to_string(caches.size()) + " caches");
            std::vector<std::unique_ptr<KVCache::Use>> uses;
            for (size_t i = 0; i < caches.size(); ++i) {
              for (size_t j = 0; j < i; ++j)
                if (caches[j] == caches[i]) throw std::invalid_argument("decode_batch: a cache appears twice");
              uses.push_back(std::make_unique<KVCache::Use>(*caches[i]));
            }
            Transformer::Activity busy(e);
            py::array_t<float> out({static_cast<py::ssize_t>(tokens.size()),
                                    static_cast<py::ssize_t>(e.config().vocab_size)});
            float* dst = out.mutable_data();
            without_gil([&] {
              e.decode_batch(tokens.data(), static_cast<int>(tokens.size()), caches.data(), dst, fixed_rows);
              return 0;
            });
            return out;
          },
          py::arg("tokens"), py::arg("caches"), py::arg("fixed_rows") = false,
          "fixed_rows: each row's logits the same bits at any batch size (the batch scheduler's arithmetic).");
}

}  // namespace decodelab
