// The identity of an input's content, for checking that every rank (every node) of a run
// reads the same files at the same paths (session/content_agreement.h). A file's identity
// is XXH3-64 over its size and its bytes: all of them for a file of up to kWholeHashBytes;
// for a larger one, kStripes stripes of kStripeBytes at evenly spaced offsets, the first
// starting at 0 and the last ending at the file's end (64 MiB read however large the
// file). What a sampled identity can miss: two large files of the same size that differ
// only between the stripes (an edit in place that keeps the size); any re-tokenized,
// re-exported, fine-tuned or truncated copy differs in a stripe. A directory's identity
// (a Hugging Face model directory) combines its regular files' names and identities, in
// name order; subdirectories are not entered.
// Thread-safety: pure functions of the filesystem.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace strata {

inline constexpr uint64_t kWholeHashBytes = 64ull << 20;
inline constexpr int kStripes = 64;
inline constexpr uint64_t kStripeBytes = 1ull << 20;

// The identity of the file or directory at `path` (opened through core/input_file.h).
StatusOr<uint64_t> ContentIdentity(const std::string& path, const std::string& what);

}  // namespace strata
