// See safetensors.h. Opening reads the 8-byte length and the header only; ReadFloats preads
// just the requested bytes; the writers stream each tensor from its producer in pieces, so
// neither side ever holds a whole tensor.
#include "models/hf/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/atomic_file.h"
#include "core/dtype.h"
#include "core/pread_fully.h"
#include "kernels/cpu/elementwise.h"
#include "nvme/io_buffer.h"

// The header length and the elements are little-endian on disk and are used in place.
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "models/hf/safetensors.cc supports little-endian hosts only"
#endif

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

// The reference implementation refuses larger headers too (a real one is a few MB at most).
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
// The most bytes one pread or write moves, and so the most memory a call holds.
constexpr uint64_t kPieceBytes = uint64_t{4} << 20;
constexpr uint64_t kWritePieceElements = kPieceBytes / sizeof(float);
constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";
constexpr const char* kMetadataKey = "__metadata__";

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

// A file descriptor owned until released.
class ScopedFd {
 public:
  explicit ScopedFd(int fd = -1) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() { Reset(); }
  int get() const { return fd_; }
  int Release() { return std::exchange(fd_, -1); }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

Status InvalidFile(const std::string& file, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors: ", file, ": ", what));
}
Status LostFile(const std::string& file, const std::string& what) {
  return absl::DataLossError(absl::StrCat("safetensors: ", file, ": ", what));
}
Status InvalidTensor(const std::string& file, const std::string& name, const std::string& what) {
  return InvalidFile(file, absl::StrCat("tensor '", name, "': ", what));
}

// Bytes of a parser message that came from the file, made printable (\xNN).
std::string Printable(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      out.push_back(c);
    } else {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", byte));
    }
  }
  return out;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Opens `path` read-only and returns it with its size; a non-regular file is an error.
StatusOr<std::pair<ScopedFd, uint64_t>> OpenRegular(const std::string& path) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError(errno, absl::StrCat("safetensors: cannot open ", path));
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) {
    return ErrnoError(errno, absl::StrCat("safetensors: stat of ", path));
  }
  if (!S_ISREG(info.st_mode)) {
    return InvalidFile(path, S_ISDIR(info.st_mode)
                                 ? "is a directory (SafetensorsSet::OpenDirectory opens one)"
                                 : "is not a regular file");
  }
  return std::make_pair(std::move(fd), static_cast<uint64_t>(info.st_size));
}

// Parses JSON text into *out. Returns "" or what is wrong: a syntax error (which includes
// invalid UTF-8) or a key that appears twice in one object (nlohmann would keep the last
// silently). For a key twice at the top level `duplicate_top_key` is set.
std::string ParseJsonStrict(std::string_view text, nlohmann::json* out,
                            std::string* duplicate_top_key) {
  struct OpenObject {
    std::set<std::string> keys;
    std::string last_key;
  };
  std::vector<OpenObject> open;
  // A raw NUL is never valid JSON, but nlohmann takes it for the end of the input.
  const size_t nul = text.find('\0');
  if (nul != std::string_view::npos) {
    return absl::StrCat("is not valid UTF-8 JSON: a NUL byte at offset ", nul);
  }
  std::string problem;
  auto callback = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) {
      open.emplace_back();
    } else if (event == Event::object_end) {
      if (!open.empty()) open.pop_back();
    } else if (event == Event::key && !open.empty()) {
      std::string key = parsed.get<std::string>();
      if (!open.back().keys.insert(key).second && problem.empty()) {
        if (depth == 1) {
          *duplicate_top_key = key;
          problem = absl::StrCat("key '", key, "' appears twice");
        } else {
          problem = absl::StrCat("key '", key, "' appears twice in the object of '",
                                 open.size() >= 2 ? open[open.size() - 2].last_key : "", "'");
        }
      }
      open.back().last_key = std::move(key);
    }
    return true;
  };
  try {
    *out = nlohmann::json::parse(text.begin(), text.end(), callback);
  } catch (const nlohmann::json::exception& e) {
    return absl::StrCat("is not valid UTF-8 JSON: ", Printable(e.what()));
  }
  return problem;
}

