// train.optimizer_states = int8 (8-bit Adam moments, docs/quantization.md "8-bit Adam
// states") through the whole runtime: the equivalence of stages and tiers, two ranks
// against one, the optimizer pool's bytes from the layout, convergence against fp32
// states, checkpoints (the 8-bit states kept as they are, format 8; conversions from and to
// fp32 states; other world sizes; damaged ones) and what is refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint.h"
#include "config/options_parse.h"
#include "core/testing/status_matchers.h"
#include "kernels/cpu/adam8bit.h"
#include "models/create_model.h"
#include "runtime/placement.h"
#include "session/ranks.h"
#include "session/session.h"
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

using ::testing::AllOf;
using ::testing::HasSubstr;

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

// The lines logged while it lives (every rank's logger named "strata-<r>": InitLogging
// reuses the one registered here for rank 0), also shown on stderr.
class LogCapture {
 public:
  LogCapture() {
    spdlog::drop("strata-0");
    auto logger = std::make_shared<spdlog::logger>(
        "strata-0",
        spdlog::sinks_init_list{std::make_shared<spdlog::sinks::ostream_sink_mt>(text_),
                                std::make_shared<spdlog::sinks::stderr_color_sink_mt>()});
    spdlog::register_logger(logger);
  }
  ~LogCapture() { spdlog::drop("strata-0"); }
  std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
};

// The bytes of an int8 run's rank file at one rank, from the layout: per unit its fp32
// master (4 bytes an element) and each moment's stored form over its used elements (fp32
// blocks 4 bytes an element, 8-bit ones 1 byte an element and a 4-byte absmax per block).
uint64_t Int8CheckpointBytes(const Options& options, uint64_t* fp32_bytes) {
  auto model = CreateModel(options.model, Recompute::kNone, DType::kF32);
  EXPECT_OK(model.status());
  uint64_t bytes = 0, quantized = 0;
  *fp32_bytes = 0;
  for (const UnitLayout& unit : (*model)->units()) {
    const size_t used = unit.used_elements();
    const std::vector<StateRun> runs = StateRuns(unit, {0, used});
    bytes += 4 * used + 2 * SectionsOf(runs).bytes();
    quantized += CountStateRuns(runs).quantized;
    *fp32_bytes += 12 * used;
  }
  EXPECT_GT(quantized, 0u);
  return bytes;
}

// checkpoint.json of step directory `step`.
nlohmann::json Manifest(const std::string& step) {
  std::ifstream in(step + "/checkpoint.json");
  return nlohmann::json::parse(in);
}

