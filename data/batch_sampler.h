// Deterministic batches of token windows from one split.
//
// A window is seq_len + 1 consecutive tokens at some offset o of the split: the inputs are
// tokens[o, o + T), the targets tokens[o + 1, o + T + 1) (inputs shifted by one), both int32
// as the kernels take them. A batch of (step s, micro-batch k) has `batch_rows` rows: the
// GLOBAL batch, all ranks together; a rank fills only its rows [row_begin, row_end).
//
// Window orders:
//  - kRandom (training): row r of batch (s, k) reads the window at an offset drawn by a
//    counter-based generator, splitmix64 of (seed, s, k, r). A row therefore depends on
//    nothing else: not on which batches were drawn before, not on batch_rows, not on the
//    rank that fills it, so any world size sees the same global batch.
//  - kSequential (validation): the split is cut into W = floor((N - 1) / T) consecutive,
//    non-overlapping windows (offsets 0, T, 2T, ...); row r of micro-batch k reads window
//    (k * batch_rows + r) mod W. The step and seed are ignored, so every evaluation sees
//    the same batches and micro-batches 0, 1, ... walk the split from its start.
//
// Thread-safety: a BatchSampler is immutable after Create; its const methods may be called
// from any number of threads at once. It shares the split's token storage (shared_ptr).
#pragma once

#include <cstdint>
#include <vector>

#include "data/tokens.h"
#include "core/status.h"

namespace strata {

enum class WindowOrder { kRandom, kSequential };

struct SamplerOptions {
  int batch_rows = 0;  // B of the global batch (all ranks' micro-batch rows together)
  int seq_len = 0;     // T, tokens per row
  uint64_t seed = 0;   // kRandom only: train.seed
  WindowOrder order = WindowOrder::kRandom;
};

// Rows [row_begin, row_end) of one batch, row-major [rows, seq_len].
struct Batch {
  int row_begin = 0;
  int rows = 0;
  int seq_len = 0;
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;  // targets[r][t] == the token after inputs[r][t]
};

// splitmix64's finalizer: a bijective 64-bit mix (Steele, Lea, Flood 2014).
uint64_t SplitMix64(uint64_t x);

class BatchSampler {
 public:
  // Errors (kInvalidArgument): batch_rows < 1, seq_len < 1, or a split with fewer than
  // seq_len + 1 tokens (including an empty validation split), naming the split and source.
  static StatusOr<BatchSampler> Create(TokenSplit split, const SamplerOptions& options);

  // The usual pair: random windows of the train split, sequential windows of validation.
  static StatusOr<BatchSampler> ForTraining(const TokenSplits& splits, int batch_rows, int seq_len,
                                            uint64_t seed);
  static StatusOr<BatchSampler> ForValidation(const TokenSplits& splits, int batch_rows,
                                              int seq_len);

  // Writes rows [row_begin, row_end) of batch (step, micro) to inputs and targets, each
  // (row_end - row_begin) * seq_len int32, row-major. Errors: step or micro negative,
  // 0 <= row_begin <= row_end <= batch_rows violated, null buffers with rows to write.
  Status FillRows(int64_t step, int64_t micro, int row_begin, int row_end, int32_t* inputs,
                  int32_t* targets) const;

  // FillRows into a new Batch; Sample is all batch_rows rows.
  StatusOr<Batch> SampleRows(int64_t step, int64_t micro, int row_begin, int row_end) const;
  StatusOr<Batch> Sample(int64_t step, int64_t micro) const;

  // The split offset of the window that row `row` of batch (step, micro) reads. Arguments
  // are not checked (FillRows checks them).
  int64_t WindowOffset(int64_t step, int64_t micro, int64_t row) const;

  // kRandom: the number of distinct window offsets, N - T. kSequential: W.
  int64_t num_windows() const { return num_windows_; }
  // kSequential: micro-batches that cover every window once, ceil(W / batch_rows).
  int64_t batches_to_cover() const { return (num_windows_ + batch_rows_ - 1) / batch_rows_; }
  int batch_rows() const { return batch_rows_; }
  int seq_len() const { return seq_len_; }
  WindowOrder order() const { return order_; }
  const TokenSplit& split() const { return split_; }

 private:
  BatchSampler(TokenSplit split, const SamplerOptions& options, int64_t num_windows);

  TokenSplit split_;
  int batch_rows_;
  int seq_len_;
  uint64_t seed_;
  WindowOrder order_;
  int64_t num_windows_;
};

}  // namespace strata
