// Smoke test of `strata bench adam`: the quick mode (5M and 20M params) runs to the end and
// returns OK on whatever CPU runs the test (the ratios it prints are not checked here).
#include "bench/bench_adam.h"

#include <gtest/gtest.h>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

TEST(BenchAdam, QuickRunReturnsOk) {
  const Status status = RunBenchAdam(2, /*quick=*/true);
  EXPECT_OK(status);
}

}  // namespace
}  // namespace strata
