// Tests batch sampling: same (seed, step, micro) gives the same batch whatever was drawn
// before, other steps/micros/seeds give other batches, a rank's row slice equals those rows
// of the global batch, targets are the inputs shifted by one, windows stay inside their
// split, and validation walks its split in fixed, non-overlapping windows.
#include "data/batch_sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

// Helpers returning a value cannot ASSERT: a failure is printed, then value() throws, which
// gtest reports as a failure of the test (unlike dereferencing, which would be undefined).

// Token i of the dataset is i % 60000: a window's content reveals its offset.
TokenDataset CountingDataset(int num_tokens) {
  std::vector<uint16_t> tokens(num_tokens);
  for (int i = 0; i < num_tokens; ++i) tokens[i] = static_cast<uint16_t>(i % 60000);
  TokenDataset dataset;
  dataset.tokens = std::make_shared<const TokenIds>(std::move(tokens));
  dataset.source = "counting dataset";
  return dataset;
}

// The same at 4 bytes a token, every id shifted past 16 bits: token i is 100000 + i.
TokenDataset WideCountingDataset(int num_tokens) {
  std::vector<uint32_t> tokens(num_tokens);
  for (int i = 0; i < num_tokens; ++i) tokens[i] = 100000u + static_cast<uint32_t>(i);
  TokenDataset dataset;
  dataset.tokens = std::make_shared<const TokenIds>(std::move(tokens));
  dataset.source = "wide counting dataset";
  return dataset;
}

TokenSplits Splits(int num_tokens, double val_fraction, int seq_len) {
  auto splits = SplitTokens(CountingDataset(num_tokens), val_fraction, seq_len);
  EXPECT_OK(splits);
  return std::move(splits).value();
}

BatchSampler Training(const TokenSplits& splits, int batch_rows, int seq_len, uint64_t seed) {
  auto sampler = BatchSampler::ForTraining(splits, batch_rows, seq_len, seed);
  EXPECT_OK(sampler);
  return std::move(sampler).value();
}

Batch Draw(const BatchSampler& sampler, int64_t step, int64_t micro) {
  auto batch = sampler.Sample(step, micro);
  EXPECT_OK(batch);
  return std::move(batch).value();
}