// The dtype named in a header entry.
StatusOr<StDType> ParseDTypeEntry(const std::string& file, const std::string& name,
                                  const nlohmann::json& value) {
  if (!value.is_string()) {
    return InvalidTensor(file, name, absl::StrCat("\"dtype\" is not a string: ", value.dump()));
  }
  const std::string text = value.get<std::string>();
  for (const StDType dtype : {StDType::kF32, StDType::kBF16, StDType::kF16}) {
    if (text == StDTypeName(dtype)) return dtype;
  }
  static const std::set<std::string>* const kOtherDtypes = new std::set<std::string>{
      "BOOL", "U8",  "I8", "I16",     "U16",     "I32",     "U32",     "I64",    "U64",
      "F64",  "C64", "F4", "F6_E2M3", "F6_E3M2", "F8_E4M3", "F8_E5M2", "F8_E8M0"};
  if (kOtherDtypes->count(text) != 0) {
    return InvalidTensor(file, name,
                         absl::StrCat("dtype ", text, " is not supported: F32, BF16, F16 are"));
  }
  return InvalidTensor(
      file, name,
      absl::StrCat("unknown dtype '", Printable(text), "' (supported: F32, BF16, F16)"));
}

// The shape of a header entry, and its element count.
Status ParseShapeEntry(const std::string& file, const std::string& name,
                       const nlohmann::json& value, std::vector<int64_t>* shape, uint64_t* numel) {
  if (!value.is_array()) {
    return InvalidTensor(file, name, absl::StrCat("\"shape\" is not an array: ", value.dump()));
  }
  shape->clear();
  *numel = 1;
  for (const nlohmann::json& dim : value) {
    if (!dim.is_number_integer()) {
      return InvalidTensor(file, name,
                           absl::StrCat("\"shape\" ", value.dump(), " holds a non-integer"));
    }
    if (dim.is_number_unsigned()) {
      if (dim.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return InvalidTensor(file, name, absl::StrCat("shape ", value.dump(), " is too large"));
      }
    } else if (dim.get<int64_t>() < 0) {
      return InvalidTensor(file, name, absl::StrCat("negative dimension in shape ", value.dump()));
    }
    const auto size = dim.get<int64_t>();
    shape->push_back(size);
    if (__builtin_mul_overflow(*numel, static_cast<uint64_t>(size), numel)) {
      return InvalidTensor(file, name, absl::StrCat("shape ", value.dump(), " is too large"));
    }
  }
  return absl::OkStatus();
}

// The [begin, end) of a header entry's data_offsets.
Status ParseOffsetsEntry(const std::string& file, const std::string& name,
                         const nlohmann::json& value, uint64_t* begin, uint64_t* end) {
  if (!value.is_array() || value.size() != 2 || !value[0].is_number_unsigned() ||
      !value[1].is_number_unsigned()) {
    return InvalidTensor(
        file, name,
        absl::StrCat("\"data_offsets\" is not two non-negative integers: ", value.dump()));
  }
  *begin = value[0].get<uint64_t>();
  *end = value[1].get<uint64_t>();
  if (*end < *begin) {
    return InvalidTensor(file, name,
                         absl::StrCat("data_offsets ", value.dump(), " end before they begin"));
  }
  return absl::OkStatus();
}

// One file's checked header: its tensors (absolute offsets) and metadata, and the open file.
struct ParsedFile {
  ScopedFd fd;
  std::vector<StTensor> tensors;  // in header order
  std::map<std::string, std::string> metadata;
};

// A tensor's range in the data section, for the layout checks.
struct DataRange {
  uint64_t begin;
  uint64_t end;
  const std::string* name;
};

