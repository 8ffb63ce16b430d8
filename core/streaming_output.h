// The policy for streaming outputs (train --metrics): a record at a time, written in place,
// so the target may be a regular file (created, truncated or appended to), a FIFO with a
// reader, /dev/null, a terminal, or this process's own standard output or error
// (/dev/stdout, /dev/stderr). Refused, naming the path and what it is: a directory, a block
// device, a socket, any other character device (/dev/full, a disk), a FIFO nobody reads
// (opening it would block the run), and any input of this run (core/run_inputs.h).
// Thread-safety: a pure function of the filesystem.
#pragma once

#include <cstdio>
#include <string>

#include "core/status.h"

namespace strata {

// Opens `path` for writing as `what` ("--metrics file"): truncated, or appended to when
// `append`. The FILE* belongs to the caller (fclose).
StatusOr<std::FILE*> OpenStreamingOutput(const std::string& path, const std::string& what,
                                         bool append);

}  // namespace strata
