// Whole files in and out, once for the project: one reader (the whole file in large
// pieces), one writer of all bytes, one fsync helper. Errors name the file and what failed.
// Writing a file whole or not at all is core/atomic_file.h, over these.
// Thread-safety: pure functions of the filesystem.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/status.h"

namespace strata {

// The whole file at `path` into `bytes` (its capacity reused), read in pieces of up to
// 64 MiB. A regular file is read to the size fstat gave, and one that shrinks meanwhile is
// kDataLoss; anything else (/proc, a pipe) is read to its end. Errors: the errno of open,
// fstat or read (kNotFound for a missing file), naming the path.
Status ReadFileInto(const std::string& path, std::string* bytes);
Status ReadFileInto(const std::string& path, std::vector<char>* bytes);
StatusOr<std::string> ReadFile(const std::string& path);

// All `size` bytes to `fd`, retrying short writes and EINTR; errors name `what`.
Status WriteAllBytes(int fd, const void* data, size_t size, const std::string& what);

// Flushes the file or directory at `path` to the disk; errors name it.
Status SyncPath(const std::string& path);
// Flushes the directory holding `path`, so a rename into it survives a crash. Best
// effort: the file is complete either way.
void SyncParentDirectory(const std::string& path);

}  // namespace strata
