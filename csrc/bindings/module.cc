// The decodelab._core extension module: one register_<concept> per file.
#include <pybind11/pybind11.h>

#include "decodelab/cpu_info.h"
#include "without_gil.h"

namespace py = pybind11;

namespace decodelab {
void register_config(py::module_& m);
void register_kv_cache(py::module_& m);
void register_sampling(py::module_& m);
void register_options(py::module_& m);
void register_engine(py::module_& m);
void register_decoding(py::module_& m);
void register_scheduler(py::module_& m);
void register_device(py::module_& m);
void register_bench(py::module_& m);
void register_profile(py::module_& m);
void register_vocabulary(py::module_& m);
}  // namespace decodelab

PYBIND11_MODULE(_core, m) {
  m.doc() = "decodelab C++ core: weights, kernels, KV cache and decode loops";
  decodelab::main_thread_ident() =
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  decodelab::cpu_info();  // chooses the kernels now: a bad DECODELAB_ISA fails the import, naming the values
  decodelab::register_config(m);
  decodelab::register_kv_cache(m);
  decodelab::register_sampling(m);
  decodelab::register_options(m);
  decodelab::register_engine(m);
  decodelab::register_decoding(m);  // adds to Engine
  decodelab::register_scheduler(m);
  decodelab::register_device(m);
  decodelab::register_bench(m);
  decodelab::register_profile(m);
  decodelab::register_vocabulary(m);
}
