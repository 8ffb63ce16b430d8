// The reader of safetensors.h: SafetensorsSet opened from one file or a directory (the
// checks in safetensors_header.cc and safetensors_index.cc) and its reads. ReadFloats preads
// just the requested bytes, in pieces, so a read never holds a whole tensor.
#include "models/hf/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/pread_fully.h"
#include "kernels/cpu/elementwise.h"
#include "models/hf/safetensors_common.h"
#include "models/hf/safetensors_header.h"
#include "models/hf/safetensors_index.h"
#include "nvme/io_buffer.h"

namespace strata {

// An open file, closed with the last SafetensorsSet copy that shares it: a plain
// descriptor, and a second one with O_DIRECT (-1 where the file system refuses it, e.g.
// tmpfs) for large reads, which then bypass the page cache: a model's weights are read
// once, and caching them would only push out what the machine needs.
class SafetensorsSet::FileHandle {
 public:
  FileHandle(int fd, const std::string& path)
      : fd_(fd), direct_fd_(::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC)) {}
  ~FileHandle() {
    ::close(fd_);
    if (direct_fd_ >= 0) ::close(direct_fd_);
  }
  FileHandle(const FileHandle&) = delete;
  FileHandle& operator=(const FileHandle&) = delete;
  int fd() const { return fd_; }
  int direct_fd() const { return direct_fd_; }

 private:
  const int fd_;
  const int direct_fd_;
};

