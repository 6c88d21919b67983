// OpProfiler: the op profile of the calls a thread makes between start() and stop()
// (decodelab/op_profile.h), read back as numpy arrays.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <stdexcept>
#include <thread>

#include "common.h"
#include "decodelab/op_profile.h"

namespace decodelab {

namespace {

// The collector installed on this thread, kept alive here: a profiler dropped while running leaves
// its collector in place rather than a dangling pointer.
thread_local std::shared_ptr<OpProfile> installed;

class OpProfiler {
 public:
  void start() {
    if (running_) throw std::invalid_argument("this op profiler is already running; stop() it first");
    prev_ = installed;
    installed = p_;
    exchange_op_profile(p_.get());
    owner_ = std::this_thread::get_id();
    running_ = true;
  }
  void stop() {
    if (!running_) throw std::invalid_argument("this op profiler is not running; start() it first");
    if (owner_ != std::this_thread::get_id())
      throw std::invalid_argument("an op profiler stops on the thread that started it");
    if (current_op_profile() != p_.get())
      throw std::invalid_argument("op profilers on one thread stop in the reverse order of their starts");
    installed = prev_;
    exchange_op_profile(prev_.get());
    prev_.reset();
    running_ = false;
  }
  bool running() const { return running_; }
  void reset() { *p_ = OpProfile{}; }
  py::dict result() const {
    const OpProfile& p = *p_;
    py::list ops, phases;
    for (int o = 0; o < kOpCount; ++o) ops.append(op_name(static_cast<Op>(o)));
    phases.append("prompt");
    phases.append("decode");
    py::array_t<double> seconds({kPhaseCount, kOpCount}), bytes({kPhaseCount, kOpCount}),
        macs({kPhaseCount, kOpCount});
    py::array_t<int64_t> calls({kPhaseCount, kOpCount});
    for (int ph = 0; ph < kPhaseCount; ++ph)
      for (int o = 0; o < kOpCount; ++o) {
        seconds.mutable_at(ph, o) = p.seconds[ph][o];
        bytes.mutable_at(ph, o) = p.weight_bytes[ph][o];
        macs.mutable_at(ph, o) = p.macs[ph][o];
        calls.mutable_at(ph, o) = p.calls[ph][o];
      }
    py::dict d;
    d["ops"] = ops;
    d["phases"] = phases;
    d["seconds"] = seconds;
    d["calls"] = calls;
    d["weight_bytes"] = bytes;
    d["macs"] = macs;
    d["passes"] = std::vector<int64_t>(p.passes, p.passes + kPhaseCount);
    d["rows"] = std::vector<int64_t>(p.rows, p.rows + kPhaseCount);
    d["kv_bytes"] = std::vector<double>(p.kv_bytes, p.kv_bytes + kPhaseCount);
    return d;
  }

 private:
  std::shared_ptr<OpProfile> p_ = std::make_shared<OpProfile>();
  std::shared_ptr<OpProfile> prev_;
  std::thread::id owner_;
  bool running_ = false;
};

}  // namespace

void register_profile(py::module_& m) {
  py::class_<OpProfiler>(m, "OpProfiler", R"doc(
Times the forward passes (and the decoder's sampling) that the thread calling start() runs until
stop(), op by op: each op gets the wall time from the previous op's end to its own, so a pass's ops
add up to the pass. Passes where every sequence adds one token count as "decode", others
(prompts, and a speculative round's pass over its drafts) as "prompt". Only the innermost running
profiler of a thread collects; calls that other threads make (a batch engine's scheduler) are not
timed.)doc")
      .def(py::init<>())
      .def("start", &OpProfiler::start)
      .def("stop", &OpProfiler::stop)
      .def("reset", &OpProfiler::reset, "Zeroes what was collected.")
      .def_property_readonly("running", &OpProfiler::running)
      .def("result", &OpProfiler::result,
           "A dict: ops and phases (names), seconds, calls, weight_bytes and macs (phases x ops; bytes of "
           "weights the linear ops hold, summed over passes, and multiply-adds), and per phase passes, rows "
           "and kv_bytes (cache bytes attention read).");
}

}  // namespace decodelab