// Checkpoints keep the 8-bit states as they are (format 8): each unit's moments in their
// stored form, named as such in the manifest, the file exactly the layout's bytes (smaller
// than fp32 states'); a resume at another stage and tier continues bit for bit, saying
// nothing of conversions.
TEST(OptimizerStates, CheckpointsKeepTheStatesAsTheyAre) {
  const std::string dir = TestDir("optimizer_states_checkpoints");
  const std::vector<std::string> save = {"train.checkpoint_dir=" + dir, "train.checkpoint_every=3"};
  const Options options = PlacementRunOptions(1, 2, With(kInt8, save), 6);
  const PlacementRun whole = TrainAllRanks(options);
  ASSERT_OK(whole.status);
  ASSERT_EQ(whole.losses.size(), 6u);
  const std::string step = dir + "/step-3";
  const nlohmann::json meta = Manifest(step);
  EXPECT_EQ(meta["version"], 8);
  for (const nlohmann::json& unit : meta["units"]) {
    const nlohmann::json& arrays = unit["arrays"];
    EXPECT_EQ(arrays[0]["dtype"], "f32");
    EXPECT_EQ(arrays[1]["dtype"], "q8-dynamic-signed");
    EXPECT_EQ(arrays[2]["dtype"], "q8-dynamic-unsigned");
    for (int k = 1; k < 3; ++k) {
      EXPECT_EQ(arrays[k]["block"], 2048);
      EXPECT_EQ(arrays[k]["scales"], "f32");
      EXPECT_TRUE(arrays[k]["fp32_blocks"].is_array());
    }
  }
  uint64_t fp32_bytes = 0;
  const uint64_t bytes = Int8CheckpointBytes(options, &fp32_bytes);
  const uint64_t file = std::filesystem::file_size(step + "/rank-00000.bin");
  std::printf("int8 checkpoint: %llu bytes (the layout's: %llu); fp32 states': %llu (%.3fx)\n",
              static_cast<unsigned long long>(file), static_cast<unsigned long long>(bytes),
              static_cast<unsigned long long>(fp32_bytes), static_cast<double>(file) / fp32_bytes);
  EXPECT_EQ(file, bytes);
  EXPECT_LT(file, fp32_bytes);
  const std::vector<std::string> resume = {"train.resume=" + step};
  for (const auto& [stage, sets] : std::vector<std::pair<int, std::vector<std::string>>>{
           {3, {}}, {1, {"zero.optimizer_tier=host", "zero.grad_tier=host"}}}) {
    LogCapture log;
    const PlacementRun resumed =
        TrainAllRanks(PlacementRunOptions(1, stage, With(With(kInt8, resume), sets), 6));
    ASSERT_OK(resumed.status) << stage;
    EXPECT_EQ(resumed.losses, std::vector<double>(whole.losses.begin() + 3, whole.losses.end()))
        << "stage " << stage << " " << absl::StrJoin(sets, " ");
    EXPECT_THAT(log.text(), ::testing::Not(HasSubstr("converted")));
  }
  // The background writer snapshots the same bytes.
  const std::string async_dir = TestDir("optimizer_states_async_checkpoints");
  const PlacementRun async = TrainAllRanks(PlacementRunOptions(
      1, 2,
      With(kInt8, {"train.checkpoint_dir=" + async_dir, "train.checkpoint_every=3",
                   "train.checkpoint_async=true", "train.checkpoint_buffer_bytes=1MiB"}),
      6));
  ASSERT_OK(async.status);
  const nlohmann::json async_meta = Manifest(async_dir + "/step-3");
  EXPECT_EQ(async_meta["files"][0]["xxh3"], meta["files"][0]["xxh3"]);
  EXPECT_EQ(async_meta["units"], meta["units"]);
}