// Every byte of the data section in exactly one tensor: sorted by begin, each range starts
// where the previous ended and the last ends at the section's end.
Status CheckLayout(const std::string& file, std::vector<DataRange> ranges, uint64_t data_bytes) {
  std::sort(ranges.begin(), ranges.end(), [](const DataRange& a, const DataRange& b) {
    return std::tie(a.begin, a.end, *a.name) < std::tie(b.begin, b.end, *b.name);
  });
  uint64_t covered = 0;
  const std::string* previous = nullptr;
  for (const DataRange& range : ranges) {
    if (range.begin < covered) {
      return InvalidFile(file, absl::StrCat("tensors '", *previous, "' and '", *range.name,
                                            "' overlap (the second's data_offsets begin at ",
                                            range.begin, ", the first's end at ", covered, ")"));
    }
    if (range.begin > covered) {
      return InvalidFile(
          file, absl::StrCat("bytes [", covered, ", ", range.begin,
                             ") of the data section belong to no tensor (a gap ",
                             previous == nullptr ? "before '"
                                                 : absl::StrCat("between '", *previous, "' and '"),
                             *range.name, "'); the format requires the data to be fully indexed"));
    }
    covered = range.end;
    previous = range.name;
  }
  if (covered != data_bytes) {
    return InvalidFile(
        file, absl::StrCat(data_bytes - covered, " bytes after the last tensor",
                           previous == nullptr
                               ? " (the header lists none)"
                               : absl::StrCat(" ('", *previous, "' ends at ", covered, ")"),
                           " in a data section of ", data_bytes,
                           " bytes; the format requires the data to be fully indexed"));
  }
  return absl::OkStatus();
}

// Opens `path` and checks its header and layout completely (see safetensors.h).
StatusOr<ParsedFile> ParseFile(const std::string& path) {
  ASSIGN_OR_RETURN(auto opened, OpenRegular(path));
  ParsedFile parsed;
  parsed.fd = std::move(opened.first);
  const uint64_t file_bytes = opened.second;
  if (file_bytes < 8) {
    return LostFile(path, absl::StrCat("has ", file_bytes,
                                       " bytes, fewer than the 8 of the header length (truncated, "
                                       "or not a safetensors file)"));
  }
  uint64_t header_bytes = 0;
  RETURN_IF_ERROR(
      PreadFully(parsed.fd.get(), &header_bytes, 8, 0, absl::StrCat("safetensors: ", path, ": header length")));
  if (header_bytes > kMaxHeaderBytes) {
    return InvalidFile(
        path, absl::StrCat("header length ", header_bytes, " is larger than the limit of 100 MiB (",
                           kMaxHeaderBytes, " bytes): not a safetensors file?"));
  }
  if (header_bytes > file_bytes - 8) {
    return LostFile(
        path, absl::StrCat("header length ", header_bytes, " is larger than the ", file_bytes - 8,
                           " bytes after it: the file is truncated (or not a "
                           "safetensors file)"));
  }
  std::string header(header_bytes, '\0');
  RETURN_IF_ERROR(
      PreadFully(parsed.fd.get(), header.data(), header_bytes, 8, absl::StrCat("safetensors: ", path, ": header")));
  nlohmann::json json;
  std::string duplicate;
  const std::string problem = ParseJsonStrict(header, &json, &duplicate);
  if (!duplicate.empty()) {
    return InvalidFile(path,
                       absl::StrCat("tensor name '", duplicate, "' appears twice in the header"));
  }
  if (!problem.empty()) return InvalidFile(path, absl::StrCat("header ", problem));
  if (!json.is_object()) {
    return InvalidFile(path, absl::StrCat("header is not a JSON object but a ", json.type_name()));
  }

  const uint64_t data_start = 8 + header_bytes;
  const uint64_t data_bytes = file_bytes - data_start;
  for (const auto& [name, entry] : json.items()) {
    if (name == kMetadataKey) {
      if (!entry.is_object()) {
        return InvalidFile(path, "\"__metadata__\" is not an object of strings");
      }
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          return InvalidFile(path, absl::StrCat("\"__metadata__\" value of '", key,
                                                "' is not a string: ", value.dump()));
        }
        parsed.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object()) {
      return InvalidTensor(path, name, absl::StrCat("entry is not an object: ", entry.dump()));
    }
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      if (!entry.contains(key)) {
        return InvalidTensor(path, name, absl::StrCat("entry lacks \"", key, "\""));
      }
    }
    StTensor tensor;
    tensor.name = name;
    tensor.file = path;
    ASSIGN_OR_RETURN(tensor.dtype, ParseDTypeEntry(path, name, entry["dtype"]));
    RETURN_IF_ERROR(ParseShapeEntry(path, name, entry["shape"], &tensor.shape, &tensor.numel));
    uint64_t begin = 0;
    uint64_t end = 0;
    RETURN_IF_ERROR(ParseOffsetsEntry(path, name, entry["data_offsets"], &begin, &end));
    const uint64_t element_bytes = StDTypeBytes(tensor.dtype);
    if (__builtin_mul_overflow(tensor.numel, element_bytes, &tensor.bytes) ||
        end - begin != tensor.bytes) {
      return InvalidTensor(
          path, name,
          absl::StrCat("data_offsets [", begin, ", ", end, "] hold ", end - begin,
                       " bytes, but shape ", ShapeText(tensor.shape), " of ",
                       StDTypeName(tensor.dtype), " needs ", tensor.numel, " * ", element_bytes,
                       tensor.numel > std::numeric_limits<uint64_t>::max() / element_bytes
                           ? " (overflows)"
                           : absl::StrCat(" = ", tensor.numel * element_bytes)));
    }
    if (end > data_bytes) {
      return absl::DataLossError(absl::StrCat(
          "safetensors: ", path, ": tensor '", name, "': data_offsets [", begin, ", ", end,
          "] end beyond the data section of ", data_bytes, " bytes: the file is truncated (it has ",
          file_bytes, " bytes, this tensor needs ", data_start + end, ")"));
    }
    tensor.offset = data_start + begin;
    parsed.tensors.push_back(std::move(tensor));
  }
  // Ranges point into parsed.tensors, whose size is final now.
  std::vector<DataRange> ranges;
  ranges.reserve(parsed.tensors.size());
  for (const StTensor& tensor : parsed.tensors) {
    ranges.push_back(
        {tensor.offset - data_start, tensor.offset - data_start + tensor.bytes, &tensor.name});
  }
  RETURN_IF_ERROR(CheckLayout(path, std::move(ranges), data_bytes));
  return parsed;
}

