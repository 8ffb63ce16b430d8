// LoRA on a quantized frozen base (lora.base_dtype nf4, int8, bf16) through the whole
// runtime: the engine trains on exactly the dequantized base (bit for bit the loss of a
// plain LoRA model given those values); every stage, placement of the base (device, host,
// nvme) and world size gives the same losses, as for an unquantized base; the stored base
// never changes and takes a fraction of the device memory; checkpoints resume bit for bit
// and refuse another base dtype; an imported base is quantized as it is read, the same
// bytes at every world size; and LoRA on an NF4 base of a trained model ends within a
// stated tolerance of LoRA on its bf16 base.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint.h"
#include "config/options_parse.h"
#include "data/tokens.h"
#include "core/testing/status_matchers.h"
#include "interop/export_weights.h"
#include "tests/engine_rig.h"
#include "tests/hf_fixtures.h"
#include "tests/placement_runs.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

std::vector<std::string> Sets(bool llama, std::vector<std::string> extra) {
  std::vector<std::string> sets;
  if (llama) sets = TinyLlamaSets();
  sets.insert(sets.end(), extra.begin(), extra.end());
  return sets;
}

// The engine computes with exactly the dequantized base: a plain LoRA model (base_dtype
// train, fp32) given the quantized engine's base values (ReadParams) evaluates to the same
// loss, bit for bit; and those values differ from the unquantized base by at most what
// the format allows (nf4: 0.14 of a block's absmax plus the absmax's own 8-bit error;
// int8: half a step of absmax / 127; bf16: half an ulp).
TEST(QuantizedBase, ComputesWithTheDequantizedBase) {
  for (const bool llama : {false, true}) {
    for (const char* dtype : {"nf4", "int8", "bf16"}) {
      const std::string what = absl::StrCat(llama ? "llama " : "gpt ", dtype);
      const Options quantized = PlacementRunOptions(
          1, 0, Sets(llama, {"lora.rank=4", "lora.targets=all",
                             absl::StrCat("lora.base_dtype=", dtype)}), 1);
      Options plain = quantized;
      plain.lora.base_dtype = BaseDType::kTrain;
      ASSERT_OK_AND_ASSIGN(auto q, MakeEngineRig(quantized));
      ASSERT_OK_AND_ASSIGN(auto p, MakeEngineRig(plain));
      const auto& units = q->model->units();
      int packed = 0;
      double worst = 0.0;  // largest |dequantized - original| / max |original| of a matrix
      for (int u = 0; u < static_cast<int>(units.size()); ++u) {
        if (units[u].trainable()) continue;
        ASSERT_OK_AND_ASSIGN(std::vector<float> original, p->engine->state().ReadParams(u));
        ASSERT_OK_AND_ASSIGN(std::vector<float> values, q->engine->state().ReadParams(u));
        ASSERT_EQ(values.size(), original.size()) << what;
        if (!q->engine->state().Packed(u)) {
          EXPECT_EQ(values, original) << what << " " << units[u].name();
          continue;
        }
        ++packed;
        EXPECT_NE(values, original) << what << " " << units[u].name() << " not quantized";
        for (const TensorSpec& t : units[u].tensors()) {
          float max_abs = 0.0f, max_err = 0.0f;
          for (size_t i = t.offset; i < t.offset + t.numel; ++i) {
            max_abs = std::max(max_abs, std::fabs(original[i]));
            max_err = std::max(max_err, std::fabs(values[i] - original[i]));
          }
          if (!t.linear) {
            EXPECT_EQ(max_err, 0.0f) << what << " " << t.name << " is not a matrix";
            continue;
          }
          worst = std::max(worst, static_cast<double>(max_err / max_abs));
        }
        ASSERT_OK(p->engine->state().WriteMaster(u, values));
      }
      EXPECT_EQ(packed, 2) << what;  // the two blocks
      const double bound = std::string(dtype) == "nf4" ? 0.15 : std::string(dtype) == "int8" ? 0.005 : 0.004;
      EXPECT_LE(worst, bound) << what;
      EXPECT_GT(worst, 0.0) << what;
      const RandomTokens batch = RandomBatch(quantized);
      ASSERT_OK_AND_ASSIGN(double a, q->engine->EvalLoss(batch.micro()));
      ASSERT_OK_AND_ASSIGN(double b, p->engine->EvalLoss(batch.micro()));
      EXPECT_EQ(a, b) << what;
    }
  }
}