namespace {

using safetensors_internal::FileExists;
using safetensors_internal::InvalidFile;
using safetensors_internal::kIndexName;
using safetensors_internal::kPieceBytes;
using safetensors_internal::kSingleName;
using safetensors_internal::ParsedFile;
using safetensors_internal::ParsedSet;
using safetensors_internal::ParseFile;
using safetensors_internal::ParseShardedSet;

// O_DIRECT's alignment of offsets, sizes and memory (the logical block size of every
// common device; a device with larger blocks refuses, and the read falls back).
constexpr uint64_t kDirectAlign = 4096;
// Reads below this go through the page cache (a header, a norm's weights).
constexpr uint64_t kDirectMinBytes = uint64_t{256} << 10;

// Bytes [offset, offset + size) of the file behind `direct_fd`, read into an aligned bounce
// buffer kept per thread: returns where they start in it (valid until this thread's next
// read), or null where O_DIRECT fails: the caller reads the range through the page cache
// instead (and reports any error there).
const char* ReadDirectView(int direct_fd, uint64_t offset, uint64_t size) {
  // On 2 MiB pages: a virtual disk's O_DIRECT reads into 4 KiB pages run several times
  // slower (a request carries a limited number of memory segments; shared/MACHINE.md).
  thread_local nvme::IoBuffer bounce;
  const uint64_t begin = offset & ~(kDirectAlign - 1);
  const uint64_t end = (offset + size + kDirectAlign - 1) & ~(kDirectAlign - 1);
  if (bounce.bytes() < end - begin) {
    bounce = nvme::IoBuffer();
    nvme::IoBufferOptions options;
    options.populate = false;  // the reads fault it in (and no smaps measuring per thread)
    StatusOr<nvme::IoBuffer> grown = nvme::IoBuffer::Allocate(end - begin, options);
    if (!grown.ok()) return nullptr;
    bounce = std::move(*grown);
  }
  // The last block may pass the end of the file: O_DIRECT then reads short, which is
  // fine as long as the asked-for bytes arrived.
  const uint64_t needed = offset + size - begin;
  uint64_t got = 0;
  while (got < needed) {
    const ssize_t n = ::pread(direct_fd, bounce.data() + got, end - begin - got,
                              static_cast<off_t>(begin + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return nullptr;
    got += static_cast<uint64_t>(n);
    if (got % kDirectAlign != 0) break;  // short: the file's end
  }
  if (got < needed) return nullptr;
  return bounce.data() + (offset - begin);
}

// ReadDirectView copied into `out`; false where O_DIRECT fails.
bool ReadDirect(int direct_fd, uint64_t offset, uint64_t size, void* out) {
  const char* view = ReadDirectView(direct_fd, offset, size);
  if (view == nullptr) return false;
  std::memcpy(out, view, size);
  return true;
}

// `n` 16-bit values (BF16 or F16; any alignment) widened to fp32 into out: bf16 through the
// CPU kernels' vectorised cast, f16 exactly (HalfToFloat keeps NaN payloads).
void WidenHalves(StDType dtype, const char* halves, uint64_t n, float* out) {
  if (dtype == StDType::kBF16 && reinterpret_cast<uintptr_t>(halves) % alignof(bf16) == 0) {
    cpu::CastToFloat(out, reinterpret_cast<const bf16*>(halves), n);
    return;
  }
  for (uint64_t i = 0; i < n; ++i) {
    uint16_t bits;
    std::memcpy(&bits, halves + i * sizeof(bits), sizeof(bits));
    out[i] = dtype == StDType::kBF16 ? ToFloat(bf16{bits}) : HalfToFloat(bits);
  }
}

// What a read of bytes [offset, offset + size) of `tensor` names in its errors.
std::string BytesWhat(const StTensor& tensor, uint64_t offset, uint64_t size) {
  return absl::StrCat("safetensors: ", tensor.file, ": tensor '", tensor.name, "': bytes [", offset,
                      ", ", offset + size, ")");
}

Status CheckBf16(const StTensor& tensor) {
  if (tensor.dtype == StDType::kBF16) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("safetensors: ", tensor.file, ": tensor '",
                                                 tensor.name, "' is ", StDTypeName(tensor.dtype),
                                                 ", not BF16"));
}

// A set's tensors sorted by name, as Find looks them up.
void SortByName(std::vector<StTensor>* tensors) {
  std::sort(tensors->begin(), tensors->end(),
            [](const StTensor& a, const StTensor& b) { return a.name < b.name; });
}

}  // namespace

StatusOr<SafetensorsSet> SafetensorsSet::OpenFile(const std::string& path) {
  ASSIGN_OR_RETURN(ParsedFile parsed, ParseFile(path));
  SafetensorsSet set;
  set.files_[path] = std::make_shared<const FileHandle>(parsed.fd.Release(), path);
  set.tensors_ = std::move(parsed.tensors);
  set.metadata_ = std::move(parsed.metadata);
  SortByName(&set.tensors_);
  return set;
}

StatusOr<SafetensorsSet> SafetensorsSet::OpenDirectory(const std::string& dir) {
  const std::string index_path = dir + "/" + kIndexName;
  const std::string single_path = dir + "/" + kSingleName;
  const bool has_index = FileExists(index_path);
  const bool has_single = FileExists(single_path);
  if (has_index && has_single) {
    return InvalidFile(dir, absl::StrCat("holds both ", kSingleName, " and ", kIndexName,
                                         ": one of them is stale; remove it"));
  }
  if (has_single) return OpenFile(single_path);
  if (!has_index) {
    if (!FileExists(dir)) {
      return absl::NotFoundError(absl::StrCat("safetensors: no directory ", dir));
    }
    return absl::NotFoundError(
        absl::StrCat("safetensors: ", dir, " holds neither ", kSingleName, " nor ", kIndexName));
  }

  ASSIGN_OR_RETURN(ParsedSet parsed, ParseShardedSet(dir, index_path));
  SafetensorsSet set;
  for (auto& [path, fd] : parsed.files) {
    set.files_[path] = std::make_shared<const FileHandle>(fd.Release(), path);
  }
  set.tensors_ = std::move(parsed.tensors);
  set.metadata_ = std::move(parsed.metadata);
  SortByName(&set.tensors_);
  return set;
}

const StTensor* SafetensorsSet::Find(const std::string& name) const {
  const auto it = std::lower_bound(
      tensors_.begin(), tensors_.end(), name,
      [](const StTensor& tensor, const std::string& key) { return tensor.name < key; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

Status SafetensorsSet::CheckRead(const StTensor& tensor, uint64_t begin, uint64_t count) const {
  if (files_.find(tensor.file) == files_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor '", tensor.name,
                                                   "' names file ", tensor.file,
                                                   ", which is not part of this set"));
  }
  if (begin > tensor.numel || count > tensor.numel - begin) {
    return absl::OutOfRangeError(absl::StrCat("safetensors: ", tensor.file, ": tensor '",
                                              tensor.name, "': elements [", begin, ", ",
                                              begin + count, ") are outside its ", tensor.numel));
  }
  return absl::OkStatus();
}

StatusOr<const float*> SafetensorsSet::ReadFloatsView(const StTensor& tensor, uint64_t begin,
                                                      uint64_t count) const {
  RETURN_IF_ERROR(CheckRead(tensor, begin, count));
  const FileHandle& handle = *files_.find(tensor.file)->second;
  const uint64_t offset = tensor.offset + begin * sizeof(float);
  const uint64_t size = count * sizeof(float);
  // fp32 read with O_DIRECT: the elements are used where they land (when float-aligned).
  if (tensor.dtype == StDType::kF32 && handle.direct_fd() >= 0 && size >= kDirectMinBytes) {
    const char* view = ReadDirectView(handle.direct_fd(), offset, size);
    if (view != nullptr && reinterpret_cast<uintptr_t>(view) % alignof(float) == 0) {
      return reinterpret_cast<const float*>(view);
    }
  }
  thread_local std::vector<float> floats;
  if (floats.size() < count) floats.resize(count);
  RETURN_IF_ERROR(ReadFloats(tensor, begin, count, floats.data()));
  return static_cast<const float*>(floats.data());
}

Status SafetensorsSet::ReadFloats(const StTensor& tensor, uint64_t begin, uint64_t count,
                                  float* out) const {
  RETURN_IF_ERROR(CheckRead(tensor, begin, count));
  const auto file = files_.find(tensor.file);
  const FileHandle& handle = *file->second;
  const int fd = handle.fd();
  // A piece through O_DIRECT where it is large and the file allows it, else (or where
  // that fails) through the page cache, whose errors name the bytes.
  const size_t element_bytes = StDTypeBytes(tensor.dtype);
  const uint64_t piece_elements = kPieceBytes / element_bytes;
  for (uint64_t done = 0; done < count;) {
    const uint64_t n = std::min(piece_elements, count - done);
    const uint64_t offset = tensor.offset + (begin + done) * element_bytes;
    const uint64_t size = n * element_bytes;
    if (tensor.dtype == StDType::kF32) {
      // Same layout on disk and in memory (little-endian IEEE): read straight into out.
      if (handle.direct_fd() < 0 || size < kDirectMinBytes ||
          !ReadDirect(handle.direct_fd(), offset, size, out + done)) {
        RETURN_IF_ERROR(PreadFully(fd, out + done, size, offset, BytesWhat(tensor, offset, size)));
      }
    } else {
      // 16-bit values widened where they land: in the O_DIRECT bounce buffer, else in a
      // buffer of this thread's (no copy between, no fresh buffer per read).
      const char* halves = nullptr;
      if (handle.direct_fd() >= 0 && size >= kDirectMinBytes) {
        halves = ReadDirectView(handle.direct_fd(), offset, size);
      }
      if (halves == nullptr) {
        thread_local std::vector<uint16_t> staged;
        if (staged.size() < n) staged.resize(n);
        RETURN_IF_ERROR(
            PreadFully(fd, staged.data(), size, offset, BytesWhat(tensor, offset, size)));
        halves = reinterpret_cast<const char*>(staged.data());
      }
      WidenHalves(tensor.dtype, halves, n, out + done);
    }
    done += n;
  }
  return absl::OkStatus();
}

StatusOr<const bf16*> SafetensorsSet::ReadBf16View(const StTensor& tensor, uint64_t begin,
                                                   uint64_t count) const {
  RETURN_IF_ERROR(CheckRead(tensor, begin, count));
  RETURN_IF_ERROR(CheckBf16(tensor));
  const FileHandle& handle = *files_.find(tensor.file)->second;
  const uint64_t offset = tensor.offset + begin * sizeof(bf16);
  const uint64_t size = count * sizeof(bf16);
  const char* view = nullptr;
  if (handle.direct_fd() >= 0 && size >= kDirectMinBytes) {
    view = ReadDirectView(handle.direct_fd(), offset, size);
    if (view != nullptr && reinterpret_cast<uintptr_t>(view) % alignof(bf16) == 0) {
      return reinterpret_cast<const bf16*>(view);
    }
  }
  // At an odd address (an odd header length), or through the page cache: in this thread's
  // own buffer.
  thread_local std::vector<bf16> staged;
  if (staged.size() < count) staged.resize(count);
  if (view != nullptr) {
    std::memcpy(staged.data(), view, size);
  } else {
    RETURN_IF_ERROR(
        PreadFully(handle.fd(), staged.data(), size, offset, BytesWhat(tensor, offset, size)));
  }
  return static_cast<const bf16*>(staged.data());
}

Status SafetensorsSet::ReadBf16(const StTensor& tensor, uint64_t begin, uint64_t count, bf16* raw,
                                float* widened) const {
  RETURN_IF_ERROR(CheckRead(tensor, begin, count));
  RETURN_IF_ERROR(CheckBf16(tensor));
  const FileHandle& handle = *files_.find(tensor.file)->second;
  constexpr uint64_t kPieceElements = kPieceBytes / sizeof(bf16);
  // Widened in slices that stay in the core's cache after their copy.
  constexpr uint64_t kSliceElements = uint64_t{16} << 10;
  for (uint64_t done = 0; done < count;) {
    const uint64_t n = std::min(kPieceElements, count - done);
    const uint64_t offset = tensor.offset + (begin + done) * sizeof(bf16);
    const uint64_t size = n * sizeof(bf16);
    bf16* to = raw + done;
    const char* view = nullptr;
    if (handle.direct_fd() >= 0 && size >= kDirectMinBytes) {
      view = ReadDirectView(handle.direct_fd(), offset, size);
    }
    if (view == nullptr) {  // straight into raw through the page cache
      RETURN_IF_ERROR(PreadFully(handle.fd(), to, size, offset, BytesWhat(tensor, offset, size)));
    }
    for (uint64_t s = 0; s < n; s += kSliceElements) {
      const uint64_t m = std::min(kSliceElements, n - s);
      if (view != nullptr) std::memcpy(to + s, view + s * sizeof(bf16), m * sizeof(bf16));
      if (widened != nullptr) cpu::CastToFloat(widened + done + s, to + s, m);
    }
    done += n;
  }
  return absl::OkStatus();
}

}  // namespace strata
