// See atomic_file.h.
#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "core/files.h"

namespace strata {

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
