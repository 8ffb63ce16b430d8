// train.optimizer_states = int8 (8-bit Adam moments, docs/quantization.md "8-bit Adam
// states") through the whole runtime: the equivalence of stages and tiers, two ranks
// against one, the optimizer pool's bytes from the layout, convergence against fp32
// states, checkpoints (fp32 arrays; the moments dequantized on save and quantized on load)
// and what is refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "core/testing/status_matchers.h"
#include "kernels/cpu/adam8bit.h"
#include "models/create_model.h"
#include "runtime/placement.h"
#include "tests/placement_runs.h"
#include "tiers/home_context.h"
#include "tiers/state_blocks.h"

namespace strata {

// (In strata, where argument-dependent lookup finds it for the vectors' comparison.)
bool operator==(const StateRun& a, const StateRun& b) {
  return a.begin == b.begin && a.end == b.end && a.quantized == b.quantized &&
         a.weight_decay == b.weight_decay && a.slot == b.slot;
}

namespace {


const std::vector<std::string> kInt8 = {"train.optimizer_states=int8", "train.grad_clip=0"};

std::vector<std::string> With(std::vector<std::string> sets, const std::vector<std::string>& more) {
  sets.insert(sets.end(), more.begin(), more.end());
  return sets;
}

// The block rule on a hand-made unit: a small tensor, large ones with and without decay,
// a mixed-decay block, padding.
TEST(OptimizerStates, BlockRule) {
  UnitLayout unit("unit");
  unit.Add("small", {100}, false, InitKind::kZeros);      // [0, 100)
  unit.Add("big", {8192}, true, InitKind::kZeros);        // [112, 8304)
  unit.Add("no decay", {4096}, false, InitKind::kZeros);  // [8304, 12400)
  unit.Add("decay", {5000}, true, InitKind::kZeros);      // [12400, 17400)
  ASSERT_EQ(unit.PaddedElements(1), 18432u);
  UnitLayout vocab("vocab");
  vocab.MarkVocabRows(vocab.Add("wte", {8192}, true, InitKind::kZeros));
  EXPECT_EQ(CountStateRuns(StateRuns(vocab, {0, 8192})).quantized, 0u);
  const std::vector<StateRun> whole = {
      {0, 2048, false, false, 0},         {2048, 8192, true, true, 0},
      {8192, 10240, false, false, 2048},  {10240, 12288, true, false, 6144},
      {12288, 14336, false, false, 4096}, {14336, 18432, true, true, 8192}};
  EXPECT_EQ(StateRuns(unit, {0, 18432}), whole);
  ASSERT_EQ(unit.ShardElements(2), 10240u);
  const std::vector<StateRun> shard = {{10240, 12288, true, false, 0},
                                       {12288, 14336, false, false, 0},
                                       {14336, 20480, true, true, 2048}};
  EXPECT_EQ(StateRuns(unit, {10240, 20480}), shard);
  const StateRunElements count = CountStateRuns(whole);
  EXPECT_EQ(count.quantized, 12288u);
  EXPECT_EQ(count.fp32, 6144u);
}

// One rank at every stage, the optimizer on the device and on the host (with the delayed
// update once), gives int8 stage 0's losses bit for bit; two ranks (half the micro-batch
// each) match one within 1e-5 and each other bit for bit.
TEST(OptimizerStates, StagesTiersAndWorldSizesMatch) {
  const int steps = 5;
  auto run = [&](int world, int stage, const std::vector<std::string>& sets) {
    std::vector<std::string> all = kInt8;
    if (world == 2) all.push_back("train.micro_batch=1");
    return TrainAllRanks(PlacementRunOptions(world, stage, With(all, sets), steps));
  };
  const PlacementRun reference = run(1, 0, {});
  ASSERT_OK(reference.status);
  ASSERT_EQ(reference.losses.size(), static_cast<size_t>(steps));
  EXPECT_LT(reference.losses.back(), reference.losses.front());
  const std::vector<std::string> host = {"zero.optimizer_tier=host", "zero.grad_tier=host"};
  struct Case {
    int world, stage;
    std::vector<std::string> sets;
  };
  const std::vector<Case> one_rank = {
      {1, 1, {}},
      {1, 2, {}},
      {1, 3, {}},
      {1, 1, host},
      {1, 2, host},
      {1, 3, host},
      {1, 2, With(host, {"zero.param_update=delayed"})},
      {1, 2, {"zero.optimizer_tier=host"}},
  };
  for (const Case& c : one_rank) {
    const PlacementRun out = run(c.world, c.stage, c.sets);
    ASSERT_OK(out.status) << c.stage << " " << absl::StrJoin(c.sets, " ");
    if (absl::StrJoin(c.sets, " ").find("delayed") != std::string::npos) continue;
    EXPECT_EQ(out.losses, reference.losses) << c.stage << " " << absl::StrJoin(c.sets, " ");
  }
  const PlacementRun two = run(2, 0, {});
  ASSERT_OK(two.status);
  ASSERT_EQ(two.losses.size(), reference.losses.size());
  for (size_t i = 0; i < reference.losses.size(); ++i) {
    EXPECT_NEAR(two.losses[i], reference.losses[i], 1e-5 * reference.losses[i]) << i;
  }
  for (const Case& c : std::vector<Case>{{2, 1, {}}, {2, 3, {}}, {2, 2, host}}) {
    const PlacementRun out = run(c.world, c.stage, c.sets);
    ASSERT_OK(out.status) << c.stage << " " << absl::StrJoin(c.sets, " ");
    EXPECT_EQ(out.losses, two.losses) << c.stage << " " << absl::StrJoin(c.sets, " ");
  }
}

// The same equivalence with bf16 params (the 8-bit step writes the bf16 copy) and on the
// tiny LLaMA (untied head: two vocabulary-row tensors in fp32).
TEST(OptimizerStates, Bf16AndLlamaMatchAcrossStagesAndTiers) {
  std::vector<std::string> llama = TinyLlamaSets();
  for (const std::vector<std::string>& model :
       {std::vector<std::string>{"train.dtype=bf16"}, llama}) {
    const std::vector<std::string> base = With(kInt8, model);
    const PlacementRun reference = TrainAllRanks(PlacementRunOptions(1, 0, base, 4));
    ASSERT_OK(reference.status) << absl::StrJoin(model, " ");
    ASSERT_EQ(reference.losses.size(), 4u);
    EXPECT_LT(reference.losses.back(), reference.losses.front());
    for (const auto& [stage, sets] : std::vector<std::pair<int, std::vector<std::string>>>{
             {3, {}},
             {2, {"zero.optimizer_tier=host", "zero.grad_tier=host"}},
             {3, {"zero.optimizer_tier=host", "zero.param_tier=host"}}}) {
      const PlacementRun out = TrainAllRanks(PlacementRunOptions(1, stage, With(base, sets), 4));
      ASSERT_OK(out.status) << absl::StrJoin(model, " ") << " " << absl::StrJoin(sets, " ");
      EXPECT_EQ(out.losses, reference.losses)
          << absl::StrJoin(model, " ") << " stage " << stage << " " << absl::StrJoin(sets, " ");
    }
  }
}

// The optimizer pool holds, per state element, the fp32 master (4 bytes) and either 8-bit
// moments (2 bytes + 8 per 2048-element block) or fp32 ones (8 bytes), as the block rule
// of tiers/state_blocks.h decides: the exact byte count from the layout.
TEST(OptimizerStates, PoolBytesFollowTheLayout) {
  const std::vector<std::string> wide = With(kInt8, {"model.channels=128"});
  const Options options = PlacementRunOptions(1, 0, wide, 1);
  ASSERT_OK_AND_ASSIGN(auto model, CreateModel(options.model, Recompute::kNone, DType::kF32));
  uint64_t elements = 0, int8_bytes = 0, quantized = 0;
  for (const UnitLayout& unit : model->units()) {
    const size_t n = unit.PaddedElements(1);
    const StateRunElements count = CountStateRuns(StateRuns(unit, {0, n}));
    elements += n;
    quantized += count.quantized;
    int8_bytes +=
        4 * n + 8 * count.fp32 + 2 * count.quantized + 8 * (count.quantized / kAdamStateBlock);
  }
  ASSERT_GT(quantized, 0u);  // the rule leaves some blocks to 8 bits in the tiny model
  std::printf(
      "optimizer state: %llu elements, %llu of them with 8-bit moments; %llu bytes "
      "(int8) against %llu (fp32), %.3f bytes per element\n",
      static_cast<unsigned long long>(elements), static_cast<unsigned long long>(quantized),
      static_cast<unsigned long long>(int8_bytes), static_cast<unsigned long long>(12 * elements),
      static_cast<double>(int8_bytes) / elements);
  const PlacementRun fp32 =
      TrainAllRanks(PlacementRunOptions(1, 0, {"train.grad_clip=0", "model.channels=128"}, 1));
  const PlacementRun device = TrainAllRanks(options);
  const PlacementRun host =
      TrainAllRanks(PlacementRunOptions(1, 1, With(wide, {"zero.optimizer_tier=host"}), 1));
  ASSERT_OK(fp32.status);
  ASSERT_OK(device.status);
  ASSERT_OK(host.status);
  EXPECT_EQ(Peak(fp32.device, StateKind::kOptimizer), 12 * elements);
  EXPECT_EQ(Peak(device.device, StateKind::kOptimizer), int8_bytes);
  EXPECT_EQ(Peak(host.host, StateKind::kOptimizer), int8_bytes);
  EXPECT_EQ(Peak(host.device, StateKind::kOptimizer), 0u);
}

// The tiny model trained 200 steps with 8-bit moments ends within 1% of fp32 moments'
// loss (mean of the last 10 steps).
TEST(OptimizerStates, ConvergesLikeFp32States) {
  const int steps = 200;
  const std::vector<std::string> sets = {"train.grad_clip=0", "train.warmup_steps=10"};
  const PlacementRun fp32 = TrainAllRanks(PlacementRunOptions(1, 0, sets, steps));
  const PlacementRun int8 = TrainAllRanks(PlacementRunOptions(1, 0, With(sets, kInt8), steps));
  ASSERT_OK(fp32.status);
  ASSERT_OK(int8.status);
  ASSERT_EQ(int8.losses.size(), static_cast<size_t>(steps));
  auto tail = [](const std::vector<double>& losses) {
    double sum = 0;
    for (size_t i = losses.size() - 10; i < losses.size(); ++i) sum += losses[i];
    return sum / 10;
  };
  const double a = tail(fp32.losses), b = tail(int8.losses);
  for (int i = 0; i < steps; ++i) {
    if (i % 20 == 0 || std::abs(int8.losses[i] - fp32.losses[i]) > 0.05 * fp32.losses[i]) {
      std::printf("step %d: fp32 %.4f int8 %.4f\n", i, fp32.losses[i], int8.losses[i]);
    }
  }
  std::printf(
      "%d steps: first loss %.4f; last-10 mean fp32 states %.5f, int8 states %.5f "
      "(%+.3f%%)\n",
      steps, fp32.losses.front(), a, b, 100.0 * (b - a) / a);
  EXPECT_LT(b, 0.8 * int8.losses.front());
  EXPECT_NEAR(b, a, 0.01 * a);
}

// The dequantized-then-quantized moments of a step give back the step's codes where the
// block's largest |m| is coded 1.0 (any v block; an m block whose largest magnitude is
// positive); an m block whose largest magnitude is negative (code 0, -0.99296875) comes
// back with absmax * 0.99296875 and may move codes: a resume is then close, not exact.
TEST(OptimizerStates, MomentsRoundTrip) {
  std::vector<float> m(2 * kAdamStateBlock), v(2 * kAdamStateBlock);
  for (size_t i = 0; i < m.size(); ++i) {
    m[i] = 1e-3f * std::sin(0.37f * i) * (i < kAdamStateBlock ? 1.0f : -1.0f);
    v[i] = 1e-6f * (1.5f + std::cos(0.11f * i));
  }
  m[17] = 2e-3f;                    // block 0: its largest |m| positive
  m[kAdamStateBlock + 5] = -2e-3f;  // block 1: negative
  for (const bool is_signed : {false, true}) {
    const std::vector<float>& x = is_signed ? m : v;
    std::vector<uint8_t> codes(x.size()), again(x.size());
    std::vector<float> absmax(2), absmax_again(2), decoded(x.size());
    cpu::QuantizeMoments(x.data(), x.size(), is_signed, codes.data(), absmax.data());
    cpu::DequantizeMoments(codes.data(), absmax.data(), x.size(), is_signed, decoded.data());
    cpu::QuantizeMoments(decoded.data(), x.size(), is_signed, again.data(), absmax_again.data());
    EXPECT_EQ(absmax_again[0], absmax[0]) << is_signed;
    EXPECT_TRUE(std::equal(codes.begin(), codes.begin() + kAdamStateBlock, again.begin()))
        << is_signed;
    if (!is_signed) {
      EXPECT_EQ(absmax_again[1], absmax[1]);
      EXPECT_EQ(again, codes);
    } else {
      EXPECT_EQ(absmax_again[1], absmax[1] * 0.99296875f);
    }
  }
}

// Checkpoints hold fp32 moments: an int8 run resumes with the same first loss and close
// losses after (the round trip above); fp32 -> int8 and int8 -> fp32 resume.
TEST(OptimizerStates, CheckpointsResume) {
  const std::string dir = TestDir("optimizer_states_checkpoints");
  const std::vector<std::string> save = {"train.checkpoint_dir=" + dir, "train.checkpoint_every=3"};
  const PlacementRun whole = TrainAllRanks(PlacementRunOptions(1, 2, With(kInt8, save), 6));
  ASSERT_OK(whole.status);
  ASSERT_EQ(whole.losses.size(), 6u);
  const std::vector<std::string> resume = {"train.resume=" + dir + "/step-3"};
  const PlacementRun resumed = TrainAllRanks(PlacementRunOptions(1, 3, With(kInt8, resume), 6));
  ASSERT_OK(resumed.status);
  ASSERT_EQ(resumed.losses.size(), 3u);
  EXPECT_EQ(resumed.losses[0], whole.losses[3]);
  for (int i = 1; i < 3; ++i) {
    std::printf("int8 resume, step %d: %.9g against %.9g uninterrupted (%+.2e relative)\n", 3 + i,
                resumed.losses[i], whole.losses[3 + i],
                (resumed.losses[i] - whole.losses[3 + i]) / whole.losses[3 + i]);
    EXPECT_NEAR(resumed.losses[i], whole.losses[3 + i], 1e-4 * whole.losses[3 + i]) << i;
  }
  // int8 -> fp32: the moments dequantized once, then fp32 steps.
  const PlacementRun as_fp32 =
      TrainAllRanks(PlacementRunOptions(1, 2, With({"train.grad_clip=0"}, resume), 6));
  ASSERT_OK(as_fp32.status);
  ASSERT_EQ(as_fp32.losses.size(), 3u);
  EXPECT_EQ(as_fp32.losses[0], whole.losses[3]);
  // fp32 -> int8: the fp32 moments quantized on load.
  const std::string fp32_dir = TestDir("optimizer_states_fp32_checkpoints");
  const PlacementRun fp32_whole = TrainAllRanks(PlacementRunOptions(
      1, 0, {"train.grad_clip=0", "train.checkpoint_dir=" + fp32_dir, "train.checkpoint_every=3"},
      6));
  ASSERT_OK(fp32_whole.status);
  const PlacementRun to_int8 = TrainAllRanks(
      PlacementRunOptions(1, 0, With(kInt8, {"train.resume=" + fp32_dir + "/step-3"}), 6));
  ASSERT_OK(to_int8.status);
  ASSERT_EQ(to_int8.losses.size(), 3u);
  EXPECT_EQ(to_int8.losses[0], fp32_whole.losses[3]);
  for (int i = 1; i < 3; ++i) {
    EXPECT_NEAR(to_int8.losses[i], fp32_whole.losses[3 + i], 1e-3 * fp32_whole.losses[3 + i]);
  }
}

// ZeRO-Infinity with 8-bit states: the optimizer on nvme (its chunks' moment extents hold
// the stored form, stepped in the slots by the same CPU 8-bit Adam) at stages 1-3, with the
// gradients on the device, the host or nvme and the params on the device or nvme, chunks of
// one and of several blocks, gives int8 stage 0's losses bit for bit; two ranks (a shard
// that does not start at the unit's element 0) give two ranks' losses.
TEST(OptimizerStates, NvmeTierMatchesTheDevice) {
  const int steps = 4;
  const std::string swap = "zero.nvme_dir=" + TestDir("states8_swap");
  auto run = [&](int world, int stage, const std::vector<std::string>& sets) {
    std::vector<std::string> all = With(kInt8, {swap});
    if (world == 2) all.push_back("train.micro_batch=1");
    return TrainAllRanks(PlacementRunOptions(world, stage, With(all, sets), steps));
  };
  const PlacementRun reference = run(1, 0, {});
  ASSERT_OK(reference.status);
  ASSERT_EQ(reference.losses.size(), static_cast<size_t>(steps));
  const std::string nvme = "zero.optimizer_tier=nvme";
  struct Case {
    int world, stage;
    std::vector<std::string> sets;
  };
  const std::vector<Case> cases = {
      {1, 1, {nvme}},
      {1, 1, {nvme, "zero.grad_tier=host", "nvme.chunk_bytes=16KiB", "nvme.optimizer_buffers=2"}},
      {1, 2, {nvme, "zero.grad_tier=nvme", "nvme.chunk_bytes=16KiB"}},
      {1, 3, {nvme, "zero.grad_tier=host"}},
      {1, 3, {nvme, "zero.grad_tier=host", "zero.param_tier=nvme", "nvme.chunk_bytes=8KiB"}},
      {1, 3, {nvme, "zero.grad_tier=nvme", "zero.param_tier=nvme", "nvme.chunk_bytes=8KiB",
              "nvme.optimizer_buffers=3"}},
  };
  for (const Case& c : cases) {
    const PlacementRun out = run(c.world, c.stage, c.sets);
    ASSERT_OK(out.status) << c.stage << " " << absl::StrJoin(c.sets, " ");
    EXPECT_EQ(out.losses, reference.losses) << c.stage << " " << absl::StrJoin(c.sets, " ");
    ASSERT_FALSE(out.steps.empty());
    EXPECT_GT(out.steps.back().nvme_read_bytes, 0u) << absl::StrJoin(c.sets, " ");
    EXPECT_EQ(Peak(out.device, StateKind::kOptimizer), 0u) << absl::StrJoin(c.sets, " ");
  }
  const PlacementRun two = run(2, 0, {});
  ASSERT_OK(two.status);
  for (const Case& c : std::vector<Case>{
           {2, 1, {nvme, "zero.grad_tier=host", "nvme.chunk_bytes=16KiB"}},
           {2, 3,
            {nvme, "zero.grad_tier=nvme", "zero.param_tier=nvme", "nvme.chunk_bytes=8KiB"}}}) {
    const PlacementRun out = run(c.world, c.stage, c.sets);
    ASSERT_OK(out.status) << c.stage << " " << absl::StrJoin(c.sets, " ");
    EXPECT_EQ(out.losses, two.losses) << "two ranks, " << c.stage << " "
                                      << absl::StrJoin(c.sets, " ");
  }
}

// Checkpoints of an int8 run on nvme (the fp32 views: moments dequantized chunk by chunk on
// save, quantized on load) resume on nvme and on the device alike: the first loss exact, the
// next within 1e-4 of the uninterrupted run (the round trip of MomentsRoundTrip).
TEST(OptimizerStates, NvmeCheckpointsResume) {
  const std::string dir = TestDir("optimizer_states_nvme_checkpoints");
  const std::vector<std::string> nvme = {"zero.optimizer_tier=nvme", "zero.grad_tier=host",
                                         "nvme.chunk_bytes=16KiB",
                                         "zero.nvme_dir=" + TestDir("states8_resume_swap")};
  const PlacementRun whole = TrainAllRanks(PlacementRunOptions(
      1, 2, With(With(kInt8, nvme), {"train.checkpoint_dir=" + dir, "train.checkpoint_every=3"}),
      6));
  ASSERT_OK(whole.status);
  ASSERT_EQ(whole.losses.size(), 6u);
  const std::vector<std::string> resume = {"train.resume=" + dir + "/step-3"};
  for (const std::vector<std::string>& tier : {nvme, std::vector<std::string>{}}) {
    const PlacementRun resumed =
        TrainAllRanks(PlacementRunOptions(1, 2, With(With(kInt8, tier), resume), 6));
    ASSERT_OK(resumed.status) << absl::StrJoin(tier, " ");
    ASSERT_EQ(resumed.losses.size(), 3u);
    EXPECT_EQ(resumed.losses[0], whole.losses[3]) << absl::StrJoin(tier, " ");
    for (int i = 1; i < 3; ++i) {
      EXPECT_NEAR(resumed.losses[i], whole.losses[3 + i], 1e-4 * whole.losses[3 + i])
          << i << " " << absl::StrJoin(tier, " ");
    }
  }
}

// A ZeRO-Infinity step (optimizer on nvme, gradients on the host) reads and writes each
// chunk's master (fp32) and its two moments in stored form, each extent padded to 4 KiB:
// the exact bytes from the layout, against fp32 states' 3 x 4 bytes per element.
TEST(OptimizerStates, NvmeBytesFollowTheStoredForm) {
  const std::vector<std::string> sets = {
      "train.grad_clip=0", "model.channels=64", "zero.optimizer_tier=nvme",
      "zero.grad_tier=host", "nvme.chunk_bytes=16KiB", "zero.nvme_dir=" + TestDir("states8_bytes")};
  const Options options = PlacementRunOptions(1, 1, With(sets, kInt8), 3);
  ASSERT_OK_AND_ASSIGN(auto model, CreateModel(options.model, Recompute::kNone, DType::kF32));
  auto padded = [](uint64_t bytes) { return (bytes + 4095) / 4096 * 4096; };
  uint64_t int8_bytes = 0, fp32_bytes = 0, elements = 0;
  for (const UnitLayout& unit : model->units()) {
    const size_t n = unit.PaddedElements(1);
    elements += n;
    const std::vector<std::vector<NvmeChunk>> chunks = NvmeChunks({n}, 4096);
    for (const NvmeChunk& chunk : chunks[0]) {
      const uint64_t master = padded((chunk.end - chunk.begin) * 4);
      fp32_bytes += 3 * master;
      const std::vector<StateRun> runs = StateRuns(unit, {chunk.begin, chunk.end});
      int8_bytes += master + 2 * padded(SectionsOf(runs).bytes());
    }
  }
  const PlacementRun int8 = TrainAllRanks(options);
  const PlacementRun fp32 = TrainAllRanks(PlacementRunOptions(1, 1, sets, 3));
  ASSERT_OK(int8.status);
  ASSERT_OK(fp32.status);
  ASSERT_EQ(int8.steps.size(), 3u);
  ASSERT_EQ(fp32.steps.size(), 3u);
  std::printf("nvme bytes per step (each way): int8 states %llu, fp32 %llu (%.3f x; %.2f bytes "
              "per element against 12)\n",
              static_cast<unsigned long long>(int8_bytes),
              static_cast<unsigned long long>(fp32_bytes),
              static_cast<double>(int8_bytes) / fp32_bytes,
              static_cast<double>(int8_bytes) / elements);
  // After step 0 (which also reads ahead for step 1), a step reads every chunk once.
  for (size_t step = 1; step < 3; ++step) {
    EXPECT_EQ(int8.steps[step].nvme_read_bytes, int8_bytes) << step;
    EXPECT_EQ(int8.steps[step].nvme_written_bytes, int8_bytes) << step;
    EXPECT_EQ(fp32.steps[step].nvme_read_bytes, fp32_bytes) << step;
    EXPECT_EQ(fp32.steps[step].nvme_written_bytes, fp32_bytes) << step;
  }
  // This tiny model keeps a large share in fp32 moments (its token embedding) and pads
  // small extents: the fraction is far above the (4 + 2) / 12 of 8-bit moments throughout.
  EXPECT_LT(int8_bytes, fp32_bytes * 0.8);
}

// The tied split (a capability, not a key) is left off with 8-bit states: the split's row
// ranges would cut blocks.
TEST(OptimizerStates, NoTiedSplit) {
  ASSERT_OK_AND_ASSIGN(
      const Placement placement,
      ResolvePlacement(
          PlacementRunOptions(1, 2,
                              With(kInt8, {"zero.optimizer_tier=host", "zero.grad_tier=host"}), 1),
          1));
  EXPECT_FALSE(placement.split_tied);
  EXPECT_TRUE(placement.early_step);
}

}  // namespace
}  // namespace strata
