// Reading an exact byte range of a file with pread, retrying short reads and EINTR.
// Thread-safety: a plain function (pread does not move the file offset).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace strata {

// Reads exactly `size` bytes at `offset` of `fd` into `data`; `what` names them in errors
// ("file: tensor 'x': bytes [a, b)"). A read error is the errno's Status; the file ending
// first is kDataLoss saying where it ends and that the file is truncated.
Status PreadFully(int fd, void* data, uint64_t size, uint64_t offset, const std::string& what);

}  // namespace strata
