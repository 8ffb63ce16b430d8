// FileKindName against the files of this machine whose kinds are known.
#include "core/file_kind.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

namespace strata {
namespace {

std::string KindOf(const std::string& path) {
  struct stat info {};
  EXPECT_EQ(::lstat(path.c_str(), &info), 0) << path;
  return FileKindName(info.st_mode);
}

TEST(FileKind, NamesEachKind) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  const std::string fifo = dir + "/kind.fifo";
  const std::string link = dir + "/kind.link";
  ::unlink(fifo.c_str());
  ::unlink(link.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  ASSERT_EQ(::symlink(fifo.c_str(), link.c_str()), 0);
  EXPECT_EQ(KindOf(dir), "a directory");
  EXPECT_EQ(KindOf(fifo), "a FIFO (named pipe)");
  EXPECT_EQ(KindOf(link), "a symbolic link");
  EXPECT_EQ(KindOf("/dev/null"), "a character device");
  EXPECT_EQ(KindOf("/proc/self/status"), "a regular file");
}

}  // namespace
}  // namespace strata