// As Lora.PlacementsAndWorldSizesMatch, with the base quantized: one rank at every stage
// and base placement gives stage 0's losses bit for bit; two ranks (half the micro-batch
// each) match one within fp32 rounding and each other bit for bit. Pairwise over the
// base dtypes: nf4 everywhere, int8 and bf16 (with a bf16 run) in a few cases.
TEST(QuantizedBase, PlacementsAndWorldSizesMatch) {
  for (const bool llama : {false, true}) {
    const std::string dir = TestDir(llama ? "qbase_llama" : "qbase_gpt");
    struct Case {
      int world, stage;
      std::vector<std::string> sets;
    };
    auto run = [&](const std::string& dtype, const Case& c) {
      std::vector<std::string> sets =
          Sets(llama, {"lora.rank=4", "lora.targets=all", "lora.dropout=0.1",
                       "train.grad_clip=0", "zero.nvme_dir=" + dir, "lora.base_dtype=" + dtype});
      if (c.world == 2) sets.push_back("train.micro_batch=1");
      sets.insert(sets.end(), c.sets.begin(), c.sets.end());
      return TrainAllRanks(PlacementRunOptions(c.world, c.stage, sets, 4));
    };
    auto what = [&](const std::string& dtype, const Case& c) {
      return absl::StrCat(llama ? "llama " : "gpt ", dtype, " world ", c.world, " stage ",
                          c.stage, " ", absl::StrJoin(c.sets, " "));
    };
    for (const std::string dtype : {"nf4", "int8", "bf16"}) {
      const PlacementRun reference = run(dtype, {1, 0, {}});
      ASSERT_OK(reference.status) << dtype;
      ASSERT_EQ(reference.losses.size(), 4u);
      const PlacementRun reference2 = run(dtype, {2, 0, {}});
      ASSERT_OK(reference2.status);
      for (size_t i = 0; i < reference.losses.size(); ++i) {
        EXPECT_NEAR(reference2.losses[i], reference.losses[i], 1e-5 * reference.losses[i])
            << what(dtype, {2, 0, {}}) << " step " << i;
      }
      std::vector<Case> cases;
      if (dtype == "nf4") {
        cases = {
            {1, 3, {"lora.base_tier=nvme"}},
            {1, 3, {"lora.base_tier=host", "zero.optimizer_tier=nvme", "zero.param_tier=nvme",
                    "train.recompute=blocks"}},
            {1, 2, {"zero.optimizer_tier=host", "zero.grad_tier=host"}},
            {2, 1, {}},
            {2, 3, {"lora.base_tier=nvme", "nvme.chunk_bytes=8KiB"}},
            {2, 3, {"lora.base_tier=host"}},
        };
      } else if (dtype == "int8") {
        cases = {{1, 3, {"lora.base_tier=host"}}, {2, 3, {"lora.base_tier=nvme"}}};
      } else {
        cases = {{2, 3, {"lora.base_tier=nvme"}}};
      }
      for (const Case& c : cases) {
        const PlacementRun out = run(dtype, c);
        ASSERT_OK(out.status) << what(dtype, c);
        EXPECT_EQ(out.losses, (c.world == 1 ? reference : reference2).losses) << what(dtype, c);
      }
    }
  }
}

// Training moves the adapters only: every packed unit's stored bytes are what they were.
// Between steps the device holds the base in its stored form: an NF4 base's params take
// less than a third of the fp32 base's bytes (the tiny model's embedding and head stay
// fp32, so not the eighth of the matrices alone).
TEST(QuantizedBase, StoredBaseNeverChangesAndIsSmall) {
  Options options = PlacementRunOptions(1, 0, {"lora.rank=4", "lora.base_dtype=nf4",
                                               "train.grad_accum=1"}, 1);
  options.train.lr = 3e-2f;
  ASSERT_OK_AND_ASSIGN(auto rig, MakeEngineRig(options));
  const auto& units = rig->model->units();
  std::vector<std::vector<uint8_t>> before(units.size());
  uint64_t packed_bytes = 0, unpacked_bytes = 0;
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    if (!rig->engine->state().Packed(u)) continue;
    ASSERT_OK_AND_ASSIGN(before[u], rig->engine->state().ReadStoredBytes(u));
    packed_bytes += rig->engine->state().stored(u).bytes();
    unpacked_bytes += units[u].used_elements() * 4;
  }
  ASSERT_GT(packed_bytes, 0u);
  EXPECT_LT(packed_bytes * 6, unpacked_bytes);  // the blocks: mostly matrices, 0.52 of 4 bytes
  const RandomTokens batch = RandomBatch(options);
  for (int step = 0; step < 3; ++step) {
    ASSERT_OK(rig->engine->TrainStep({batch.micro()}, options.train.lr, step).status());
  }
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    if (!rig->engine->state().Packed(u)) continue;
    ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> after, rig->engine->state().ReadStoredBytes(u));
    EXPECT_EQ(after, before[u]) << units[u].name();
  }
  // Four blocks: all of them dequantized at once would be twice the bound below.
  const PlacementRun full =
      TrainAllRanks(PlacementRunOptions(1, 0, {"lora.rank=4", "model.layers=4"}, 1));
  const PlacementRun nf4 = TrainAllRanks(
      PlacementRunOptions(1, 0, {"lora.rank=4", "lora.base_dtype=nf4", "model.layers=4"}, 1));
  ASSERT_OK(full.status);
  ASSERT_OK(nf4.status);
  const int params = static_cast<int>(StateKind::kParams);
  EXPECT_LT(nf4.device_setup.current_by_kind[params] * 3,
            full.device_setup.current_by_kind[params] * 2)
      << nf4.device_setup.current_by_kind[params] << " vs "
      << full.device_setup.current_by_kind[params];
  // During the steps: one block's dequantized params in use and one on its way out at
  // most, however far the host runs ahead (never the whole base dequantized).
  const uint64_t block_bytes = units[1].used_elements() * sizeof(float);
  EXPECT_GT(Peak(nf4.device, StateKind::kParams), nf4.device_setup.current_by_kind[params]);
  EXPECT_LE(Peak(nf4.device, StateKind::kParams),
            nf4.device_setup.current_by_kind[params] + 2 * block_bytes);
}

