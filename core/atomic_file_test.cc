// Tests the whole-or-nothing writer: the file appears with exactly its bytes and no
// PATH.partial; a failing producer, an unwritable directory and a path that is a directory
// each leave the old file untouched and no partial file, with the error naming the file.
#include "core/atomic_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

std::string Dir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::string Read(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

TEST(AtomicFile, WritesWholeAndLeavesNoPartial) {
  const std::string path = Dir() + "/whole.txt";
  ASSERT_OK(WriteFileAtomically(path, std::string_view("first")));
  ASSERT_OK(WriteFileAtomically(path, std::string_view("second, longer")));
  EXPECT_EQ(Read(path), "second, longer");
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
  const std::string big(3 << 20, 'x');  // several write calls
  ASSERT_OK(WriteFileAtomically(path, [&](int fd, const std::string& partial) {
    RETURN_IF_ERROR(WriteAllBytes(fd, big.data(), big.size() / 2, partial));
    return WriteAllBytes(fd, big.data(), big.size() - big.size() / 2, partial);
  }));
  EXPECT_EQ(Read(path), big);
}

TEST(AtomicFile, AFailureKeepsTheOldFile) {
  const std::string path = Dir() + "/kept.txt";
  ASSERT_OK(WriteFileAtomically(path, std::string_view("old")));
  EXPECT_THAT(WriteFileAtomically(path,
                                  [](int fd, const std::string& partial) -> Status {
                                    RETURN_IF_ERROR(WriteAllBytes(fd, "new", 3, partial));
                                    return absl::DataLossError("the producer failed");
                                  }),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("the producer failed")));
  EXPECT_EQ(Read(path), "old");
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));

  EXPECT_THAT(WriteFileAtomically(Dir() + "/no-such-dir/x.txt", std::string_view("x")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no-such-dir/x.txt.partial")));
  const std::string directory = Dir() + "/a-directory";
  std::filesystem::create_directories(directory);
  EXPECT_THAT(WriteFileAtomically(directory, std::string_view("x")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("it is a directory")));
  EXPECT_TRUE(std::filesystem::is_directory(directory));
  EXPECT_FALSE(std::filesystem::exists(directory + ".partial"));
}

}  // namespace
}  // namespace strata
