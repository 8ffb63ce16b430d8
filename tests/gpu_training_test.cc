// device.backend=cuda against the CPU backend: the same seed, data and options (only the
// backend differs) must give the same loss trajectory over 10 steps of the tiny GPT.
//
// Tolerances, per step, |cuda - cpu| <= tol * |cpu|:
// - fp32: 1e-4. Both backends sum in fixed orders and accumulate GEMMs in fp32 (cuBLAS
//   without TF32), but the orders differ (cuBLAS tiles, warp reductions vs oneDNN and SIMD
//   loops), so bits differ at the level of fp32 rounding; AdamW carries that from step to
//   step without amplifying it much in 10 steps.
// - bf16: 2e-2. Params and activations are rounded to bf16 (8 mantissa bits, relative
//   step 2^-8 = 3.9e-3) after every op; a different accumulation order flips single
//   roundings, and those differences reach the loss through every later op and step.
// Placements: stages 0-3 with everything on the device (world 1), LoRA on a quantized base
// (NF4, int8) on the device and on the host, 8-bit Adam states on the device and the host,
// and ZeRO-Offload
// (zero.optimizer_tier=host, zero.grad_tier=host) at stages 2 and 3, the latter also with
// zero.param_tier=host, each with clipping on and off (off lets the host AdamW start during
// backward). Where CUDA sees two GPUs or more, world 2 (ranks as threads, NCCL over the
// local group) at stage 3 is compared too; with one GPU, world 2 must be refused clearly.
// Without a usable GPU every comparison skips with the reason ("no usable GPU: ..."), and
// only the fail-fast check runs: the backend factory and a session refuse
// device.backend=cuda at once with a message naming it.
// Tagged "gpu" (tools/gpu_check.sh runs it).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "config/options_parse.h"
#include "device/cuda/cuda_device.h"
#include "core/testing/status_matchers.h"
#include "runtime/backend.h"
#include "tests/placement_runs.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

constexpr int kSteps = 10;

// The number of usable GPUs, or 0 with *reason set.
int UsableGpus(std::string* reason) {
  StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) {
    *reason = std::string(count.status().message());
    return 0;
  }
  if (*count <= 0) *reason = "CUDA sees no device";
  return *count;
}

#define SKIP_WITHOUT_GPU(min_gpus)                                             \
  do {                                                                         \
    std::string reason;                                                        \
    const int gpus = UsableGpus(&reason);                                      \
    if (gpus == 0) GTEST_SKIP() << "no usable GPU: " << reason;                \
    if (gpus < (min_gpus)) GTEST_SKIP() << "needs " << (min_gpus) << " GPUs"; \
  } while (0)

Options Make(const std::string& backend, const std::string& dtype, int world,
             const std::vector<std::string>& extra) {
  std::vector<std::string> sets = {
      "model.preset=tiny",      "train.seq_len=32",      "train.micro_batch=4",
      "train.grad_accum=2",     "train.lr=3e-3",         "train.warmup_steps=2",
      "train.eval_every=0",     "zero.comm_timeout_s=60", "zero.prefetch_bytes=64KiB",
      "device.memory_limit=1GiB", "tiers.host_memory_limit=1GiB",
      "train.steps=" + std::to_string(kSteps), "train.dtype=" + dtype,
      "zero.world=" + std::to_string(world), "device.backend=" + backend};
  sets.insert(sets.end(), extra.begin(), extra.end());
  StatusOr<Options> options = ParseOptions("", sets);
  EXPECT_OK(options);
  return options.ok() ? *options : Options{};
}


double Tolerance(const std::string& dtype) { return dtype == "bf16" ? 2e-2 : 1e-4; }

