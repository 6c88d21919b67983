// Model weights: memory-mapped files and the tensors they hold.
//
// A model file is untrusted input. Every tensor's file index, dtype, shape, offset and length
// is checked against the file before any byte is read; a bad one raises std::invalid_argument
// (ValueError in Python) naming the tensor.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "decodelab/aligned.h"
#include "decodelab/gguf_blocks.h"

namespace decodelab {

enum class DType { F32, F16, BF16 };

// "F32" / "F16" / "BF16" (safetensors spelling); anything else throws, naming the tensor.
DType parse_dtype(const std::string& dtype, const std::string& tensor);
size_t dtype_size(DType dtype);

struct TensorInfo {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  int file = 0;          // index into the file list
  uint64_t offset = 0;   // byte offset of the first element within the file
  uint64_t nbytes = 0;   // must equal numel * dtype size
};

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Copies bytes [offset, offset + n) of the file into dst with pread, from the page cache,
  // mapping nothing into the process; std::runtime_error if the file no longer holds them.
  void read(uint64_t offset, size_t n, void* dst) const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  int fd_ = -1;  // kept open for read()
};

class WeightStore {
 public:
  WeightStore(const std::vector<std::string>& files, const std::vector<TensorInfo>& tensors);

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }

  // An fp32 view of tensor `name`, whose shape must equal `shape`. fp32 data aligned to 4 bytes
  // is used in place (zero copy); f16 / bf16 / unaligned data is converted once into a buffer
  // owned by the store.
  const float* f32(const std::string& name, const std::vector<int64_t>& shape);
  // The same values as f32(), always as an owned copy whose bytes are read with pread: no page of
  // the mapping is touched (a tensor in one of ggml's block formats is decoded from the mapping,
  // as f32() does). A model whose layers are packed reads its norm and bias vectors so;
  // through the mapping, each would fault in (and keep resident) the kernel's read-around of
  // neighbouring pages, which belong to layer sources already packed and released.
  const float* f32_read(const std::string& name, const std::vector<int64_t>& shape);
  // The same values written to dst (numel floats) instead of kept by the store.
  void f32_read_into(const std::string& name, const std::vector<int64_t>& shape, float* dst);

  // Tensor `name` of shape (rows, cols) as an owned fp32 copy of shape (cols, rows). GPT-2 stores
  // its Conv1D weights (in, out); a matrix-vector product reads (out, in) rows faster.
  const float* f32_transposed(const std::string& name, const std::vector<int64_t>& shape);

  // The mapped blocks of tensor `name` where the file stores it in one of ggml's block formats
  // (gguf_blocks.h), setting *format; null for any other dtype or a missing tensor. The shape
  // must equal `shape`. f32() decodes such a tensor into an owned copy instead.
  const uint8_t* blocks(const std::string& name, const std::vector<int64_t>& shape, const BlockFormat** format) const;
  // The file that holds tensor `name` and the byte offset of its data there; null for a missing one.
  std::pair<const MappedFile*, uint64_t> source(const std::string& name) const;
  // Whether f32(name, ...) returns the mapped bytes themselves (fp32 at a 4-byte boundary).
  bool in_place(const std::string& name) const;

  // Copies fp32 matrix `name` of shape (rows, cols) into `dst` (rows * cols floats), transposed to
  // (cols, rows) when `transpose`, then drops its mapped pages from the resident set.
  void copy_f32(const std::string& name, const std::vector<int64_t>& shape, bool transpose, float* dst);

  // Tell the kernel that the mapped pages of tensor `name` will not be read soon (after a
  // converted copy was made): they leave the process's resident set and come back from the page
  // cache if they are read again. A hint only; the data stays valid.
  void release(const std::string& name) const;
  // The same for rows [first, first + n) of tensor `name`, stored as `rows` rows one after another
  // (a layer converted a run of rows at a time lets each run go as soon as it is done).
  void release_rows(const std::string& name, int64_t first, int64_t n, int64_t rows) const;

  uint64_t mapped_bytes() const;   // bytes of the mapped files
  uint64_t owned_bytes() const { return owned_bytes_; }  // bytes of converted copies

 private:
  struct Entry {
    TensorInfo info;
    DType dtype;
    bool supported;  // F32, F16 or BF16
    const BlockFormat* block;  // one of ggml's block formats, else null
  };
  const Entry& checked(const std::string& name, const std::vector<int64_t>& shape) const;
  float* owned(size_t numel);  // a new fp32 buffer the store keeps
  static size_t numel_of(const Entry& e);  // values in the tensor, in blocks or not
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::unordered_map<std::string, Entry> tensors_;
  std::vector<std::vector<float, HugePageAllocator<float>>> owned_;  // read on every step, as the mapping is
  uint64_t owned_bytes_ = 0;
};

std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace decodelab
