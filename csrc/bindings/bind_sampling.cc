// Samplers and chains, the distribution helpers (softmax, stage statistics) and the sampler factories.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>

#include "common.h"
#include "decodelab/decoding.h"
#include "decodelab/sampling.h"

namespace py = pybind11;

namespace decodelab {

namespace {

std::vector<int32_t> context_ids(const std::vector<int64_t>& ctx) {
  std::vector<int32_t> out(ctx.size());
  for (size_t i = 0; i < ctx.size(); ++i) {
    if (ctx[i] < 0 || ctx[i] > INT32_MAX)
      throw std::invalid_argument("context token id " + std::to_string(ctx[i]) + " at index " + std::to_string(i) +
                                  " is negative or too large");
    out[i] = static_cast<int32_t>(ctx[i]);
  }
  return out;
}

std::vector<float> logits_vector(const FloatArray& a) {
  if (a.ndim() != 1) throw std::invalid_argument("logits must be 1-D, got " + std::to_string(a.ndim()) + " dimensions");
  if (a.size() < 1) throw std::invalid_argument("logits must hold at least one token");
  if (a.size() > (1 << 24)) throw std::invalid_argument("logits longer than 2^24 tokens");
  return std::vector<float>(a.data(), a.data() + a.size());
}

SampleContext make_ctx(const std::vector<int32_t>& ids, int64_t n_prompt, int64_t step, int64_t sequence) {
  if (n_prompt < 0 || n_prompt > static_cast<int64_t>(ids.size()))
    throw std::invalid_argument("n_prompt must be in [0, len(context)] = [0, " + std::to_string(ids.size()) + "], got " +
                                std::to_string(n_prompt));
  if (step < 0) throw std::invalid_argument("step must be >= 0, got " + std::to_string(step));
  if (sequence < 0) throw std::invalid_argument("sequence must be >= 0, got " + std::to_string(sequence));
  SampleContext c;
  c.tokens = ids.data();
  c.n_tokens = static_cast<int>(ids.size());
  c.n_prompt = static_cast<int>(n_prompt);
  c.step = static_cast<uint64_t>(step);
  c.sequence = static_cast<uint64_t>(sequence);
  return c;
}

}  // namespace

void register_sampling(py::module_& m) {
  py::class_<Sampler, std::shared_ptr<Sampler>>(m, "Sampler")
      .def_property_readonly("name", &Sampler::name)
      .def_property_readonly("selects", &Sampler::selects, "True for Greedy, Dist and Mirostat: one token is left.")
      .def(
          "apply",
          [](Sampler& s, const FloatArray& logits, const std::vector<int64_t>& context, int64_t n_prompt, int64_t step,
             int64_t sequence) {
            std::vector<float> l = logits_vector(logits);
            std::vector<int32_t> ids = context_ids(context);
            SampleContext c = make_ctx(ids, n_prompt, step, sequence);
            s.apply(l.data(), static_cast<int>(l.size()), c);
            return to_array(l);
          },
          py::arg("logits"), py::arg("context") = std::vector<int64_t>{}, py::arg("n_prompt") = 0, py::arg("step") = 0,
          py::arg("sequence") = 0)
      .def("accept", &Sampler::accept, py::arg("token"))
      .def("reset", &Sampler::reset)
      .def("clone", &Sampler::clone);

  py::class_<Chain, Sampler, std::shared_ptr<Chain>>(m, "Chain")
      .def(py::init<std::vector<SamplerPtr>>(), py::arg("stages"))
      .def_property_readonly("stages", &Chain::stages)
      .def(
          "trace",
          [](Chain& c, const FloatArray& logits, const std::vector<int64_t>& context, int64_t n_prompt, int64_t step,
             int64_t sequence) {
            std::vector<float> l = logits_vector(logits);
            std::vector<int32_t> ids = context_ids(context);
            SampleContext ctx = make_ctx(ids, n_prompt, step, sequence);
            py::list out;
            out.append(py::make_tuple("input", to_array(l)));
            for (const auto& s : c.stages()) {
              s->apply(l.data(), static_cast<int>(l.size()), ctx);
              out.append(py::make_tuple(s->name(), to_array(l)));
            }
            return out;
          },
          py::arg("logits"), py::arg("context") = std::vector<int64_t>{}, py::arg("n_prompt") = 0, py::arg("step") = 0,
          py::arg("sequence") = 0, "[(stage name, logits after it)], the input first.");

  m.def("stage_stats", [](const FloatArray& before, const FloatArray& after, int top) {
    std::vector<float> b = logits_vector(before), a = logits_vector(after);
    if (a.size() != b.size()) throw std::invalid_argument("before and after must have the same length");
    StageStats s;
    std::vector<float> pb, pa;
    stage_stats(b.data(), a.data(), static_cast<int>(a.size()), top, s, pb, pa);
    return stats_dict(s);
  }, py::arg("before"), py::arg("after"), py::arg("top") = 20);
  m.def("softmax", [](const FloatArray& logits) {
    std::vector<float> l = logits_vector(logits), p(l.size());
    softmax(l.data(), static_cast<int>(l.size()), p.data());
    return to_array(p);
  }, py::arg("logits"), "Probabilities under the samplers' conventions (NaN removed, +inf takes all mass).");
  m.def(
      "time_sampler",
      [](Sampler& s, const FloatArray& logits, const std::vector<int64_t>& context, int repeats) {
        // Mean seconds of one apply() in C++, the logits restored from a copy before each run (the
        // restore is timed too: time a no-op chain for that baseline).
        std::vector<float> src = logits_vector(logits), work(src.size());
        std::vector<int32_t> ids = context_ids(context);
        SampleContext c = make_ctx(ids, 0, 0, 0);
        py::gil_scoped_release nogil;
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < repeats; ++i) {
          std::copy(src.begin(), src.end(), work.begin());
          c.step = static_cast<uint64_t>(i);
          s.apply(work.data(), static_cast<int>(work.size()), c);
        }
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / repeats;
      },
      py::arg("sampler"), py::arg("logits"), py::arg("context"), py::arg("repeats"));
  m.def("counter_uniform", &counter_uniform, py::arg("seed"), py::arg("sequence"), py::arg("step"), py::arg("salt"));