// fp32 states into an int8 run and 8-bit ones into an fp32 run: converted (quantized, or
// dequantized), and the log says so; the first loss is the uninterrupted run's (it depends
// on the master alone), the next ones close.
TEST(OptimizerStates, ConversionsBetweenFp32AndInt8StatesAreSaid) {
  const std::string dir = TestDir("optimizer_states_conversions");
  const PlacementRun int8 = TrainAllRanks(PlacementRunOptions(
      1, 0, With(kInt8, {"train.checkpoint_dir=" + dir + "/int8", "train.checkpoint_every=3"}), 6));
  const PlacementRun fp32 = TrainAllRanks(PlacementRunOptions(
      1, 0,
      {"train.grad_clip=0", "train.checkpoint_dir=" + dir + "/fp32", "train.checkpoint_every=3"},
      6));
  ASSERT_OK(int8.status);
  ASSERT_OK(fp32.status);
  {
    LogCapture log;
    const PlacementRun as_fp32 = TrainAllRanks(PlacementRunOptions(
        1, 2, {"train.grad_clip=0", "train.resume=" + dir + "/int8/step-3"}, 6));
    ASSERT_OK(as_fp32.status);
    ASSERT_EQ(as_fp32.losses.size(), 3u);
    EXPECT_EQ(as_fp32.losses[0], int8.losses[3]);
    for (int i = 1; i < 3; ++i) {
      EXPECT_NEAR(as_fp32.losses[i], int8.losses[3 + i], 1e-3 * int8.losses[3 + i]) << i;
    }
    EXPECT_THAT(log.text(), HasSubstr("converted 8-bit Adam states to fp32"));
  }
  {
    LogCapture log;
    const PlacementRun to_int8 = TrainAllRanks(
        PlacementRunOptions(1, 3, With(kInt8, {"train.resume=" + dir + "/fp32/step-3"}), 6));
    ASSERT_OK(to_int8.status);
    ASSERT_EQ(to_int8.losses.size(), 3u);
    EXPECT_EQ(to_int8.losses[0], fp32.losses[3]);
    for (int i = 1; i < 3; ++i) {
      EXPECT_NEAR(to_int8.losses[i], fp32.losses[3 + i], 1e-3 * fp32.losses[3 + i]) << i;
    }
    EXPECT_THAT(log.text(), HasSubstr("converted fp32 Adam states to 8-bit"));
  }
  // The dequantized moments are what the 8-bit codes stand for: read back through the
  // manifest, each element of exp_avg is map[code] * absmax of its block.
  ASSERT_OK_AND_ASSIGN(const OpenedCheckpoint opened, OpenCheckpoint(dir + "/int8/step-3"));
  const OpenedCheckpoint::Unit& unit = opened.units[1];
  ASSERT_TRUE(unit.eight_bit(1));
  std::vector<float> values(unit.elements);
  ASSERT_OK(ReadCheckpointArray(opened, 1, 1, 0, unit.elements, values.data()));
  std::vector<uint8_t> stored(CheckpointMoment8BitBytes(opened, 1, 1, 0, unit.elements));
  ASSERT_OK(ReadCheckpointMoment8Bit(opened, 1, 1, 0, unit.elements, stored.data()));
  std::vector<StateRun> runs;
  for (size_t b = 0; b * kAdamStateBlock < unit.elements; ++b) {
    const size_t end = std::min(unit.elements, (b + 1) * kAdamStateBlock);
    runs.push_back({b * kAdamStateBlock, end, unit.blocks[1].quantized(b), false, 0});
  }
  size_t slots[2] = {0, 0};
  for (StateRun& run : runs) {
    run.slot = slots[run.quantized];
    slots[run.quantized] += run.end - run.begin;
  }
  std::vector<float> expected(unit.elements);
  MomentToFp32(runs, true, stored.data(), expected.data());
  EXPECT_EQ(values, expected);
  EXPECT_GT(slots[1], 0u);
}

