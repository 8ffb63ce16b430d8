// What the safetensors reader and writer share; see safetensors_common.h.
#include "models/hf/safetensors_common.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "core/input_file.h"
#include "core/strict_json.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace strata {
namespace safetensors_internal {

void ScopedFd::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status InvalidFile(const std::string& file, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors: ", file, ": ", what));
}
Status LostFile(const std::string& file, const std::string& what) {
  return absl::DataLossError(absl::StrCat("safetensors: ", file, ": ", what));
}
Status InvalidTensor(const std::string& file, const std::string& name, const std::string& what) {
  return InvalidFile(file, absl::StrCat("tensor '", name, "': ", what));
}

std::string Printable(std::string_view text) { return PrintableText(text); }

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

StatusOr<std::pair<ScopedFd, uint64_t>> OpenRegular(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
    return InvalidFile(path, "is a directory (SafetensorsSet::OpenDirectory opens one)");
  }
  // Regular, never blocking, noted as an input of the run (core/input_file.h).
  StatusOr<InputFile> opened = InputFile::Open(path, "safetensors: file");
  if (!opened.ok()) {
    if (opened.status().code() == absl::StatusCode::kInvalidArgument) {
      return InvalidFile(path, "is not a regular file");
    }
    return opened.status();
  }
  const uint64_t size = opened->size();
  return std::make_pair(ScopedFd(opened->Release()), size);
}

bool FileExists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

}  // namespace safetensors_internal
}  // namespace strata
