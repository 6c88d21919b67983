// Running engine work with the GIL released, safely beside other Python threads and shutdown.
#pragma once

#include <Python.h>
#include <cxxabi.h>
#include <pybind11/pybind11.h>

#include <chrono>
#include <exception>
#include <functional>
#include <optional>
#include <thread>

namespace decodelab {

inline bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

// Runs f() with the GIL released and returns its result, or rethrows its exception once the GIL
// is held again. The GIL is not taken back in a destructor: while the interpreter shuts down, a
// thread asking for it is ended by pthread_exit, and that unwinding through a noexcept destructor
// aborts the process ("terminate called without an active exception"). A thread that finishes
// its work during shutdown therefore parks until the process exits instead.
template <class F>
auto without_gil(F&& f) -> decltype(f()) {
  PyThreadState* state = PyEval_SaveThread();
  std::exception_ptr error;
  std::optional<decltype(f())> out;
  try {
    out.emplace(f());
  } catch (abi::__forced_unwind&) {
    throw;
  } catch (...) {
    error = std::current_exception();
  }
  while (interpreter_finalizing()) std::this_thread::sleep_for(std::chrono::seconds(1));
  PyEval_RestoreThread(state);
  if (error) std::rethrow_exception(error);
  return std::move(*out);
}

// The ident of Python's main thread, set when the module is imported.
inline unsigned long& main_thread_ident() {
  static unsigned long ident = 0;
  return ident;
}

// The poll a decode loop calls between steps to honour Ctrl-C: signals reach Python's main thread
// only, so other threads get no poll at all and never take the GIL mid-loop. Checked at most every
// 20 ms (taking the GIL every step cost small models a futex call per token).
inline std::function<void()> signal_poll() {
  if (PyThread_get_thread_ident() != main_thread_ident()) return {};
  return [] {
    using clock = std::chrono::steady_clock;
    thread_local clock::time_point last{};
    const auto now = clock::now();
    if (now - last < std::chrono::milliseconds(20)) return;
    last = now;
    pybind11::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw pybind11::error_already_set();
  };
}

}  // namespace decodelab
