// Weights out of strata: a checkpoint's fp32 master weights written as a Hugging Face model
// directory (config.json + safetensors, sharded above a size, with the index) or as an
// llm.c GPT-2 checkpoint (version 3, fp32). What `strata export` runs.
// Thread-safety: plain functions.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/status.h"

namespace strata {

struct ExportRequest {
  std::string from;  // a checkpoint: step-<k> directory, or a checkpoint_dir (its newest)
  std::string to;    // "hf:DIR" or "llmc:FILE"
  DType dtype = DType::kF32;  // hf: the safetensors dtype (fp32 exact; bf16 rounded)
  uint64_t max_shard_bytes = 5ull << 30;  // hf: larger models go into shards of this size
  bool show_progress = true;
};

// Verifies the checkpoint's files, then writes the output; every file is written under a
// temporary name and renamed, so a failed export leaves no half-written file. Returns one
// line saying what was written.
StatusOr<std::string> ExportWeights(const ExportRequest& request);

}  // namespace strata
