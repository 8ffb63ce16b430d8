// ZeRO-Infinity against the same runs with everything on the device (CPU backend, ranks as
// threads): optimizer state (and stage-3 param shards) in per-rank swap files through the
// NVMe tier, stepped by the same CPU Adam, so losses must be bit-identical to the device
// placement at the same stage and world size. Host memory in NVMe mode is bounded by the
// pipeline's buffers: doubling the layers leaves the host peak unchanged (allowance: the
// buffers are sized by the largest unit, the embedding, which does not change). Bad
// swap-file set-ups are clear errors before any step.
#include <sys/stat.h>

#include <cstdlib>
#include <mutex>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_join.h"
#include "launch/ranks.h"
#include "launch/session.h"
#include "runtime/core/options_parse.h"

namespace strata {
namespace {

std::string SwapDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp ? tmp : "/tmp") + "/swap";
  mkdir(dir.c_str(), 0755);
  return dir;
}

Options Make(int world, int stage, std::vector<std::string> extra, int steps = 20) {
  std::vector<std::string> sets = {
      "model.preset=tiny", "model.layers=2", "model.channels=32", "model.heads=2",
      "train.seq_len=16", "train.lr=3e-3", "train.warmup_steps=2", "train.grad_accum=2",
      "train.eval_every=0", "device.threads=1", "zero.comm_timeout_s=60",
      "train.micro_batch=2", "zero.prefetch_bytes=64KiB", "zero.nvme_dir=" + SwapDir(),
      "train.steps=" + std::to_string(steps), "zero.world=" + std::to_string(world),
      "zero.stage=" + std::to_string(stage)};
  sets.insert(sets.end(), extra.begin(), extra.end());
  auto options = ParseOptions("", sets);
  EXPECT_TRUE(options.ok()) << options.status();
  return *options;
}

struct Outcome {
  Status status;
  std::vector<double> losses;  // rank 0
  PoolStats device, host;      // rank 0
  uint64_t nvme_read = 0, nvme_written = 0;
};

Outcome Train(const Options& options) {
  Outcome out;
  std::mutex mutex;
  out.status = RunRanks(options, [&](Communicator& communicator) -> Status {
    ASSIGN_OR_RETURN(auto session, TrainingSession::Create(options, &communicator));
    std::vector<double> losses;
    uint64_t read = 0, written = 0;
    for (int step = 0; step < options.train.steps; ++step) {
      ASSIGN_OR_RETURN(StepReport report, session->Step(step));
      losses.push_back(report.result.loss);
      read += report.result.nvme_read_bytes;
      written += report.result.nvme_written_bytes;
    }
    if (communicator.rank() == 0) {
      std::lock_guard<std::mutex> lock(mutex);
      out.losses = losses;
      out.device = session->device().pool(Tier::kDevice).Stats();
      out.host = session->device().pool(Tier::kHost).Stats();
      out.nvme_read = read;
      out.nvme_written = written;
    }
    return absl::OkStatus();
  });
  return out;
}

TEST(Infinity, NvmePlacementsMatchTheDevice) {
  for (int world : {1, 2}) {
    for (int stage = 1; stage <= 3; ++stage) {
      for (const char* clip : {"train.grad_clip=1", "train.grad_clip=0"}) {
        const Outcome device = Train(Make(world, stage, {clip}));
        ASSERT_TRUE(device.status.ok()) << device.status;
        // 16 KiB chunks: every unit's shard is stepped and stored in several chunks.
        std::vector<std::vector<std::string>> placements = {
            {"zero.optimizer_tier=nvme", "zero.grad_tier=device"},
            {"zero.optimizer_tier=nvme", "zero.grad_tier=host", "nvme.chunk_bytes=16KiB"},
        };
        if (stage == 3) {
          placements.push_back({"zero.optimizer_tier=nvme", "zero.param_tier=nvme"});
          placements.push_back({"zero.optimizer_tier=nvme", "zero.grad_tier=host",
                                "zero.param_tier=nvme", "nvme.chunk_bytes=16KiB"});
          placements.push_back({"zero.optimizer_tier=nvme", "zero.param_tier=nvme",
                                "nvme.chunk_bytes=8KiB", "nvme.read_ahead_units=1"});
        }
        for (auto placement : placements) {
          const std::string what = absl::StrCat("world ", world, " stage ", stage, " ", clip,
                                                " ", absl::StrJoin(placement, " "));
          placement.push_back(clip);
          const Outcome nvme = Train(Make(world, stage, placement));
          ASSERT_TRUE(nvme.status.ok()) << what << ": " << nvme.status;
          EXPECT_EQ(nvme.losses, device.losses) << what;
          EXPECT_GT(nvme.nvme_read, 0u) << what;
          EXPECT_GT(nvme.nvme_written, 0u) << what;
          EXPECT_EQ(nvme.device.peak_by_kind[static_cast<int>(StateKind::kOptimizer)], 0u)
              << what;
        }
      }
    }
  }
}

TEST(Infinity, HostMemoryDoesNotGrowWithTheModel) {
  const std::vector<std::string> nvme = {"zero.optimizer_tier=nvme", "zero.param_tier=nvme",
                                         "model.channels=64"};
  auto layers = [&](int n) {
    auto sets = nvme;
    sets.push_back("model.layers=" + std::to_string(n));
    return Train(Make(1, 3, sets, 3));
  };
  const Outcome small = layers(4);
  const Outcome large = layers(8);
  ASSERT_TRUE(small.status.ok() && large.status.ok()) << small.status << large.status;
  // The on-device placement's optimizer state doubles (nearly) with the layers...
  EXPECT_GT(large.nvme_read, small.nvme_read * 3 / 2);
  // ...while the host peak stays within 5% (+64 KiB of small buffers).
  EXPECT_LE(large.host.peak_bytes, small.host.peak_bytes * 1.05 + (64 << 10))
      << "host peak " << small.host.peak_bytes << " -> " << large.host.peak_bytes;
}

TEST(Infinity, MissingSwapDirectoryIsAClearErrorBeforeAnyStep) {
  Options options = Make(1, 2, {"zero.optimizer_tier=nvme"}, 1);
  options.zero.nvme_dir = "/nonexistent/strata-swap";
  const Outcome out = Train(options);
  ASSERT_FALSE(out.status.ok());
  EXPECT_THAT(std::string(out.status.message()), ::testing::HasSubstr("/nonexistent/strata-swap"));
}

}  // namespace
}  // namespace strata
