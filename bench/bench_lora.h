// `strata bench lora` (bench/bench_lora.cc): LoRA on a quantized frozen base
// (lora.base_dtype), three figures:
//   1. bytes per parameter of the base's stored form, computed from the model's layouts
//      (core/stored_layout.h; nothing allocated): its quantized matrices alone, and the
//      whole base (embeddings, norms and head in train.dtype);
//   2. the step time of an NF4 (and int8) base over a bf16 base's, measured in the same
//      process in alternating rounds;
//   3. the NVMe bytes read per step with the base on NVMe, NF4 over bf16.
// The Measure* and StoredBaseBytes functions return the figures (the test checks them on
// tiny shapes); RunBenchLora prints them with the CPU and the goals.
// Thread-safety: called once, from main (or a test).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "core/options.h"
#include "core/quant_format.h"
#include "core/status.h"

namespace strata {

// The stored bytes of a LoRA model's frozen base.
struct StoredBaseBytes {
  uint64_t matrix_elements = 0;  // the linear matrices' real values (every piece's)
  uint64_t matrix_bytes = 0;     // their pieces' stored bytes: codes, scales, alignment
  uint64_t base_params = 0;      // every frozen unit's real parameters
  // Every frozen unit's stored bytes: a packed unit's buffer (StoredUnit::bytes), any other
  // frozen unit (embeddings, final norm, an untied head) its used elements in train.dtype.
  uint64_t base_bytes = 0;
  // What the runtime keeps of the frozen units at world 1 (each stored layout padded for
  // one shard, in train.dtype): what a step's gather of a whole unit reads from NVMe.
  uint64_t base_padded_bytes = 0;
  double matrix_bytes_per_param() const {
    return matrix_elements ? static_cast<double>(matrix_bytes) / matrix_elements : 0.0;
  }
  double base_bytes_per_param() const {
    return base_params ? static_cast<double>(base_bytes) / base_params : 0.0;
  }
};

// The frozen base of `model` with LoRA on (rank 16, the family's default targets: the base
// units do not depend on them) computing in `dtype`, stored as `base`. kTrain: the base as
// train.dtype values (matrix_bytes then counts those).
StatusOr<StoredBaseBytes> ComputeStoredBaseBytes(const ModelOptions& model, DType dtype,
                                                 BaseDType base);

// One round of the step-time measurement: each configuration's mean ms/step over its
// measured steps (int8_ms 0 where it is left out).
struct LoraStepRound {
  double bf16_ms = 0.0, nf4_ms = 0.0, int8_ms = 0.0;
};

struct LoraStepFigures {
  std::string model;         // Model::Describe()
  uint64_t num_params = 0;   // base + adapters
  uint64_t base_params = 0;  // the frozen units'
  int micro_batch = 0, seq_len = 0;
  DType dtype = DType::kF32;
  int steps = 0;  // measured steps per configuration and round
  std::vector<LoraStepRound> rounds;
  // Medians over the rounds of the per-round ratios nf4 / bf16 and int8 / bf16 (0 without
  // int8).
  double nf4_ratio = 0.0, int8_ratio = 0.0;
};

// The step-time sessions' settings before `args.sets` (which may change any of them) and
// the ones forced after (a flat schedule, one rank, no evaluation). lora.base_dtype is set
// per configuration.
std::vector<std::string> LoraStepSets(const BenchArgs& args);

// One single-rank session per configuration (bf16, nf4 and, with `int8`, int8 bases), all
// made first, then warmed up by one step each; then `rounds` rounds of `args.steps` steps of
// each, the sessions taking turns step by step, the order reversed at every step (a drift
// of the machine within a round then weighs on each alike). A round's figure is each
// configuration's mean ms/step over its steps.
StatusOr<LoraStepFigures> MeasureLoraStepTime(const BenchArgs& args, int rounds, bool int8);

// The NVMe part: each base dtype's mean param_nvme_read_bytes per step (after a warm-up
// step), and the base's stored bytes from the layouts for comparison.
struct LoraNvmeReads {
  BaseDType base = BaseDType::kBF16;
  double read_bytes_per_step = 0.0;  // measured (StepResult::param_nvme_read_bytes)
  StoredBaseBytes stored;            // the same model's layouts
};

struct LoraNvmeFigures {
  std::string model;
  int micro_batch = 0, seq_len = 0, steps = 0;
  DType dtype = DType::kF32;         // train.dtype
  uint64_t prefetch_bytes = 0;       // zero.prefetch_bytes
  std::vector<LoraNvmeReads> reads;  // bf16, then nf4, then int8
};

// The NVMe sessions' settings before `args.sets` and after: stage 3, lora.base_tier=nvme,
// zero.nvme_dir=`dir`, and B=1, T=64 unless `args.sets` says otherwise (the bytes read do
// not depend on the batch, only the compute does).
std::vector<std::string> LoraNvmeSets(const BenchArgs& args, const std::string& dir);

// One session per base dtype (bf16, nf4, int8), one after the other: a warm-up step, then
// `steps` measured steps.
StatusOr<LoraNvmeFigures> MeasureLoraNvmeReads(const BenchArgs& args, const std::string& dir,
                                               int steps);

struct LoraBenchArgs {
  int rounds = 5;           // --pairs
  bool int8 = true;         // --no-int8 leaves int8 out of the step-time rounds
  std::string dir;          // --dir: zero.nvme_dir ("": a new directory under /var/tmp or .)
  int nvme_steps = 2;       // --nvme-steps
  bool skip_steps = false;  // --layout-only: the bytes per parameter alone
};

// Prints the three parts with the CPU and the goals (NF4 matrices <= 0.53 bytes/param,
// int8 <= 1.07; step time NF4 / bf16 <= 1.15; NVMe reads of the matrices NF4 / bf16 <=
// 0.27), and why a goal is not met.
Status RunBenchLora(const BenchArgs& args, const LoraBenchArgs& lora);

}  // namespace strata