bool FileExists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

// The whole (small) file at `path`.
StatusOr<std::string> ReadSmallFile(const std::string& path) {
  ASSIGN_OR_RETURN(auto opened, OpenRegular(path));
  if (opened.second > kMaxHeaderBytes) {
    return InvalidFile(path, absl::StrCat("has ", opened.second,
                                          " bytes, more than an index "
                                          "may (100 MiB)"));
  }
  std::string text(opened.second, '\0');
  RETURN_IF_ERROR(PreadFully(opened.first.get(), text.data(), text.size(), 0, "safetensors: " + path));
  return text;
}

// A shard file named in an index must lie in the index's directory or below it.
bool IsPlainRelativePath(const std::string& name) {
  if (name.empty() || name[0] == '/') return false;
  for (const auto& part : std::filesystem::path(name)) {
    if (part == "..") return false;
  }
  return true;
}

// ---- writing ----

// A tensor to write with its checked size and place.
struct PlannedTensor {
  const StOutputTensor* tensor;
  uint64_t numel;
  uint64_t bytes;
};

Status CheckOutputTensors(const std::string& where, const std::vector<StOutputTensor>& tensors,
                          StDType dtype, std::vector<PlannedTensor>* planned) {
  std::set<std::string> names;
  for (const StOutputTensor& tensor : tensors) {
    if (tensor.name.empty() || tensor.name == kMetadataKey) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors: writing ", where, ": a tensor name may not be '", tensor.name, "'"));
    }
    if (!names.insert(tensor.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: writing ", where, ": tensor '",
                                                     tensor.name, "' is given twice"));
    }
    if (!tensor.fill) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: writing ", where, ": tensor '",
                                                     tensor.name, "' has no fill function"));
    }
    uint64_t numel = 1;
    for (const int64_t size : tensor.shape) {
      if (size < 0 || __builtin_mul_overflow(numel, static_cast<uint64_t>(size), &numel)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "safetensors: writing ", where, ": tensor '", tensor.name, "' has shape ",
            ShapeText(tensor.shape), size < 0 ? " with a negative dimension" : ", too large"));
      }
    }
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(numel, StDTypeBytes(dtype), &bytes)) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: writing ", where, ": tensor '",
                                                     tensor.name, "' is too large"));
    }
    planned->push_back({&tensor, numel, bytes});
  }
  return absl::OkStatus();
}