  m.def(
      "sampler_token_mask",
      [](py::function rule, const std::string& label) {
        // The rule runs in Python: the decode loop, which released the GIL, takes it for the call;
        // an exception the rule raises ends the loop and reaches the caller (as Ctrl-C's does).
        // Clones share the function; the last one may go away with the GIL released (inside
        // the decode loop), so its reference is dropped with the GIL taken.
        std::shared_ptr<py::function> shared(new py::function(std::move(rule)), [](py::function* f) {
          py::gil_scoped_acquire gil;
          delete f;
        });
        TokenMaskFn fn = [shared](const SampleContext& ctx, uint32_t* words, int n_words) {
          py::gil_scoped_acquire gil;
          py::array_t<int32_t> generated(ctx.n_generated(), ctx.tokens + ctx.n_prompt);
          (*shared)(generated, static_cast<int64_t>(ctx.sequence), reinterpret_cast<uintptr_t>(words), n_words);
        };
        return make_token_mask(fn, label);
      },
      py::arg("rule"), py::arg("label"),
      "A stage that asks rule(generated_ids, sequence, address, n_words) to write the allowed tokens as\n"
      "n_words uint32 words at address (bit i % 32 of word i / 32), then removes every other token.");
  m.def("sampler_temperature", &make_temperature, py::arg("t"));
  m.def("sampler_top_k", &make_top_k, py::arg("k"), py::arg("min_tokens_to_keep") = 1);
  m.def("sampler_top_p", &make_top_p, py::arg("p"), py::arg("min_tokens_to_keep") = 1);
  m.def("sampler_min_p", &make_min_p, py::arg("p"), py::arg("min_tokens_to_keep") = 1);
  m.def("sampler_typical_p", &make_typical_p, py::arg("p"), py::arg("min_tokens_to_keep") = 1);
  m.def("sampler_epsilon_cutoff", &make_epsilon_cutoff, py::arg("epsilon"), py::arg("min_tokens_to_keep") = 1);
  m.def("sampler_eta_cutoff", &make_eta_cutoff, py::arg("eta"), py::arg("min_tokens_to_keep") = 1);
  m.def("sampler_top_n_sigma", &make_top_n_sigma, py::arg("n"));
  m.def("sampler_xtc", &make_xtc, py::arg("probability"), py::arg("threshold"), py::arg("seed"));
  m.def("sampler_repetition_penalty", &make_repetition_penalty, py::arg("penalty"), py::arg("last_n"));
  m.def("sampler_presence_penalty", &make_presence_penalty, py::arg("penalty"));
  m.def("sampler_frequency_penalty", &make_frequency_penalty, py::arg("penalty"));
  m.def("sampler_no_repeat_ngram", &make_no_repeat_ngram, py::arg("n"));
  m.def("sampler_logit_bias", &make_logit_bias, py::arg("bias"));
  m.def("sampler_suppress_tokens", &make_suppress_tokens, py::arg("ids"));
  m.def("sampler_min_new_tokens", &make_min_new_tokens, py::arg("min_new_tokens"), py::arg("eos_ids"));
  m.def("sampler_dry", &make_dry, py::arg("multiplier"), py::arg("base"), py::arg("allowed_length"),
        py::arg("breakers"), py::arg("last_n"));
  m.def("sampler_mirostat_v2", &make_mirostat_v2, py::arg("tau"), py::arg("eta"), py::arg("seed"));
  m.def("sampler_top_h", &make_top_h, py::arg("top_h"));
  m.def("sampler_sequence_bias", &make_sequence_bias, py::arg("sequences"), py::arg("biases"));
  m.def("sampler_bad_words", &make_bad_words, py::arg("sequences"), py::arg("eos_ids"));
  m.def("sampler_exponential_decay_length_penalty", &make_exponential_decay_length_penalty, py::arg("start"),
        py::arg("factor"), py::arg("eos_ids"));
  m.def("sampler_forced_bos", &make_forced_bos, py::arg("token_id"));
  m.def("sampler_forced_eos", &make_forced_eos, py::arg("max_length"), py::arg("eos_ids"));
  py::class_<WatermarkScheme>(m, "WatermarkScheme")
      .def(py::init(&make_watermark_scheme), py::arg("vocab_size"), py::arg("greenlist_ratio"), py::arg("hashing_key"),
           py::arg("seeding_scheme"), py::arg("context_width"))
      .def("greenlist", [](const WatermarkScheme& w, const std::vector<int64_t>& prefix) {
        std::vector<int32_t> ids = context_ids(prefix), out;
        if (ids.empty()) throw std::invalid_argument("watermark greenlist needs a prefix of at least one token");
        w.greenlist(ids.data(), static_cast<int>(ids.size()), out);
        return out;
      }, py::arg("prefix"))
      .def("score", [](const WatermarkScheme& w, const std::vector<int64_t>& ids, bool ignore_repeated) {
        std::vector<int32_t> v = context_ids(ids);
        for (int32_t t : v)
          if (t >= w.vocab())
            throw std::invalid_argument("token id " + std::to_string(t) + " is outside the watermark's vocabulary [0, " +
                                        std::to_string(w.vocab()) + ")");
        py::gil_scoped_release nogil;
        return watermark_score(w, v, ignore_repeated);
      }, py::arg("ids"), py::arg("ignore_repeated_ngrams"));
  m.def("sampler_watermark", &make_watermark, py::arg("scheme"), py::arg("bias"));
  m.def("sampler_greedy", &make_greedy);
  m.def("sampler_dist", &make_dist, py::arg("seed"));
}

}  // namespace decodelab
