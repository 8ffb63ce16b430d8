// Test helpers for nvme/: a per-test directory under TEST_TMPDIR, probes that turn a
// missing io_uring or O_DIRECT into a GTEST_SKIP with the reason, and position-derived
// byte patterns (every byte is a function of (seed, file offset), so any misplaced or
// stale byte is found, as nccl-tests do with (rank, step)).
// Thread-safety: plain functions.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "nvme/io_engine.h"

namespace strata::nvme::testing {

// A fresh directory for this test under TEST_TMPDIR (or /tmp).
std::string MakeTestDir();

// Empty when `engine` and O_DIRECT in `dir` are usable, otherwise the reason to skip.
std::string SkipReason(IoEngineKind engine, const std::string& dir);

// The engines every engine test runs on, and a gtest parameter name for each.
inline const IoEngineKind kTestedEngines[] = {IoEngineKind::kIoUring, IoEngineKind::kPread};
inline std::string EngineParamName(const ::testing::TestParamInfo<IoEngineKind>& info) {
  return OptionName(info.param);
}

// The byte at `file_offset` of pattern `seed`.
inline uint8_t PatternByte(uint64_t seed, uint64_t file_offset) {
  uint64_t x = (file_offset + 1) * 0x9e3779b97f4a7c15ull ^ (seed * 0xbf58476d1ce4e5b9ull);
  x ^= x >> 29;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 32;
  return static_cast<uint8_t>(x);
}
void FillPattern(void* data, uint64_t bytes, uint64_t seed, uint64_t file_offset);
// Offset (from data) of the first byte that differs from the pattern, or -1.
int64_t FirstMismatch(const void* data, uint64_t bytes, uint64_t seed, uint64_t file_offset);

// Writes `bytes` of pattern `seed` at offset 0 of `path` with plain (buffered) I/O + fsync.
void WritePatternFile(const std::string& path, uint64_t bytes, uint64_t seed);

}  // namespace strata::nvme::testing

// Skips the current test when `engine` or O_DIRECT in `dir` is not available here.
#define STRATA_SKIP_IF_UNAVAILABLE(engine, dir)                                                   \
  do {                                                                                            \
    const std::string strata_skip_reason_ = ::strata::nvme::testing::SkipReason((engine), (dir)); \
    if (!strata_skip_reason_.empty()) GTEST_SKIP() << strata_skip_reason_;                        \
  } while (0)
