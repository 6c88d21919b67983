// Vocabulary helpers for the Python readers: a GGUF string array read in one pass, and the
// SentencePiece-BPE merge list (every split of a token into two vocabulary pieces, ranked by the
// token's score). Both run per token over 100k-300k tokens, where a Python loop took seconds.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace decodelab {

namespace py = pybind11;

namespace {

// `count` GGUF strings (u64 little-endian length, then that many UTF-8 bytes) from buf[pos:]:
// (list of str, the offset after the last). A length over `limit`, a string past the end or bytes
// that are not UTF-8 raise ValueError("element i: ...") for the caller to name the file and key.
py::tuple gguf_strings(const py::buffer& buf, uint64_t pos, uint64_t count, uint64_t limit) {
  const py::buffer_info info = buf.request();
  const auto* data = static_cast<const uint8_t*>(info.ptr);
  const uint64_t size = static_cast<uint64_t>(info.size) * static_cast<uint64_t>(info.itemsize);
  if (pos > size || count > (size - pos) / 8)  // each string is at least its 8-byte length
    throw py::value_error(std::to_string(count) + " strings at offset " + std::to_string(pos) +
                          " need bytes past the end of the file (" + std::to_string(size) + " bytes)");
  py::list out(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t start = pos;  // the message is built only on an error: this loop runs per token
    auto fail = [&](const std::string& what) {
      return py::value_error("element " + std::to_string(i) + " at offset " + std::to_string(start) + ": " + what);
    };
    if (size - pos < 8) throw fail("its length needs bytes past the end of the file");
    uint64_t n;
    std::memcpy(&n, data + pos, 8);
    pos += 8;
    if (n > limit)
      throw fail(std::to_string(n) + " bytes long, more than the limit of " + std::to_string(limit));
    if (n > size - pos) throw fail(std::to_string(n) + " bytes, past the end of the file");
    PyObject* s = PyUnicode_DecodeUTF8(reinterpret_cast<const char*>(data + pos), static_cast<Py_ssize_t>(n), nullptr);
    if (!s) {
      PyErr_Clear();
      throw fail("not valid UTF-8");
    }
    PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), s);  // steals the reference
    pos += n;
  }
  return py::make_tuple(out, pos);
}

// SentencePiece BPE as llama.cpp runs it merges the adjacent pair whose joined text is the
// highest-scoring token (the leftmost among equals). As BPE merges: for every token with
// eligible[i], each split at a character boundary into two vocabulary tokens (a token's id is its
// first position in `tokens`), ranked by (-score, token id, id of the left piece).
py::list spm_merges(const py::list& tokens, const py::array_t<double, py::array::c_style | py::array::forcecast>& scores,
                    const py::array_t<bool, py::array::c_style | py::array::forcecast>& eligible) {
  const size_t n = tokens.size();
  if (static_cast<size_t>(scores.size()) != n || static_cast<size_t>(eligible.size()) != n)
    throw py::value_error("spm_merges: " + std::to_string(n) + " tokens but " + std::to_string(scores.size()) +
                          " scores and " + std::to_string(eligible.size()) + " flags");
  std::vector<std::string_view> text(n);
  for (size_t i = 0; i < n; ++i) {
    Py_ssize_t len;
    const char* p = PyUnicode_AsUTF8AndSize(tokens[i].ptr(), &len);  // kept by the str object
    if (!p) throw py::error_already_set();
    text[i] = std::string_view(p, static_cast<size_t>(len));
  }
  std::unordered_map<std::string_view, int32_t> id;
  id.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) id.emplace(text[i], static_cast<int32_t>(i));  // keeps the first
  struct Merge {
    double neg_score;
    int32_t token, left, right;
  };
  std::vector<Merge> ranked;
  const double* sc = scores.data();
  const bool* ok = eligible.data();
  for (size_t i = 0; i < n; ++i) {
    if (!ok[i]) continue;
    const std::string_view t = text[i];
    for (size_t k = 1; k < t.size(); ++k) {
      if ((static_cast<uint8_t>(t[k]) & 0xC0) == 0x80) continue;  // inside a character
      const auto a = id.find(t.substr(0, k));
      if (a == id.end()) continue;
      const auto b = id.find(t.substr(k));
      if (b == id.end()) continue;
      ranked.push_back({-sc[i], static_cast<int32_t>(i), a->second, b->second});
    }
  }
  std::sort(ranked.begin(), ranked.end(), [](const Merge& x, const Merge& y) {
    if (x.neg_score != y.neg_score) return x.neg_score < y.neg_score;
    if (x.token != y.token) return x.token < y.token;
    return x.left < y.left;
  });
  // Each piece is a vocabulary token: the pair holds the tokens' own str objects, not copies
  // (Gemma 3: 40 MiB of tuples rather than 125 MiB with a new str for every piece).
  py::list out(ranked.size());
  for (size_t j = 0; j < ranked.size(); ++j) {
    py::tuple pair = py::make_tuple(tokens[ranked[j].left], tokens[ranked[j].right]);
    PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(j), pair.release().ptr());
  }
  return out;
}

// Hands the C heap's free pages back to the system: building a tokenizer frees about as much
// as it keeps (48 MiB for Gemma 3's), which glibc would otherwise hold for the process's life.
void trim_heap() {
#ifdef __GLIBC__
  ::malloc_trim(0);
#endif
}

}  // namespace

void register_vocabulary(py::module_& m) {
  m.def("trim_heap", &trim_heap, "return the C heap's free pages to the system (glibc's malloc_trim)");
  m.def("gguf_strings", &gguf_strings, py::arg("buffer"), py::arg("pos"), py::arg("count"), py::arg("limit"),
        "count GGUF strings from buffer[pos:]: (list of str, offset after them); ValueError names the element");
  m.def("spm_merges", &spm_merges, py::arg("tokens"), py::arg("scores"), py::arg("eligible"),
        "SentencePiece BPE's merges as (left, right) pairs, ranked by the joined token's score");
}

}  // namespace decodelab
