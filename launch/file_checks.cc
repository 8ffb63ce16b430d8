// Start-up file checks; see file_checks.h.
#include "launch/file_checks.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/file_kind.h"
#include "launch/checkpoint.h"

namespace strata {
namespace {

// True when `a` and `b` name the same existing file.
bool SameFile(const std::string& a, const std::string& b) {
  struct stat first {};
  struct stat second {};
  return !a.empty() && !b.empty() && ::stat(a.c_str(), &first) == 0 &&
         ::stat(b.c_str(), &second) == 0 && first.st_dev == second.st_dev &&
         first.st_ino == second.st_ino;
}

}  // namespace

Status CheckOutputsAreNotInputs(const std::string& config_path, const std::string& metrics_path,
                                const Options& options) {
  if (metrics_path.empty()) return absl::OkStatus();
  for (const auto& [input, what] :
       {std::pair<std::string, std::string>{config_path, "the config file (--config)"},
        {options.data.path, "the data file (data.path)"}}) {
    if (SameFile(metrics_path, input)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--metrics ", metrics_path, " is ", what,
          ": writing metrics there would destroy it; choose another metrics file"));
    }
  }
  struct stat info {};
  if (::stat(metrics_path.c_str(), &info) == 0) {
    if (S_ISDIR(info.st_mode)) {  // a pipe or /dev/null is fine to write to
      return absl::InvalidArgumentError(absl::StrCat("--metrics ", metrics_path,
                                                     " is a directory; name a file in it"));
    }
    if (::access(metrics_path.c_str(), W_OK) != 0) {
      return ErrnoError(errno, absl::StrCat("--metrics ", metrics_path, " cannot be written"));
    }
    return absl::OkStatus();
  }
  std::string parent = std::filesystem::path(metrics_path).parent_path().string();
  if (parent.empty()) parent = ".";
  if (::stat(parent.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return absl::NotFoundError(absl::StrCat("--metrics ", metrics_path, ": its directory ",
                                            parent, " does not exist"));
  }
  if (::access(parent.c_str(), W_OK | X_OK) != 0) {
    return ErrnoError(errno, absl::StrCat("--metrics ", metrics_path, ": its directory ", parent,
                                          " is not writable"));
  }
  return absl::OkStatus();
}

Status CheckCheckpointDir(const Options& options, uint64_t checkpoint_bytes) {
  const std::string& dir = options.train.checkpoint_dir;
  if (dir.empty()) return absl::OkStatus();
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "train.checkpoint_dir ", dir, " cannot be created: ",
        error ? error.message() : std::string(std::strerror(errno))));
  }
  if (!S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("train.checkpoint_dir ", dir, " is ", FileKindName(info.st_mode)));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return ErrnoError(errno, absl::StrCat("train.checkpoint_dir ", dir, " is not writable"));
  }
  Status room = CheckRoomForCheckpoint(dir, checkpoint_bytes);
  if (!room.ok()) return Annotate(room, "train.checkpoint_dir at start-up");
  return absl::OkStatus();
}

}  // namespace strata
