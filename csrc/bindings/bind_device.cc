// The CUDA path's presence and devices.
#include <pybind11/pybind11.h>

#include "decodelab/device.h"

namespace py = pybind11;

namespace decodelab {

void register_device(py::module_& m) {
  m.def("built_with_cuda", &built_with_cuda, "True when this build has the CUDA path.");
  m.def("cuda_device_count", &cuda_device_count, "Visible CUDA devices; RuntimeError in a build without CUDA.");
}

}  // namespace decodelab
