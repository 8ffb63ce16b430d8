// `strata bench lora`'s figures on tiny shapes: the stored bytes of a LLaMA base counted by
// hand from docs/quantization.md's layout, the presets' bytes per parameter within the
// goals, the step-time rounds and their medians, and the NVMe reads of each base dtype
// against its stored layout. The timings themselves are not asserted (a noisy machine).
#include "bench/bench_lora.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "config/options_parse.h"
#include "core/testing/status_matchers.h"

namespace strata {
namespace {

// A LLaMA of 2 blocks, C=64, 4 heads of 16, 2 KV heads, F=128, vocab 256, untied.
const std::vector<std::string>& TinySets() {
  static const auto* sets = new std::vector<std::string>{
      "model.channels=64",    "model.layers=2",  "model.heads=4",        "model.kv_heads=2",
      "model.ffn_hidden=128", "model.vocab=256", "model.max_seq_len=64", "train.micro_batch=2",
      "train.seq_len=16",     "device.threads=1"};
  return *sets;
}

ModelOptions TinyModel() {
  BenchArgs args;
  args.sets = TinySets();
  auto options = ParseOptions("", LoraStepSets(args));
  EXPECT_OK(options);
  return options.ok() ? options->model : ModelOptions{};
}

// Per block: q 64x64 (4096 values), k and v 32x64 (2048 each), o 64x64 (4096), gate and up
// 128x64 (8192 each), down 64x128 (8192): 36864 matrix values; the norms 2 x 64.
// The base: embedding 256x64, 2 blocks, final norm 64, head 256x64.
constexpr uint64_t kMatrixValues = 2 * 36864;
constexpr uint64_t kBaseParams = 16384 + 2 * (36864 + 128) + 64 + 16384;

TEST(BenchLora, StoredBytesOfATinyLlamaCountedByHand) {
  const ModelOptions model = TinyModel();
  // NF4, pieces of n values (n / 64 blocks, one absmax group): codes n/2, absmax codes
  // n/64, absmax2 4 and offset 4 bytes, each array 16-byte aligned.
  //   4096: 2048 + 64 + 16 + 16 = 2144; 2048: 1024 + 32 + 16 + 16 = 1088;
  //   8192: 4096 + 128 + 16 + 16 = 4256.
  // A block: q|k|v 2144 + 2 x 1088, o 2144, gate|up 2 x 4256, down 4256 = 19232.
  ASSERT_OK_AND_ASSIGN(const StoredBaseBytes nf4,
                       ComputeStoredBaseBytes(model, DType::kF32, BaseDType::kNF4));
  EXPECT_EQ(nf4.matrix_elements, kMatrixValues);
  EXPECT_EQ(nf4.matrix_bytes, 2u * 19232);
  EXPECT_DOUBLE_EQ(nf4.matrix_bytes_per_param(), 19232.0 / 36864);  // 0.5217
  EXPECT_EQ(nf4.base_params, kBaseParams);
  // The whole base in fp32: the embedding and the head 65536 bytes each, the final norm
  // 256; a block its two norms (256 bytes each, fp32) and its matrices: 19744.
  EXPECT_EQ(nf4.base_bytes, 2u * 65536 + 256 + 2 * (19232 + 512));
  EXPECT_DOUBLE_EQ(nf4.base_bytes_per_param(),
                   static_cast<double>(2 * 65536 + 256 + 2 * 19744) / kBaseParams);

  // int8: codes n, absmaxes 4 n / 64: 4096 -> 4352, 2048 -> 2176, 8192 -> 8704; a block
  // 4352 + 2 x 2176 + 4352 + 2 x 8704 + 8704 = 39168 = 1.0625 bytes per value.
  ASSERT_OK_AND_ASSIGN(const StoredBaseBytes int8,
                       ComputeStoredBaseBytes(model, DType::kF32, BaseDType::kInt8));
  EXPECT_EQ(int8.matrix_bytes, 2u * 39168);
  EXPECT_DOUBLE_EQ(int8.matrix_bytes_per_param(), 1.0625);

  ASSERT_OK_AND_ASSIGN(const StoredBaseBytes bf16,
                       ComputeStoredBaseBytes(model, DType::kF32, BaseDType::kBF16));
  EXPECT_EQ(bf16.matrix_bytes, 2 * kMatrixValues);
  EXPECT_EQ(bf16.base_bytes, 2u * 65536 + 256 + 2 * (2 * 36864 + 512));

  // Unquantized, in bf16: two bytes for every parameter (the tensors' offsets are aligned
  // to 16 elements, which these shapes already are).
  ASSERT_OK_AND_ASSIGN(const StoredBaseBytes plain,
                       ComputeStoredBaseBytes(model, DType::kBF16, BaseDType::kTrain));
  EXPECT_EQ(plain.matrix_bytes, 2 * kMatrixValues);
  EXPECT_EQ(plain.base_bytes, 2 * kBaseParams);
  EXPECT_DOUBLE_EQ(plain.base_bytes_per_param(), 2.0);
}

TEST(BenchLora, PresetsMeetTheBytesPerParameterGoals) {
  for (const char* preset : {"gpt2-124m", "llama-1b", "llama-8b"}) {
    ASSERT_OK_AND_ASSIGN(const Options options,
                         ParseOptions("", {std::string("model.preset=") + preset}));
    ASSERT_OK_AND_ASSIGN(const StoredBaseBytes nf4,
                         ComputeStoredBaseBytes(options.model, DType::kBF16, BaseDType::kNF4));
    ASSERT_OK_AND_ASSIGN(const StoredBaseBytes int8,
                         ComputeStoredBaseBytes(options.model, DType::kBF16, BaseDType::kInt8));
    // Every piece of these shapes divides into whole blocks: at least the codes and one
    // absmax code per block (0.5 + 1/64), at most 0.53.
    EXPECT_GE(nf4.matrix_bytes_per_param(), 0.5 + 1.0 / 64) << preset;
    EXPECT_LE(nf4.matrix_bytes_per_param(), 0.53) << preset;
    EXPECT_GE(int8.matrix_bytes_per_param(), 1.0625) << preset;
    EXPECT_LE(int8.matrix_bytes_per_param(), 1.07) << preset;
    EXPECT_EQ(nf4.matrix_elements, int8.matrix_elements) << preset;
    // The rest of the base (embeddings, norms, head): the same for both formats, in bf16 at
    // least 2 bytes each (alignment gaps add a little).
    EXPECT_EQ(nf4.base_bytes - nf4.matrix_bytes, int8.base_bytes - int8.matrix_bytes) << preset;
    EXPECT_GE(nf4.base_bytes - nf4.matrix_bytes, 2 * (nf4.base_params - nf4.matrix_elements))
        << preset;
  }
}

TEST(BenchLora, StepTimeRoundsAndTheirMedian) {
  BenchArgs args;
  args.sets = TinySets();
  args.steps = 1;
  ASSERT_OK_AND_ASSIGN(const LoraStepFigures figures, MeasureLoraStepTime(args, 3, true));
  EXPECT_NE(figures.model.find("LLaMA"), std::string::npos) << figures.model;
  EXPECT_EQ(figures.base_params, kBaseParams);
  // Adapters of rank 16 on every projection of a block, A [16, in] and B [out, 16]: q and o
  // 2 x 1024, k and v 1024 + 512, gate and up 1024 + 2048, down 2048 + 1024.
  EXPECT_EQ(figures.num_params, kBaseParams + 2 * 16384);
  EXPECT_EQ(figures.micro_batch, 2);
  EXPECT_EQ(figures.seq_len, 16);
  EXPECT_EQ(figures.dtype, DType::kF32);
  ASSERT_EQ(figures.rounds.size(), 3u);
  std::vector<double> nf4, int8;
  for (const LoraStepRound& round : figures.rounds) {
    EXPECT_GT(round.bf16_ms, 0.0);
    EXPECT_GT(round.nf4_ms, 0.0);
    EXPECT_GT(round.int8_ms, 0.0);
    nf4.push_back(round.nf4_ms / round.bf16_ms);
    int8.push_back(round.int8_ms / round.bf16_ms);
  }
  std::sort(nf4.begin(), nf4.end());
  std::sort(int8.begin(), int8.end());
  EXPECT_DOUBLE_EQ(figures.nf4_ratio, nf4[1]);
  EXPECT_DOUBLE_EQ(figures.int8_ratio, int8[1]);
}

TEST(BenchLora, StepTimeWithoutInt8) {
  BenchArgs args;
  args.sets = TinySets();
  args.steps = 1;
  ASSERT_OK_AND_ASSIGN(const LoraStepFigures figures, MeasureLoraStepTime(args, 2, false));
  ASSERT_EQ(figures.rounds.size(), 2u);
  EXPECT_EQ(figures.rounds[0].int8_ms, 0.0);
  EXPECT_EQ(figures.int8_ratio, 0.0);
  // Two rounds: the median is the mean of the two ratios.
  EXPECT_DOUBLE_EQ(figures.nf4_ratio, (figures.rounds[0].nf4_ms / figures.rounds[0].bf16_ms +
                                       figures.rounds[1].nf4_ms / figures.rounds[1].bf16_ms) /
                                          2);
}

TEST(BenchLora, NvmeSetsPutTheBaseOnNvmeAfterTheCallersKeys) {
  BenchArgs args;
  args.sets = {"zero.stage=1", "train.micro_batch=3"};
  ASSERT_OK_AND_ASSIGN(const Options options, ParseOptions("", LoraNvmeSets(args, "/some/dir")));
  EXPECT_EQ(options.zero.stage, 3);
  EXPECT_EQ(options.lora.base_tier, StateTier::kNvme);
  EXPECT_EQ(options.zero.nvme_dir, "/some/dir");
  EXPECT_EQ(options.train.micro_batch, 3);  // the caller's
  EXPECT_EQ(options.train.seq_len, 64);     // the NVMe part's default
  EXPECT_EQ(options.lora.rank, 16);
  EXPECT_EQ(options.model.channels, 768);
}

TEST(BenchLora, NvmeReadsFollowTheStoredLayouts) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/bench-lora-nvme";
  std::filesystem::create_directories(dir);
  BenchArgs args;
  args.sets = TinySets();
  ASSERT_OK_AND_ASSIGN(const LoraNvmeFigures figures, MeasureLoraNvmeReads(args, dir, 2));
  ASSERT_EQ(figures.reads.size(), 3u);
  EXPECT_EQ(figures.reads[0].base, BaseDType::kBF16);
  EXPECT_EQ(figures.reads[1].base, BaseDType::kNF4);
  EXPECT_EQ(figures.reads[2].base, BaseDType::kInt8);
  EXPECT_EQ(figures.steps, 2);
  EXPECT_EQ(figures.micro_batch, 2);  // the caller's, over the NVMe part's default of 1
  EXPECT_EQ(figures.prefetch_bytes, 256u << 20);
  for (const LoraNvmeReads& reads : figures.reads) {
    EXPECT_GT(reads.read_bytes_per_step, 0.0);
    EXPECT_EQ(reads.stored.base_params, kBaseParams);
  }
  EXPECT_EQ(figures.reads[1].stored.matrix_bytes, 2u * 19232);
  // The whole tiny base fits in zero.prefetch_bytes (256 MiB): each unit is gathered once
  // per step and kept from its forward to its backward, so a step reads exactly the
  // stored bytes of every frozen unit (padded for one shard).
  for (const LoraNvmeReads& reads : figures.reads) {
    EXPECT_EQ(reads.read_bytes_per_step, static_cast<double>(reads.stored.base_padded_bytes))
        << BaseDTypeName(reads.base);
  }
  // With a window of 1 KiB units are re-read for their backward, except those used by
  // consecutive accesses (the last block's forward and backward, the head's): between one
  // and two passes.
  args.sets.push_back("zero.prefetch_bytes=1KiB");
  ASSERT_OK_AND_ASSIGN(const LoraNvmeFigures small, MeasureLoraNvmeReads(args, dir, 1));
  EXPECT_EQ(small.prefetch_bytes, 1024u);
  for (const LoraNvmeReads& reads : small.reads) {
    const double passes = reads.read_bytes_per_step / reads.stored.base_padded_bytes;
    EXPECT_GT(passes, 1.0) << BaseDTypeName(reads.base);
    EXPECT_LT(passes, 2.0) << BaseDTypeName(reads.base);
  }
}

}  // namespace
}  // namespace strata
