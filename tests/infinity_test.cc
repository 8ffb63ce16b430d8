// ZeRO-Infinity against the same runs with everything on the device (CPU backend, ranks as
// threads): optimizer state (and stage-3 param shards) in per-rank swap files through the
// NVMe tier, stepped by the same CPU Adam, so losses must be bit-identical to the device
// placement at the same stage and world size. Host memory in NVMe mode is bounded by the
// pipeline's buffers: doubling the layers leaves the host peak unchanged (allowance: the
// buffers are sized by the largest unit, the embedding, which does not change). Bad
// swap-file set-ups are clear errors before any step.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_join.h"
#include "core/run_identity.h"
#include "core/testing/status_matchers.h"
#include "session/session.h"
#include "tests/engine_rig.h"
#include "tests/placement_runs.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

std::string SwapDir() { return TestDir("swap"); }

Options Make(int world, int stage, std::vector<std::string> extra, int steps = 20) {
  extra.push_back("zero.nvme_dir=" + SwapDir());
  return PlacementRunOptions(world, stage, extra, steps);
}

// A run with the NVMe traffic of rank 0 summed over its steps.
struct Outcome : PlacementRun {
  uint64_t nvme_read = 0, nvme_written = 0;
};

Outcome Train(const Options& options) {
  Outcome out;
  static_cast<PlacementRun&>(out) = TrainAllRanks(options);
  for (const StepResult& step : out.steps) {
    out.nvme_read += step.nvme_read_bytes;
    out.nvme_written += step.nvme_written_bytes;
  }
  return out;
}

TEST(Infinity, NvmePlacementsMatchTheDevice) {
  for (int world : {1, 2}) {
    for (int stage = 1; stage <= 3; ++stage) {
      for (const char* clip : {"train.grad_clip=1", "train.grad_clip=0"}) {
        const Outcome device = Train(Make(world, stage, {clip}));
        ASSERT_OK(device.status);
        ASSERT_EQ(device.losses.size(), 20u);
        // 16 KiB chunks: every unit's shard is stepped and stored in several chunks; with
        // 2-3 buffers each is reused many times a step (more often than its rotating events).
        std::vector<std::vector<std::string>> placements = {
            {"zero.optimizer_tier=nvme", "zero.grad_tier=device"},
            {"zero.optimizer_tier=nvme", "zero.grad_tier=host", "nvme.chunk_bytes=16KiB",
             "nvme.optimizer_buffers=2"},
        };
        // Gradient sums on nvme too (stages 2-3): chunks of 16 KiB / 8 KiB, so a unit's sum
        // is read back, added to and written in several chunks per micro-batch.
        std::vector<std::vector<std::string>> grads_on_nvme;
        if (stage >= 2) {
          grads_on_nvme.push_back({"zero.optimizer_tier=nvme", "zero.grad_tier=nvme",
                                   "nvme.chunk_bytes=16KiB", "nvme.optimizer_buffers=3"});
        }
        if (stage == 3) {
          grads_on_nvme.push_back({"zero.optimizer_tier=nvme", "zero.grad_tier=nvme",
                                   "zero.param_tier=nvme", "nvme.chunk_bytes=8KiB"});
        }
        placements.insert(placements.end(), grads_on_nvme.begin(), grads_on_nvme.end());
        if (stage == 3) {
          placements.push_back({"zero.optimizer_tier=nvme", "zero.param_tier=nvme"});
          placements.push_back({"zero.optimizer_tier=nvme", "zero.grad_tier=host",
                                "zero.param_tier=nvme", "nvme.chunk_bytes=16KiB"});
          placements.push_back({"zero.optimizer_tier=nvme", "zero.param_tier=nvme",
                                "nvme.chunk_bytes=8KiB", "nvme.read_ahead_units=1",
                                "nvme.optimizer_buffers=3"});
        }
        for (auto placement : placements) {
          const std::string what = absl::StrCat("world ", world, " stage ", stage, " ", clip,
                                                " ", absl::StrJoin(placement, " "));
          placement.push_back(clip);
          const bool sums_on_nvme =
              std::find(placement.begin(), placement.end(), "zero.grad_tier=nvme") !=
              placement.end();
          const Outcome nvme = Train(Make(world, stage, placement));
          ASSERT_OK(nvme.status) << what;
          if (sums_on_nvme && std::string(clip) == "train.grad_clip=1") {
            // The same gradient sums; the norm is summed chunk by chunk (fp32 parts), so
            // the clip scale and with it the losses agree within fp32 rounding.
            ASSERT_EQ(nvme.losses.size(), device.losses.size()) << what;
            for (size_t i = 0; i < device.losses.size(); ++i) {
              EXPECT_NEAR(nvme.losses[i], device.losses[i], 1e-5 * std::abs(device.losses[i]))
                  << what << " step " << i;
            }
          } else {
            EXPECT_EQ(nvme.losses, device.losses) << what;
          }
          EXPECT_GT(nvme.nvme_read, 0u) << what;
          EXPECT_GT(nvme.nvme_written, 0u) << what;
          EXPECT_EQ(nvme.device.peak_by_kind[static_cast<int>(StateKind::kOptimizer)], 0u)
              << what;
        }
      }
    }
  }
}

