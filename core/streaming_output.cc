// See streaming_output.h.
#include "core/streaming_output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "core/file_kind.h"
#include "core/run_inputs.h"

namespace strata {
namespace {

bool SameFile(const struct stat& a, int fd) {
  struct stat b {};
  return ::fstat(fd, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino &&
         a.st_rdev == b.st_rdev;
}

// A character device a stream may go to, judged before it is opened (opening some devices
// acts on them): /dev/null (1:3), a terminal (Linux's tty majors 4 and 5, pseudo-terminals
// 136-143), or what this process's standard output or error already is.
bool AllowedDevice(const struct stat& info) {
  const unsigned int dev_major = major(info.st_rdev);
  if (dev_major == 1 && minor(info.st_rdev) == 3) return true;
  if (dev_major == 4 || dev_major == 5 || (dev_major >= 136 && dev_major <= 143)) return true;
  return SameFile(info, STDOUT_FILENO) || SameFile(info, STDERR_FILENO);
}

}  // namespace

StatusOr<std::FILE*> OpenStreamingOutput(const std::string& path, const std::string& what,
                                         bool append) {
  const std::string named = absl::StrCat(what, " ", path);
  if (std::optional<std::string> input = FindRunInput(path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot write ", named, ": it is an input of this run (", *input,
        "); strata never writes an output over its own input: choose another path"));
  }
  struct stat info {};
  const bool exists = ::stat(path.c_str(), &info) == 0;
  if (!exists && errno != ENOENT) return ErrnoError(errno, "stat of " + named);
  if (exists && !S_ISREG(info.st_mode) && !S_ISFIFO(info.st_mode) && !S_ISCHR(info.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("cannot write ", named, ": it is ",
                                                   FileKindName(info.st_mode)));
  }
  if (exists && S_ISCHR(info.st_mode) && !AllowedDevice(info)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot write ", named, ": it is a character device other than /dev/null, a terminal "
        "or this process's standard output or error"));
  }
  // O_NONBLOCK: a FIFO without a reader fails with ENXIO instead of blocking the run.
  int flags = O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  if (!exists || S_ISREG(info.st_mode)) flags |= O_CREAT | (append ? O_APPEND : O_TRUNC);
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) {
    if (errno == ENXIO && exists && S_ISFIFO(info.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot write ", named, ": it is a FIFO (named pipe) that nobody reads; start its "
          "reader first"));
    }
    return ErrnoError(errno, "cannot open " + named);
  }
  const int current = ::fcntl(fd, F_GETFL);
  if (current >= 0) ::fcntl(fd, F_SETFL, current & ~O_NONBLOCK);
  std::FILE* file = ::fdopen(fd, append ? "a" : "w");
  if (file == nullptr) {
    const int error = errno;
    ::close(fd);
    return ErrnoError(error, "cannot open " + named);
  }
  return file;
}

}  // namespace strata