// Trains on the CPU and on CUDA with the same options and compares every step's loss.
void ExpectSameTrajectory(const std::string& dtype, int world,
                          const std::vector<std::string>& extra) {
  const std::string what = absl::StrCat(dtype, ", world ", world, ", ", absl::StrJoin(extra, " "));
  SCOPED_TRACE(what);
  const PlacementRun cpu = TrainAllRanks(Make("cpu", dtype, world, extra));
  ASSERT_OK(cpu.status);
  const PlacementRun cuda = TrainAllRanks(Make("cuda", dtype, world, extra));
  ASSERT_OK(cuda.status);
  // On cuda the engine's collectives go through NCCL (the local group is only its
  // bootstrap), or with one rank through the self communicator (no NCCL at all).
  EXPECT_THAT(cuda.communicator_description,
              ::testing::HasSubstr(world == 1 ? "self rank 0 of 1" : "NCCL"));
  ASSERT_EQ(cpu.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(cuda.losses.size(), static_cast<size_t>(kSteps));
  const double tolerance = Tolerance(dtype);
  double worst = 0.0;
  for (int step = 0; step < kSteps; ++step) {
    const double relative = std::fabs(cuda.losses[step] - cpu.losses[step]) /
                            std::max(1e-12, std::fabs(cpu.losses[step]));
    worst = std::max(worst, relative);
    EXPECT_LE(relative, tolerance) << "step " << step + 1 << ": cuda " << cuda.losses[step]
                                   << " vs cpu " << cpu.losses[step];
    EXPECT_TRUE(std::isfinite(cuda.losses[step]));
  }
  // Training must also train: the last loss below the first.
  EXPECT_LT(cuda.losses.back(), cuda.losses.front());
  std::printf("[%s on %s] first loss cpu %.6f cuda %.6f, last cpu %.6f cuda %.6f, worst "
              "relative difference %.2e (tolerance %.0e)\n",
              what.c_str(), cuda.device_description.c_str(), cpu.losses.front(), cuda.losses.front(),
              cpu.losses.back(), cuda.losses.back(), worst, tolerance);
}

class GpuTraining : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuTraining, StagesOnDeviceMatchCpu) {
  SKIP_WITHOUT_GPU(1);
  for (int stage = 0; stage <= 3; ++stage) {
    ExpectSameTrajectory(GetParam(), 1, {"zero.stage=" + std::to_string(stage)});
  }
  ExpectSameTrajectory(GetParam(), 1, {"zero.stage=3", "train.recompute=blocks"});
}

TEST_P(GpuTraining, OffloadMatchesCpu) {
  SKIP_WITHOUT_GPU(1);
  const std::vector<std::string> host = {"zero.optimizer_tier=host", "zero.grad_tier=host"};
  for (const char* clip : {"train.grad_clip=1", "train.grad_clip=0"}) {
    for (int stage : {2, 3}) {
      std::vector<std::string> extra = host;
      extra.push_back("zero.stage=" + std::to_string(stage));
      extra.push_back(clip);
      ExpectSameTrajectory(GetParam(), 1, extra);
      if (stage == 3) {
        extra.push_back("zero.param_tier=host");
        ExpectSameTrajectory(GetParam(), 1, extra);
      }
    }
  }
}

// ZeRO-Infinity on CUDA: NVMe reads into pinned buffers, then to the device; the gradient
// sums on the device or in a swap file (world 1; swap files under the test's temp dir).
TEST_P(GpuTraining, InfinityMatchesCpu) {
  SKIP_WITHOUT_GPU(1);
  const std::string dir = TestDir("gpu-swap");
  for (const char* grads : {"zero.grad_tier=device", "zero.grad_tier=nvme"}) {
    for (const char* clip : {"train.grad_clip=1", "train.grad_clip=0"}) {
      ExpectSameTrajectory(GetParam(), 1,
                           {"zero.stage=3", "zero.optimizer_tier=nvme", "zero.param_tier=nvme",
                            grads, clip, "zero.nvme_dir=" + dir, "nvme.chunk_bytes=16KiB"});
    }
  }
}

// The LLaMA family (RMSNorm, rotary embedding, grouped-query attention of a head_dim apart
// from C / H, SwiGLU, untied head, padded vocabulary) on CUDA against the CPU: on the device
// at stage 0, at stage 3 with recompute and Qwen3's q/k norms (CopyHeads + RmsNorm), and
// with everything on NVMe.
TEST_P(GpuTraining, LlamaMatchesCpu) {
  SKIP_WITHOUT_GPU(1);
  std::vector<std::string> llama = TinyLlamaSets();
  llama.insert(llama.end(), {"model.channels=64", "model.layers=2"});
  std::vector<std::string> extra = llama;
  extra.push_back("zero.stage=0");
  ExpectSameTrajectory(GetParam(), 1, extra);
  extra = llama;
  extra.insert(extra.end(), {"zero.stage=3", "train.recompute=blocks", "model.qk_norm=true"});
  ExpectSameTrajectory(GetParam(), 1, extra);
  extra = llama;
  extra.insert(extra.end(), {"zero.stage=3", "zero.optimizer_tier=nvme", "zero.param_tier=nvme",
                             "zero.grad_tier=nvme", "zero.nvme_dir=" + TestDir("gpu-swap"),
                             "nvme.chunk_bytes=16KiB"});
  ExpectSameTrajectory(GetParam(), 1, extra);
}

