// See input_file.h.
#include "core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "core/bytes.h"
#include "core/file_kind.h"
#include "core/run_inputs.h"

namespace strata {

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    size_ = other.size_;
    other.fd_ = -1;
  }
  return *this;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

int InputFile::Release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

StatusOr<InputFile> InputFile::Open(const std::string& path, const std::string& what,
                                    uint64_t max_bytes) {
  const std::string named = absl::StrCat(what, " ", path);
  // O_NONBLOCK: opening a FIFO without a writer returns at once (and is refused below);
  // a regular file ignores the flag.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return ErrnoError(errno, "cannot open " + named);
  InputFile file;
  file.fd_ = fd;
  struct stat info {};
  if (::fstat(fd, &info) != 0) return ErrnoError(errno, "stat of " + named);
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        named, " is ", FileKindName(info.st_mode), ", not a regular file: strata reads ",
        "inputs only from regular files"));
  }
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  if (size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(named, " is ", FormatBytes(size),
                                                   ", more than the ", FormatBytes(max_bytes),
                                                   " such a file may be"));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  file.size_ = size;
  NoteRunInputFd(fd, named);
  return file;
}

namespace {

template <typename Bytes>
Status ReadInto(const std::string& path, const std::string& what, uint64_t max_bytes,
                Bytes* bytes) {
  ASSIGN_OR_RETURN(InputFile file, InputFile::Open(path, what, max_bytes));
  bytes->resize(file.size());
  size_t done = 0;
  while (done < file.size()) {
    const size_t piece = std::min<size_t>(file.size() - done, size_t{64} << 20);
    const ssize_t got = ::read(file.fd(), bytes->data() + done, piece);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoError(errno, absl::StrCat("reading ", what, " ", path));
    if (got == 0) {
      return absl::DataLossError(absl::StrCat(what, " ", path, " shrank while it was read (",
                                              done, " of ", file.size(), " bytes)"));
    }
    done += static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

}  // namespace

Status ReadInputFileInto(const std::string& path, const std::string& what, uint64_t max_bytes,
                         std::string* bytes) {
  return ReadInto(path, what, max_bytes, bytes);
}

Status ReadInputFileInto(const std::string& path, const std::string& what, uint64_t max_bytes,
                         std::vector<char>* bytes) {
  return ReadInto(path, what, max_bytes, bytes);
}

StatusOr<std::string> ReadInputFile(const std::string& path, const std::string& what,
                                    uint64_t max_bytes) {
  std::string bytes;
  RETURN_IF_ERROR(ReadInputFileInto(path, what, max_bytes, &bytes));
  return bytes;
}

}  // namespace strata
