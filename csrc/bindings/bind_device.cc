// The machine: the CPU's instruction sets and the kernel variant chosen, the CUDA path's devices.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "decodelab/cpu_info.h"
#include "decodelab/device.h"

namespace py = pybind11;

namespace decodelab {

void register_device(py::module_& m) {
  m.def(
      "cpu_info",
      [] {
        const CpuInfo& c = cpu_info();
        py::dict d;
        d["detected"] = c.detected;
        d["supported"] = c.supported;
        d["compiled"] = c.compiled;
        d["cap"] = c.cap.empty() ? py::object(py::none()) : py::object(py::str(c.cap));
        d["chosen"] = c.chosen;
        d["portable"] = c.portable;
        return d;
      },
      "The CPU features that decide the kernels, the variants this CPU runs and this build holds, the\n"
      "DECODELAB_ISA cap, and the variant chosen.");
  m.def("built_with_cuda", &built_with_cuda, "True when this build has the CUDA path.");
  m.def("cuda_device_count", &cuda_device_count, "Visible CUDA devices; RuntimeError in a build without CUDA.");
}

}  // namespace decodelab
