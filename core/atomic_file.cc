// See atomic_file.h.
#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

// Flushes the directory holding `path`, so a rename into it survives a crash.
void SyncParentDirectory(const std::string& path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  if (parent.empty()) parent = ".";
  const int fd = ::open(parent.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

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

Status WriteFileAtomically(
    const std::string& path,
    const std::function<Status(int fd, const std::string& partial)>& write) {
  const std::string partial = path + ".partial";
  const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(errno, "cannot create " + partial);
  Status status = write(fd, partial);
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoError(errno, "syncing " + partial);
  if (::close(fd) != 0 && status.ok()) status = ErrnoError(errno, "closing " + partial);
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

Status WriteFileAtomically(const std::string& path, std::string_view bytes) {
  return WriteFileAtomically(path, [&](int fd, const std::string& partial) {
    return WriteAllBytes(fd, bytes.data(), bytes.size(), partial);
  });
}

}  // namespace strata
