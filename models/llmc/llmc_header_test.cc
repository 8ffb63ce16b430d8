// llm.c's model header: a well-formed one gives its shape; the file's size is checked
// against the exact parameter count, which for fields near 2^31 exceeds 64 bits (a count
// that wrapped, as it did in uint64 and int arithmetic, accepted a file whose size matched
// the wrapped count: C = 2^30, L = 4 wrapped 12 L C^2 to 0).
#include "models/llmc/llmc_header.h"

#include <fcntl.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

// A (sparse) llm.c model file: the header of (T, V, L, NH, C, Vp), then `bytes` in all.
std::string WriteModel(const std::string& name, const int32_t (&shape)[6], uint64_t bytes) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  int32_t header[kLlmcHeaderInts] = {kLlmcModelMagic, kLlmcModelVersionFp32};
  for (int i = 0; i < 6; ++i) header[2 + i] = shape[i];
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  EXPECT_GE(fd, 0) << path;
  EXPECT_EQ(::write(fd, header, sizeof(header)), static_cast<ssize_t>(sizeof(header)));
  EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(bytes)), 0);  // no disk blocks
  ::close(fd);
  return path;
}

TEST(ReadLlmcHeader, ReadsTheShapeOfAMatchingFile) {
  // T 8, V 10, L 1, NH 2, C 4, Vp 16: (16 + 8) 4 + (12 16 + 13 4) + 2 4 = 348 parameters.
  const std::string path = WriteModel("tiny.bin", {8, 10, 1, 2, 4, 16}, 1024 + 348 * 4);
  ASSERT_OK_AND_ASSIGN(const ModelOptions model, ReadLlmcHeader(path));
  EXPECT_EQ(model.max_seq_len, 8);
  EXPECT_EQ(model.vocab, 10);
  EXPECT_EQ(model.padded_vocab, 16);
  EXPECT_EQ(model.channels, 4);
  EXPECT_THAT(ReadLlmcHeader(WriteModel("short.bin", {8, 10, 1, 2, 4, 16}, 1024 + 347 * 4)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("348 fp32 parameters, 2416 bytes")));
}

TEST(ReadLlmcHeader, CountsParametersBeyond64Bits) {
  // C = 2^30, L = 4, NH 1, V = Vp = T = 1: 12 L C^2 = 3 * 2^64, which uint64 made 0, and the
  // count 2^31 + 52 * 2^30 + 2^31 = 56 * 2^30 matched a 224 GiB (sparse) file.
  const uint64_t wrapped_params = uint64_t{56} << 30;
  const std::string path =
      WriteModel("wrapped.bin", {1, 1, 4, 1, 1 << 30, 1}, 1024 + wrapped_params * 4);
  EXPECT_THAT(ReadLlmcHeader(path),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("its header's model has 55340232281258196992 fp32 parameters")));
  // Position and vocabulary rows near 2^31 each: their sum overflowed int.
  EXPECT_THAT(ReadLlmcHeader(WriteModel("rows.bin", {2147483647, 2147483647, 1, 1, 1, 2147483647},
                                        1024 + 4)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("4294967321 fp32 parameters")));
}

}  // namespace
}  // namespace strata
