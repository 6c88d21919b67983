#include "decodelab/weights.h"

#include "decodelab/aligned.h"
#include "decodelab/bf16.h"
#include "decodelab/dtypes.h"
#include "decodelab/f16.h"
#include "decodelab/gguf_blocks.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <sstream>
#include <stdexcept>

namespace decodelab {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

DType parse_dtype(const std::string& dtype, const std::string& tensor) {
  DType d;
  if (find_dtype(kStorageTypeNames, dtype, &d)) return d;
  throw std::invalid_argument("tensor '" + tensor + "' has dtype " + dtype +
                              "; supported dtypes are F32, F16 and BF16");
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
  }
  return 0;
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);  // kept for read(): not for a program this one starts
  if (fd < 0) throw std::invalid_argument("cannot open model file " + path + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw std::invalid_argument("cannot stat model file " + path);
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      throw std::invalid_argument("cannot memory-map model file " + path + ": " + std::strerror(errno));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  fd_ = fd;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  ::close(fd_);
}

void MappedFile::read(uint64_t offset, size_t n, void* dst) const {
  auto* out = static_cast<uint8_t*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, out, n, static_cast<off_t>(offset));
    const int err = errno;
    if (got < 0 && err == EINTR) continue;
    if (got <= 0) {
      const std::string why = got < 0 ? std::string(": ") + std::strerror(err) : "";
      throw std::runtime_error("model file " + path_ + " no longer holds the " + std::to_string(n) +
                               " bytes at offset " + std::to_string(offset) + why);
    }
    out += got, offset += static_cast<uint64_t>(got), n -= static_cast<size_t>(got);
  }
}

WeightStore::WeightStore(const std::vector<std::string>& files, const std::vector<TensorInfo>& tensors) {
  for (const auto& f : files) files_.push_back(std::make_unique<MappedFile>(f));
  for (const auto& t : tensors) {
    const std::string where = "tensor '" + t.name + "'";
    if (t.file < 0 || static_cast<size_t>(t.file) >= files_.size())
      throw std::invalid_argument(where + " refers to file index " + std::to_string(t.file) +
                                  ", but there are " + std::to_string(files_.size()) + " files");
    // A dtype the engine cannot use is kept (the tensor may be unused, e.g. an int buffer) and
    // refused only if the model asks for it; its bounds are still checked here.
    DType dt = DType::F32;
    const bool supported = find_dtype(kStorageTypeNames, t.dtype, &dt);
    const BlockFormat* block = find_block_format(t.dtype);
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) throw std::invalid_argument(where + " has a negative dimension in shape " + shape_str(t.shape));
      if (d > 0 && numel > std::numeric_limits<uint64_t>::max() / 16 / static_cast<uint64_t>(d))
        throw std::invalid_argument(where + " has an impossibly large shape " + shape_str(t.shape));
      numel *= static_cast<uint64_t>(d);
    }
    if (supported && numel * dtype_size(dt) != t.nbytes)
      throw std::invalid_argument(where + " with shape " + shape_str(t.shape) + " and dtype " + t.dtype +
                                  " needs " + std::to_string(numel * dtype_size(dt)) + " bytes, but its data holds " +
                                  std::to_string(t.nbytes));
    if (block) {  // whole blocks along each row (GGUF's rule), then the bytes those blocks take
      const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
      if (cols % block->elems != 0)
        throw std::invalid_argument(where + " with shape " + shape_str(t.shape) + " has rows of " +
                                    std::to_string(cols) + " values, not a multiple of " + t.dtype + "'s blocks of " +
                                    std::to_string(block->elems));
      const uint64_t need = numel / block->elems * block->bytes;
      if (need != t.nbytes)
        throw std::invalid_argument(where + " with shape " + shape_str(t.shape) + " and dtype " + t.dtype +
                                    " needs " + std::to_string(need) + " bytes, but its data holds " +
                                    std::to_string(t.nbytes));
    }
    const uint64_t fsize = files_[t.file]->size();
    if (t.offset > fsize || t.nbytes > fsize - t.offset)
      throw std::invalid_argument(where + " spans bytes [" + std::to_string(t.offset) + ", " +
                                  std::to_string(t.offset + t.nbytes) + ") but " + files_[t.file]->path() +
                                  " has only " + std::to_string(fsize) + " bytes (truncated or corrupt file)");
    if (!tensors_.emplace(t.name, Entry{t, dt, supported, block}).second)
      throw std::invalid_argument(where + " appears twice");
  }
}

uint64_t WeightStore::mapped_bytes() const {
  uint64_t n = 0;
  for (const auto& f : files_) n += f->size();
  return n;
}


const WeightStore::Entry& WeightStore::checked(const std::string& name, const std::vector<int64_t>& shape) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw std::invalid_argument("tensor '" + name + "' is missing from the checkpoint");
  const Entry& e = it->second;
  if (!e.supported && !e.block) parse_dtype(e.info.dtype, name);  // throws, naming the dtype
  if (e.info.shape != shape)
    throw std::invalid_argument("tensor '" + name + "' has shape " + shape_str(e.info.shape) +
                                " but the config implies " + shape_str(shape));
  return e;
}

size_t WeightStore::numel_of(const Entry& e) {
  return e.block ? e.info.nbytes / e.block->bytes * e.block->elems : e.info.nbytes / dtype_size(e.dtype);
}

float* WeightStore::owned(size_t numel) {
  owned_.emplace_back(numel);
  owned_bytes_ += numel * sizeof(float);
  return owned_.back().data();
}

