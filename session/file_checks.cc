// Start-up file checks; see file_checks.h.
#include "session/file_checks.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "core/file_kind.h"

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

Status CheckOutput(const std::string& config_path, const std::string& flag,
                   const std::string& path, const Options& options) {
  if (path.empty()) return absl::OkStatus();
  for (const auto& [input, what] :
       {std::pair<std::string, std::string>{config_path, "the config file (--config)"},
        {options.data.path, "the data file (data.path)"}}) {
    if (SameFile(path, input)) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, " ", path, " is ", what,
          ": writing there would destroy it; choose another file"));
    }
  }
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0) {
    if (S_ISDIR(info.st_mode)) {  // a pipe or /dev/null is fine to write to
      return absl::InvalidArgumentError(absl::StrCat(flag, " ", path,
                                                     " is a directory; name a file in it"));
    }
    if (::access(path.c_str(), W_OK) != 0) {
      return ErrnoError(errno, absl::StrCat(flag, " ", path, " cannot be written"));
    }
    return absl::OkStatus();
  }
  std::string parent = std::filesystem::path(path).parent_path().string();
  if (parent.empty()) parent = ".";
  if (::stat(parent.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return absl::NotFoundError(absl::StrCat(flag, " ", path, ": its directory ",
                                            parent, " does not exist"));
  }
  if (::access(parent.c_str(), W_OK | X_OK) != 0) {
    return ErrnoError(errno, absl::StrCat(flag, " ", path, ": its directory ", parent,
                                          " is not writable"));
  }
  return absl::OkStatus();
}

}  // namespace

Status CheckOutputsAreNotInputs(const std::string& config_path,
                                const std::vector<OutputFile>& outputs, const Options& options) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    RETURN_IF_ERROR(CheckOutput(config_path, outputs[i].flag, outputs[i].path, options));
    for (size_t j = 0; j < i; ++j) {
      if (!outputs[i].path.empty() && outputs[i].path == outputs[j].path) {
        return absl::InvalidArgumentError(absl::StrCat(outputs[j].flag, " and ", outputs[i].flag,
                                                       " both name ", outputs[i].path,
                                                       ": give each its own file"));
      }
    }
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
