// Kernel hooks for tests and benchmarks: one linear layer or decode attention through the engine's
// kernels, timed or not, and the read-bandwidth probe.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "common.h"
#include "decodelab/gguf_blocks.h"
#include "decodelab/aligned.h"
#include "decodelab/bf16.h"
#include "decodelab/device.h"
#include "decodelab/kernels.h"
#include "decodelab/transformer.h"

namespace decodelab {

namespace {

// A layer over a numpy (out, in) fp32 matrix, stored as `type` in `store` (test bindings).
Linear test_layer(const FloatArray& w, WeightType type, QuantizedWeights& store) {
  Linear L;
  L.w = w.data();
  L.in = static_cast<int>(w.shape(1));
  L.out = static_cast<int>(w.shape(0));
  quantize_linear(L, type, store);
  return L;
}

// The test bindings' y = x w^T through the engine's kernels: x (T, in), w (out, in) given in fp32
// and stored as dtype once, then `repeats` products on that one copy into y (T, out), the seconds
// each took into `seconds` when it is not null (the conversion is not timed).
void test_linear(const FloatArray& x, const FloatArray& w, const std::string& dtype, bool bf16_matmul, int repeats,
                 float* y, double* seconds) {
  const WeightType type = parse_weight_type(dtype);
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

void register_bench(py::module_& m) {
  m.def(
      "dequantize_blocks",
      [](const std::string& dtype, const py::bytes& data) {
        const BlockFormat* f = find_block_format(dtype);
        if (!f) throw std::invalid_argument("dtype must be one of ggml's block formats (BLOCK_DTYPES), got '" + dtype + "'");
        const std::string_view raw = data;
        if (raw.size() % f->bytes)
          throw std::invalid_argument(dtype + " blocks are " + std::to_string(f->bytes) + " bytes each; got " +
                                      std::to_string(raw.size()) + " bytes");
        const size_t n = raw.size() / f->bytes * f->elems;
        py::array_t<float> out(static_cast<py::ssize_t>(n));
        dequantize_blocks(*f, reinterpret_cast<const uint8_t*>(raw.data()), n, out.mutable_data());
        return out;
      },
      py::arg("dtype"), py::arg("data"),
      "The values of `data`, whole blocks of ggml's format `dtype`, as the engine decodes them (for tests).");
  m.def(
      "linear_blocks",
      [](const FloatArray& x, const std::string& format, const py::bytes& data, int out, const std::string& dtype,
         bool as_head, bool narrow) {
        const BlockFormat* f = find_block_format(format);
        if (!f) throw std::invalid_argument("format must be one of ggml's block formats (BLOCK_DTYPES), got '" + format + "'");
        const WeightType type = parse_weight_type(dtype);
        if (x.ndim() != 2 || x.shape(0) < 1 || x.shape(1) < 1 || x.shape(1) % f->elems || out < 1)
          throw std::invalid_argument("x must be (T, in) with in a multiple of " + std::to_string(f->elems) +
                                      " and out >= 1");
        const std::string_view raw = data;
        const size_t row_bytes = static_cast<size_t>(x.shape(1)) / f->elems * f->bytes;
        if (raw.size() != row_bytes * out)
          throw std::invalid_argument("data must hold " + std::to_string(row_bytes * out) + " bytes (" +
                                      std::to_string(out) + " rows of " + format + " blocks), got " +
                                      std::to_string(raw.size()));
        const uint8_t* src = reinterpret_cast<const uint8_t*>(raw.data());
        Linear L;
        L.in = static_cast<int>(x.shape(1));
        L.out = out;
        QuantizedWeights store;
        if (type == WeightType::F32) throw std::invalid_argument("dtype must be a converted one, got 'float32'");
        if (type == WeightType::I4 && f->bits == 4 && !as_head) {
          pack_i4_blocks(L, *f, src, store);
        } else if (type == WeightType::I4 && narrow && narrow_planes(*f)) {
          pack_i5_blocks(L, *f, src, store);
        } else if (type == WeightType::I4) {  // wider formats, and any format as a 4-bit model's head
          pack_i8_blocks(L, *f, src, store);
        } else {
          const int in = L.in;
          const RowSource rows = [f, src, row_bytes, in](int o0, int n, float* dst) {
            dequantize_blocks(*f, src + o0 * row_bytes, static_cast<size_t>(n) * in, dst);
          };
          quantize_linear(L, type, store, nullptr, &rows);
        }
        py::array_t<float> y({x.shape(0), static_cast<py::ssize_t>(out)});
        linear(x.data(), static_cast<int>(x.shape(0)), L, y.mutable_data());
        return y;
      },
      py::arg("x"), py::arg("format"), py::arg("data"), py::arg("out"), py::arg("dtype") = "int4",
      py::arg("as_head") = false, py::arg("narrow") = true,
      "y = x W^T with W given as `out` rows of ggml blocks (`format`), stored as the engine stores a GGUF\n"
      "file's layer of that format under `dtype`: under int4, 4-bit formats repacked as they are into int4,\n"
      "5-bit ones with a step per 32 (Q5_0, Q5_1, Q5_K) and Q6_K into 5- and 6-bit blocks (narrow=False:\n"
      "8-bit ones), and\n"
      "wider ones (or a 4-bit one, as_head: the output head) into 8-bit blocks of the file's codes and steps;\n"
      "under other dtypes decoded a panel of rows at a time and converted (for tests).");
  m.def("read_bandwidth", &read_bandwidth, py::arg("nbytes"), py::arg("n_threads"), py::arg("repeats") = 5,
        py::call_guard<py::gil_scoped_release>(),
        "Best read bandwidth in bytes/s summing an nbytes buffer (in huge pages where the system allows): the "
        "memory bound of a decode step.");
  m.def(
      "gemm_min_rows", [](const std::string& dtype) { return gemm_min_rows(parse_weight_type(dtype)); },
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
        const KVDType dtype = parse_kv_type(kv_dtype);
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
        std::vector<float> q(static_cast<size_t>(n_heads) * head_dim), out(q.size());
        for (float& v : q) v = next_value();
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
              attention_paged(q.data(), pool, table.data(), layer, 1, n_ctx - 1, n_heads, out.data(), threads);
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
        const WeightType type = parse_weight_type(dtype);
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
}

}  // namespace decodelab