// LoRA on a quantized frozen base (lora.base_dtype): the base dequantized on the device by
// the CUDA kernels before each use, on the device at stage 0 (GPT, NF4) and streamed from
// the host at stage 3 (LLaMA's fused q|k|v and gate|up pieces; NF4, then int8).
TEST_P(GpuTraining, QuantizedBaseMatchesCpu) {
  SKIP_WITHOUT_GPU(1);
  ExpectSameTrajectory(GetParam(), 1, {"zero.stage=0", "lora.rank=8", "lora.targets=all",
                                       "lora.base_dtype=nf4", "train.lr=1e-2"});
  for (const char* dtype : {"nf4", "int8"}) {
    std::vector<std::string> extra = TinyLlamaSets();
    extra.insert(extra.end(), {"model.channels=64", "zero.stage=3", "lora.rank=8",
                               "lora.targets=all", "lora.base_tier=host", "train.lr=1e-2",
                               std::string("lora.base_dtype=") + dtype});
    ExpectSameTrajectory(GetParam(), 1, extra);
  }
}

// 8-bit Adam states (train.optimizer_states=int8) stepped by the CUDA kernel on the device
// at stage 3 (the codes and absmaxes in the device pool), and by the CPU Adam with the state
// on the host.
TEST_P(GpuTraining, EightBitStatesMatchCpu) {
  SKIP_WITHOUT_GPU(1);
  ExpectSameTrajectory(GetParam(), 1,
                       {"zero.stage=3", "train.optimizer_states=int8", "train.grad_clip=0"});
  ExpectSameTrajectory(GetParam(), 1,
                       {"zero.stage=2", "zero.optimizer_tier=host", "zero.grad_tier=host",
                        "train.optimizer_states=int8", "train.grad_clip=0"});
}

TEST_P(GpuTraining, TwoRanksOverNcclMatchCpu) {
  SKIP_WITHOUT_GPU(2);
  ExpectSameTrajectory(GetParam(), 2, {"zero.stage=3"});
  ExpectSameTrajectory(GetParam(), 2, {"zero.stage=2", "zero.optimizer_tier=host",
                                       "zero.grad_tier=host"});
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GpuTraining, ::testing::Values("fp32", "bf16"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(GpuTrainingSetup, MoreRanksThanGpusIsRefused) {
  SKIP_WITHOUT_GPU(1);
  std::string reason;
  const int gpus = UsableGpus(&reason);
  const PlacementRun run = TrainAllRanks(Make("cuda", "fp32", gpus + 1, {"zero.stage=1"}));
  EXPECT_THAT(run.status,
              StatusIs(::testing::Ne(absl::StatusCode::kOk), HasSubstr("one GPU per rank")));
}

// Runs everywhere: without CUDA or a GPU the cuda backend is refused at once, naming it.
TEST(GpuTrainingSetup, WithoutGpuFailsFastAndClearly) {
  std::string reason;
  if (UsableGpus(&reason) > 0) GTEST_SKIP() << "a GPU is usable here";
  const Options options = Make("cuda", "fp32", 1, {});
  EXPECT_THAT(CreateBackend(options),
              StatusIs(::testing::AnyOf(absl::StatusCode::kUnavailable,
                                        absl::StatusCode::kFailedPrecondition),
                       HasSubstr("device.backend=cuda")));
  // The session says the same before reading data or building the model.
  const PlacementRun run = TrainAllRanks(options);
  EXPECT_THAT(run.status,
              StatusIs(::testing::Ne(absl::StatusCode::kOk), HasSubstr("device.backend=cuda")));
}

}  // namespace
}  // namespace strata