// The 8-byte length and the header, padded with spaces to a multiple of 8 bytes.
StatusOr<std::string> HeaderBytes(const std::string& path,
                                  const std::vector<PlannedTensor>& tensors, StDType dtype,
                                  const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const PlannedTensor& planned : tensors) {
    header[planned.tensor->name] = {{"dtype", StDTypeName(dtype)},
                                    {"shape", planned.tensor->shape},
                                    {"data_offsets", {offset, offset + planned.bytes}}};
    offset += planned.bytes;
  }
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: writing ", path,
                     ": a name or metadata string is not valid UTF-8: ", Printable(e.what())));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t length = text.size();
  std::string bytes(reinterpret_cast<const char*>(&length), 8);
  return bytes + text;
}

// Writes the checked tensors into `path`, whole or not at all.
Status WritePlannedFile(const std::string& path, const std::vector<PlannedTensor>& tensors,
                        StDType dtype, const std::map<std::string, std::string>& metadata) {
  ASSIGN_OR_RETURN(const std::string header, HeaderBytes(path, tensors, dtype, metadata));
  return Annotate(WriteFileAtomically(path, [&](int fd, const std::string& partial) -> Status {
    RETURN_IF_ERROR(WriteAllBytes(fd, header.data(), header.size(), partial));
    std::vector<float> values;
    std::vector<uint16_t> halves;
    for (const PlannedTensor& planned : tensors) {
      const StOutputTensor& tensor = *planned.tensor;
      for (uint64_t begin = 0; begin < planned.numel; begin += kWritePieceElements) {
        const uint64_t count = std::min(kWritePieceElements, planned.numel - begin);
        values.resize(count);
        RETURN_IF_ERROR(
            Annotate(tensor.fill(begin, count, values.data()),
                     absl::StrCat("writing ", path, ": tensor '", tensor.name, "' elements [",
                                  begin, ", ", begin + count, ")")));
        if (dtype == StDType::kF32) {
          RETURN_IF_ERROR(WriteAllBytes(fd, values.data(), count * sizeof(float), partial));
          continue;
        }
        halves.resize(count);
        for (uint64_t i = 0; i < count; ++i) {
          halves[i] = dtype == StDType::kBF16 ? ToBf16(values[i]).bits : FloatToHalf(values[i]);
        }
        RETURN_IF_ERROR(WriteAllBytes(fd, halves.data(), count * sizeof(uint16_t), partial));
      }
    }
    return absl::OkStatus();
  }), "safetensors");
}

// Writes `text` to `path` whole or not at all.
Status WriteTextFile(const std::string& path, const std::string& text) {
  return Annotate(WriteFileAtomically(path, text), "safetensors");
}

// model-DDDDD-of-DDDDD.safetensors, the shard names this writer (and transformers) uses.
bool IsShardName(const std::string& name) {
  const std::string prefix = "model-";
  const std::string suffix = ".safetensors";
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const std::string middle =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  const size_t of = middle.find("-of-");
  if (of == std::string::npos || of == 0 || of + 4 == middle.size()) return false;
  const std::string digits = middle.substr(0, of) + middle.substr(of + 4);
  return std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

Status RemoveIfPresent(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoError(errno, "safetensors: removing stale " + path);
  }
  return absl::OkStatus();
}

}  // namespace

const char* StDTypeName(StDType dtype) {
  switch (dtype) {
    case StDType::kF32:
      return "F32";
    case StDType::kBF16:
      return "BF16";
    case StDType::kF16:
      return "F16";
  }
  return "?";
}

size_t StDTypeBytes(StDType dtype) { return dtype == StDType::kF32 ? 4 : 2; }

