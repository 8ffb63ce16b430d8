// See pread_fully.h.
#include "core/pread_fully.h"

#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"

namespace strata {

Status PreadFully(int fd, void* data, uint64_t size, uint64_t offset, const std::string& what) {
  auto* bytes = static_cast<char*>(data);
  uint64_t done = 0;
  while (done < size) {
    const ssize_t got = ::pread(fd, bytes + done, size - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoError(errno, absl::StrCat(what, ": pread"));
    if (got == 0) {
      return absl::DataLossError(absl::StrCat(what, ": the file ends at byte ", offset + done,
                                              ", before byte ", offset + size,
                                              ": the file is truncated"));
    }
    done += static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

}  // namespace strata
