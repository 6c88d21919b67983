// The options of each call shape, bound once as plain records: DecodeOptions (generate, a stream's
// Decoder) and BeamOptions (beam search), which Python builds from its resolved options
// (decodelab/options.py) and passes whole; and the dtype names load() and new_cache() take.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sstream>
#include <string>

#include "decodelab/decoding.h"
#include "decodelab/dtypes.h"
#include "decodelab/gguf_blocks.h"

namespace py = pybind11;

namespace decodelab {

namespace {
std::string ids_repr(const std::vector<int32_t>& ids) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < ids.size(); ++i) s << (i ? ", " : "") << ids[i];
  s << "]";
  return s.str();
}
}  // namespace

void register_options(py::module_& m) {
  // The dtype names, from their one table each (dtypes.h).
  py::list weights, kv;
  for (const auto& e : kWeightTypeNames) weights.append(e.name);
  for (const auto& e : kKVTypeNames) kv.append(e.name);
  m.attr("WEIGHT_DTYPES") = py::tuple(weights);
  m.attr("KV_DTYPES") = py::tuple(kv);
  py::list blocks;  // ggml's block formats the engine reads from a GGUF file's mapping (gguf_blocks.h)
  for (const auto& f : kBlockFormats) blocks.append(f.name);
  m.attr("BLOCK_DTYPES") = py::tuple(blocks);
  m.def(
      "weight_dtype", [](const std::string& s) { return weight_type_name(parse_weight_type(s)); }, py::arg("name"),
      "The weight dtype's name for `name` or an alias of it (fp32, bf16); ValueError listing the names.");
  m.def(
      "kv_dtype", [](const std::string& s) { return kv_type_name(parse_kv_type(s)); }, py::arg("name"),
      "The cache dtype's name for `name` or an alias of it (fp32, bf16); ValueError listing the names.");

  py::class_<DecodeOptions>(m, "DecodeOptions", "How generate() and a stream decode one sequence.")
      .def(py::init<>())
      .def_readwrite("max_new_tokens", &DecodeOptions::max_new_tokens)
      .def_readwrite("eos_ids", &DecodeOptions::eos_ids)
      .def_readwrite("sequence", &DecodeOptions::sequence, "Which sample of this prompt: keys the random stream.")
      .def_readwrite("logprobs", &DecodeOptions::logprobs, "< 0: none; N >= 0: the token's logprob and the top N.")
      .def_readwrite("logprobs_processed", &DecodeOptions::logprobs_processed)
      .def_readwrite("trace", &DecodeOptions::trace, "0 off, 1 per-stage summaries, 2 also the full logits.")
      .def_readwrite("trace_top", &DecodeOptions::trace_top)
      .def_readwrite("guidance_scale", &DecodeOptions::guidance_scale, "Classifier-free guidance; 1: off.")
      .def_readwrite("negative_prompt", &DecodeOptions::negative_prompt,
                     "The unconditional sequence's prompt (empty: the input's last token).")
      .def_readwrite("num_draft_tokens", &DecodeOptions::num_draft_tokens, "Speculative decoding: tokens per draft.")
      .def_readwrite("prompt_lookup_max_ngram", &DecodeOptions::prompt_lookup_max_ngram,
                     "Prompt lookup: the longest n-gram of the text's end looked for earlier in it.")
      .def_readwrite("draft_p_min", &DecodeOptions::draft_p_min,
                     "A draft model's round ends where its likeliest next token is below this probability; 0: off.")
      .def("__repr__", [](const DecodeOptions& o) {
        return "DecodeOptions(max_new_tokens=" + std::to_string(o.max_new_tokens) + ", eos_ids=" + ids_repr(o.eos_ids) +
               ", sequence=" + std::to_string(o.sequence) + ", logprobs=" + std::to_string(o.logprobs) +
               ", logprobs_processed=" + (o.logprobs_processed ? "True" : "False") +
               ", trace=" + std::to_string(o.trace) + ", trace_top=" + std::to_string(o.trace_top) + ")";
      });
  py::class_<BeamOptions>(m, "BeamOptions", "How beam search runs (see decodelab/beam_search.h).")
      .def(py::init<>())
      .def_readwrite("num_beams", &BeamOptions::num_beams)
      .def_readwrite("max_new_tokens", &BeamOptions::max_new_tokens)
      .def_readwrite("length_penalty", &BeamOptions::length_penalty)
      .def_readwrite("early_stopping", &BeamOptions::early_stopping, "1: True, 0: False (heuristic), -1: \"never\".")
      .def_readwrite("num_return_sequences", &BeamOptions::num_return_sequences)
      .def_readwrite("eos_ids", &BeamOptions::eos_ids)
      .def_readwrite("do_sample", &BeamOptions::do_sample, "Draw continuations instead of taking the top ones.")
      .def_readwrite("seed", &BeamOptions::seed)
      .def_readwrite("trace", &BeamOptions::trace, "Record the beam tree.")
      .def("__repr__", [](const BeamOptions& o) {
        return "BeamOptions(num_beams=" + std::to_string(o.num_beams) +
               ", max_new_tokens=" + std::to_string(o.max_new_tokens) +
               ", length_penalty=" + std::to_string(o.length_penalty) +
               ", early_stopping=" + std::to_string(o.early_stopping) +
               ", num_return_sequences=" + std::to_string(o.num_return_sequences) + ", eos_ids=" + ids_repr(o.eos_ids) +
               ", do_sample=" + (o.do_sample ? "True" : "False") + ", seed=" + std::to_string(o.seed) +
               ", trace=" + (o.trace ? "True" : "False") + ")";
      });
}

}  // namespace decodelab
