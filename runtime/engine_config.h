// What the engine takes from the options, resolved once (EngineConfig::From): the
// placement (runtime/placement.h), the step's shape and AdamW hyper-parameters, how far
// stage 3 gathers ahead, and the NVMe tiers' settings. The engine and the ZeRO component
// factory read this, never the whole Options. Set by code, not by a config key: the fault
// plan the fault suite injects into the NVMe stores (read once at the top of the program).
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "core/options.h"
#include "core/status.h"
#include "nvme/fault_injection.h"
#include "runtime/placement.h"

namespace strata {

// The NVMe tiers' settings (zero.nvme_dir, zero.nvme_allow_memory_fs, nvme.*).
struct NvmeSettings {
  std::string dir;
  bool allow_memory_fs = false;
  IoEngineKind engine = IoEngineKind::kAuto;
  int queue_depth = 32;
  uint64_t chunk_bytes = 16ull << 20;
  int read_ahead_units = 3;
  int optimizer_buffers = 16;
  int grad_buffers = 8;
  // Fault tests of the whole program: every NVMe store's engine wrapped in this plan.
  std::optional<nvme::FaultPlan> fault;
};

struct EngineConfig {
  Placement placement;  // the stage, the world, the homes and the capabilities
  DType dtype = DType::kF32;  // train.dtype: params, activations and gradients
  int micro_batch = 1;        // train.micro_batch: rows per rank and micro-batch
  int seq_len = 64;           // train.seq_len
  int grad_accum = 1;         // train.grad_accum: micro-batches per step
  uint64_t seed = 1337;       // train.seed: the init's and the dropout masks'
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;  // AdamW
  float grad_clip = 1.0f;     // global-norm clipping; 0 = none
  float lora_dropout = 0.0f;  // lora.dropout, on the adapters' inputs
  // lora.base_dtype: a frozen unit with linear matrices is stored in this form
  // (core/stored_layout.h) and dequantized before each use; kTrain: as the model lays it out.
  BaseDType base_dtype = BaseDType::kTrain;
  uint64_t prefetch_bytes = 256ull << 20;  // zero.prefetch_bytes (stage 3)
  NvmeSettings nvme;

  // The engine's configuration in `options` for a run of `world` ranks
  // (ResolvePlacement's errors where the placement cannot run).
  static StatusOr<EngineConfig> From(const Options& options, int world);
};

}  // namespace strata
