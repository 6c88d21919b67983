// The decode loops: Engine.generate and Engine.beam_search (whole loops in C++, the GIL released)
// and Decoder (a stream's step-by-step loop). Each takes its call shape's options object whole.
#include <Python.h>
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "common.h"
#include "decodelab/decoding.h"
#include "decodelab/kv_cache.h"
#include "decodelab/transformer.h"
#include "without_gil.h"

namespace decodelab {

namespace {
// (logprob, top ids, top logprobs) of each step from `start` on: a stream asks after each piece,
// and converting the whole result every time would cost O(length) per piece.
py::list logprobs_from(const GenerateResult& r, size_t start) {
  py::list out;
  for (size_t k = start; k < r.logprobs.size(); ++k)
    out.append(py::make_tuple(r.logprobs[k], r.top_ids[k], r.top_logprobs[k]));
  return out;
}
}  // namespace

// After register_engine: adds the decode loops to the Engine class it made.
void register_decoding(py::module_& m) {
  py::class_<Decoder>(m, "Decoder", "Decode one token per step() call; for streams.")
      .def(py::init([](const Transformer& e, const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& prompt,
                       Chain& chain, KVCache& cache, const DecodeOptions& options) {
             return std::make_unique<Decoder>(e, cache, to_ids(prompt), chain, options);
           }),
           py::arg("engine"), py::arg("prompt"), py::arg("chain"), py::arg("cache"), py::arg("options"),
           // The decoder refers to the engine, chain and cache: keep them alive as long as it lives.
           py::keep_alive<1, 2>(), py::keep_alive<1, 4>(), py::keep_alive<1, 5>())
      .def(
          "step",
          [](Decoder& d) {
            KVCache::Use use(d.cache());
            Transformer::Activity busy(d.model());
            return without_gil([&] { return d.step(); });
          },
          "Run the model and choose the next token; -1 once finished.")
      .def_property_readonly("finished", &Decoder::finished)
      .def("result", [](const Decoder& d) { return generate_result_dict(d.result()); })
      .def(
          "logprobs", [](const Decoder& d, size_t start) { return logprobs_from(d.result(), start); },
          py::arg("start"), "(logprob, top ids, top logprobs) of each step from `start` on (with logprobs >= 0).");


  py::class_<SpeculativeDecoder>(m, "SpeculativeDecoder", "Speculative decoding, one round per step() call.")
      .def(py::init([](const Transformer& e, const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& prompt,
                       Chain& chain, KVCache& cache, const DecodeOptions& options, const Transformer* draft,
                       KVCache* draft_cache) {
             return std::make_unique<SpeculativeDecoder>(e, cache, to_ids(prompt), chain, options, draft, draft_cache);
           }),
           py::arg("engine"), py::arg("prompt"), py::arg("chain"), py::arg("cache"), py::arg("options"),
           py::arg("draft").none(true), py::arg("draft_cache").none(true), py::keep_alive<1, 2>(),
           py::keep_alive<1, 4>(), py::keep_alive<1, 5>(), py::keep_alive<1, 7>(), py::keep_alive<1, 8>())
      .def(
          "step",
          [](SpeculativeDecoder& d) {
            KVCache::Use use(d.cache());
            std::unique_ptr<KVCache::Use> draft_use;
            if (d.draft_cache()) draft_use = std::make_unique<KVCache::Use>(*d.draft_cache());
            Transformer::Activity busy(d.model());
            return without_gil([&] { return d.step(); });
          },
          "One round: the tokens it added (empty once finished).")
      .def_property_readonly("finished", &SpeculativeDecoder::finished)
      .def("result", [](const SpeculativeDecoder& d) { return generate_result_dict(d.result()); })
      .def("speculation", [](const SpeculativeDecoder& d) { return speculation_dict(d.stats()); })
      .def(
          "logprobs", [](const SpeculativeDecoder& d, size_t start) { return logprobs_from(d.result(), start); },
          py::arg("start"), "(logprob, top ids, top logprobs) of each token from `start` on (with logprobs >= 0).");

  using EngineClass = py::class_<Transformer, std::shared_ptr<Transformer>>;
  py::reinterpret_borrow<EngineClass>(m.attr("Engine"))
      .def(
          "beam_search",
          [](const Transformer& e, const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& prompt,
             Chain& processors, KVCache& cache, const BeamOptions& options) {
            std::vector<int32_t> ids = to_ids(prompt);
            KVCache::Use use(cache);
            Transformer::Activity busy(e);
            e.check_tokens(ids.data(), static_cast<int>(ids.size()), cache);
            const auto poll = signal_poll();
            return beam_result_dict(without_gil([&] { return beam_search(e, cache, ids, processors, options, poll); }));
          },
          py::arg("prompt"), py::arg("processors"), py::arg("cache"), py::arg("options"))
      .def(
          "generate",
          [](const Transformer& e, const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& prompt,
             Chain& chain, KVCache& cache, const DecodeOptions& options) {
            std::vector<int32_t> ids = to_ids(prompt);
            KVCache::Use use(cache);
            Transformer::Activity busy(e);
            e.check_tokens(ids.data(), static_cast<int>(ids.size()), cache);
            const auto poll = signal_poll();
            return generate_result_dict(without_gil([&] { return generate(e, cache, ids, chain, options, poll); }));
          },
          py::arg("prompt"), py::arg("chain"), py::arg("cache"), py::arg("options"))
      .def(
          "generate_speculative",
          [](const Transformer& e, const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& prompt,
             Chain& chain, KVCache& cache, const DecodeOptions& options, const Transformer* draft,
             KVCache* draft_cache) {
            std::vector<int32_t> ids = to_ids(prompt);
            KVCache::Use use(cache);
            std::unique_ptr<KVCache::Use> draft_use;
            if (draft_cache) draft_use = std::make_unique<KVCache::Use>(*draft_cache);
            Transformer::Activity busy(e);
            const auto poll = signal_poll();
            SpeculationStats stats;
            GenerateResult r = without_gil([&] {
              return generate_speculative(e, cache, ids, chain, options, draft, draft_cache, &stats, poll);
            });
            py::dict d = generate_result_dict(r);
            d["speculation"] = speculation_dict(stats);
            return d;
          },
          py::arg("prompt"), py::arg("chain"), py::arg("cache"), py::arg("options"), py::arg("draft").none(true),
          py::arg("draft_cache").none(true));
}

}  // namespace decodelab
