// Tests of the remove-on-signal table: registered files are unlinked (while still open and
// usable), unregistered ones are not, a full table refuses, and a real signal handler that
// calls RemoveRegisteredPaths removes them.
#include "core/remove_on_signal.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace strata {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

bool Exists(const std::string& path) {
  struct stat info;
  return ::lstat(path.c_str(), &info) == 0;
}

void Touch(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << path;
  ::close(fd);
}

TEST(RemoveOnSignal, RemovesRegisteredPathsOnlyAndKeepsOpenFilesUsable) {
  const std::string kept = TempPath("kept");
  const std::string removed = TempPath("removed");
  Touch(kept);
  const int fd = ::open(removed.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  {
    RemoveOnSignal forgotten(kept);
    ASSERT_TRUE(forgotten.registered());
  }
  const int before = RegisteredPathCount();
  RemoveOnSignal owner(removed);
  ASSERT_TRUE(owner.registered());
  EXPECT_EQ(RegisteredPathCount(), before + 1);
  EXPECT_EQ(RemoveRegisteredPaths(), 1);
  EXPECT_FALSE(Exists(removed));
  EXPECT_TRUE(Exists(kept));
  // The open descriptor still reads and writes the removed file.
  const char text[] = "still here";
  ASSERT_EQ(::pwrite(fd, text, sizeof(text), 0), static_cast<ssize_t>(sizeof(text)));
  char back[sizeof(text)] = {};
  ASSERT_EQ(::pread(fd, back, sizeof(back), 0), static_cast<ssize_t>(sizeof(text)));
  EXPECT_STREQ(back, text);
  ::close(fd);
  // A second pass finds nothing left to unlink; the slot stays until its owner goes.
  EXPECT_EQ(RemoveRegisteredPaths(), 0);
  EXPECT_EQ(RegisteredPathCount(), before + 1);
}

TEST(RemoveOnSignal, FullTableAndOverlongPathsAreRefused) {
  EXPECT_EQ(RegisterRemoveOnSignal(std::string(kRemoveOnSignalPathBytes, 'x')), -1);
  EXPECT_EQ(RegisterRemoveOnSignal(""), -1);
  std::vector<RemoveOnSignal> owners;
  for (int i = 0; i < kRemoveOnSignalSlots; ++i) {
    owners.emplace_back(TempPath("slot" + std::to_string(i)));
    ASSERT_TRUE(owners.back().registered()) << i;
  }
  EXPECT_EQ(RegisterRemoveOnSignal(TempPath("one-too-many")), -1);
  owners.pop_back();
  const int slot = RegisterRemoveOnSignal(TempPath("fits-again"));
  EXPECT_GE(slot, 0);
  UnregisterRemoveOnSignal(slot);
}

void Handler(int) { RemoveRegisteredPaths(); }

TEST(RemoveOnSignal, ASignalHandlerRemovesThem) {
  const std::string path = TempPath("by-handler");
  Touch(path);
  RemoveOnSignal owner(path);
  struct sigaction action {};
  action.sa_handler = Handler;
  struct sigaction previous {};
  ASSERT_EQ(::sigaction(SIGUSR1, &action, &previous), 0);
  ASSERT_EQ(::raise(SIGUSR1), 0);
  ::sigaction(SIGUSR1, &previous, nullptr);
  EXPECT_FALSE(Exists(path));
}

}  // namespace
}  // namespace strata
