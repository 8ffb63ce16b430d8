// Tests the directory lock: a second Acquire while the first lives is refused naming the
// holder's pid and host; releasing removes the file; a lock file whose process is gone
// (a pid with no process; a live pid with another start time) is replaced; one from
// another host is not, and the error says which file to remove; a foreign file is refused.
#include "core/lock_file.h"

#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/testing/status_matchers.h"
#include "core/testing/test_dir.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::StatusIs;

class DirLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir().string();
  }
  void Plant(const LockHolder& holder) const {
    std::ofstream(dir_ + "/x.lock") << "strata-lock host=" << holder.host << " pid=" << holder.pid
                                    << " start=" << holder.start << " run=" << holder.run
                                    << "\nsomeone\n";
  }
  std::string dir_;
};

TEST_F(DirLockTest, OneHolderAtATime) {
  ASSERT_OK_AND_ASSIGN(auto lock, DirLock::Acquire(dir_, "x.lock", "train.checkpoint_dir"));
  EXPECT_TRUE(fs::exists(dir_ + "/x.lock"));
  const LockHolder me = ThisProcessAsHolder();
  EXPECT_THAT(DirLock::Acquire(dir_, "x.lock", "train.checkpoint_dir"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr(absl::StrCat("in use by another strata run (pid ", me.pid,
                                              " on host ", me.host))));
  lock.reset();
  EXPECT_FALSE(fs::exists(dir_ + "/x.lock"));
  ASSERT_OK(DirLock::Acquire(dir_, "x.lock", "train.checkpoint_dir").status());
}

TEST_F(DirLockTest, AStaleLockIsReplaced) {
  LockHolder gone = ThisProcessAsHolder();
  gone.pid = 1 << 30;  // above pid_max: no such process
  Plant(gone);
  ASSERT_OK_AND_ASSIGN(auto lock, DirLock::Acquire(dir_, "x.lock", "train.checkpoint_dir"));
  EXPECT_EQ(lock->replaced_stale(), absl::StrCat("pid ", gone.pid, " on host ", gone.host));
  lock.reset();
  // This very pid, but started at another time: the pid was reused.
  LockHolder reused = ThisProcessAsHolder();
  ASSERT_GT(reused.start, 0u);
  reused.start += 1;
  EXPECT_TRUE(HolderIsGone(reused));
  EXPECT_FALSE(HolderIsGone(ThisProcessAsHolder()));
  Plant(reused);
  ASSERT_OK(DirLock::Acquire(dir_, "x.lock", "train.checkpoint_dir").status());
}

TEST_F(DirLockTest, AnotherHostsLockIsKeptAndNamed) {
  LockHolder elsewhere{"node-that-is-not-this-one", 4242, 7, "abc"};
  Plant(elsewhere);
  EXPECT_THAT(DirLock::Acquire(dir_, "x.lock", "train.checkpoint_dir"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("pid 4242 on host node-that-is-not-this-one, run abc")));
  EXPECT_THAT(DirLock::Acquire(dir_, "x.lock", "train.checkpoint_dir"),
              StatusIs(::testing::_, HasSubstr("remove " + dir_ + "/x.lock")));
  EXPECT_TRUE(fs::exists(dir_ + "/x.lock"));
  std::ofstream(dir_ + "/x.lock", std::ios::trunc) << "not a lock\n";
  EXPECT_THAT(DirLock::Acquire(dir_, "x.lock", "train.checkpoint_dir"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not a strata lock file")));
}

TEST(ParseLockHolder, ReadsTheFirstLine) {
  LockHolder holder;
  ASSERT_TRUE(ParseLockHolder("strata-lock host=h pid=12 start=99 run=r1\nx", &holder));
  EXPECT_EQ(holder.host, "h");
  EXPECT_EQ(holder.pid, 12);
  EXPECT_EQ(holder.start, 99u);
  EXPECT_EQ(holder.run, "r1");
  EXPECT_FALSE(ParseLockHolder("strata-lock host=h\n", &holder));   // no pid
  EXPECT_FALSE(ParseLockHolder("strata-lock host=h pid=x\n", &holder));
  EXPECT_FALSE(ParseLockHolder("pid=1 host=h\n", &holder));
}

}  // namespace
}  // namespace strata
