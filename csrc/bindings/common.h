// Helpers the binding files share: token-id arrays, dtype names, read-only numpy views.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "decodelab/decoding.h"
#include "decodelab/dtypes.h"
#include "decodelab/kernels.h"
#include "decodelab/kv_cache.h"

namespace decodelab {

namespace py = pybind11;

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

inline std::vector<int32_t> to_ids(const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& a) {
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

inline void set_read_only(py::array& a) {
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
}

inline py::array_t<float> to_array(const std::vector<float>& v) {
  py::array_t<float> a(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

// Result dicts of the decode loops and one sampler stage's statistics (bind_results.cc).
py::dict generate_result_dict(const GenerateResult& r);
py::dict speculation_dict(const SpeculationStats& s);
py::dict beam_result_dict(const BeamResult& r);
py::dict stats_dict(const StageStats& s);

}  // namespace decodelab