// A checkpoint of a quantized-base run records the base dtype and the hash of the stored
// bytes, resumes bit for bit (at another stage and base placement), and refuses a run of
// another base dtype, naming the key.
TEST(QuantizedBase, CheckpointsResumeAndNameTheBaseDtype) {
  const std::string dir = TestDir("qbase_checkpoints");
  std::vector<std::string> sets = {"lora.rank=4", "lora.base_dtype=nf4",
                                   "train.checkpoint_dir=" + dir, "train.checkpoint_every=3",
                                   "zero.nvme_dir=" + TestDir("qbase_checkpoints_swap")};
  const PlacementRun whole = TrainAllRanks(PlacementRunOptions(1, 2, sets, 6));
  ASSERT_OK(whole.status);
  ASSERT_EQ(whole.losses.size(), 6u);
  ASSERT_OK_AND_ASSIGN(OpenedCheckpoint opened, OpenCheckpoint(dir + "/step-3"));
  EXPECT_EQ(opened.base.base_dtype, BaseDType::kNF4);
  EXPECT_EQ(opened.version, 8);

  std::vector<std::string> resume = sets;
  resume.push_back("train.resume=" + dir + "/step-3");
  resume.push_back("lora.base_tier=nvme");
  const PlacementRun resumed = TrainAllRanks(PlacementRunOptions(1, 3, resume, 6));
  ASSERT_OK(resumed.status);
  ASSERT_EQ(resumed.losses.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(resumed.losses[i], whole.losses[3 + i]) << i;

  std::vector<std::string> other = resume;
  other.push_back("lora.base_dtype=int8");
  EXPECT_THAT(TrainAllRanks(PlacementRunOptions(1, 3, other, 6)).status,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("base stored as nf4"), HasSubstr("lora.base_dtype=int8"))));
}

