// Units and flat buffers. A model declares an ordered list of units (embedding, blocks,
// head); all parameters of a unit live in one flat buffer whose tensors sit at fixed,
// 64-byte-aligned offsets. The buffer is padded so that it splits into `world_size` equal
// shards of a multiple of kShardAlignElements elements (4 KiB of bf16, 8 KiB of fp32), so
// rank r owns shard r of every unit and every shard is 4 KiB-aligned in every dtype.
// Thread-safety: plain values.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace strata {

inline constexpr size_t kShardAlignElements = 2048;
inline constexpr size_t kTensorAlignElements = 16;

enum class InitKind { kNormal, kZeros, kOnes };

struct TensorSpec {
  std::string name;
  std::vector<int> shape;
  size_t offset = 0;  // elements from the start of the unit's flat buffer
  size_t numel = 0;
  bool weight_decay = false;  // AdamW decay applies (matrices yes, biases/norms no)
  InitKind init = InitKind::kZeros;
  float init_std = 0.0f;  // for kNormal
  // A linear layer's weight matrix [rows, cols] (UnitLayout::MarkLinear): what a quantized
  // frozen base (lora.base_dtype) quantizes; everything else (embeddings, norms, biases, the
  // LM head) stays in the compute dtype.
  bool linear = false;
  // A vocabulary-row matrix (token embedding, LM head; UnitLayout::MarkVocabRows): with 8-bit
  // Adam states (train.optimizer_states = int8) its moments stay fp32, as bitsandbytes
  // advises for embeddings (a row seen rarely gets gradients orders of magnitude below its
  // block's absmax, so its v rounds to 0 while its m does not: a step of lr * m / eps).
  bool vocab_rows = false;
  // Rows of each piece quantized as a whole (one per Hugging Face matrix of a fused one,
  // e.g. LLaMA's q|k|v rows); empty: the whole tensor is one piece.
  std::vector<int> piece_rows;
};

class UnitLayout {
 public:
  explicit UnitLayout(std::string name) : name_(std::move(name)) {}

  // Appends a tensor at the next aligned offset; returns its index.
  int Add(const std::string& name, std::vector<int> shape, bool weight_decay, InitKind init,
          float init_std = 0.0f);

  // Marks tensor `index` (2-D) a linear layer's weight, quantized as `piece_rows` row ranges
  // (empty: one piece).
  void MarkLinear(int index, std::vector<int> piece_rows = {});

  // Marks tensor `index` a vocabulary-row matrix (TensorSpec::vocab_rows); returns it.
  int MarkVocabRows(int index) {
    tensors_[index].vocab_rows = true;
    return index;
  }

  const std::string& name() const { return name_; }
  // A frozen unit (a LoRA base) is read by compute but never trained: it has no gradient
  // sums, no optimizer state and no fp32 master, only its compute-dtype params, placed
  // apart from the trainable units' (lora.base_tier). Default: trainable.
  bool trainable() const { return trainable_; }
  void set_trainable(bool trainable) { trainable_ = trainable; }
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  const TensorSpec& tensor(int index) const { return tensors_[index]; }
  // Parameters that are real (excludes alignment gaps and padding).
  size_t num_params() const;
  // End of the last tensor (before world padding).
  size_t used_elements() const { return used_elements_; }
  // Elements of the flat buffer padded for `world_size` equal, aligned shards.
  size_t PaddedElements(int world_size) const;
  size_t ShardElements(int world_size) const { return PaddedElements(world_size) / world_size; }

 private:
  std::string name_;
  std::vector<TensorSpec> tensors_;
  size_t used_elements_ = 0;
  bool trainable_ = true;
};

}  // namespace strata
