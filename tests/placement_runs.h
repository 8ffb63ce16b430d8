// Shared by the placement tests (offload, infinity): the small model they train at every
// stage, world size and placement, and a run that keeps what they compare.
// Thread-safety: TrainAllRanks runs the ranks as threads (or under mpirun) and returns
// once all are done.
#pragma once

#include <string>
#include <vector>

#include "device/memory.h"
#include "core/options.h"
#include "runtime/engine.h"

namespace strata {

// Tiny GPT (L2 C32), T=16, micro_batch 2 per rank, grad_accum 2, 1 kernel thread, then
// `extra` --set lines. Expects them to parse (a gtest failure otherwise).
Options PlacementRunOptions(int world, int stage, const std::vector<std::string>& extra,
                            int steps);

struct PlacementRun {
  Status status;
  std::vector<double> losses;     // rank 0's view of the global mean loss, per step
  std::vector<StepResult> steps;  // rank 0
  PoolStats device, host;         // rank 0's pools after the run
  PoolStats device_setup, host_setup;  // rank 0's pools after the set-up, before any step
  std::string device_description;        // rank 0's device
  std::string communicator_description;  // rank 0's engine communicator (NCCL on cuda)
};

PlacementRun TrainAllRanks(const Options& options);

// --set lines that turn PlacementRunOptions' GPT into a tiny LLaMA of the same width:
// grouped-query attention (4 query heads, 2 key/value heads) of head_dim 12 (not
// channels / heads = 8), an untied LM head and a padded vocabulary (250 in 256). Append
// "model.tie_embeddings=true" for the tied variant.
const std::vector<std::string>& TinyLlamaSets();

// A directory `name` under the test's temporary directory (TEST_TMPDIR, else /tmp),
// created if missing.
std::string TestDir(const std::string& name);

inline uint64_t Peak(const PoolStats& pool, StateKind kind) {
  return pool.peak_by_kind[static_cast<int>(kind)];
}

}  // namespace strata