// An int8 checkpoint written at world 2 (stage 3) loads at world 1 (stage 0) as it is:
// written straight back, every master and stored moment is byte for byte the same; the
// resumed losses are world 2's within rounding (the gradient sums' order differs). Gathered
// into one directory (consolidate), it keeps its stored form and resumes the same.
TEST(OptimizerStates, Int8CheckpointsMoveAcrossWorldSizesAsTheyAre) {
  const std::string dir = TestDir("optimizer_states_world2");
  const PlacementRun two = TrainAllRanks(PlacementRunOptions(
      2, 3,
      With(kInt8,
           {"train.micro_batch=1", "train.checkpoint_dir=" + dir, "train.checkpoint_every=3"}),
      6));
  ASSERT_OK(two.status);
  const std::string step = dir + "/step-3";
  const Options one = PlacementRunOptions(
      1, 0, With(kInt8, {"train.resume=" + step, "train.checkpoint_dir=" + dir + "/back"}), 6);
  ASSERT_OK(RunRanks(one, [&](Communicator& communicator) -> Status {
    ASSIGN_OR_RETURN(auto session, TrainingSession::Create(one, &communicator));
    return session->Checkpoint(3).status();
  }));
  const std::string consolidated = dir + "/consolidated";
  std::filesystem::remove_all(consolidated);  // a run outside bazel's fresh TEST_TMPDIR
  ASSERT_OK(ConsolidateCheckpoint({{step}, consolidated}).status());
  ASSERT_OK_AND_ASSIGN(const OpenedCheckpoint written, OpenCheckpoint(step));
  EXPECT_EQ(written.world, 2);
  for (const std::string& other : {dir + "/back/step-3", consolidated}) {
    ASSERT_OK_AND_ASSIGN(const OpenedCheckpoint back, OpenCheckpoint(other));
    EXPECT_EQ(back.world, 1);
    ASSERT_EQ(back.units.size(), written.units.size());
    for (size_t u = 0; u < written.units.size(); ++u) {
      const size_t n = written.units[u].elements;
      std::vector<float> a(n), b(n);
      ASSERT_OK(ReadCheckpointArray(written, u, 0, 0, n, a.data()));
      ASSERT_OK(ReadCheckpointArray(back, u, 0, 0, n, b.data()));
      EXPECT_EQ(a, b) << other << " unit " << u << " master";
      for (int k = 1; k < 3; ++k) {
        ASSERT_TRUE(back.units[u].eight_bit(k));
        EXPECT_EQ(back.units[u].blocks[k].fp32, written.units[u].blocks[k].fp32);
        std::vector<uint8_t> x(CheckpointMoment8BitBytes(written, u, k, 0, n));
        std::vector<uint8_t> y(CheckpointMoment8BitBytes(back, u, k, 0, n));
        ASSERT_OK(ReadCheckpointMoment8Bit(written, u, k, 0, n, x.data()));
        ASSERT_OK(ReadCheckpointMoment8Bit(back, u, k, 0, n, y.data()));
        EXPECT_EQ(x, y) << other << " unit " << u << " array " << k;
      }
    }
  }
  const PlacementRun resumed =
      TrainAllRanks(PlacementRunOptions(1, 0, With(kInt8, {"train.resume=" + step}), 6));
  const PlacementRun from_consolidated =
      TrainAllRanks(PlacementRunOptions(1, 0, With(kInt8, {"train.resume=" + consolidated}), 6));
  ASSERT_OK(resumed.status);
  ASSERT_OK(from_consolidated.status);
  ASSERT_EQ(resumed.losses.size(), 3u);
  EXPECT_EQ(from_consolidated.losses, resumed.losses);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(resumed.losses[i], two.losses[3 + i], 1e-5 * two.losses[3 + i]) << i;
  }
}

// Rewrites checkpoint.json of `step` with `meta` and its checksum made again.
void WriteManifest(const std::string& step, nlohmann::json meta) {
  meta.erase("checksum");
  const std::string compact = meta.dump();
  meta["checksum"] = absl::StrFormat("%016x", XXH3_64bits(compact.data(), compact.size()));
  std::ofstream(step + "/checkpoint.json", std::ios::trunc) << meta.dump(2);
}

