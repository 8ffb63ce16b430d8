// See atomic_file.h.
#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "core/file_kind.h"
#include "core/files.h"
#include "core/remove_on_signal.h"
#include "core/run_inputs.h"

namespace strata {
namespace {

Status NotAnInput(const std::string& path, const std::string& what) {
  if (std::optional<std::string> input = FindRunInput(path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot write ", what, " ", path, ": it is an input of this run (", *input,
        "); strata never writes an output over its own input: choose another path"));
  }
  return absl::OkStatus();
}

// Removes a stale PATH.partial (a regular file or a symbolic link; unlink never follows the
// link), so that the new one is created by this writer.
Status ClearPartial(const std::string& partial) {
  struct stat info {};
  if (::lstat(partial.c_str(), &info) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoError(errno, "stat of " + partial);
  }
  if (!S_ISREG(info.st_mode) && !S_ISLNK(info.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot write ", partial, ": it exists and is ", FileKindName(info.st_mode),
        "; remove it or choose another path"));
  }
  if (::unlink(partial.c_str()) != 0 && errno != ENOENT) {
    return ErrnoError(errno, "removing the stale " + partial);
  }
  return absl::OkStatus();
}

}  // namespace

Status CheckWholeFileOutput(const std::string& path, const std::string& what) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoError(errno, absl::StrCat("stat of ", what, " ", path));
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot write ", what, " ", path, ": it is ", FileKindName(info.st_mode),
        "; strata writes a whole-file output only to a new path or over a regular file, ",
        "never over a link, a device, a FIFO or a directory: remove it or choose another path"));
  }
  return NotAnInput(path, what);
}

Status CheckOutputDirectory(const std::string& dir, const std::string& what) {
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoError(errno, absl::StrCat("stat of ", what, " ", dir));
  }
  if (!S_ISDIR(info.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("cannot write ", what, " ", dir, ": it is ",
                                                   FileKindName(info.st_mode),
                                                   ", not a directory"));
  }
  return NotAnInput(dir, what);
}

Status WriteFileAtomically(
    const std::string& path,
    const std::function<Status(int fd, const std::string& partial)>& write,
    const std::string& what) {
  RETURN_IF_ERROR(CheckWholeFileOutput(path, what));
  const std::string partial = path + ".partial";
  RETURN_IF_ERROR(ClearPartial(partial));
  const int fd =
      ::open(partial.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, "cannot create " + partial);
  RemoveOnSignal remove_on_signal(partial);
  Status status = write(fd, partial);
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoError(errno, "syncing " + partial);
  if (::close(fd) != 0 && status.ok()) status = ErrnoError(errno, "closing " + partial);
  // Checked again: the target may have changed while the bytes were written.
  if (status.ok()) status = CheckWholeFileOutput(path, what);
  if (status.ok() && ::rename(partial.c_str(), path.c_str()) != 0) {
    status = ErrnoError(errno, absl::StrCat("renaming ", partial, " to ", path));
  }
  if (!status.ok()) {
    ::unlink(partial.c_str());
    return status;
  }
  SyncParentDirectory(path);
  return absl::OkStatus();
}

Status WriteFileAtomically(const std::string& path, std::string_view bytes,
                           const std::string& what) {
  return WriteFileAtomically(
      path,
      [&](int fd, const std::string& partial) {
        return WriteAllBytes(fd, bytes.data(), bytes.size(), partial);
      },
      what);
}

}  // namespace strata
