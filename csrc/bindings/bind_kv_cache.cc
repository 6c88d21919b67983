// KVCache: one sequence's paged cache as Python sees it, with zero-copy views of its blocks.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>

#include "common.h"
#include "decodelab/bf16.h"
#include "decodelab/kv_cache.h"
#include "decodelab/transformer.h"

namespace decodelab {

namespace {

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

}  // namespace

void register_kv_cache(py::module_& m) {
  m.attr("default_kv_block_size") = Transformer::kDefaultBlockSize;
  m.attr("max_kv_block_size") = Transformer::kMaxBlockSize;
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
      .def_property_readonly("dtype", [](const KVCache& c) { return kv_type_name(c.pool().dtype()); })
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
                                          kv_type_name(p.dtype()));
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
               std::to_string(p.head_dim()) + ", " + kv_type_name(p.dtype()) + ", " +
               std::to_string(c.block_table().size()) + " blocks of " + std::to_string(p.block_size()) + " (" +
               std::to_string(c.shared_blocks()) + " shared), " + std::to_string(c.nbytes()) + " bytes)";
      });
}

}  // namespace decodelab
