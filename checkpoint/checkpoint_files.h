// The file helpers of the checkpoint code (internal: in the library's srcs, so nothing
// outside checkpoint/ can include it): whole files written, synced and read, a file checked against its size and XXH3, the step-<k> directories
// of a checkpoint directory listed. Every error names the file and starts "checkpoint: ".
// Thread-safety: reentrant; each call works on its own file descriptors and buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/progress.h"
#include "core/status.h"

namespace strata {
namespace checkpoint_internal {

// ErrnoError for `what`, prefixed "checkpoint: ".
Status Errno(int error, const std::string& what);

// 16 hex digits: how checkpoint.json writes an XXH3.
std::string Hex(uint64_t value);

// Writes the pieces, one after the other, to a new file at `path`, not synced (the kernel
// starts writing it back while the next unit is gathered; SyncPath at the end).
Status WriteFile(const std::string& path,
                 const std::vector<std::pair<const char*, size_t>>& pieces);

// Flushes the file (or directory) at `path` to the disk.
Status SyncFile(const std::string& path);

// The whole file into `bytes` (its capacity reused).
Status ReadBytesInto(const std::string& path, std::vector<char>* bytes);
StatusOr<std::vector<char>> ReadBytes(const std::string& path);

// The file at `path` has `bytes` bytes whose XXH3 is `hash` (hex), read in 16 MiB pieces;
// `progress` (may be null) advances by the bytes read.
Status CheckFile(const std::string& path, uint64_t bytes, const std::string& hash,
                 Progress* progress);

// The complete step-<k> directories under `dir` (with a checkpoint.json; no .partial),
// oldest first.
std::vector<std::pair<int, std::filesystem::path>> ListCheckpoints(const std::string& dir);

// `path` itself when it holds a checkpoint.json, else its newest complete step-<k>.
StatusOr<std::string> ResolveCheckpoint(const std::string& path);

}  // namespace checkpoint_internal
}  // namespace strata
