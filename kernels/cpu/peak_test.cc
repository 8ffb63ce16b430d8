// The FMA peak measurement returns a positive, finite rate for a short run on one and on the
// default number of threads. (The value itself is machine-dependent and not checked.)
#include "kernels/cpu/peak.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace strata::cpu {
namespace {

TEST(Peak, ShortMeasurementIsPositiveAndFinite) {
  for (int threads : {1, 0}) {
    const double gflops = MeasureFp32FmaPeakGflops(threads, 0.05);
    EXPECT_TRUE(std::isfinite(gflops)) << threads;
    EXPECT_GT(gflops, 0.0) << threads;
    RecordProperty("gflops_threads_" + std::to_string(threads), std::to_string(gflops));
  }
}

TEST(Peak, ZeroSecondsStillRunsOneChunk) {
  const double gflops = MeasureFp32FmaPeakGflops(1, 0.0);
  EXPECT_TRUE(std::isfinite(gflops));
  EXPECT_GT(gflops, 0.0);
}

TEST(Peak, NamesAnInstructionSet) {
  const std::string isa = Fp32FmaPeakIsaName();
  EXPECT_TRUE(isa == "avx512f" || isa == "avx2+fma" || isa == "scalar") << isa;
}

}  // namespace
}  // namespace strata::cpu