// f16 / bf16 values at src (any alignment) widened into dst.
static void widen_halves(const uint8_t* src, DType dtype, size_t numel, float* dst) {
  for (size_t i = 0; i < numel; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = dtype == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
}

const float* WeightStore::f32(const std::string& name, const std::vector<int64_t>& shape) {
  const Entry& e = checked(name, shape);
  const uint8_t* src = files_[e.info.file]->data() + e.info.offset;
  const size_t numel = numel_of(e);
  if (e.block) {  // decoded once into a buffer the store owns
    float* dst = owned(numel);
    dequantize_blocks(*e.block, src, numel, dst);
    return dst;
  }
  if (e.dtype == DType::F32 && reinterpret_cast<uintptr_t>(src) % alignof(float) == 0)
    return reinterpret_cast<const float*>(src);
  float* dst = owned(numel);
  if (e.dtype == DType::F32) std::memcpy(dst, src, numel * sizeof(float));
  else widen_halves(src, e.dtype, numel, dst);
  return dst;
}

const float* WeightStore::f32_read(const std::string& name, const std::vector<int64_t>& shape) {
  float* dst = owned(numel_of(checked(name, shape)));
  f32_read_into(name, shape, dst);
  return dst;
}

void WeightStore::f32_read_into(const std::string& name, const std::vector<int64_t>& shape, float* dst) {
  const Entry& e = checked(name, shape);
  const size_t numel = numel_of(e);
  if (e.block) {  // ggml keeps norms and biases in F32; a vector in blocks decodes from the mapping
    dequantize_blocks(*e.block, files_[e.info.file]->data() + e.info.offset, numel, dst);
    return;
  }
  if (e.dtype == DType::F32) {
    files_[e.info.file]->read(e.info.offset, e.info.nbytes, dst);
  } else {
    std::vector<uint8_t> raw(e.info.nbytes);
    files_[e.info.file]->read(e.info.offset, raw.size(), raw.data());
    widen_halves(raw.data(), e.dtype, numel, dst);
  }
}

const uint8_t* WeightStore::blocks(const std::string& name, const std::vector<int64_t>& shape,
                                   const BlockFormat** format) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end() || !it->second.block) return nullptr;
  const Entry& e = it->second;
  if (e.info.shape != shape)
    throw std::invalid_argument("tensor '" + name + "' has shape " + shape_str(e.info.shape) +
                                " but the config implies " + shape_str(shape));
  *format = e.block;
  return files_[e.info.file]->data() + e.info.offset;
}

std::pair<const MappedFile*, uint64_t> WeightStore::source(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return {nullptr, 0};
  return {files_[it->second.info.file].get(), it->second.info.offset};
}

bool WeightStore::in_place(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return false;
  const Entry& e = it->second;
  return e.supported && e.dtype == DType::F32 &&
         reinterpret_cast<uintptr_t>(files_[e.info.file]->data() + e.info.offset) % alignof(float) == 0;
}

void WeightStore::copy_f32(const std::string& name, const std::vector<int64_t>& shape, bool transpose, float* dst) {
  if (shape.size() != 2) throw std::invalid_argument("tensor '" + name + "': only matrices are copied");
  const size_t owned_before = owned_.size();
  const float* src = f32(name, shape);  // checks name, dtype and shape; may convert into owned_
  const int64_t R = shape[0], C = shape[1];
  if (transpose) {
    // Blocked so that both the rows read and the rows written stay in cache.
    constexpr int64_t kB = 64;
#pragma omp parallel for schedule(static) collapse(2)
    for (int64_t r0 = 0; r0 < R; r0 += kB)
      for (int64_t c0 = 0; c0 < C; c0 += kB)
        for (int64_t r = r0; r < std::min(R, r0 + kB); ++r)
          for (int64_t c = c0; c < std::min(C, c0 + kB); ++c) dst[c * R + r] = src[r * C + c];
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < R; ++r) std::memcpy(dst + r * C, src + r * C, static_cast<size_t>(C) * sizeof(float));
  }
  if (owned_.size() > owned_before) {  // the fp32 conversion is no longer needed
    owned_bytes_ -= owned_.back().size() * sizeof(float);
    owned_.pop_back();
  }
  release(name);
}

const float* WeightStore::f32_transposed(const std::string& name, const std::vector<int64_t>& shape) {
  if (shape.size() != 2) throw std::invalid_argument("tensor '" + name + "': only matrices can be transposed");
  std::vector<float, HugePageAllocator<float>> out(static_cast<size_t>(shape[0]) * shape[1]);
  copy_f32(name, shape, true, out.data());
  owned_.push_back(std::move(out));
  owned_bytes_ += owned_.back().size() * sizeof(float);
  return owned_.back().data();
}

void WeightStore::release(const std::string& name) const { release_rows(name, 0, 1, 1); }

void WeightStore::release_rows(const std::string& name, int64_t first, int64_t n, int64_t rows) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end() || rows <= 0 || first < 0 || n <= 0 || first + n > rows) return;
  const TensorInfo& t = it->second.info;
  const long page = ::sysconf(_SC_PAGESIZE);
  if (page <= 0) return;
  const uintptr_t base = reinterpret_cast<uintptr_t>(files_[t.file]->data() + t.offset);
  const uint64_t row_bytes = t.nbytes / static_cast<uint64_t>(rows);
  const uintptr_t lo = base + static_cast<uint64_t>(first) * row_bytes;
  const uintptr_t hi = first + n == rows ? base + t.nbytes : base + static_cast<uint64_t>(first + n) * row_bytes;
  // Only pages that lie wholly inside the rows: a neighbour sharing a page keeps it.
  const uintptr_t a = (lo + page - 1) / page * page, b = hi / page * page;
  if (b > a) ::madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
}

}  // namespace decodelab
