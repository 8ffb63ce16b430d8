// LoRA (low-rank adapters) for the decoder models: a targeted projection y = W x of every
// block becomes y = W x + (alpha / rank) * B (A x), with A [rank, in] and B [n, rank]
// trained and W (and every other base parameter) frozen. A target may be a column slice
// [col, col + n) of a fused projection's output (LLaMA's q, k and v rows of its fused qkv
// matrix, gate and up of gate_up), so each Hugging Face module keeps its own adapter, as
// in PEFT; GPT-2's fused c_attn is one target.
//
// The adapters of block l are one unit of their own ("block l lora"), appended after every
// base unit (so base unit indices are the same with and without LoRA), read by block l's
// stage with the base block. Their tensors are "<target>.lora_A" and "<target>.lora_B".
// A starts as a normal of PEFT's variance (its Kaiming-uniform bound 1/sqrt(in), std
// 1/sqrt(3 in)), B at zero: the adapted model starts equal to the base.
// Thread-safety: as Model (one host thread; work on ctx.stream).
#pragma once

#include <string>
#include <vector>

#include "runtime/model.h"

namespace strata {

// A projection of a block that may take an adapter.
struct LoraTargetSpec {
  std::string name;                  // strata's, e.g. "attn.q"
  std::vector<std::string> aliases;  // Hugging Face / PEFT module names, e.g. "q_proj"
  std::string hf_module;             // PEFT's module path inside a layer, e.g. "self_attn.q_proj"
  int in = 0;                        // input width
  int out_cols = 0;                  // width of the (fused) projection's output
  int col = 0;                       // the target's output columns [col, col + n)
  int n = 0;
};

struct LoraConfig {
  int rank = 0;  // 0: no LoRA
  float alpha = 16.0f;
  std::string targets;  // lora.targets text ("" = the family's default)
  // lora.dropout: each target's input x is dropped out (kept values scaled by 1/(1-p))
  // before A in training micro-batches (StepContext::dropout_key); a mask per block and
  // target, a function of the global sample row, position and channel (Ops::Dropout).
  float dropout = 0.0f;

  bool enabled() const { return rank > 0; }
};

// The indices into `specs` that `text` names (comma-separated strata names, aliases, or
// "all"; "" = `defaults`), in spec order; InvalidArgument naming an unknown name and
// listing the known ones.
StatusOr<std::vector<int>> ResolveLoraTargets(const std::string& text,
                                              const std::vector<LoraTargetSpec>& specs,
                                              const std::string& defaults);

class LoraAdapters {
 public:
  // No adapters (rank 0).
  LoraAdapters() = default;
  // Adapters of `targets` (indices into `specs`) for `layers` blocks: appends their units
  // to `units` and marks every unit before them frozen.
  LoraAdapters(const LoraConfig& config, std::vector<LoraTargetSpec> specs,
               std::vector<int> targets, int layers, DType dtype,
               std::vector<UnitLayout>* units);

  bool active() const { return rank_ > 0; }
  int rank() const { return rank_; }
  float scale() const { return scale_; }
  // Unit of block l's adapters.
  int unit(int layer) const { return first_unit_ + layer; }
  // Whether spec `target` has an adapter.
  bool has(int target) const;
  const std::vector<LoraTargetSpec>& specs() const { return specs_; }
  const std::vector<int>& targets() const { return targets_; }

  // Activations for micro-batches of `rows` tokens (each block's A x per target, kept for
  // the backward), and the scratch of up to `rows` decode tokens.
  Status Prepare(Device& device, int rows, int layers);
  Status PrepareDecode(Device& device, int rows);

  // out[:, col:col+n] += scale * B (A x) for block `layer`'s target `target` (its input x
  // [rows, in], its output `out` [rows, out_cols]); A x is kept for Backward. `decode`:
  // tokens of generation (rows <= PrepareDecode's, nothing kept).
  Status Forward(const StepContext& ctx, int layer, int target, const void* x, void* out,
                 int rows, bool decode = false);
  // Given dout [rows, out_cols] (the gradient of the projection's output), adds the
  // adapter's gradients to ctx.grads[unit(layer)] and its input gradient to dx [rows, in].
  Status Backward(const StepContext& ctx, int layer, int target, const void* x,
                  const void* dout, void* dx, int rows);

 private:
  const void* A(const StepContext& ctx, int layer, int target) const;
  const void* B(const StepContext& ctx, int layer, int target) const;
  void* Grad(const StepContext& ctx, int layer, int target, bool b) const;
  size_t Offset(int target, bool b) const;

  // The dropped-out input of `target` in block `layer` into xd_ (training with dropout);
  // returns x itself where nothing is dropped.
  StatusOr<const void*> DroppedInput(const StepContext& ctx, int layer, int target,
                                     const void* x, int rows);
  uint64_t MaskKey(const StepContext& ctx, int layer, int target) const;
  // Block `layer`'s A x of `target`, kept from the forward for the backward.
  void* KeptAx(int layer, int target);

  int rank_ = 0;
  float scale_ = 0.0f;
  float dropout_ = 0.0f;
  int max_in_ = 0;
  DType dtype_ = DType::kF32;
  std::vector<LoraTargetSpec> specs_;
  std::vector<int> targets_;
  std::vector<int> tensor_of_;  // per spec: index of its lora_A in the unit (B follows); -1
  std::vector<size_t> offsets_;  // per tensor of an adapter unit: its element offset
  int first_unit_ = 0;
  int max_n_ = 0;
  Buffer h_;       // [layers][targets][rows, rank]: A x of each target, kept
  Buffer tmp_;     // [rows, max n]
  Buffer dh_;      // [rows, rank]
  Buffer xd_;      // dropout: [rows, max in], a target's dropped-out input
  Buffer dxd_;     // dropout: [rows, max in], its gradient
  Buffer dec_h_;   // [decode rows, rank]
  Buffer dec_tmp_; // [decode rows, max n]
  int decode_rows_ = 0;
  int rows_ = 0;
};

}  // namespace strata