// LLaMA with everything on NVMe (optimizer, gradient sums, params; stage 3, two ranks) and
// the optimizer alone on NVMe at stage 2: the device's losses.
TEST(Infinity, LlamaOnNvmeMatchesTheDevice) {
  for (int stage : {2, 3}) {
    std::vector<std::string> sets = TinyLlamaSets();
    sets.push_back("train.grad_clip=0");
    const Outcome device = Train(Make(2, stage, sets, 10));
    ASSERT_OK(device.status);
    if (stage == 3) {
      sets.insert(sets.end(), {"zero.optimizer_tier=nvme", "zero.grad_tier=nvme",
                               "zero.param_tier=nvme", "nvme.chunk_bytes=16KiB"});
    } else {
      sets.insert(sets.end(), {"zero.optimizer_tier=nvme", "zero.grad_tier=host"});
    }
    const Outcome nvme = Train(Make(2, stage, sets, 10));
    ASSERT_OK(nvme.status) << "stage " << stage;
    EXPECT_EQ(nvme.losses, device.losses) << "stage " << stage;
    EXPECT_GT(nvme.nvme_read, 0u);
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
  ASSERT_OK(small.status);
  ASSERT_OK(large.status);
  // The on-device placement's optimizer state doubles (nearly) with the layers...
  EXPECT_GT(large.nvme_read, small.nvme_read * 3 / 2);
  // ...while the host peak stays within 5% (+64 KiB of small buffers).
  EXPECT_LE(large.host.peak_bytes, small.host.peak_bytes * 1.05 + (64 << 10))
      << "host peak " << small.host.peak_bytes << " -> " << large.host.peak_bytes;
}

// Without clipping each unit is stepped right after its last Add: the sums are handed to
// the optimizer in memory, so at grad_accum 1 the disk moves exactly the bytes of the
// optimizer-only placement (with clipping each sum is written and read back: 4 B/param
// more each way). Units of more chunks than the grad home's 8 buffers write the early
// chunks out and still match. Reading the handed-over sums afterwards is a clear error.
TEST(Infinity, FinalSumsGoToTheOptimizerInMemoryWithoutClipping) {
  struct Case {
    const char* chunk;
    const char* channels;
    bool all_kept;  // every unit has at most 8 chunks
  };
  for (const Case& c : {Case{"nvme.chunk_bytes=16KiB", "model.channels=32", true},
                        Case{"nvme.chunk_bytes=8KiB", "model.channels=64", false}}) {
    const char* chunk = c.chunk;
    auto run = [&](const char* grad_tier, const char* clip) {
      return Train(Make(1, 2,
                        {"zero.optimizer_tier=nvme", std::string("zero.grad_tier=") + grad_tier,
                         chunk, c.channels, "train.grad_accum=1", clip}));
    };
    const Outcome optimizer_only = run("device", "train.grad_clip=0");
    const Outcome no_clip = run("nvme", "train.grad_clip=0");
    const Outcome clip = run("nvme", "train.grad_clip=1");
    for (const Outcome* out : {&optimizer_only, &no_clip, &clip}) {
      ASSERT_OK(out->status) << chunk;
    }
    ASSERT_FALSE(optimizer_only.losses.empty()) << chunk;
    EXPECT_EQ(no_clip.losses, optimizer_only.losses) << chunk;
    // Totals over the steps' counters: write-backs still out at the end of the last step
    // are not counted, so the comparisons allow 10% (the sums are a third on top).
    const double written = static_cast<double>(optimizer_only.nvme_written);
    const double read = static_cast<double>(optimizer_only.nvme_read);
    if (c.all_kept) {
      EXPECT_LT(no_clip.nvme_written, written * 1.1) << chunk;
      EXPECT_LT(no_clip.nvme_read, read * 1.1) << chunk;
    } else {
      EXPECT_GT(no_clip.nvme_written, written * 1.1) << chunk;
      EXPECT_LT(no_clip.nvme_written, clip.nvme_written) << chunk;
    }
    // With clipping the fp32 sums of every parameter are written and read once per step.
    EXPECT_GT(clip.nvme_written, written * 1.2) << chunk;
    EXPECT_GT(clip.nvme_read, read * 1.2) << chunk;
  }
}

// The sums read back from the swap file (Engine::ReadGradients) equal the device's; after a
// step without clipping they went to the optimizer without being stored, and reading them
// is a clear error, not stale data.
TEST(Infinity, GradientSumsReadBackFromNvmeEqualTheDevice) {
  std::vector<std::vector<float>> sums[2];
  const char* tiers[2] = {"zero.grad_tier=device", "zero.grad_tier=nvme"};
  for (int t = 0; t < 2; ++t) {
    const Options options = Make(1, 2,
                                 {"zero.optimizer_tier=nvme", tiers[t], "nvme.chunk_bytes=16KiB",
                                  "train.grad_clip=0", "train.grad_accum=1"});
    StatusOr<std::unique_ptr<EngineRig>> rig = MakeEngineRig(options);
    ASSERT_OK(rig);
    Engine& engine = *(*rig)->engine;
    std::mt19937 rng(5);
    std::vector<int32_t> inputs, targets;
    for (int i = 0; i < options.train.micro_batch * options.train.seq_len; ++i) {
      inputs.push_back(rng() % options.model.vocab);
      targets.push_back(rng() % options.model.vocab);
    }
    const MicroBatch batch{inputs.data(), targets.data()};
    ASSERT_OK(engine.ComputeGradients({batch}));
    for (size_t u = 0; u < (*rig)->model->units().size(); ++u) {
      StatusOr<std::vector<float>> grads = engine.state().ReadGradients(static_cast<int>(u));
      ASSERT_OK(grads) << tiers[t];
      sums[t].push_back(*grads);
    }
    ASSERT_OK(engine.TrainStep({batch}, 1e-3f, 0));
    StatusOr<std::vector<float>> after = engine.state().ReadGradients(0);
    if (t == 1) {
      EXPECT_THAT(after, StatusIs(::testing::Ne(absl::StatusCode::kOk), HasSubstr("never stored")));
    }
  }
  EXPECT_EQ(sums[1], sums[0]);
}

// bf16 gradients land in the compute dtype and are summed into fp32 chunk sums on the host
// (first Add: zeroed, then summed): the same sums, so the same losses as on the device.
TEST(Infinity, Bf16GradientSumsOnNvmeMatchTheDevice) {
  for (int stage : {2, 3}) {
    const std::vector<std::string> common = {"train.dtype=bf16", "train.grad_clip=0",
                                             "zero.optimizer_tier=nvme", "nvme.chunk_bytes=16KiB"};
    auto sets = common;
    sets.push_back("zero.grad_tier=device");
    const Outcome device = Train(Make(1, stage, sets));
    sets.back() = "zero.grad_tier=nvme";
    const Outcome nvme = Train(Make(1, stage, sets));
    ASSERT_OK(device.status);
    ASSERT_OK(nvme.status);
    ASSERT_EQ(device.losses.size(), 20u);
    EXPECT_EQ(nvme.losses, device.losses) << "stage " << stage;
  }
}

// With the gradient sums on nvme too, neither the host nor the device holds anything per
// parameter: no gradient state stays on the device, and the host peak stays put when the
// layers double (with the sums on the device, its gradient state grows with them, which
// shows the check can fail). Transient full-gradient buffers (stage 3, freed after their
// reduction) are not state: how many are alive at once depends on the streams' timing.
TEST(Infinity, GradientSumsOnNvmeLeaveNoMemoryThatGrowsWithTheModel) {
  auto run = [&](const char* grad_tier, int layers) {
    return Train(Make(1, 3,
                      {"zero.optimizer_tier=nvme", "zero.param_tier=nvme", "model.channels=64",
                       std::string("zero.grad_tier=") + grad_tier, "nvme.chunk_bytes=64KiB",
                       "model.layers=" + std::to_string(layers)},
                      2));
  };
  const Outcome small = run("nvme", 4);
  const Outcome large = run("nvme", 8);
  const Outcome small_device = run("device", 4);
  const Outcome large_device = run("device", 8);
  for (const Outcome* out : {&small, &large, &small_device, &large_device}) {
    ASSERT_OK(out->status);
  }
  ASSERT_EQ(small_device.losses.size(), 2u);
  EXPECT_EQ(small.losses, small_device.losses);
  const int grads = static_cast<int>(StateKind::kGrads);
  // The gradient state each tier holds after the set-up (before any transient buffer).
  EXPECT_GT(large_device.device_setup.current_by_kind[grads],
            small_device.device_setup.current_by_kind[grads] * 3 / 2);
  EXPECT_EQ(small.device_setup.current_by_kind[grads], 0u);
  EXPECT_EQ(large.device_setup.current_by_kind[grads], 0u);
  EXPECT_EQ(large.host_setup.current_by_kind[grads], small.host_setup.current_by_kind[grads])
      << "the host's gradient buffers depend on the chunk size only";
  EXPECT_LE(large.host.peak_bytes, small.host.peak_bytes * 1.05 + (64 << 10))
      << "host peak " << small.host.peak_bytes << " -> " << large.host.peak_bytes;
}

TEST(Infinity, MissingSwapDirectoryIsAClearErrorBeforeAnyStep) {
  Options options = Make(1, 2, {"zero.optimizer_tier=nvme"}, 1);
  options.zero.nvme_dir = "/nonexistent/strata-swap";
  const Outcome out = Train(options);
  EXPECT_THAT(out.status, StatusIs(::testing::Ne(absl::StatusCode::kOk),
                                   HasSubstr("/nonexistent/strata-swap")));
}

// State corrupted on disk between steps (every byte of the master file, or of the param
// shards' file) is never trained on: the next step that reads it fails with the checksum
// error naming the file, and the pipeline shuts down without hanging (the test's timeout
// would catch one). The master file is read by every step, so the next step must fail.
// Param shards may already have been read ahead (after step 0's write-back, before the
// corruption): then step 1 must match an uncorrupted run exactly, and its own write-back
// replaces the garbage.
TEST(Infinity, CorruptedSwapFileIsNeverTrainedOn) {
  struct Case {
    int stage;
    std::vector<std::string> sets;
    const char* file;
    bool must_fail;
    bool must_pass = false;
  };
  const std::vector<Case> cases = {
      {2, {"zero.optimizer_tier=nvme", "nvme.chunk_bytes=16KiB", "nvme.optimizer_buffers=3"},
       "master", true},
      {3, {"zero.optimizer_tier=nvme", "zero.param_tier=nvme", "nvme.chunk_bytes=16KiB"},
       "params", false},
      // A step's first Add writes each gradient sum afresh: a garbage grads file left
      // between steps is never read, so the step must equal an uncorrupted run's.
      {2, {"zero.optimizer_tier=nvme", "zero.grad_tier=nvme", "nvme.chunk_bytes=16KiB"},
       "grads", false, true},
  };
  for (const Case& c : cases) {
    Options options = Make(1, c.stage, c.sets, 3);
    auto run = [&](const std::string& dir, bool corrupt) -> StatusOr<double> {
      options.zero.nvme_dir = dir;
      mkdir(dir.c_str(), 0755);
      ASSIGN_OR_RETURN(std::unique_ptr<TrainingSession> session,
                       TrainingSession::CreateSingleRank(options));
      RETURN_IF_ERROR(session->Step(0).status());
      // Step 0's write-backs done, so the garbage stays on disk until read.
      RETURN_IF_ERROR(session->Finish());
      if (corrupt) {
        const std::string path = dir + "/strata-" + RunId() + "-rank0-" + std::string(c.file) + ".swap";
        const int fd = ::open(path.c_str(), O_WRONLY);
        if (fd < 0) return absl::InternalError("cannot open " + path);
        struct stat info;
        ::fstat(fd, &info);
        const std::vector<char> garbage(info.st_size, 0x5a);
        const bool written = ::pwrite(fd, garbage.data(), garbage.size(), 0) ==
                                 static_cast<ssize_t>(garbage.size()) &&
                             ::fsync(fd) == 0;
        ::close(fd);
        if (!written) return absl::InternalError("cannot corrupt " + path);
      }
      ASSIGN_OR_RETURN(StepReport report, session->Step(1));
      return report.result.loss;
    };
    const StatusOr<double> clean = run(SwapDir() + "/clean-" + c.file, false);
    ASSERT_OK(clean);
    const std::string dir = SwapDir() + "/corrupt-" + c.file;
    const StatusOr<double> corrupted = run(dir, true);
    EXPECT_TRUE(corrupted.ok() || !c.must_pass) << c.file << ": " << corrupted.status();
    if (corrupted.ok()) {
      EXPECT_FALSE(c.must_fail) << "a corrupted " << c.file << " file went unnoticed";
      EXPECT_EQ(*corrupted, *clean) << c.file << ": trained on something else";
      continue;
    }
    EXPECT_THAT(corrupted,
                StatusIs(absl::StatusCode::kDataLoss,
                         ::testing::AllOf(HasSubstr("checksum mismatch"),
                                          HasSubstr(dir + "/strata-" + RunId() + "-rank0-" + c.file + ".swap"))))
        << c.file;
  }
}

}  // namespace
}  // namespace strata