float HalfToFloat(uint16_t half_bits) {
  const uint32_t sign = static_cast<uint32_t>(half_bits & 0x8000u) << 16;
  const uint32_t exponent = (half_bits >> 10) & 0x1fu;
  uint32_t mantissa = half_bits & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // infinity, or NaN with its payload
  } else if (exponent != 0) {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal: mantissa * 2^-24; normalize so the leading 1 becomes implicit.
    int shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    bits = sign | (static_cast<uint32_t>(127 - 15 + 1 - shift) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

uint16_t FloatToHalf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN: keep the top payload bits, and quiet
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  // 65520 (0x477ff000) is halfway between 65504, the largest half (odd mantissa), and 2^16:
  // it and everything above round to infinity.
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (magnitude >= 0x38800000u) {  // normal half (>= 2^-14): drop 13 bits, ties to even
    const uint32_t rounded = magnitude - 0x38000000u + 0xfffu + ((magnitude >> 13) & 1u);
    return static_cast<uint16_t>(sign | (rounded >> 13));
  }
  // Subnormal half: round(value * 2^24) with ties to even; 2^-25 and below round to zero.
  const uint32_t exponent = magnitude >> 23;
  if (exponent < 102) return sign;  // below 2^-25 (float subnormals included)
  const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - exponent;  // 14..24: value * 2^24 = mantissa >> shift
  uint32_t quotient = mantissa >> shift;
  const uint32_t remainder = mantissa & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (remainder > half || (remainder == half && (quotient & 1u))) ++quotient;
  return static_cast<uint16_t>(sign | quotient);
}

StatusOr<SafetensorsSet> SafetensorsSet::OpenFile(const std::string& path) {
  ASSIGN_OR_RETURN(ParsedFile parsed, ParseFile(path));
  SafetensorsSet set;
  set.files_[path] = std::make_shared<const FileHandle>(parsed.fd.Release(), path);
  set.tensors_ = std::move(parsed.tensors);
  set.metadata_ = std::move(parsed.metadata);
  std::sort(set.tensors_.begin(), set.tensors_.end(),
            [](const StTensor& a, const StTensor& b) { return a.name < b.name; });
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

  ASSIGN_OR_RETURN(const std::string text, ReadSmallFile(index_path));
  nlohmann::json index;
  std::string duplicate;
  const std::string problem = ParseJsonStrict(text, &index, &duplicate);
  if (!problem.empty()) return InvalidFile(index_path, problem);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return InvalidFile(index_path, "is not a JSON object with a \"weight_map\" object");
  }
  // Shard file -> the tensors the index puts there.
  std::map<std::string, std::set<std::string>> by_shard;
  std::map<std::string, std::string> shard_of;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string() || !IsPlainRelativePath(shard.get<std::string>())) {
      return InvalidFile(index_path,
                         absl::StrCat("weight_map: tensor '", name, "' maps to ", shard.dump(),
                                      ", not a file name in the directory"));
    }
    by_shard[shard.get<std::string>()].insert(name);
    shard_of[name] = shard.get<std::string>();
  }

  SafetensorsSet set;
  std::map<std::string, std::string> found_in;  // tensor -> the shard holding it
  for (const auto& [shard, names] : by_shard) {
    const std::string path = dir + "/" + shard;
    if (!FileExists(path)) {
      return LostFile(
          index_path,
          absl::StrCat("shard ", shard, " (holding '", *names.begin(), "'",
                       names.size() > 1 ? absl::StrCat(" and ", names.size() - 1, " more") : "",
                       ") is missing: no file ", path));
    }
    ASSIGN_OR_RETURN(ParsedFile parsed, ParseFile(path));
    if (set.files_.empty()) set.metadata_ = parsed.metadata;
    for (StTensor& tensor : parsed.tensors) {
      const auto [previous, inserted] = found_in.emplace(tensor.name, shard);
      if (!inserted) {
        return InvalidFile(index_path, absl::StrCat("tensor '", tensor.name, "' is in two shards: ",
                                                    previous->second, " and ", shard));
      }
      const auto listed = shard_of.find(tensor.name);
      if (listed == shard_of.end()) {
        return InvalidFile(index_path, absl::StrCat("shard ", shard, " holds tensor '", tensor.name,
                                                    "', which the index's weight_map lacks"));
      }
      set.tensors_.push_back(std::move(tensor));
    }
    set.files_[path] = std::make_shared<const FileHandle>(parsed.fd.Release(), path);
  }
  for (const auto& [name, shard] : shard_of) {
    const auto found = found_in.find(name);
    if (found == found_in.end() || found->second != shard) {
      return InvalidFile(
          index_path,
          absl::StrCat("weight_map puts tensor '", name, "' in ", shard, ", which does not hold it",
                       found == found_in.end() ? " (no shard does)"
                                               : absl::StrCat(" (", found->second, " does)")));
    }
  }
  std::sort(set.tensors_.begin(), set.tensors_.end(),
            [](const StTensor& a, const StTensor& b) { return a.name < b.name; });
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

