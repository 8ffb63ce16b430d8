// See files.h.
#include "core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

constexpr size_t kPieceBytes = 64u << 20;

template <typename Bytes>
Status ReadInto(const std::string& path, Bytes* bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "cannot open " + path);
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    return ErrnoError(error, "stat of " + path);
  }
  // A regular file: its size. Else (size 0 in /proc, unknown for a pipe): to the end.
  const bool sized = S_ISREG(info.st_mode) && info.st_size > 0;
  size_t want = sized ? static_cast<size_t>(info.st_size) : 0;
  bytes->resize(sized ? want : 4096);
  size_t done = 0;
  while (!sized || done < want) {
    if (!sized && done == bytes->size()) bytes->resize(bytes->size() * 2);
    const ssize_t got =
        ::read(fd, bytes->data() + done, std::min(bytes->size() - done, kPieceBytes));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int error = errno;
      ::close(fd);
      return ErrnoError(error, "reading " + path);
    }
    if (got == 0) {
      if (!sized) break;
      ::close(fd);
      return absl::DataLossError(absl::StrCat(path, " shrank while it was read (", done, " of ",
                                              want, " bytes)"));
    }
    done += static_cast<size_t>(got);
  }
  ::close(fd);
  bytes->resize(done);
  return absl::OkStatus();
}

}  // namespace

Status ReadFileInto(const std::string& path, std::string* bytes) { return ReadInto(path, bytes); }

Status ReadFileInto(const std::string& path, std::vector<char>* bytes) {
  return ReadInto(path, bytes);
}

StatusOr<std::string> ReadFile(const std::string& path) {
  std::string bytes;
  RETURN_IF_ERROR(ReadFileInto(path, &bytes));
  return bytes;
}

Status WriteAllBytes(int fd, const void* data, size_t size, const std::string& what) {
  const auto* bytes = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, bytes + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoError(n < 0 ? errno : EIO, "writing " + what);
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

Status SyncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "cannot open " + path);
  if (::fsync(fd) != 0) {
    const int error = errno;
    ::close(fd);
    return ErrnoError(error, "syncing " + path);
  }
  if (::close(fd) != 0) return ErrnoError(errno, "closing " + path);
  return absl::OkStatus();
}

void SyncParentDirectory(const std::string& path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  if (parent.empty()) parent = ".";
  SyncPath(parent).IgnoreError();
}

}  // namespace strata
