// What the safetensors reader and writer share (internal: in the library's srcs, so nothing
// outside models/hf/ can include it): the file names of a directory, the limits, the form of
// the errors ("safetensors: FILE: ..."), a file descriptor's owner, opening a regular file,
// and the strict JSON parse that headers and indexes go through.
// Invariants: every error made here names the file; text that came from a file is made
// printable before it goes into a message.
// Thread-safety: pure functions and constants; a ScopedFd is owned by one thread at a time.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/strict_json.h"

namespace strata {
namespace safetensors_internal {

// The reference implementation refuses larger headers too (a real one is a few MB at most).
inline constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
// The most bytes one pread or write moves, and so the most memory a call holds.
inline constexpr uint64_t kPieceBytes = uint64_t{4} << 20;
inline constexpr const char* kIndexName = "model.safetensors.index.json";
inline constexpr const char* kSingleName = "model.safetensors";
inline constexpr const char* kMetadataKey = "__metadata__";

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
  void Reset();

 private:
  int fd_;
};

// InvalidArgument / DataLoss "safetensors: FILE: WHAT"; InvalidTensor adds "tensor 'NAME': ".
Status InvalidFile(const std::string& file, const std::string& what);
Status LostFile(const std::string& file, const std::string& what);
Status InvalidTensor(const std::string& file, const std::string& name, const std::string& what);

// Bytes of a parser message that came from the file, made printable (\xNN).
std::string Printable(std::string_view text);

// "[d0, d1, ...]".
std::string ShapeText(const std::vector<int64_t>& shape);

// Opens `path` read-only and returns it with its size; a non-regular file is an error.
StatusOr<std::pair<ScopedFd, uint64_t>> OpenRegular(const std::string& path);

// Whether anything (a file, a directory) exists at `path`.
bool FileExists(const std::string& path);

// The strict JSON parse (core/strict_json.h) headers and indexes go through: a syntax error
// or a key twice in one object is a problem.
using ::strata::ParseJsonStrict;

}  // namespace safetensors_internal
}  // namespace strata
