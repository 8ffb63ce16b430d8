// core/files: a file read whole (also /proc's, whose size stat gives as 0), missing files
// named, all bytes written, and a path synced.
#include "core/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::IsOkAndHolds;
using testing::StatusIs;

std::string TempDir() {
  const char* root = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(root != nullptr ? root : "/tmp") + "/files_test.XXXXXX";
  return ::mkdtemp(dir.data());
}

TEST(Files, WrittenBytesReadBackWhole) {
  const std::string path = TempDir() + "/data.bin";
  std::string bytes(3 << 20, '\0');  // several reads' worth, every byte value
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_OK(WriteAllBytes(fd, bytes.data(), bytes.size(), path));
  ASSERT_EQ(::close(fd), 0);
  ASSERT_OK(SyncPath(path));
  EXPECT_THAT(ReadFile(path), IsOkAndHolds(bytes));
  std::vector<char> into(10, 'x');
  ASSERT_OK(ReadFileInto(path, &into));
  EXPECT_EQ(std::string(into.begin(), into.end()), bytes);
}

TEST(Files, ProcFilesAndEmptyFilesAndMissingOnes) {
  StatusOr<std::string> cmdline = ReadFile("/proc/self/cmdline");
  ASSERT_OK(cmdline);
  EXPECT_THAT(*cmdline, HasSubstr("files_test"));
  const std::string empty = TempDir() + "/empty";
  ::close(::open(empty.c_str(), O_WRONLY | O_CREAT, 0644));
  EXPECT_THAT(ReadFile(empty), IsOkAndHolds(std::string()));
  EXPECT_THAT(ReadFile(empty + ".missing"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("empty.missing")));
  EXPECT_THAT(SyncPath(empty + ".missing"), StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace strata
