// Loading NCCL at run time, without a GPU: a file that is not NCCL is refused naming every
// place searched; the toolkit's libnccl (where this build found one) loads with a version
// at least the minimum; version codes print as NCCL writes them. Each case runs in a child
// process, since the library is loaded once per process.
#include "collectives/nccl_library.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "core/testing/status_matchers.h"

namespace strata::nccl_internal {
namespace {


TEST(NcclLibrary, VersionText) {
  EXPECT_EQ(NcclVersionText(22809), "2.28.9");
  EXPECT_EQ(NcclVersionText(21400), "2.14.0");
  EXPECT_EQ(NcclVersionText(2708), "2.7.8");
  EXPECT_EQ(NcclVersionText(0), "unknown");
}

// Runs `body` in a forked child with STRATA_NCCL_LIBRARY=`library`; returns its exit code
// (0: `body` held).
template <typename Body>
int InChild(const std::string& library, Body body) {
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("STRATA_NCCL_LIBRARY", library.c_str(), 1);
    _exit(body() ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
}

TEST(NcclLibrary, AFileThatIsNotNcclIsNamed) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string fake = std::string(tmp != nullptr ? tmp : "/tmp") + "/libnotnccl.so";
  std::ofstream(fake) << "not a library";
  // A library the user names is the only one tried.
  EXPECT_EQ(InChild(fake,
                    [&] {
                      StatusOr<const NcclLibrary*> loaded = LoadNccl();
                      if (loaded.ok()) return false;
                      const std::string message(loaded.status().message());
                      return loaded.status().code() == absl::StatusCode::kFailedPrecondition &&
                             message.find(fake) != std::string::npos &&
                             message.find("STRATA_NCCL_LIBRARY") != std::string::npos;
                    }),
            0);
}

TEST(NcclLibrary, TheToolkitsNcclLoads) {
  const std::string toolkit = "/usr/local/cuda/lib64/libnccl.so.2";
  if (access(toolkit.c_str(), R_OK) != 0) GTEST_SKIP() << "SKIPPED: no " << toolkit;
  EXPECT_EQ(InChild(toolkit,
                    [&] {
                      StatusOr<const NcclLibrary*> loaded = LoadNccl();
                      return loaded.ok() && (*loaded)->path == toolkit &&
                             (*loaded)->version >= kMinNcclVersionCode &&
                             (*loaded)->AllReduce != nullptr && &Nccl() == *loaded;
                    }),
            0);
}

}  // namespace
}  // namespace strata::nccl_internal
