// Tests of the swap directory claim: the lock file and what it says, a live run's
// directory refused (a child process holds a lock), a crashed run's leftovers swept while
// a live run's are kept, tmpfs refused unless allowed, claims shared within a process.
#include "nvme/swap_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/run_identity.h"
#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::strata::testing::StatusIs;

std::set<std::string> ListDir(const std::string& dir) {
  std::set<std::string> names;
  DIR* handle = ::opendir(dir.c_str());
  while (const dirent* entry = handle ? ::readdir(handle) : nullptr) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.insert(name);
  }
  if (handle) ::closedir(handle);
  return names;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

class SwapDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = std::string(tmp ? tmp : "/tmp") + "/swapdir-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ::mkdir(dir_.c_str(), 0755);
  }
  std::string dir_;
};

TEST_F(SwapDirTest, HoldsALockFileThatNamesTheRunAndRemovesItAtTheEnd) {
  const std::string lock = dir_ + "/strata-" + RunId() + "-rank2.lock";
  {
    StatusOr<std::shared_ptr<SwapDirClaim>> claim = SwapDirClaim::Acquire({dir_, 2});
    ASSERT_OK(claim);
    EXPECT_EQ((*claim)->lock_path(), lock);
    EXPECT_EQ((*claim)->SwapPath("master"), dir_ + "/strata-" + RunId() + "-rank2-master.swap");
    std::ifstream in(lock);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_THAT(text, AllOf(HasSubstr("strata run " + RunId() + " rank 2"),
                            HasSubstr("pid " + std::to_string(::getpid()))));
    // The same process and rank share the claim; another rank has its own.
    StatusOr<std::shared_ptr<SwapDirClaim>> again = SwapDirClaim::Acquire({dir_, 2});
    ASSERT_OK(again);
    EXPECT_EQ(again->get(), claim->get());
    StatusOr<std::shared_ptr<SwapDirClaim>> other = SwapDirClaim::Acquire({dir_, 3});
    ASSERT_OK(other);
    EXPECT_NE(other->get(), claim->get());
  }
  EXPECT_TRUE(ListDir(dir_).empty());
}

TEST_F(SwapDirTest, CrashedRunsLeftoversAreSweptAndOthersFilesKept) {
  // A crashed run: a lock nobody holds, and its swap files; a file of another rank of it
  // without a lock, a user's file and a look-alike name stay.
  WriteFile(dir_ + "/strata-dead01-rank0.lock", "strata run dead01 rank 0: pid 1\n");
  WriteFile(dir_ + "/strata-dead01-rank0-params.swap", std::string(8192, 'p'));
  WriteFile(dir_ + "/strata-dead01-rank0-master.swap", "m");
  WriteFile(dir_ + "/strata-dead01-rank1-master.swap", "orphan without a lock");
  WriteFile(dir_ + "/notes.txt", "mine");
  WriteFile(dir_ + "/strata-dead01-rank0-params.swap.bak", "not a swap file name");
  StatusOr<std::shared_ptr<SwapDirClaim>> claim = SwapDirClaim::Acquire({dir_, 0});
  ASSERT_OK(claim);
  EXPECT_EQ((*claim)->swept().size(), 3u);
  EXPECT_GE((*claim)->swept_bytes(), 8192u);
  const std::set<std::string> left = ListDir(dir_);
  EXPECT_EQ(left, (std::set<std::string>{"strata-" + RunId() + "-rank0.lock",
                                         "strata-dead01-rank1-master.swap", "notes.txt",
                                         "strata-dead01-rank0-params.swap.bak"}));
}

TEST_F(SwapDirTest, ADirectoryHeldByALiveRunIsRefusedNamingIt) {
  // Another process holds a lock of another run id, as a live run does.
  const std::string lock = dir_ + "/strata-live02-rank0.lock";
  WriteFile(lock, "strata run live02 rank 0: pid 777 on host elsewhere\n");
  WriteFile(dir_ + "/strata-live02-rank0-params.swap", "in use");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int fd = ::open(lock.c_str(), O_RDONLY);
    ::flock(fd, LOCK_EX);
    char byte = 1;
    (void)!::write(ready[1], &byte, 1);
    ::pause();  // until killed
    ::_exit(0);
  }
  char byte;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  StatusOr<std::shared_ptr<SwapDirClaim>> claim = SwapDirClaim::Acquire({dir_, 5});
  EXPECT_THAT(claim, StatusIs(absl::StatusCode::kFailedPrecondition,
                              AllOf(HasSubstr("in use by another live run"), HasSubstr(lock),
                                    HasSubstr("pid 777 on host elsewhere"))));
  // Its files stay, and ours are gone.
  EXPECT_EQ(ListDir(dir_), (std::set<std::string>{"strata-live02-rank0.lock",
                                                  "strata-live02-rank0-params.swap"}));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  // Once it died, its lock is a crashed run's: swept.
  claim = SwapDirClaim::Acquire({dir_, 5});
  ASSERT_OK(claim);
  EXPECT_EQ(ListDir(dir_), (std::set<std::string>{"strata-" + RunId() + "-rank5.lock"}));
}

TEST_F(SwapDirTest, MemoryFilesystemsAreRefusedUnlessAllowed) {
  struct stat info {};
  if (::stat("/dev/shm", &info) != 0 || MemoryFilesystemOf("/dev/shm").value_or("").empty()) {
    GTEST_SKIP() << "SKIPPED: no tmpfs at /dev/shm";
  }
  const std::string shm = "/dev/shm/strata-swapdir-test-" + std::to_string(::getpid());
  ::mkdir(shm.c_str(), 0755);
  EXPECT_THAT(SwapDirClaim::Acquire({shm, 0}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("is on tmpfs"), HasSubstr("zero.nvme_allow_memory_fs"))));
  EXPECT_TRUE(ListDir(shm).empty());
  {
    StatusOr<std::shared_ptr<SwapDirClaim>> allowed = SwapDirClaim::Acquire({shm, 0, true});
    EXPECT_OK(allowed);
  }
  ::rmdir(shm.c_str());
  EXPECT_EQ(MemoryFilesystemOf(dir_).value_or("?"), "");
}

TEST_F(SwapDirTest, AMissingDirectoryIsAnErrorNamingIt) {
  EXPECT_THAT(SwapDirClaim::Acquire({dir_ + "/missing", 0}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(dir_ + "/missing")));
}

}  // namespace
}  // namespace strata
