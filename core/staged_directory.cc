// See staged_directory.h.
#include "core/staged_directory.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/atomic_file.h"
#include "core/files.h"
#include "core/remove_on_signal.h"
#include "core/run_identity.h"

namespace strata {

namespace fs = std::filesystem;

StatusOr<std::unique_ptr<StagedDirectory>> StagedDirectory::Begin(const std::string& dir,
                                                                  const std::string& what) {
  RETURN_IF_ERROR(CheckOutputDirectory(dir, what));
  std::string base = dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  std::unique_ptr<StagedDirectory> staged(new StagedDirectory);
  staged->dir_ = base;
  staged->what_ = what;
  staged->staging_ = absl::StrCat(base, ".partial-", RunId());
  std::error_code error;
  fs::remove_all(staged->staging_, error);  // this run's own, from an earlier attempt
  const fs::path parent = fs::path(base).parent_path();
  if (!parent.empty()) fs::create_directories(parent, error);
  if (::mkdir(staged->staging_.c_str(), 0755) != 0) {
    return ErrnoError(errno, absl::StrCat(what, ": cannot create ", staged->staging_));
  }
  staged->remove_on_signal_slot_ = RegisterRemoveOnSignal(staged->staging_);
  return staged;
}

StagedDirectory::~StagedDirectory() {
  UnregisterRemoveOnSignal(remove_on_signal_slot_);
  if (!committed_ && !staging_.empty()) {
    std::error_code error;
    fs::remove_all(staging_, error);
  }
}

StatusOr<int> StagedDirectory::Commit() {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(staging_, error)) {
    names.push_back(entry.path().filename().string());
  }
  if (error) return absl::UnknownError(absl::StrCat(what_, ": listing ", staging_, ": ",
                                                    error.message()));
  for (const std::string& name : names) RETURN_IF_ERROR(SyncPath(staging_ + "/" + name));
  struct stat info {};
  if (::stat(dir_.c_str(), &info) != 0 && errno == ENOENT) {
    if (::rename(staging_.c_str(), dir_.c_str()) != 0) {
      return ErrnoError(errno, absl::StrCat(what_, ": renaming ", staging_, " to ", dir_));
    }
  } else {
    RETURN_IF_ERROR(CheckOutputDirectory(dir_, what_));
    for (const std::string& name : names) {  // checked first: nothing moves unless all may
      RETURN_IF_ERROR(CheckWholeFileOutput(dir_ + "/" + name, what_ + " file"));
    }
    for (const std::string& name : names) {
      const std::string from = staging_ + "/" + name, to = dir_ + "/" + name;
      if (::rename(from.c_str(), to.c_str()) != 0) {
        return ErrnoError(errno, absl::StrCat(what_, ": renaming ", from, " to ", to));
      }
    }
    ::rmdir(staging_.c_str());
  }
  committed_ = true;
  // The renames on the disk: the target's entries, and the target's own entry in its
  // parent. Best effort, as core/atomic_file.h: the files are complete either way.
  SyncPath(dir_).IgnoreError();
  SyncParentDirectory(dir_);
  return static_cast<int>(names.size());
}

}  // namespace strata
