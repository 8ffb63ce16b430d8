// WriteTokenFile (declared in tokens.h): a strata token file, written whole or not at all.
// The bytes go to a new temporary file in the target's directory (a rename is atomic only
// within one file system), which is synced before it is renamed over the target, so a
// crash leaves the old file or the new one, never a prefix; the temporary file is removed
// on every error and registered for removal on a signal. Thread-safety: no shared state
// beyond a counter that keeps the temporary names of one process apart.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "core/files.h"
#include "core/remove_on_signal.h"
#include "data/tokens.h"

namespace strata {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "token files are little-endian; this host needs byte swaps in token_file_writer.cc");

// Tokens narrowed to uint16 per write(2) call: 1 MiB of output.
constexpr size_t kNarrowChunkTokens = size_t{1} << 19;

std::atomic<uint64_t> g_temporary_counter{0};

// The header and the tokens at `bytes_per_token`, then an fsync.
Status WriteContents(int fd, absl::Span<const uint32_t> tokens, int bytes_per_token, int vocab,
                     const std::string& temporary) {
  std::vector<int32_t> header(kTokenHeaderInts, 0);
  header[0] = kStrataTokensMagic;
  header[1] = kStrataTokensVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  header[3] = bytes_per_token;
  header[4] = vocab;
  RETURN_IF_ERROR(WriteAllBytes(fd, header.data(), kTokenHeaderBytes, temporary));
  if (bytes_per_token == 4) {
    RETURN_IF_ERROR(WriteAllBytes(fd, tokens.data(), tokens.size() * sizeof(uint32_t), temporary));
  } else {
    std::vector<uint16_t> narrow(std::min(tokens.size(), kNarrowChunkTokens));
    for (size_t begin = 0; begin < tokens.size(); begin += narrow.size()) {
      const size_t count = std::min(narrow.size(), tokens.size() - begin);
      for (size_t i = 0; i < count; ++i) narrow[i] = static_cast<uint16_t>(tokens[begin + i]);
      RETURN_IF_ERROR(WriteAllBytes(fd, narrow.data(), count * sizeof(uint16_t), temporary));
    }
  }
  if (::fsync(fd) != 0) {
    const int error = errno;
    return ErrnoError(error, "syncing " + temporary);
  }
  return absl::OkStatus();
}

}  // namespace

Status WriteTokenFile(const std::string& path, absl::Span<const uint32_t> tokens, int vocab) {
  const std::string target = absl::StrCat("token file '", path, "'");
  if (path.empty()) return absl::InvalidArgumentError("token file path is empty");
  if (vocab < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(target, ": vocab must be >= 0 (0 = unknown), got ", vocab));
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(target, ": no tokens to write (a reader refuses an empty token file)"));
  }
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat(target, ": ", tokens.size(),
                     " tokens are more than one file holds (2^31 - 1, header[2] "
                     "is an int32); write them as several files"));
  }
  uint32_t max_id = 0;
  for (size_t position = 0; position < tokens.size(); ++position) {
    if (vocab > 0 && tokens[position] >= static_cast<uint32_t>(vocab)) {
      return absl::InvalidArgumentError(
          absl::StrCat(target, ": token id ", tokens[position], " at token position ", position,
                       " is out of range for vocab = ", vocab, " (ids must be < vocab)"));
    }
    max_id = std::max(max_id, tokens[position]);
  }
  const int bytes_per_token = max_id <= 0xFFFF ? 2 : 4;
  // The whole-file output policy (core/atomic_file.h): only over a regular file that is no
  // input of the run. The temporary name is this writer's own (ranks may write one cache
  // file at once), created anew, never through a link.
  RETURN_IF_ERROR(CheckWholeFileOutput(path, "token file"));

  // O_EXCL: a name left by a crashed writer of another process with the same pid (another
  // host on a shared file system) is skipped, never reused.
  std::string temporary;
  int fd = -1;
  for (int attempt = 0; fd < 0 && attempt < 100; ++attempt) {
    temporary = absl::StrCat(path, ".partial.", ::getpid(), ".", g_temporary_counter++);
    fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    const int error = errno;
    if (fd < 0 && error != EEXIST) return ErrnoError(error, "cannot create " + temporary);
  }
  if (fd < 0) return ErrnoError(EEXIST, "cannot create " + temporary);
  RemoveOnSignal remove_on_signal(temporary);
  Status status = WriteContents(fd, tokens, bytes_per_token, vocab, temporary);
  if (::close(fd) != 0 && status.ok()) {
    const int error = errno;
    status = ErrnoError(error, "closing " + temporary);
  }
  if (status.ok()) status = CheckWholeFileOutput(path, "token file");
  if (status.ok() && ::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    status = ErrnoError(error, absl::StrCat("renaming ", temporary, " to ", path));
  }
  if (!status.ok()) {
    ::unlink(temporary.c_str());
    return status;
  }
  SyncParentDirectory(path);
  return absl::OkStatus();
}

}  // namespace strata