TEST(SplitMix64, KnownValues) {
  // Reference values of splitmix64 seeded with 0: the first two outputs.
  EXPECT_EQ(SplitMix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(SplitMix64(0x9E3779B97F4A7C15ull), 0x6E789E6AA1B965F4ull);
}

TEST(BatchSampler, SameSeedStepMicroSameBatchWhateverCameBefore) {
  const TokenSplits splits = Splits(20000, 0.1, 32);
  const BatchSampler first = Training(splits, 8, 32, 1337);
  const BatchSampler second = Training(splits, 8, 32, 1337);
  const Batch direct = Draw(first, 17, 2);
  for (int step = 0; step < 17; ++step) Draw(second, step, 0);  // a different history
  const Batch after_history = Draw(second, 17, 2);
  EXPECT_EQ(direct.inputs, after_history.inputs);
  EXPECT_EQ(direct.targets, after_history.targets);
}

TEST(BatchSampler, OtherStepMicroOrSeedGivesOtherBatch) {
  const TokenSplits splits = Splits(20000, 0.1, 32);
  const BatchSampler sampler = Training(splits, 8, 32, 1337);
  const Batch base = Draw(sampler, 5, 0);
  EXPECT_NE(base.inputs, Draw(sampler, 6, 0).inputs);
  EXPECT_NE(base.inputs, Draw(sampler, 5, 1).inputs);
  EXPECT_NE(base.inputs, Draw(Training(splits, 8, 32, 1338), 5, 0).inputs);
  // Coordinates are not interchangeable: (step 1, micro 0) != (step 0, micro 1).
  EXPECT_NE(Draw(sampler, 1, 0).inputs, Draw(sampler, 0, 1).inputs);
  // Rows of one batch differ from each other.
  std::set<int64_t> offsets;
  for (int row = 0; row < 8; ++row) offsets.insert(sampler.WindowOffset(5, 0, row));
  EXPECT_EQ(offsets.size(), 8u);
}

TEST(BatchSampler, RankSliceEqualsRowsOfGlobalBatch) {
  const int seq_len = 16;
  const TokenSplits splits = Splits(10000, 0.1, seq_len);
  const BatchSampler global = Training(splits, 12, seq_len, 7);
  const Batch whole = Draw(global, 3, 1);
  const int world = 3;
  const int rows_per_rank = 12 / world;
  for (int rank = 0; rank < world; ++rank) {
    const int begin = rank * rows_per_rank;
    auto slice = global.SampleRows(3, 1, begin, begin + rows_per_rank);
    ASSERT_OK(slice);
    EXPECT_EQ(slice->row_begin, begin);
    EXPECT_EQ(slice->rows, rows_per_rank);
    const auto first = whole.inputs.begin() + begin * seq_len;
    EXPECT_EQ(slice->inputs, std::vector<int32_t>(first, first + rows_per_rank * seq_len));
    const auto first_target = whole.targets.begin() + begin * seq_len;
    EXPECT_EQ(slice->targets,
              std::vector<int32_t>(first_target, first_target + rows_per_rank * seq_len));
  }
  // A row does not depend on the global batch size either.
  const BatchSampler smaller = Training(splits, 5, seq_len, 7);
  const Batch five = Draw(smaller, 3, 1);
  EXPECT_EQ(five.inputs,
            std::vector<int32_t>(whole.inputs.begin(), whole.inputs.begin() + 5 * seq_len));
}

TEST(BatchSampler, TargetsAreInputsShiftedByOne) {
  const int seq_len = 24;
  const TokenSplits splits = Splits(5000, 0.2, seq_len);
  const BatchSampler sampler = Training(splits, 6, seq_len, 99);
  for (int step = 0; step < 20; ++step) {
    const Batch batch = Draw(sampler, step, 0);
    ASSERT_EQ(batch.inputs.size(), 6u * seq_len);
    for (int row = 0; row < 6; ++row) {
      const int64_t offset = sampler.WindowOffset(step, 0, row);
      for (int t = 0; t < seq_len; ++t) {
        ASSERT_EQ(batch.inputs[row * seq_len + t], offset + t);  // the counting dataset
        ASSERT_EQ(batch.targets[row * seq_len + t], offset + t + 1);
      }
    }
  }
}

TEST(BatchSampler, TrainWindowsStayInTrainSplitAndReachItsEnd) {
  const int seq_len = 8;
  const TokenSplits splits = Splits(200, 0.5, seq_len);  // train = [0, 100)
  const BatchSampler sampler = Training(splits, 16, seq_len, 3);
  EXPECT_EQ(sampler.num_windows(), 100 - seq_len);
  int64_t max_offset = 0;
  int64_t min_offset = 1 << 30;
  for (int step = 0; step < 200; ++step) {
    const Batch batch = Draw(sampler, step, 0);
    for (int32_t target : batch.targets) ASSERT_LT(target, 100);  // never a validation token
    for (int row = 0; row < 16; ++row) {
      const int64_t offset = sampler.WindowOffset(step, 0, row);
      max_offset = std::max(max_offset, offset);
      min_offset = std::min(min_offset, offset);
    }
  }
  EXPECT_EQ(min_offset, 0);
  EXPECT_EQ(max_offset, 100 - seq_len - 1);  // the last window ends on the last train token
}

TEST(BatchSampler, ValidationWalksFixedWindowsOfTheValidationSplit) {
  const int seq_len = 10;
  const TokenSplits splits = Splits(1000, 0.1, seq_len);  // validation = [900, 1000)
  auto sampler = BatchSampler::ForValidation(splits, 4, seq_len);
  ASSERT_OK(sampler);
  EXPECT_EQ(sampler->order(), WindowOrder::kSequential);
  EXPECT_EQ(sampler->num_windows(), 9);  // floor(99 / 10)
  EXPECT_EQ(sampler->batches_to_cover(), 3);
  std::vector<int32_t> firsts;
  for (int micro = 0; micro < 3; ++micro) {
    const Batch batch = Draw(*sampler, 0, micro);
    // The step is ignored: every evaluation sees the same batches.
    EXPECT_EQ(batch.inputs, Draw(*sampler, 123, micro).inputs);
    for (int row = 0; row < 4; ++row) {
      firsts.push_back(batch.inputs[row * seq_len]);
      for (int t = 0; t < seq_len; ++t) {
        ASSERT_GE(batch.inputs[row * seq_len + t], 900);
        ASSERT_EQ(batch.targets[row * seq_len + t], batch.inputs[row * seq_len + t] + 1);
        ASSERT_LT(batch.targets[row * seq_len + t], 1000);
      }
    }
  }
  // Windows 0..8 in order, then wrapping around to window 0.
  const std::vector<int32_t> expected = {900, 910, 920, 930, 940, 950,
                                         960, 970, 980, 900, 910, 920};
  EXPECT_EQ(firsts, expected);
}

TEST(BatchSampler, FourByteIdsSampleTheSameWindowsAndKeepTheirValues) {
  const int seq_len = 12;
  auto narrow_splits = SplitTokens(CountingDataset(3000), 0.1, seq_len);
  auto wide_splits = SplitTokens(WideCountingDataset(3000), 0.1, seq_len);
  ASSERT_OK(narrow_splits);
  ASSERT_OK(wide_splits);
  const BatchSampler narrow = Training(*narrow_splits, 5, seq_len, 11);
  const BatchSampler wide = Training(*wide_splits, 5, seq_len, 11);
  for (int step = 0; step < 10; ++step) {
    const Batch narrow_batch = Draw(narrow, step, 0);
    const Batch wide_batch = Draw(wide, step, 0);
    ASSERT_EQ(wide_batch.inputs.size(), narrow_batch.inputs.size());
    for (size_t i = 0; i < wide_batch.inputs.size(); ++i) {
      ASSERT_EQ(wide_batch.inputs[i], 100000 + narrow_batch.inputs[i]) << i;
      ASSERT_EQ(wide_batch.targets[i], 100000 + narrow_batch.targets[i]) << i;
    }
  }
  // Validation reads the wide split from its own begin (token 2700).
  auto validation = BatchSampler::ForValidation(*wide_splits, 2, seq_len);
  ASSERT_OK(validation);
  const Batch batch = Draw(*validation, 0, 0);
  EXPECT_EQ(batch.inputs[0], 102700);
  EXPECT_EQ(batch.targets[seq_len - 1], 102700 + seq_len);
}

TEST(BatchSampler, RejectsBadArgumentsWithReasons) {
  const TokenSplits splits = Splits(1000, 0.0, 16);
  EXPECT_THAT(BatchSampler::ForValidation(splits, 4, 16),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("validation split of counting dataset holds 0 tokens")));
  EXPECT_FALSE(BatchSampler::ForTraining(splits, 0, 16, 1).ok());
  EXPECT_FALSE(BatchSampler::ForTraining(splits, 4, 0, 1).ok());
  EXPECT_FALSE(BatchSampler::ForTraining(splits, 4, 1000, 1).ok());  // needs 1001 tokens

  const BatchSampler sampler = Training(splits, 4, 16, 1);
  std::vector<int32_t> inputs(4 * 16), targets(4 * 16);
  EXPECT_FALSE(sampler.FillRows(-1, 0, 0, 4, inputs.data(), targets.data()).ok());
  EXPECT_FALSE(sampler.FillRows(0, -1, 0, 4, inputs.data(), targets.data()).ok());
  EXPECT_FALSE(sampler.FillRows(0, 0, 0, 5, inputs.data(), targets.data()).ok());
  EXPECT_FALSE(sampler.FillRows(0, 0, 3, 2, inputs.data(), targets.data()).ok());
  EXPECT_FALSE(sampler.FillRows(0, 0, 0, 4, nullptr, targets.data()).ok());
  EXPECT_OK(sampler.FillRows(0, 0, 2, 2, nullptr, nullptr));  // nothing to write
  EXPECT_FALSE(sampler.SampleRows(0, 0, 3, 1).ok());
}

}  // namespace
}  // namespace strata
