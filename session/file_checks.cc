// Start-up file checks; see file_checks.h.
#include "session/file_checks.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "core/atomic_file.h"
#include "core/file_kind.h"
#include "core/lock_file.h"
#include "core/run_inputs.h"

namespace strata {
namespace {

Status CheckOutput(const std::string& flag, const std::string& path, bool whole_file) {
  if (path.empty()) return absl::OkStatus();
  if (whole_file) RETURN_IF_ERROR(CheckWholeFileOutput(path, flag));
  if (std::optional<std::string> input = FindRunInput(path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot write ", flag, " ", path, ": it is an input of this run (", *input,
        "); writing there would destroy it: choose another file"));
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

std::string SourcePath(const std::string& source) {
  for (const char* prefix : {"hf:", "llmc:", "sentencepiece:"}) {
    const std::string p(prefix);
    if (source.rfind(p, 0) == 0) return source.substr(p.size());
  }
  return "";
}

Status NoteOptionInputs(const std::string& config_path, const Options& options) {
  if (!config_path.empty()) RETURN_IF_ERROR(NoteRunInputPath(config_path, "the --config file"));
  if (!options.data.path.empty()) {
    RETURN_IF_ERROR(NoteRunInputPath(options.data.path, "the data file (data.path)"));
  }
  const std::string model = SourcePath(options.model.from);
  if (!model.empty()) RETURN_IF_ERROR(NoteRunInputPath(model, "the model (model.from)"));
  const std::string tokenizer = SourcePath(options.data.tokenizer);
  if (!tokenizer.empty()) {
    RETURN_IF_ERROR(NoteRunInputPath(tokenizer, "the tokenizer (data.tokenizer)"));
  }
  if (!options.train.resume.empty()) {
    RETURN_IF_ERROR(NoteRunInputPath(options.train.resume, "the checkpoint (train.resume)"));
  }
  return absl::OkStatus();
}

Status CheckOutputsAreNotInputs(const std::string& config_path,
                                const std::vector<OutputFile>& outputs, const Options& options) {
  RETURN_IF_ERROR(NoteOptionInputs(config_path, options));
  for (size_t i = 0; i < outputs.size(); ++i) {
    RETURN_IF_ERROR(CheckOutput(outputs[i].flag, outputs[i].path, outputs[i].whole_file));
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

StatusOr<std::unique_ptr<DirLock>> ClaimCheckpointDir(const Options& options,
                                                      uint64_t checkpoint_bytes) {
  const std::string& dir = options.train.checkpoint_dir;
  if (dir.empty()) return std::unique_ptr<DirLock>();
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
  ASSIGN_OR_RETURN(std::unique_ptr<DirLock> lock,
                   DirLock::Acquire(dir, kCheckpointLockName, "train.checkpoint_dir"));
  Status room = CheckRoomForCheckpoint(dir, checkpoint_bytes);
  if (!room.ok()) return Annotate(room, "train.checkpoint_dir at start-up");
  return lock;
}

}  // namespace strata
