// Vocabulary helpers for the Python readers: a GGUF string array read in one pass, a BPE file's
// merges checked against the vocabulary, and the SentencePiece-BPE merge list (every split of a
// token into two vocabulary pieces, ranked by the token's score). Each runs per token over
// 100k-500k tokens or merges, where a Python loop took seconds.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
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

// The tokens' UTF-8 text, borrowed from the list's str objects (which keep it alive).
std::vector<std::string_view> utf8_views(const py::list& tokens) {
  std::vector<std::string_view> text(tokens.size());
  for (size_t i = 0; i < text.size(); ++i) {
    Py_ssize_t len;
    const char* p = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(tokens.ptr(), static_cast<Py_ssize_t>(i)), &len);
    if (!p) throw py::error_already_set();
    text[i] = std::string_view(p, static_cast<size_t>(len));
  }
  return text;
}

// Token text -> first id, in one flat open-addressed array: each slot holds the text's hash in its
// high half and id + 1 in its low one (0: empty), so a probe rarely compares bytes. Node-based
// std::unordered_map took a cache miss per lookup, and these loops look up millions of pieces.
class TokenIndex {
 public:
  explicit TokenIndex(const std::vector<std::string_view>& text) : text_(text) {
    size_t cap = 16;
    while (cap < 2 * text.size()) cap *= 2;
    slots_.assign(cap, 0);
    mask_ = cap - 1;
    for (size_t i = 0; i < text.size(); ++i) {
      const uint64_t h = hash(text[i]);
      for (size_t s = h & mask_;; s = (s + 1) & mask_) {
        if (slots_[s] == 0) {
          slots_[s] = (h & kHigh) | (i + 1);
          break;
        }
        if (same(slots_[s], h, text[i])) break;  // a repeat keeps the first id
      }
    }
  }
  // The first id of `piece`, or -1.
  int64_t find(std::string_view piece) const {
    const uint64_t h = hash(piece);
    for (size_t s = h & mask_; slots_[s] != 0; s = (s + 1) & mask_)
      if (same(slots_[s], h, piece)) return static_cast<int64_t>(slots_[s] & ~kHigh) - 1;
    return -1;
  }

 private:
  static constexpr uint64_t kHigh = 0xFFFFFFFF00000000ull;
  static uint64_t hash(std::string_view v) {  // FNV-1a, then mixed so the low bits pick the slot
    uint64_t h = 1469598103934665603ull;
    for (const char c : v) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
    return h ^ (h >> 29);
  }
  bool same(uint64_t slot, uint64_t h, std::string_view v) const {
    return (slot & kHigh) == (h & kHigh) && text_[(slot & ~kHigh) - 1] == v;
  }
  const std::vector<std::string_view>& text_;
  std::vector<uint64_t> slots_;
  uint64_t mask_ = 0;
};

// Merges as two int32 arrays of token ids (left pieces, right pieces): 4 MiB for Gemma 3's
// 514,847 rather than 40 MiB of tuples; the reader pairs the tokens' own str objects lazily.
class IdPairs {
 public:
  explicit IdPairs(size_t n)
      : left_(static_cast<py::ssize_t>(n)), right_(static_cast<py::ssize_t>(n)),
        l_(left_.mutable_data()), r_(right_.mutable_data()) {}
  void set(size_t j, int64_t a, int64_t b) { l_[j] = static_cast<int32_t>(a), r_[j] = static_cast<int32_t>(b); }
  py::tuple result() const { return py::make_tuple(left_, right_); }

 private:
  py::array_t<int32_t> left_, right_;
  int32_t *l_, *r_;
};

// SentencePiece BPE as llama.cpp runs it merges the adjacent pair whose joined text is the
// highest-scoring token (the leftmost among equals). As BPE merges: for every token with
// eligible[i], each split at a character boundary into two vocabulary tokens (a token's id is its
// first position in `tokens`), ranked by (-score, token id, id of the left piece): (left ids, right ids).
py::tuple spm_merges(const py::list& tokens, const py::array_t<double, py::array::c_style | py::array::forcecast>& scores,
                    const py::array_t<bool, py::array::c_style | py::array::forcecast>& eligible) {
  const size_t n = tokens.size();
  if (static_cast<size_t>(scores.size()) != n || static_cast<size_t>(eligible.size()) != n)
    throw py::value_error("spm_merges: " + std::to_string(n) + " tokens but " + std::to_string(scores.size()) +
                          " scores and " + std::to_string(eligible.size()) + " flags");
  const std::vector<std::string_view> text = utf8_views(tokens);
  const TokenIndex id(text);
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
      const int64_t b = id.find(t.substr(k));  // a suffix is a token less often than a prefix
      if (b < 0) continue;
      const int64_t a = id.find(t.substr(0, k));
      if (a < 0) continue;
      ranked.push_back({-sc[i], static_cast<int32_t>(i), static_cast<int32_t>(a), static_cast<int32_t>(b)});
    }
  }
  std::sort(ranked.begin(), ranked.end(), [](const Merge& x, const Merge& y) {
    if (x.neg_score != y.neg_score) return x.neg_score < y.neg_score;
    if (x.token != y.token) return x.token < y.token;
    return x.left < y.left;
  });
  IdPairs out(ranked.size());
  for (size_t j = 0; j < ranked.size(); ++j) out.set(j, ranked[j].left, ranked[j].right);
  return out.result();
}

// A byte-level BPE file's merges ("left right", split at the first space) as (left ids, right
// ids). Each must name two tokens whose joined text is a token too:
// `tokenizers` raises a bare Exception, or panics, on one that does not; here it is a ValueError
// naming the merge, for the caller to name the file.
py::tuple bpe_merges(const py::list& tokens, const py::list& merges) {
  const std::vector<std::string_view> text = utf8_views(tokens);
  const TokenIndex id(text);
  const std::vector<std::string_view> lines = utf8_views(merges);
  IdPairs out(lines.size());
  std::string joined;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string_view m = lines[i];
    const size_t sp = m.find(' ');
    int64_t a = -1, b = -1;
    if (sp != std::string_view::npos) {
      a = id.find(m.substr(0, sp));
      b = id.find(m.substr(sp + 1));
      joined.assign(m.substr(0, sp)).append(m.substr(sp + 1));
    }
    if (a < 0 || b < 0 || id.find(joined) < 0) {
      const py::object head = merges[i].attr("__getitem__")(py::slice(0, 64, 1));
      throw py::value_error("merge " + std::to_string(i) + " (" + py::repr(head).cast<std::string>() +
                            ") is not two vocabulary tokens, separated by a space, whose joined text is a token too");
    }
    out.set(i, a, b);
  }
  return out.result();
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
        "SentencePiece BPE's merges as (left ids, right ids), ranked by the joined token's score");
  m.def("bpe_merges", &bpe_merges, py::arg("tokens"), py::arg("merges"),
        "a BPE file's 'left right' merges as (left ids, right ids); ValueError names the merge");
}

}  // namespace decodelab
