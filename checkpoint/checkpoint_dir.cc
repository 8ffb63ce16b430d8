// A checkpoint directory as a whole: see checkpoint_dir.h.
#include "checkpoint/checkpoint_dir.h"

#include <sys/statvfs.h>

#include <cerrno>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_files.h"

namespace strata {

using checkpoint_internal::Errno;
using checkpoint_internal::ListCheckpoints;
using checkpoint_internal::ResolveCheckpoint;

Status CheckRoomForCheckpoint(const std::string& dir, uint64_t bytes) {
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) return Errno(errno, "statvfs of " + dir);
  const uint64_t free_bytes = uint64_t{fs.f_bavail} * fs.f_frsize;
  if (bytes > free_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("checkpoint: ", dir, " has ", free_bytes, " bytes free, a checkpoint needs ",
                     bytes, ": free space there or set train.checkpoint_dir elsewhere"));
  }
  return absl::OkStatus();
}

std::string LatestCheckpoint(const std::string& dir) {
  const auto found = ListCheckpoints(dir);
  return found.empty() ? std::string() : found.back().second.string();
}

StatusOr<std::string> ResolveCheckpointPath(const std::string& path) {
  return ResolveCheckpoint(path);
}

uint64_t CheckpointBytes(const Model& model) {
  uint64_t bytes = 1 << 20;  // checkpoint.json and slack (all ranks' files together)
  for (const UnitLayout& unit : model.units()) {
    if (unit.trainable()) bytes += 3 * unit.used_elements() * 4;
  }
  return bytes;
}

std::vector<std::string> RemovePartialCheckpoints(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> removed;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0 || !entry.is_directory(error)) continue;
    // step-<k>.partial (versions 1-5), or a step-<k> without its manifest (version 6).
    const bool partial = name.size() >= 8 && name.substr(name.size() - 8) == ".partial";
    if (!partial && fs::exists(entry.path() / "checkpoint.json", error)) continue;
    std::error_code removing;
    fs::remove_all(entry.path(), removing);
    if (!removing) removed.push_back(entry.path().string());
  }
  return removed;
}

}  // namespace strata
