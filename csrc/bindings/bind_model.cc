#include <Python.h>
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <stdexcept>

#include <cstdint>
#include <cstring>

#include "decodelab/aligned.h"
#include "decodelab/bf16.h"
#include "decodelab/decoding.h"
#include "decodelab/device.h"
#include "decodelab/kernels.h"
#include "decodelab/kv_cache.h"
#include "decodelab/transformer.h"
#include "decodelab/weights.h"
#include "without_gil.h"

namespace py = pybind11;

namespace decodelab {

py::dict generate_result_dict(const GenerateResult& r);
py::dict beam_result_dict(const BeamResult& r);

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

void set_read_only(py::array& a) {
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
}

const char* dtype_name(KVDType d) {
  return d == KVDType::F32 ? "float32" : d == KVDType::BF16 ? "bfloat16" : "int8";
}

KVDType parse_kv_dtype(const std::string& s) {
  if (s == "float32" || s == "fp32") return KVDType::F32;
  if (s == "bfloat16" || s == "bf16") return KVDType::BF16;
  if (s == "int8") return KVDType::I8;
  throw std::invalid_argument("cache dtype must be 'float32', 'bfloat16' or 'int8', got '" + s + "'");
}

WeightType parse_weight_dtype(const std::string& s) {
  if (s == "float32") return WeightType::F32;
  if (s == "bfloat16") return WeightType::BF16;
  if (s == "int8") return WeightType::I8;
  if (s == "w8a8") return WeightType::I8A8;
  throw std::invalid_argument("dtype must be 'float32', 'bfloat16', 'int8' or 'w8a8', got '" + s + "'");
}

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

// A layer over a numpy (out, in) fp32 matrix, stored as `type` in `store` (test bindings).
Linear test_layer(const FloatArray& w, WeightType type, QuantizedWeights& store) {
  Linear L;
  L.w = w.data();
  L.in = static_cast<int>(w.shape(1));
  L.out = static_cast<int>(w.shape(0));
  quantize_linear(L, type, store);
  return L;
}

DecodeOptions decode_options(int max_new_tokens, const std::vector<int32_t>& eos_ids, uint64_t sequence, int logprobs,
                             bool logprobs_processed, int trace, int trace_top) {
  DecodeOptions o;
  o.max_new_tokens = max_new_tokens;
  o.eos_ids = eos_ids;
  o.sequence = sequence;
  o.logprobs = logprobs;
  o.logprobs_processed = logprobs_processed;
  o.trace = trace;
  o.trace_top = trace_top;
  return o;
}

// Indices arrive as int64 so that a Python int past int range is reported as out of range,
// not as pybind11's "incompatible function arguments".
int checked_layer(const KVCache& c, int64_t layer) {
  const int n = c.pool().n_layers();
  if (layer < 0 || layer >= n)
    throw py::index_error("layer " + std::to_string(layer) + " is out of range [0, " + std::to_string(n) + ")");
  return static_cast<int>(layer);
}

// Keys (kind 0) or values (kind 1) of one layer as (n_kv_heads, len, head_dim) float32: a
// read-only view when the tokens sit in one fp32 block, otherwise a gathered copy.
py::array layer_kv(py::object self, int64_t layer_index, int kind) {
  const KVCache& c = self.cast<const KVCache&>();
  const BlockPool& p = c.pool();
  const int layer = checked_layer(c, layer_index);
  const int nkv = p.n_kv_heads(), hd = p.head_dim(), bs = p.block_size(), len = c.length();
  const auto& table = c.block_table();
  const py::ssize_t f = sizeof(float);
  if (p.dtype() == KVDType::F32 && table.size() == 1) {
    const float* base = reinterpret_cast<const float*>(p.data(table[0])) + p.slab(layer, kind, 0);
    py::array a(py::dtype::of<float>(), {static_cast<py::ssize_t>(nkv), static_cast<py::ssize_t>(len),
                                          static_cast<py::ssize_t>(hd)},
                {static_cast<py::ssize_t>(bs) * hd * f, static_cast<py::ssize_t>(hd) * f, f}, base, self);
    set_read_only(a);
    return a;
  }
  py::array_t<float> out({static_cast<py::ssize_t>(nkv), static_cast<py::ssize_t>(len), static_cast<py::ssize_t>(hd)});
  float* dst = out.mutable_data();
  for (int kh = 0; kh < nkv; ++kh)
    for (int pos = 0; pos < len; ++pos) {
      const size_t off = p.slab(layer, kind, kh) + static_cast<size_t>(pos % bs) * hd;
      float* d = dst + (static_cast<size_t>(kh) * len + pos) * hd;
      const uint8_t* blk = p.data(table[pos / bs]);
      if (p.dtype() == KVDType::F32) {
        std::memcpy(d, reinterpret_cast<const float*>(blk) + off, hd * sizeof(float));
      } else if (p.dtype() == KVDType::I8) {
        const int8_t* s = reinterpret_cast<const int8_t*>(blk) + off;
        const float scale = p.row_scales(blk, layer, kind, kh)[pos % bs];
        for (int i = 0; i < hd; ++i) d[i] = scale * static_cast<float>(s[i]);
      } else {
        const uint16_t* s = reinterpret_cast<const uint16_t*>(blk) + off;
        for (int i = 0; i < hd; ++i) d[i] = bf16_to_f32(s[i]);
      }
    }
  return std::move(out);
}

// The storage of a sequence's i-th block, or IndexError.
const uint8_t* block_data(const KVCache& c, int64_t i) {
  const int n = static_cast<int>(c.block_table().size());
  if (i < 0 || i >= n)
    throw py::index_error("block " + std::to_string(i) + " is out of range [0, " + std::to_string(n) + ")");
  return c.pool().data(c.block_table()[i]);
}

py::dict pool_stats(const std::shared_ptr<BlockPool>& p) {
  py::dict d;
  const auto s = p->stats();
  d["dtype"] = dtype_name(p->dtype());
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

// The test bindings' y = x w^T through the engine's kernels: x (T, in), w (out, in) given in fp32
// and stored as dtype once, then `repeats` products on that one copy into y (T, out), the seconds
// each took into `seconds` when it is not null (the conversion is not timed).
void test_linear(const FloatArray& x, const FloatArray& w, const std::string& dtype, bool bf16_matmul, int repeats,
                 float* y, double* seconds) {
  const WeightType type = parse_weight_dtype(dtype);
  QuantizedWeights store;
  Linear L = test_layer(w, type, store);
  L.bf16_activations = bf16_matmul && bf16_matmul_applies(type);
  const int T = static_cast<int>(x.shape(0));
  py::gil_scoped_release release;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    linear(x.data(), T, L, y);
    if (seconds) seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
}

// x (T, in) and w (out, in) with T, out >= 1, and repeats >= 1, or ValueError naming them.
void check_linear_args(const FloatArray& x, const FloatArray& w, int repeats) {
  if (repeats < 1) throw std::invalid_argument("repeats must be >= 1, got " + std::to_string(repeats));
  if (x.ndim() != 2 || w.ndim() != 2)
    throw std::invalid_argument("x must be (T, in) and w (out, in), got " + std::to_string(x.ndim()) + "-D and " +
                                std::to_string(w.ndim()) + "-D");
  if (x.shape(1) != w.shape(1) || x.shape(0) < 1 || w.shape(0) < 1)
    throw std::invalid_argument("x (" + std::to_string(x.shape(0)) + ", " + std::to_string(x.shape(1)) +
                                ") does not fit w (" + std::to_string(w.shape(0)) + ", " + std::to_string(w.shape(1)) +
                                ")");
}

}  // namespace

void register_device(py::module_& m) {
  m.def("read_bandwidth", &read_bandwidth, py::arg("nbytes"), py::arg("n_threads"), py::arg("repeats") = 5,
        py::call_guard<py::gil_scoped_release>(),
        "Best read bandwidth in bytes/s summing an nbytes buffer (in huge pages where the system allows): the "
        "memory bound of a decode step.");
  m.attr("default_kv_block_size") = Transformer::kDefaultBlockSize;
  m.attr("max_kv_block_size") = Transformer::kMaxBlockSize;
  m.def(
      "gemm_min_rows", [](const std::string& dtype) { return gemm_min_rows(parse_weight_dtype(dtype)); },
      py::arg("dtype"),
      "The fewest rows for which a layer of this weight dtype runs the oneDNN matmul instead of the "
      "kernels that read the weights once per call (int8: only with bf16_matmul on a CPU where "
      "bf16_matmul_native() is true, bfloat16 with bf16_matmul there too; w8a8: never, the largest int).");
  m.def("bf16_matmul_native", &bf16_matmul_native,
        "Whether this CPU multiplies bf16 in hardware (AVX512_BF16): only then do bfloat16 and int8 layers "
        "take the bf16 matmul from gemm_min_rows rows with bf16_matmul (without it oneDNN emulates the "
        "products, slower than the fp32 matmul).");
  m.def(
      "linear",
      [](const FloatArray& x, const FloatArray& w, const std::string& dtype, int repeats, bool bf16_matmul) {
        check_linear_args(x, w, repeats);
        py::array_t<float> y({x.shape(0), w.shape(0)});
        test_linear(x, w, dtype, bf16_matmul, repeats, y.mutable_data(), nullptr);
        return y;
      },
      py::arg("x"), py::arg("w"), py::arg("dtype") = "float32", py::arg("repeats") = 1, py::arg("bf16_matmul") = false,
      "y = x w^T through the engine's kernels, w given in fp32 and stored as dtype first (for tests);\n"
      "repeats > 1 runs the product that many times on the one stored copy, as linear_seconds does.\n"
      "bf16_matmul: a bfloat16 or int8 layer, where bf16_matmul_native(), rounds x to bf16 on the\n"
      "matmul path, as load(bf16_matmul=True).");
  m.def(
      "linear_seconds",
      [](const FloatArray& x, const FloatArray& w, const std::string& dtype, int repeats, bool bf16_matmul) {
        check_linear_args(x, w, repeats);
        std::vector<float> y(static_cast<size_t>(x.shape(0)) * w.shape(0));
        py::array_t<double> seconds(repeats);
        test_linear(x, w, dtype, bf16_matmul, repeats, y.data(), seconds.mutable_data());
        return seconds;
      },
      py::arg("x"), py::arg("w"), py::arg("dtype") = "float32", py::arg("repeats") = 1, py::arg("bf16_matmul") = false,
      "Seconds each of `repeats` products y = x w^T took on one stored copy of w as dtype (the\n"
      "conversion is not timed): the kernel alone, for benchmarks.");
  m.def(
      "attention_seconds",
      [](int n_layers, int n_heads, int n_kv_heads, int head_dim, int n_ctx, const std::string& kv_dtype, int repeats,
         int threads) {
        auto at_least_1 = [](const char* name, int v) {
          if (v < 1) throw std::invalid_argument(std::string(name) + " must be >= 1, got " + std::to_string(v));
        };
        at_least_1("n_layers", n_layers);
        at_least_1("n_heads", n_heads);
        at_least_1("n_kv_heads", n_kv_heads);
        at_least_1("head_dim", head_dim);
        at_least_1("n_ctx", n_ctx);
        at_least_1("repeats", repeats);
        at_least_1("threads", threads);
        if (n_heads % n_kv_heads)
          throw std::invalid_argument("n_kv_heads must divide n_heads = " + std::to_string(n_heads) + ", got " +
                                      std::to_string(n_kv_heads));
        const KVDType dtype = parse_kv_dtype(kv_dtype);
        const double cache_bytes = 2.0 * n_layers * n_kv_heads * head_dim * static_cast<double>(n_ctx) *
                                   (dtype == KVDType::F32 ? 4 : dtype == KVDType::BF16 ? 2 : 1);
        constexpr double kMaxBytes = 4.0 * (1 << 30);
        if (cache_bytes > kMaxBytes)
          throw std::invalid_argument("the cache would take " + std::to_string(cache_bytes / (1 << 20)) +
                                      " MiB, more than the limit of 4096 MiB");
        ModelConfig cfg;
        cfg.arch = "llama";
        cfg.n_layers = n_layers;
        cfg.n_heads = n_heads;
        cfg.n_kv_heads = n_kv_heads;
        cfg.head_dim = head_dim;
        cfg.dim = n_heads * head_dim;
        BlockPool pool(cfg, nullptr, dtype, Transformer::kDefaultBlockSize);
        const int bs = Transformer::kDefaultBlockSize, n_blocks = (n_ctx + bs - 1) / bs;
        std::vector<int> table(n_blocks);
        uint32_t state = 12345;  // small pseudo-random keys and values, as a model's would be
        auto next_value = [&state]() {
          state = state * 1664525u + 1013904223u;
          return static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
        };
        for (int b = 0; b < n_blocks; ++b) {
          table[b] = pool.alloc();
          const size_t n = pool.block_elems();
          if (dtype == KVDType::F32) {
            float* f = reinterpret_cast<float*>(pool.data(table[b]));
            for (size_t i = 0; i < n; ++i) f[i] = next_value();
          } else if (dtype == KVDType::I8) {  // values in [-127, 127], each row's scale 1 / 254
            int8_t* v = reinterpret_cast<int8_t*>(pool.data(table[b]));
            for (size_t i = 0; i < n; ++i) v[i] = static_cast<int8_t>(std::lround(254.0f * next_value()));
            float* sc = reinterpret_cast<float*>(pool.data(table[b]) + pool.scales_offset());
            std::fill(sc, sc + n / head_dim, 1.0f / 254.0f);
          } else {
            uint16_t* u = reinterpret_cast<uint16_t*>(pool.data(table[b]));
            for (size_t i = 0; i < n; ++i) u[i] = f32_to_bf16(next_value());
          }
        }
        const int stride = aligned_stride(n_ctx);
        std::vector<float> q(static_cast<size_t>(n_heads) * head_dim), out(q.size());
        for (float& v : q) v = next_value();
        std::vector<float> scratch(static_cast<size_t>(threads) * n_heads * stride), gather(1);
        // Between steps, a read of 128 MiB on the same threads (more than the last-level cache, here
        // about 48 MiB in effect) pushes the cache blocks out, as a decode step's weights do: each
        // step reads them from memory. A write sweep (memset) instead left dirty lines whose write-back
        // the timed step paid for, and a sweep on the calling thread alone let the team's other
        // threads fall asleep before the step.
        std::vector<float, HugePageAllocator<float>> flush(size_t(32) << 20, 1.0f);
        volatile float sink = 0.0f;
        py::array_t<double> seconds(repeats);
        double* sec = seconds.mutable_data();
        {
          py::gil_scoped_release release;
          for (int r = 0; r < repeats; ++r) {
            sink = sink + read_pass(flush.data(), flush.size(), threads);
            const auto t0 = std::chrono::steady_clock::now();
            for (int layer = 0; layer < n_layers; ++layer)
              attention_paged(q.data(), pool, table.data(), layer, 1, n_ctx - 1, n_heads, out.data(), scratch.data(),
                              stride, gather.data(), threads);
            sec[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          }
        }
        for (int b = 0; b < n_blocks; ++b) pool.release(table[b]);
        return seconds;
      },
      py::arg("n_layers"), py::arg("n_heads"), py::arg("n_kv_heads"), py::arg("head_dim"), py::arg("n_ctx"),
      py::arg("kv_dtype") = "float32", py::arg("repeats") = 10, py::arg("threads") = 1,
      "Seconds each of `repeats` decode steps' attention took (one query at position n_ctx - 1 over\n"
      "every layer of a paged cache of n_ctx positions, read from memory): the kernel alone, for\n"
      "benchmarks.");
  m.def(
      "linear_many",
      [](const FloatArray& x, const std::vector<FloatArray>& ws, const std::string& dtype) {
        if (x.ndim() != 2 || x.shape(0) < 1)
          throw std::invalid_argument("x must be (T, in) with T >= 1, got " + std::to_string(x.ndim()) + "-D");
        if (ws.empty() || ws.size() > 4)
          throw std::invalid_argument("linear_many takes 1 to 4 weights, got " + std::to_string(ws.size()));
        const WeightType type = parse_weight_dtype(dtype);
        const int T = static_cast<int>(x.shape(0));
        std::vector<Linear> layers(ws.size());
        std::vector<QuantizedWeights> stores(ws.size());
        std::vector<py::array_t<float>> ys;
        std::vector<const Linear*> lp;
        std::vector<float*> yp;
        for (size_t i = 0; i < ws.size(); ++i) {
          if (ws[i].ndim() != 2 || ws[i].shape(1) != x.shape(1) || ws[i].shape(0) < 1)
            throw std::invalid_argument("weight " + std::to_string(i) + " does not fit x (T, " + std::to_string(x.shape(1)) + ")");
          layers[i] = test_layer(ws[i], type, stores[i]);
          ys.emplace_back(std::vector<py::ssize_t>{T, ws[i].shape(0)});
          lp.push_back(&layers[i]);
          yp.push_back(ys.back().mutable_data());
        }
        {
          py::gil_scoped_release release;
          linear_many(x.data(), T, lp.data(), yp.data(), static_cast<int>(lp.size()));
        }
        return ys;
      },
      py::arg("x"), py::arg("ws"), py::arg("dtype") = "float32",
      "[x w^T for w in ws] through one fused call of the engine's kernels (for tests).");
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

  py::class_<KVCache, std::shared_ptr<KVCache>>(m, "KVCache", R"doc(
The key/value cache of one sequence, stored in fixed-size blocks of the model's block pool.

Per token it costs 2 (K and V) x n_layers x n_kv_heads x head_dim x bytes per element; nbytes
counts the blocks this sequence references, shared ones included. fork() shares every block;
the first write into a shared block copies that block (copy-on-write).
)doc")
      .def_property_readonly("length", &KVCache::length)
      .def("__len__", &KVCache::length)
      .def_property_readonly("capacity", &KVCache::capacity, "Most tokens this cache may hold.")
      .def_property_readonly("grows", &KVCache::grows, "Whether the capacity doubles (up to the context window) when exceeded.")
      .def_property_readonly("nbytes", &KVCache::nbytes, "Exact bytes of the K/V blocks this sequence references.")
      .def_property_readonly("dtype", [](const KVCache& c) { return dtype_name(c.pool().dtype()); })
      .def_property_readonly("n_layers", [](const KVCache& c) { return c.pool().n_layers(); })
      .def_property_readonly("n_kv_heads", [](const KVCache& c) { return c.pool().n_kv_heads(); })
      .def_property_readonly("head_dim", [](const KVCache& c) { return c.pool().head_dim(); })
      .def_property_readonly("block_size", [](const KVCache& c) { return c.pool().block_size(); })
      .def_property_readonly("block_table", [](const KVCache& c) { KVCache::Use u(c); return c.block_table(); },
                             "Pool block ids; position p lives in block_table[p // block_size].")
      .def_property_readonly("shared_blocks", [](const KVCache& c) { KVCache::Use u(c); return c.shared_blocks(); },
                             "Blocks also referenced by another sequence.")
      .def_property_readonly("token_ids", [](const KVCache& c) { KVCache::Use u(c); return c.token_ids(); })
      .def("fork", [](const KVCache& c) { KVCache::Use u(c); return c.fork(); },
           "A new cache sharing these tokens copy-on-write; copies no token.")
      .def(
          "truncate",
          [](KVCache& c, int64_t n) {
            KVCache::Use u(c);
            if (n < 0 || n > c.length())
              throw std::invalid_argument("truncate(" + std::to_string(n) + ") is outside [0, " +
                                          std::to_string(c.length()) + "], the tokens this cache holds");
            c.truncate(static_cast<int>(n));
          },
          py::arg("n"),
           "Keep the first n tokens.")
      .def("clear", [](KVCache& c) { KVCache::Use u(c); c.clear(); })
      .def(
          "keys", [](py::object self, int64_t layer) {
            KVCache::Use u(self.cast<const KVCache&>());
            return layer_kv(self, layer, 0);
          }, py::arg("layer"),
          "(n_kv_heads, len, head_dim) float32: a read-only view when the tokens sit in one fp32 block, "
          "otherwise a gathered copy (bfloat16 widened; int8 times each row's scale).")
      .def(
          "values", [](py::object self, int64_t layer) {
            KVCache::Use u(self.cast<const KVCache&>());
            return layer_kv(self, layer, 1);
          }, py::arg("layer"),
          "Like keys(), for values.")
      .def(
          "block",
          [](py::object self, int64_t i) {
            const KVCache& c = self.cast<const KVCache&>();
            KVCache::Use u(c);
            const BlockPool& p = c.pool();
            const uint8_t* blk = block_data(c, i);
            const py::ssize_t e = static_cast<py::ssize_t>(p.elem_bytes());
            const py::ssize_t L = p.n_layers(), kv = p.n_kv_heads(), bs = p.block_size(), hd = p.head_dim();
            py::dtype dt = p.dtype() == KVDType::F32    ? py::dtype::of<float>()
                           : p.dtype() == KVDType::BF16 ? py::dtype::of<uint16_t>()
                                                        : py::dtype::of<int8_t>();
            py::array a(dt, {L, py::ssize_t(2), kv, bs, hd}, {2 * kv * bs * hd * e, kv * bs * hd * e, bs * hd * e, hd * e, e},
                        blk, self);
            set_read_only(a);
            return a;
          },
          py::arg("i"),
          "Zero-copy read-only view of this sequence's i-th block, (n_layers, 2 [K, V], n_kv_heads, block_size, "
          "head_dim); float32, uint16 holding bfloat16 bits, or int8 (each row's scale in block_scales(i)). Rows "
          "past len(cache) are unused.")
      .def(
          "block_scales",
          [](py::object self, int64_t i) {
            const KVCache& c = self.cast<const KVCache&>();
            KVCache::Use u(c);
            const BlockPool& p = c.pool();
            if (p.dtype() != KVDType::I8)
              throw std::invalid_argument(std::string("block_scales() is for int8 caches; this one is ") +
                                          dtype_name(p.dtype()));
            const uint8_t* blk = block_data(c, i);
            const py::ssize_t f = sizeof(float);
            const py::ssize_t L = p.n_layers(), kv = p.n_kv_heads(), bs = p.block_size();
            py::array a(py::dtype::of<float>(), {L, py::ssize_t(2), kv, bs}, {2 * kv * bs * f, kv * bs * f, bs * f, f},
                        blk + p.scales_offset(), self);
            set_read_only(a);
            return a;
          },
          py::arg("i"),
          "Zero-copy read-only view of the row scales of an int8 cache's i-th block, (n_layers, 2 [K, V], "
          "n_kv_heads, block_size) float32: row r of block(i) holds values / scale, rounded.")
      .def("__repr__", [](const KVCache& c) {
        std::unique_ptr<KVCache::Use> u;
        try {
          u = std::make_unique<KVCache::Use>(c);
        } catch (const std::invalid_argument&) {
          return std::string("KVCache(in use by a call on another thread)");
        }
        const BlockPool& p = c.pool();
        return "KVCache(" + std::to_string(c.length()) + "/" + std::to_string(c.capacity()) + " tokens, " +
               std::to_string(p.n_layers()) + " layers x " + std::to_string(p.n_kv_heads()) + " kv heads x head_dim " +
               std::to_string(p.head_dim()) + ", " + dtype_name(p.dtype()) + ", " +
               std::to_string(c.block_table().size()) + " blocks of " + std::to_string(p.block_size()) + " (" +
               std::to_string(c.shared_blocks()) + " shared), " + std::to_string(c.nbytes()) + " bytes)";
      });

  py::class_<Decoder>(m, "Decoder", "Decode one token per step() call; for streams.")
      .def(py::init([](const Transformer& e, const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& prompt,
                       Chain& chain, KVCache& cache, int max_new_tokens, const std::vector<int32_t>& eos_ids,
                       uint64_t sequence, int logprobs, bool logprobs_processed, int trace, int trace_top) {
             return std::make_unique<Decoder>(
                 e, cache, to_ids(prompt), chain,
                 decode_options(max_new_tokens, eos_ids, sequence, logprobs, logprobs_processed, trace, trace_top));
           }),
           py::arg("engine"), py::arg("prompt"), py::arg("chain"), py::arg("cache"), py::arg("max_new_tokens"),
           py::arg("eos_ids"), py::arg("sequence") = 0, py::arg("logprobs") = -1, py::arg("logprobs_processed") = false,
           py::arg("trace") = 0, py::arg("trace_top") = 20,
           // The decoder refers to the engine, chain and cache: keep them alive as long as it lives.
           py::keep_alive<1, 2>(), py::keep_alive<1, 4>(), py::keep_alive<1, 5>())
      .def(
          "step",
          [](Decoder& d) {
            KVCache::Use use(d.cache());
            Transformer::Activity busy(d.model());
            return without_gil([&] { return d.step(); });
          },
          "Run the model and choose the next token; -1 once finished.")
      .def_property_readonly("finished", &Decoder::finished)
      .def("result", [](const Decoder& d) { return generate_result_dict(d.result()); });

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
             const WeightType wt = parse_weight_dtype(weight_dtype);
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
      .def_property_readonly("weight_dtype", [](const Transformer& e) {
        switch (e.weight_type()) {
          case WeightType::F32: return "float32";
          case WeightType::BF16: return "bfloat16";
          case WeightType::I8A8: return "w8a8";
          default: return "int8";
        }
      })
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
          "Bytes of fp32 copies of weights: f16/bf16 or unaligned data, and with fp32 weights the linear layers and "
          "head copied from the mapping (GPT-2 Conv1D weights transposed); 0 when every weight is read in place.")
      .def(
          "new_cache",
          [](const Transformer& e, int capacity, const std::string& dtype, bool grow) {
            return e.new_cache(capacity, parse_kv_dtype(dtype), grow);
          },
          py::arg("capacity"), py::arg("dtype") = "float32", py::arg("grow") = false)
      .def_property_readonly("block_size", &Transformer::block_size, "Tokens per KV-cache block.")
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
          "decode_batch",
          [](const Transformer& e, const std::vector<int32_t>& tokens, const std::vector<KVCache*>& caches) {
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
              e.decode_batch(tokens.data(), static_cast<int>(tokens.size()), caches.data(), dst);
              return 0;
            });
            return out;
          },
          py::arg("tokens"), py::arg("caches"))
      .def(
          "beam_search",
          [](const Transformer& e, const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& prompt,
             Chain& processors, KVCache& cache, int num_beams, int max_new_tokens, double length_penalty,
             int early_stopping, int num_return_sequences, const std::vector<int32_t>& eos_ids, bool do_sample,
             uint64_t seed, bool trace) {
            std::vector<int32_t> ids = to_ids(prompt);
            KVCache::Use use(cache);
            Transformer::Activity busy(e);
            e.check_tokens(ids.data(), static_cast<int>(ids.size()), cache);
            BeamOptions o;
            o.num_beams = num_beams;
            o.max_new_tokens = max_new_tokens;
            o.length_penalty = length_penalty;
            o.early_stopping = early_stopping;
            o.num_return_sequences = num_return_sequences;
            o.eos_ids = eos_ids;
            o.do_sample = do_sample;
            o.seed = seed;
            o.trace = trace;
            const auto poll = signal_poll();
            return beam_result_dict(without_gil([&] { return beam_search(e, cache, ids, processors, o, poll); }));
          },
          py::arg("prompt"), py::arg("processors"), py::arg("cache"), py::arg("num_beams"), py::arg("max_new_tokens"),
          py::arg("length_penalty"), py::arg("early_stopping"), py::arg("num_return_sequences"), py::arg("eos_ids"),
          py::arg("do_sample"), py::arg("seed"), py::arg("trace"))
      .def(
          "generate",
          [](const Transformer& e, const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& prompt,
             Chain& chain, int max_new_tokens, const std::vector<int32_t>& eos_ids, KVCache& cache, uint64_t sequence,
             int logprobs, bool logprobs_processed, int trace, int trace_top) {
            std::vector<int32_t> ids = to_ids(prompt);
            KVCache::Use use(cache);
            Transformer::Activity busy(e);
            e.check_tokens(ids.data(), static_cast<int>(ids.size()), cache);
            const DecodeOptions o =
                decode_options(max_new_tokens, eos_ids, sequence, logprobs, logprobs_processed, trace, trace_top);
            const auto poll = signal_poll();
            return generate_result_dict(without_gil([&] { return generate(e, cache, ids, chain, o, poll); }));
          },
          py::arg("prompt"), py::arg("chain"), py::arg("max_new_tokens"), py::arg("eos_ids"), py::arg("cache"),
          py::arg("sequence") = 0, py::arg("logprobs") = -1, py::arg("logprobs_processed") = false,
          py::arg("trace") = 0, py::arg("trace_top") = 20);
}

}  // namespace decodelab