// A damaged byte among a unit's 8-bit codes fails the file's checksum, named; a manifest
// whose 8-bit array has an unknown dtype, fp32 blocks outside the unit, or fp32 blocks that
// do not add up to the file is refused naming the unit and the array (or the file).
TEST(OptimizerStates, DamagedInt8StatesAreNamed) {
  const std::string dir = TestDir("optimizer_states_damaged");
  ASSERT_OK(
      TrainAllRanks(
          PlacementRunOptions(
              1, 0, With(kInt8, {"train.checkpoint_dir=" + dir, "train.checkpoint_every=2"}), 2))
          .status);
  const std::string step = dir + "/step-2";
  const nlohmann::json original = Manifest(step);
  ASSERT_OK_AND_ASSIGN(const OpenedCheckpoint opened, OpenCheckpoint(step));
  // The first code of unit 1's exp_avg: its piece's codes section follows its fp32 values.
  const OpenedCheckpoint::Unit& unit = opened.units[1];
  ASSERT_TRUE(unit.eight_bit(1));
  size_t fp32_elements = 0;
  for (size_t b = 0; b * kAdamStateBlock < unit.elements; ++b) {
    if (!unit.blocks[1].quantized(b)) {
      fp32_elements += std::min(unit.elements, (b + 1) * kAdamStateBlock) - b * kAdamStateBlock;
    }
  }
  const std::string file = step + "/rank-00000.bin";
  {
    std::fstream out(file, std::ios::in | std::ios::out | std::ios::binary);
    out.seekg(unit.arrays[1][0].offset + 4 * fp32_elements);
    const char code = static_cast<char>(out.get());
    out.seekp(unit.arrays[1][0].offset + 4 * fp32_elements);
    out.put(static_cast<char>(code ^ 0x40));
  }
  const PlacementRun damaged =
      TrainAllRanks(PlacementRunOptions(1, 0, With(kInt8, {"train.resume=" + step}), 4));
  EXPECT_THAT(damaged.status.message(), AllOf(HasSubstr("checksum mismatch"), HasSubstr(file)));
  EXPECT_TRUE(damaged.losses.empty());

  const std::string name = original["units"][1]["name"].get<std::string>();
  nlohmann::json unknown = original;
  unknown["units"][1]["arrays"][1]["dtype"] = "q8-blockwise";
  WriteManifest(step, unknown);
  EXPECT_THAT(OpenCheckpoint(step).status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                AllOf(HasSubstr("unit " + name +
                                                "'s exp_avg is of dtype "
                                                "q8-blockwise"),
                                      HasSubstr("q8-dynamic-signed"))));
  nlohmann::json outside = original;
  outside["units"][1]["arrays"][2]["fp32_blocks"] = {{0, 999}};
  WriteManifest(step, outside);
  EXPECT_THAT(OpenCheckpoint(step).status(),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("unit " + name + "'s exp_avg_sq lists fp32 blocks")));
  nlohmann::json resized = original;
  resized["units"][1]["arrays"][2]["fp32_blocks"] = nlohmann::json::array();  // all 8-bit
  if (original["units"][1]["arrays"][2]["fp32_blocks"].empty()) {
    resized["units"][1]["arrays"][2]["fp32_blocks"] = {{0, 1}};
  }
  WriteManifest(step, resized);
  EXPECT_THAT(
      OpenCheckpoint(step).status(),
      testing::StatusIs(absl::StatusCode::kInvalidArgument,
                        AllOf(HasSubstr("rank-00000.bin add up to"), HasSubstr("fp32_blocks"))));
  WriteManifest(step, original);
  EXPECT_OK(OpenCheckpoint(step).status());
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

// Checkpoints of an int8 run on nvme keep the stored form (ReadMoment assembles it from the
// chunks) and resume on nvme and on the device alike, bit for bit with the uninterrupted run.
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
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(resumed.losses[i], whole.losses[3 + i]) << i << " " << absl::StrJoin(tier, " ");
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

// The tied split (a capability, not a key) works with 8-bit states: the late ranges (the
// batch's token rows of the tied embedding, fp32 moments, and the first T rows of the
// position embedding, 8-bit) grow to whole blocks; the losses are the unsplit step's.
TEST(OptimizerStates, TiedSplitStepsWholeBlocks) {
  // One micro-batch a step (the split's condition); a position embedding of 128 x 64 rows,
  // 8-bit, whose first T rows end inside a block.
  const std::vector<std::string> shape = With(
      kInt8, {"train.grad_accum=1", "model.channels=64", "model.max_seq_len=128"});
  const Options split = PlacementRunOptions(
      1, 2, With(shape, {"zero.optimizer_tier=host", "zero.grad_tier=host"}), 4);
  ASSERT_OK_AND_ASSIGN(const Placement placement, ResolvePlacement(split, 1));
  EXPECT_TRUE(placement.split_tied);
  EXPECT_TRUE(placement.early_step);
  const PlacementRun reference = TrainAllRanks(PlacementRunOptions(1, 0, shape, 4));
  const PlacementRun out = TrainAllRanks(split);
  ASSERT_OK(reference.status);
  ASSERT_OK(out.status);
  EXPECT_EQ(out.losses, reference.losses);
}

}  // namespace
}  // namespace strata
