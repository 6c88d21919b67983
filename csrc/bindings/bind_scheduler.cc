// Scheduler: continuous batching for a server's worker thread (add from any thread, step without
// the GIL), and QueueFull, raised by add() when the queue is full.
#include <Python.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "common.h"
#include "decodelab/scheduler.h"
#include "without_gil.h"

namespace decodelab {

void register_scheduler(py::module_& m) {
  py::register_exception<QueueFull>(m, "QueueFull", PyExc_RuntimeError);
  py::class_<Scheduler>(m, "Scheduler", "Continuous batching of requests on one model.")
      .def(py::init([](std::shared_ptr<Transformer> e, int max_running, int max_waiting, int prefill_chunk,
                       int prefill_budget, int prefix_cache_blocks, const std::string& kv_dtype) {
             SchedulerOptions o;
             o.max_running = max_running;
             o.max_waiting = max_waiting;
             o.prefill_chunk = prefill_chunk;
             o.prefill_budget = prefill_budget;
             o.prefix_cache_blocks = prefix_cache_blocks;
             o.kv_dtype = parse_kv_type(kv_dtype);
             return std::make_unique<Scheduler>(*e, o);
           }),
           py::arg("engine"), py::arg("max_running") = 32, py::arg("max_waiting") = 256, py::arg("prefill_chunk") = 256,
           py::arg("prefill_budget") = 512, py::arg("prefix_cache_blocks") = 0, py::arg("kv_dtype") = "float32",
           py::keep_alive<1, 2>())
      .def(
          "add",
          [](Scheduler& s, const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& prompt,
             std::shared_ptr<Chain> chain, const DecodeOptions& options, bool reuse_prefix) {
            return s.add(to_ids(prompt), std::move(chain), options, reuse_prefix);
          },
          py::arg("prompt"), py::arg("chain"), py::arg("options"), py::arg("reuse_prefix") = false,
          "Queue a request (the chain is kept and used; pass a clone); its id. ValueError for a bad request, "
          "QueueFull when full.")
      .def("cancel", &Scheduler::cancel, py::arg("id"), "End a request at the next step.")
      .def(
          "step",
          [](Scheduler& s) {
            std::vector<RequestUpdate> ups;
            {
              Transformer::Activity busy(s.model());
              ups = without_gil([&] { return s.step(); });
            }
            py::list out;
            for (auto& u : ups) {
              py::object lps = py::none();
              if (!u.logprobs.empty()) {
                py::list l;
                for (size_t k = 0; k < u.logprobs.size(); ++k)
                  l.append(py::make_tuple(u.logprobs[k], u.top_ids[k], u.top_logprobs[k]));
                lps = l;
              }
              out.append(py::make_tuple(u.id, u.tokens, u.finished, u.finish_reason, lps));
            }
            return out;
          },
          "One step (the GIL released): [(id, new tokens, finished, finish_reason, logprobs or None)].")
      .def(
          "take_result", [](Scheduler& s, int64_t id) { return generate_result_dict(s.take_result(id)); },
          py::arg("id"), "A finished request's result dict, once.")
      .def_property_readonly("idle", &Scheduler::idle)
      .def(
          "stats",
          [](const Scheduler& s) {
            const Scheduler::Stats t = s.stats();
            py::dict d;
            d["running"] = t.running;
            d["waiting"] = t.waiting;
            d["prefilling"] = t.prefilling;
            d["steps"] = t.steps;
            d["prompt_tokens"] = t.prompt_tokens;
            d["reused_tokens"] = t.reused_tokens;
            d["generated_tokens"] = t.generated_tokens;
            d["decode_rows"] = t.decode_rows;
            d["cached_blocks"] = t.cached_blocks;
            return d;
          },
          "Counters: requests running, waiting and prefilling; steps; prompt tokens run and reused; tokens "
          "generated; rows over all decode passes; prefix-cache blocks.");
}

}  // namespace decodelab
