// Writing a file whole or not at all, for every output a user keeps (exported weights,
// safetensors indexes, traces): the bytes go to PATH.partial, are synced and renamed over
// PATH, then PATH's directory is synced (best effort: the file is complete either way). A
// failure at any step removes PATH.partial and returns an error naming the file and the
// step; PATH itself is never left half-written.
// Thread-safety: pure functions of the filesystem; two writers of one PATH race.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "core/files.h"  // WriteAllBytes, for the writers
#include "core/status.h"

namespace strata {

// `write` fills the open file descriptor `fd` of `partial` (PATH.partial).
Status WriteFileAtomically(
    const std::string& path,
    const std::function<Status(int fd, const std::string& partial)>& write);
Status WriteFileAtomically(const std::string& path, std::string_view bytes);

}  // namespace strata
