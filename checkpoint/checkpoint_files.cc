// The checkpoint code's file helpers: see checkpoint_files.h.
#include "checkpoint/checkpoint_files.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/input_file.h"
#include "core/files.h"
#include "core/pread_fully.h"

namespace strata {
namespace checkpoint_internal {

Status Errno(int error, const std::string& what) {
  return ErrnoError(error, "checkpoint: " + what);
}

Status WriteFile(const std::string& path,
                 const std::vector<std::pair<const char*, size_t>>& pieces) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Errno(errno, "cannot create " + path);
  for (const auto& [data, size] : pieces) {
    Status written = WriteAllBytes(fd, data, size, path);
    if (!written.ok()) {
      ::close(fd);
      return Annotate(written, "checkpoint");
    }
  }
  if (::close(fd) != 0) return Errno(errno, "closing " + path);
  return absl::OkStatus();
}

Status SyncFile(const std::string& path) { return Annotate(SyncPath(path), "checkpoint"); }

Status ReadBytesInto(const std::string& path, std::vector<char>* bytes) {
  return ReadInputFileInto(path, "checkpoint: file", kNoInputLimit, bytes);
}

StatusOr<std::vector<char>> ReadBytes(const std::string& path) {
  std::vector<char> bytes;
  RETURN_IF_ERROR(ReadBytesInto(path, &bytes));
  return bytes;
}

std::string Hex(uint64_t value) { return absl::StrFormat("%016x", value); }

Status CheckFile(const std::string& path, uint64_t bytes, const std::string& hash,
                 Progress* progress) {
  ASSIGN_OR_RETURN(const InputFile in, InputFile::Open(path, "checkpoint: file"));
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  std::vector<char> piece(16 << 20);
  uint64_t total = 0;
  int read_error = 0;
  for (;;) {
    const ssize_t got = ::read(in.fd(), piece.data(), piece.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) read_error = errno;
    if (got <= 0) break;
    XXH3_64bits_update(state, piece.data(), static_cast<size_t>(got));
    total += static_cast<uint64_t>(got);
    if (progress != nullptr) progress->Advance(static_cast<uint64_t>(got));
  }
  const std::string found = Hex(XXH3_64bits_digest(state));
  XXH3_freeState(state);
  if (read_error != 0) return Errno(read_error, "reading " + path);
  if (total != bytes) {
    return absl::DataLossError(
        absl::StrCat("checkpoint: ", path, " has ", total, " bytes, expected ", bytes));
  }
  if (found != hash) {
    return absl::DataLossError(absl::StrCat("checkpoint: ", path, ": checksum mismatch (XXH3 ",
                                            found, ", checkpoint.json says ", hash, ")"));
  }
  return absl::OkStatus();
}

std::vector<std::pair<int, std::filesystem::path>> ListCheckpoints(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::pair<int, fs::path>> found;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    int step = 0;
    size_t used = 0;
    if (name.rfind("step-", 0) != 0) continue;
    try {
      step = std::stoi(name.substr(5), &used);
    } catch (const std::exception&) {
      continue;
    }
    if (used != name.size() - 5 || !fs::exists(entry.path() / "checkpoint.json")) continue;
    found.emplace_back(step, entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

StatusOr<std::string> ResolveCheckpoint(const std::string& path) {
  if (std::filesystem::exists(path + "/checkpoint.json")) return path;
  const auto found = ListCheckpoints(path);
  if (found.empty() && std::filesystem::is_directory(path) &&
      std::filesystem::path(path).filename().string().rfind("step-", 0) == 0) {
    return absl::NotFoundError(absl::StrCat(
        "checkpoint: ", path, " has no checkpoint.json: its writing did not finish (the manifest "
        "is written last, after every rank's file), so it is not a checkpoint"));
  }
  if (found.empty()) {
    return absl::NotFoundError(absl::StrCat("checkpoint: no checkpoint at ", path, " (neither ",
                                            path,
                                            "/checkpoint.json nor a step-<k> directory "
                                            "holding one)"));
  }
  return found.back().second.string();
}

}  // namespace checkpoint_internal
}  // namespace strata
