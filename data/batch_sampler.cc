// BatchSampler: window offsets from a counter-based generator (training) or a fixed walk
// over the split (validation); see batch_sampler.h. No state changes after Create, so the
// const methods are thread-safe.
#include "data/batch_sampler.h"

#include <utility>

namespace strata {
namespace {

// Distinct odd constants per coordinate, so (s, k, r) and permutations of it differ.
constexpr uint64_t kStepSalt = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kMicroSalt = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kRowSalt = 0x165667B19E3779F9ull;

}  // namespace

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

BatchSampler::BatchSampler(TokenSplit split, const SamplerOptions& options, int64_t num_windows)
    : split_(std::move(split)),
      batch_rows_(options.batch_rows),
      seq_len_(options.seq_len),
      seed_(options.seed),
      order_(options.order),
      num_windows_(num_windows) {}

StatusOr<BatchSampler> BatchSampler::Create(TokenSplit split, const SamplerOptions& options) {
  if (options.batch_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch sampler: batch_rows must be >= 1, got ", options.batch_rows));
  }
  if (options.seq_len < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch sampler: train.seq_len must be >= 1, got ", options.seq_len));
  }
  const int64_t window_tokens = int64_t{options.seq_len} + 1;
  if (!split.tokens || split.begin < 0 || split.end > static_cast<int64_t>(split.tokens->size()) ||
      split.num_tokens() < window_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch sampler: the ", split.name.empty() ? "unnamed" : split.name, " split of ",
        split.source.empty() ? "the data" : split.source, " holds ",
        split.tokens ? split.num_tokens() : 0, " tokens, fewer than one sequence of seq_len + 1 = ",
        window_tokens, split.name == "validation" ? " (is data.val_fraction 0?)" : ""));
  }
  const int64_t num_windows = options.order == WindowOrder::kRandom
                                  ? split.num_tokens() - options.seq_len
                                  : (split.num_tokens() - 1) / options.seq_len;
  return BatchSampler(std::move(split), options, num_windows);
}

StatusOr<BatchSampler> BatchSampler::ForTraining(const TokenSplits& splits, int batch_rows,
                                                 int seq_len, uint64_t seed) {
  SamplerOptions options;
  options.batch_rows = batch_rows;
  options.seq_len = seq_len;
  options.seed = seed;
  options.order = WindowOrder::kRandom;
  return Create(splits.train, options);
}

StatusOr<BatchSampler> BatchSampler::ForValidation(const TokenSplits& splits, int batch_rows,
                                                   int seq_len) {
  SamplerOptions options;
  options.batch_rows = batch_rows;
  options.seq_len = seq_len;
  options.order = WindowOrder::kSequential;
  return Create(splits.validation, options);
}

int64_t BatchSampler::WindowOffset(int64_t step, int64_t micro, int64_t row) const {
  if (order_ == WindowOrder::kSequential) {
    const unsigned __int128 global_row =
        static_cast<unsigned __int128>(micro) * static_cast<uint64_t>(batch_rows_) +
        static_cast<uint64_t>(row);
    return static_cast<int64_t>(global_row % static_cast<uint64_t>(num_windows_)) * seq_len_;
  }
  uint64_t key = SplitMix64(seed_);
  key = SplitMix64(key ^ (static_cast<uint64_t>(step) * kStepSalt));
  key = SplitMix64(key ^ (static_cast<uint64_t>(micro) * kMicroSalt));
  key = SplitMix64(key ^ (static_cast<uint64_t>(row) * kRowSalt));
  // Lemire's multiply-shift maps 64 random bits onto [0, num_windows) without a division;
  // its bias is below num_windows / 2^64.
  return static_cast<int64_t>(
      (static_cast<unsigned __int128>(key) * static_cast<uint64_t>(num_windows_)) >> 64);
}

Status BatchSampler::FillRows(int64_t step, int64_t micro, int row_begin, int row_end,
                              int32_t* inputs, int32_t* targets) const {
  if (step < 0 || micro < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch sampler: step and micro-batch must be >= 0, got step ", step, ", micro ", micro));
  }
  if (row_begin < 0 || row_begin > row_end || row_end > batch_rows_) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch sampler: rows [", row_begin, ", ", row_end,
                     ") are not a range of the global batch [0, ", batch_rows_, ")"));
  }
  if (row_begin == row_end) return absl::OkStatus();
  if (inputs == nullptr || targets == nullptr) {
    return absl::InvalidArgumentError("batch sampler: null inputs or targets buffer");
  }
  for (int row = row_begin; row < row_end; ++row) {
    const int64_t window = split_.begin + WindowOffset(step, micro, row);
    const int64_t out = static_cast<int64_t>(row - row_begin) * seq_len_;
    split_.tokens->CopyToInt32(window, seq_len_, inputs + out);
    split_.tokens->CopyToInt32(window + 1, seq_len_, targets + out);
  }
  return absl::OkStatus();
}

StatusOr<Batch> BatchSampler::SampleRows(int64_t step, int64_t micro, int row_begin,
                                         int row_end) const {
  Batch batch;
  batch.row_begin = row_begin;
  batch.rows = row_end - row_begin;
  batch.seq_len = seq_len_;
  if (batch.rows > 0) {
    batch.inputs.resize(static_cast<size_t>(batch.rows) * seq_len_);
    batch.targets.resize(batch.inputs.size());
  }
  RETURN_IF_ERROR(
      FillRows(step, micro, row_begin, row_end, batch.inputs.data(), batch.targets.data()));
  return batch;
}

StatusOr<Batch> BatchSampler::Sample(int64_t step, int64_t micro) const {
  return SampleRows(step, micro, 0, batch_rows_);
}

}  // namespace strata
