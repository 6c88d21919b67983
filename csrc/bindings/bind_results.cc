// The decode loops' results as Python dicts: generated tokens, logprobs, traces, beam hypotheses.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "common.h"
#include "decodelab/decoding.h"

namespace decodelab {

py::dict stats_dict(const StageStats& s) {
  py::dict d;
  d["name"] = s.name;
  d["n_kept"] = s.n_kept;
  d["entropy"] = s.entropy;
  d["mass_removed"] = s.mass_removed;
  d["top_ids"] = s.top_ids;
  d["top_probs"] = s.top_probs;
  if (!s.logits.empty()) d["logits"] = to_array(s.logits);
  return d;
}

py::dict speculation_dict(const SpeculationStats& s) {
  py::dict d;
  d["drafted"] = s.drafted;
  d["accepted"] = s.accepted;
  d["drafted_at"] = s.drafted_at;
  d["accepted_at"] = s.accepted_at;
  d["draft_seconds"] = s.draft_seconds;
  d["verify_seconds"] = s.verify_seconds;
  py::list rounds;
  for (const auto& r : s.rounds) rounds.append(py::make_tuple(r.draft, r.accepted, r.token, r.bonus));
  d["rounds"] = rounds;
  return d;
}

py::dict generate_result_dict(const GenerateResult& r) {
  py::dict d;
  d["token_ids"] = r.token_ids;
  d["finish_reason"] = r.finish_reason;
  d["prefill_seconds"] = r.prefill_seconds;
  d["first_token_seconds"] = r.first_token_seconds;
  d["decode_seconds"] = r.decode_seconds;
  d["reused_prompt_tokens"] = r.reused_prompt_tokens;
  d["logprobs"] = r.logprobs;
  d["top_ids"] = r.top_ids;
  d["top_logprobs"] = r.top_logprobs;
  py::list trace;
  for (const auto& st : r.trace) {
    py::dict s;
    py::list stages;
    for (const auto& x : st.stages) stages.append(stats_dict(x));
    s["stages"] = stages;
    s["token"] = st.token;
    s["rank_raw"] = st.rank_raw;
    s["logprob_raw"] = st.logprob_raw;
    s["rank_processed"] = st.rank_processed;
    s["logprob_processed"] = st.logprob_processed;
    trace.append(s);
  }
  d["trace"] = trace;
  return d;
}

py::dict beam_result_dict(const BeamResult& r) {
  py::dict d;
  py::list hyps;
  for (const auto& h : r.hypotheses) {
    py::dict x;
    x["token_ids"] = h.token_ids;
    x["score"] = h.score;
    x["sum_logprobs"] = h.sum_logprobs;
    x["finish_reason"] = h.finish_reason;
    hyps.append(x);
  }
  d["hypotheses"] = hyps;
  py::list ev;
  for (const auto& e : r.events) {
    py::dict x;
    x["step"] = e.step;
    x["node"] = e.node;
    x["parent"] = e.parent;
    x["token"] = e.token;
    x["sum_logprobs"] = e.sum_logprobs;
    x["status"] = e.status;
    ev.append(x);
  }
  d["events"] = ev;
  d["steps"] = r.steps;
  d["prefill_seconds"] = r.prefill_seconds;
  d["decode_seconds"] = r.decode_seconds;
  d["peak_cache_bytes"] = r.peak_cache_bytes;
  return d;
}

}  // namespace decodelab
