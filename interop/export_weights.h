// Weights out of strata: a checkpoint's fp32 master weights written as a Hugging Face model
// directory (config.json + safetensors, sharded above a size, with the index) or as an
// llm.c GPT-2 checkpoint (version 3, fp32). What `strata export` runs.
//
// A LoRA checkpoint holds the adapters alone (checkpoint/checkpoint.h); it exports either as
// PEFT's adapter directory (peft:DIR: adapter_model.safetensors + adapter_config.json, the
// adapters as they are), or merged into its base (hf:DIR with merge_lora: every targeted
// W[col:col+n, :] += (alpha/rank) B A, in fp32). The base is made again from its source
// (LoraBaseReader) and must hash as it did in training (checkpoint.base.xxh3) before
// anything is written. Memory: one unit of the model at a time.
// Thread-safety: plain functions; a LoraBaseReader is used by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "core/dtype.h"
#include "core/status.h"
#include "interop/import_weights.h"
#include "runtime/model.h"

namespace strata {

struct ExportRequest {
  std::string from;           // a checkpoint: step-<k> directory, or a checkpoint_dir (its newest)
  std::string to;             // "hf:DIR", "llmc:FILE", or (a LoRA checkpoint) "peft:DIR"
  DType dtype = DType::kF32;  // hf:, peft: the safetensors dtype (fp32 exact; bf16 rounded)
  uint64_t max_shard_bytes = 5ull << 30;  // hf: larger models go into shards of this size
  bool show_progress = true;
  // A LoRA checkpoint to hf:DIR: the base with the adapters merged in. Without it, hf: and
  // llmc: of a LoRA checkpoint are refused (the adapters alone are no model).
  bool merge_lora = false;
};

// Verifies the checkpoint's files, then writes the output: llmc:FILE whole or not at all
// (core/atomic_file.h); hf:DIR and peft:DIR staged (core/staged_directory.h), so a failed
// or interrupted export leaves the directory as it was. Never over an input: the
// checkpoint, the weights it was trained from (checkpoint.source), a LoRA base. Returns one
// line saying what was written.
StatusOr<std::string> ExportWeights(const ExportRequest& request);

// A LoRA checkpoint's base, made again from where its training took it (checkpoint.base):
// "hf:DIR" read through HfWeights, or "" the model's random init with base.seed (an llm.c
// base is refused). Values come as training used them: rounded to base.dtype (the compute
// dtype) and widened back to fp32, zero in gaps, used elements.
class LoraBaseReader {
 public:
  // `model`: a model of checkpoint.model, with or without the adapters (its base units are
  // the same either way); it must outlive the reader. `who` starts error messages
  // ("export", "sample").
  static StatusOr<LoraBaseReader> Open(const OpenedCheckpoint& checkpoint, const Model& model,
                                       const std::string& who);
  // The base units, in order (the model's frozen units, or all of a model without LoRA).
  const std::vector<int>& units() const { return units_; }
  // Unit `unit`'s values (one of units()) as training used them into `values` (resized to
  // its used elements): rounded to the compute dtype, or quantized as the checkpoint's
  // base_dtype says and dequantized. `hasher` (may be null) is fed what BaseHash hashed of
  // the unit in training: its values, or a packed unit's stored bytes.
  Status Read(int unit, std::vector<float>* values, BaseHasher* hasher = nullptr) const;
  // The checkpoint's lora.base_dtype.
  BaseDType base_dtype() const { return base_dtype_; }
  // "hf:DIR", or "random weights of seed S".
  std::string Describe() const;

 private:
  LoraBaseReader() = default;
  const Model* model_ = nullptr;
  std::vector<int> units_;
  std::optional<HfWeights> weights_;  // an hf: base; else the model's init
  uint64_t seed_ = 0;
  DType dtype_ = DType::kF32;
  BaseDType base_dtype_ = BaseDType::kTrain;
  std::string from_;
};

// OK when `computed` (BaseHasher::Hex over every base unit) is the checkpoint's base hash;
// else FailedPrecondition naming the source and both hashes.
Status CheckLoraBaseHash(const OpenedCheckpoint& checkpoint, const LoraBaseReader& base,
                         const std::string& computed, const std::string& who);

// LoraOptions of a LoRA checkpoint (rank, alpha, targets) for CreateModel; and a check
// that `model` (made with them) has the checkpoint's adapter units: checkpoint unit k is
// the model's unit first + k, "block k lora", of the same size. Returns `first`.
LoraOptions CheckpointLoraOptions(const OpenedCheckpoint& checkpoint);
StatusOr<int> CheckAdapterUnits(const OpenedCheckpoint& checkpoint, const Model& model);

}  // namespace strata
