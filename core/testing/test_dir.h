// A fresh directory for the running test: $TEST_TMPDIR (or /tmp) / <test name>, emptied
// first, so tests that make files, links, FIFOs and device nodes never meet another
// test's and never touch a system path.
// Thread-safety: call from the test's thread.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

namespace strata {
namespace testing {

inline std::filesystem::path FreshTestDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::filesystem::path dir =
      std::filesystem::path(tmp != nullptr ? tmp : "/tmp") /
      ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace testing
}  // namespace strata