Status WriteSafetensors(const std::string& path, const std::vector<StOutputTensor>& tensors,
                        StDType dtype, const std::map<std::string, std::string>& metadata) {
  std::vector<PlannedTensor> planned;
  RETURN_IF_ERROR(CheckOutputTensors(path, tensors, dtype, &planned));
  return WritePlannedFile(path, planned, dtype, metadata);
}

StatusOr<std::vector<std::string>> WriteSafetensorsDirectory(
    const std::string& dir, const std::vector<StOutputTensor>& tensors, StDType dtype,
    uint64_t max_shard_bytes, const std::map<std::string, std::string>& metadata) {
  if (max_shard_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: writing ", dir, ": max_shard_bytes must be positive"));
  }
  std::vector<PlannedTensor> planned;
  RETURN_IF_ERROR(CheckOutputTensors(dir, tensors, dtype, &planned));
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("safetensors: cannot create ", dir, ": ", error.message()));
  }
  const std::string index_path = dir + "/" + kIndexName;
  // Gone first: a failure below must not leave an index that names half-written shards.
  RETURN_IF_ERROR(RemoveIfPresent(index_path));

  // Shards in the given order, each closed before the next tensor would overflow it.
  std::vector<std::vector<PlannedTensor>> shards(1);
  uint64_t shard_bytes = 0;
  uint64_t total_bytes = 0;
  for (const PlannedTensor& tensor : planned) {
    if (!shards.back().empty() && shard_bytes + tensor.bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(tensor);
    shard_bytes += tensor.bytes;
    total_bytes += tensor.bytes;
  }
  std::vector<std::string> written;
  std::set<std::string> written_names;
  if (total_bytes <= max_shard_bytes) {
    const std::string path = dir + "/" + kSingleName;
    RETURN_IF_ERROR(WritePlannedFile(path, planned, dtype, metadata));
    written.push_back(path);
    written_names.insert(kSingleName);
  } else {
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t s = 0; s < shards.size(); ++s) {
      const std::string name =
          absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, shards.size());
      const std::string path = dir + "/" + name;
      RETURN_IF_ERROR(WritePlannedFile(path, shards[s], dtype, metadata));
      for (const PlannedTensor& tensor : shards[s]) weight_map[tensor.tensor->name] = name;
      written.push_back(path);
      written_names.insert(name);
    }
    written_names.insert(kIndexName);
    // Stale files go before the index appears, so the index never sits beside them.
    for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
      const std::string name = entry.path().filename().string();
      if ((name == kSingleName || IsShardName(name)) && written_names.count(name) == 0) {
        RETURN_IF_ERROR(RemoveIfPresent(entry.path().string()));
      }
    }
    if (error) {
      return absl::InternalError(
          absl::StrCat("safetensors: cannot list ", dir, ": ", error.message()));
    }
    const nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}},
                                  {"weight_map", weight_map}};
    RETURN_IF_ERROR(WriteTextFile(index_path, index.dump(2) + "\n"));
    written.push_back(index_path);
  }
  if (written_names.count(kIndexName) == 0) {
    // model.safetensors alone: shards of an earlier, larger export are stale.
    for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
      const std::string name = entry.path().filename().string();
      if (IsShardName(name)) RETURN_IF_ERROR(RemoveIfPresent(entry.path().string()));
    }
    if (error) {
      return absl::InternalError(
          absl::StrCat("safetensors: cannot list ", dir, ": ", error.message()));
    }
  }
  Annotate(SyncPath(dir), "safetensors").IgnoreError();  // the renames durable (best effort)
  return written;
}

}  // namespace strata