// An imported base (model.from=hf:) is quantized as it is read, each rank packing its share
// from whole pieces: one rank at stage 0 and two ranks at stage 3 with the base on NVMe
// (shard boundaries inside pieces; GPT-2's transposed Conv1D matrices, LLaMA's fused q|k|v)
// store the same bytes (their checkpoints' base hashes are equal), and the two-rank runs
// at stages 0 and 3 give the same losses bit for bit.
TEST(QuantizedBase, ImportQuantizesAsItReadsTheSameAtEveryWorldSize) {
  const std::string data = TestDir("qbase_hf_data") + "/tokens.bin";
  if (!std::filesystem::exists(data)) {
    std::vector<uint32_t> tokens(4096);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = (i * 37 + i / 7) % 96;
    ASSERT_OK(WriteTokenFile(data, tokens, 96));
  }
  for (const std::string fixture : {"gpt2-tiny", "llama-tiny"}) {
    auto run = [&](int world, int stage, const std::string& name,
                   std::vector<std::string> extra) {
      std::vector<std::string> sets = {
          "model.from=hf:" + HfFixture(fixture), "train.seq_len=16", "train.grad_accum=1",
          "train.micro_batch=" + std::to_string(2 / world), "device.threads=1",
          "train.eval_every=0", "train.steps=3", "zero.comm_timeout_s=60",
          "data.path=" + data, "lora.rank=4", "lora.targets=all", "lora.base_dtype=nf4",
          "zero.world=" + std::to_string(world), "zero.stage=" + std::to_string(stage),
          "train.checkpoint_every=3",
          "train.checkpoint_dir=" + TestDir("qbase_hf_" + fixture + "_" + name)};
      sets.insert(sets.end(), extra.begin(), extra.end());
      StatusOr<Options> options = ParseOptions("", sets);
      EXPECT_OK(options);
      return TrainAllRanks(options.ok() ? *options : Options{});
    };
    const PlacementRun one = run(1, 0, "one", {});
    const PlacementRun two = run(2, 0, "two", {});
    const PlacementRun sharded =
        run(2, 3, "sharded", {"lora.base_tier=nvme", "zero.nvme_dir=" + TestDir("qbase_hf_swap")});
    ASSERT_OK(one.status) << fixture;
    ASSERT_OK(two.status) << fixture;
    ASSERT_OK(sharded.status) << fixture;
    EXPECT_EQ(sharded.losses, two.losses) << fixture;
    ASSERT_EQ(one.losses.size(), two.losses.size());
    for (size_t i = 0; i < one.losses.size(); ++i) {
      EXPECT_NEAR(two.losses[i], one.losses[i], 1e-5 * one.losses[i]) << fixture << " " << i;
    }
    std::string hashes[3];
    int k = 0;
    for (const char* name : {"one", "two", "sharded"}) {
      ASSERT_OK_AND_ASSIGN(OpenedCheckpoint opened,
                           OpenCheckpoint(TestDir("qbase_hf_" + fixture + "_" + name) + "/step-3"));
      EXPECT_EQ(opened.base.base_dtype, BaseDType::kNF4);
      hashes[k++] = opened.base.xxh3;
    }
    EXPECT_EQ(hashes[1], hashes[0]) << fixture;
    EXPECT_EQ(hashes[2], hashes[0]) << fixture;
  }
}

TEST(QuantizedBase, BaseDtypeNeedsLora) {
  Options options = PlacementRunOptions(1, 0, {}, 1);
  options.lora.base_dtype = BaseDType::kNF4;
  EXPECT_THAT(MakeEngineRig(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("lora.base_dtype=nf4"), HasSubstr("lora.rank is 0"))));
}

// Fidelity: a tiny GPT trained in full for 200 steps on the embedded corpus, exported as
// a Hugging Face directory, then LoRA for 30 steps on its base stored as bf16 and as NF4
// (adapters fp32, the same seed and data). The NF4 run's mean loss over its last 5 steps is
// within 2% of the bf16 run's; measured (gpt, this shape): see docs/quantization.md.
TEST(QuantizedBase, Nf4LoraStaysNearBf16Lora) {
  const std::string dir = TestDir("qbase_fidelity");
  const PlacementRun trained = TrainAllRanks(PlacementRunOptions(
      1, 0, {"train.checkpoint_dir=" + dir + "/ck", "train.checkpoint_every=200",
             "train.lr=1e-2", "train.warmup_steps=10"}, 200));
  ASSERT_OK(trained.status);
  ASSERT_LT(trained.losses.back(), trained.losses.front() * 0.7);
  ExportRequest request;
  request.from = dir + "/ck/step-200";
  request.to = "hf:" + dir + "/hf";
  request.show_progress = false;
  ASSERT_OK(ExportWeights(request).status());
  auto lora = [&](const std::string& dtype) {
    return TrainAllRanks(PlacementRunOptions(
        1, 0, {"model.from=hf:" + dir + "/hf", "lora.rank=8", "lora.targets=all",
               "lora.base_dtype=" + dtype, "train.lr=3e-3"}, 30));
  };
  const PlacementRun bf16 = lora("bf16");
  const PlacementRun nf4 = lora("nf4");
  ASSERT_OK(bf16.status);
  ASSERT_OK(nf4.status);
  auto tail = [](const PlacementRun& run) {
    double sum = 0.0;
    for (size_t i = run.losses.size() - 5; i < run.losses.size(); ++i) sum += run.losses[i];
    return sum / 5;
  };
  const double ratio = tail(nf4) / tail(bf16);
  std::printf("fidelity: trained %.4f -> %.4f; LoRA 30 steps, last-5 mean: bf16 base %.5f, "
              "nf4 base %.5f, ratio %.5f\n",
              trained.losses.front(), trained.losses.back(), tail(bf16), tail(nf4), ratio);
  EXPECT_NEAR(ratio, 1.0, 0.02);
  EXPECT_NE(tail(nf4), tail(bf16));  // the base really was quantized
}

}  // namespace
}  // namespace strata
