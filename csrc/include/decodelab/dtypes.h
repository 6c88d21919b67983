// The names of the dtype enums (linear-layer weights, KV cache, tensors in a file): one table
// each, the one parser and the one name lookup of each. Python reads the first two tables
// (decodelab._core.WEIGHT_DTYPES, KV_DTYPES) instead of spelling the names again.
#pragma once

#include <stdexcept>
#include <string>

#include "decodelab/kv_cache.h"
#include "decodelab/linear.h"
#include "decodelab/weights.h"

namespace decodelab {

template <typename E>
struct DTypeName {
  E type;
  const char* name;
};
inline constexpr DTypeName<WeightType> kWeightTypeNames[] = {
    {WeightType::F32, "float32"}, {WeightType::BF16, "bfloat16"}, {WeightType::I8, "int8"}, {WeightType::I8A8, "w8a8"},
    {WeightType::I4, "int4"}};
inline constexpr DTypeName<KVDType> kKVTypeNames[] = {
    {KVDType::F32, "float32"}, {KVDType::BF16, "bfloat16"}, {KVDType::I8, "int8"}};
// Tensors as a weight file stores them (safetensors spelling).
inline constexpr DTypeName<DType> kStorageTypeNames[] = {{DType::F32, "F32"}, {DType::F16, "F16"}, {DType::BF16, "BF16"}};
// Short spellings the weight and cache parsers also take.
inline constexpr const char* kDTypeAliases[][2] = {{"fp32", "float32"}, {"bf16", "bfloat16"}};

template <typename E, size_t N>
const char* dtype_name(const DTypeName<E> (&table)[N], E type) {
  for (const auto& e : table)
    if (e.type == type) return e.name;
  throw std::logic_error("a dtype without a name");
}

// Sets *out to the enum value named exactly s; false, leaving it alone, for any other name.
template <typename E, size_t N>
bool find_dtype(const DTypeName<E> (&table)[N], const std::string& s, E* out) {
  for (const auto& e : table)
    if (s == e.name) {
      *out = e.type;
      return true;
    }
  return false;
}

// The enum value named s (or an alias of its name); std::invalid_argument listing the names.
template <typename E, size_t N>
E parse_dtype_name(const DTypeName<E> (&table)[N], const std::string& s, const char* what) {
  std::string name = s;
  for (const auto& a : kDTypeAliases)
    if (s == a[0]) name = a[1];
  std::string names;
  for (size_t i = 0; i < N; ++i) {
    if (name == table[i].name) return table[i].type;
    names += std::string(i ? (i + 1 == N ? " or '" : ", '") : "'") + table[i].name + "'";
  }
  throw std::invalid_argument(std::string(what) + " must be " + names + ", got '" + s + "'");
}

inline const char* weight_type_name(WeightType t) { return dtype_name(kWeightTypeNames, t); }
inline const char* kv_type_name(KVDType t) { return dtype_name(kKVTypeNames, t); }
inline WeightType parse_weight_type(const std::string& s) { return parse_dtype_name(kWeightTypeNames, s, "dtype"); }
inline KVDType parse_kv_type(const std::string& s) { return parse_dtype_name(kKVTypeNames, s, "cache dtype"); }

}  // namespace decodelab
