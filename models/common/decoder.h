// What the decoder models (models/gpt, models/llama) share: the stage skeleton and its
// forward/backward dispatch (stage 0 the embedding, 1..L the blocks with their LoRA
// adapter units, L+1 the final norm, L+2 the LM head), the LM head itself (logits, the
// fused loss and its gradient; tied: the embedding's matrix), a block's recompute before
// its backward, the buffers every family has (the residual stream's gradient, scratch, the
// final norm's output, logits, losses), the seeded initialisation of units, tensor
// addressing inside a unit's flat buffer, the micro-batch shape check, and the element
// ranges a tied embedding's last backward stage adds to. Each family derives from
// DecoderBase, fills units_ (and lora_) and calls BuildStages in its constructor, allocates
// the shared buffers with its own in PrepareActivations, and states only its differences:
// its embedding, block and final norm, forward and backward.
// Thread-safety: as Model.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "models/common/lora.h"
#include "runtime/model.h"

namespace strata {

class DecoderBase : public Model {
 public:
  const std::vector<UnitLayout>& units() const override { return units_; }
  const std::vector<StageSpec>& stages() const override { return stages_; }

  // Each element depends only on (seed, unit, tensor, index): the same values for every
  // world size. Rows [vocab, padded) of
  // the tensors named by PaddedVocabTensors() are zero: they pad the vocabulary, get no
  // gradient (the loss ignores their logits, no token selects them) and stay zero.
  void InitUnit(int unit, uint64_t seed, float* values) const override;

  // The stage skeleton: the shape checked, then the family's stage (the LM head: here).
  Status Forward(int stage, const StepContext& ctx) final;
  // The LM head's backward starts the gradient (logits hold dloss * dlogits), the final
  // norm's gets dres_ zeroed, a block's gets its activations recomputed first (recompute).
  Status Backward(int stage, const StepContext& ctx) final;
  const float* losses() const override { return losses_.as<float>(); }
  const void* logits() const override { return logits_.data(); }

 protected:
  // `layers` blocks; `recompute`: each block keeps only its output and runs its forward
  // again before its backward.
  DecoderBase(DType dtype, int vocab, int padded_vocab, int channels, int layers,
              bool recompute)
      : dtype_(dtype), vocab_(vocab), padded_vocab_(padded_vocab), channels_(channels),
        layers_(layers), recompute_(recompute) {}

  // The family's stages. Forward: embedding into encoded_; block `stage` (1..L) from its
  // residual input, its activations kept, and with `output` its output (a recompute leaves
  // the last projection out: the backward does not read it); the final norm into lnf_.
  virtual Status EmbedForward(const StepContext& ctx) = 0;
  virtual Status BlockForward(int stage, const StepContext& ctx, bool output) = 0;
  virtual Status FinalNormForward(const StepContext& ctx) = 0;
  // Backward: dres_ carries the residual stream's gradient from stage to stage (the final
  // norm's backward starts it from dbtc_, zeroed by the skeleton; a block's adds its own;
  // the embedding's consumes it).
  virtual Status FinalNormBackward(const StepContext& ctx) = 0;
  virtual Status BlockBackward(int stage, const StepContext& ctx) = 0;
  virtual Status EmbedBackward(const StepContext& ctx) = 0;

  // stages_ from units_ and lora_: embed {0}; block l {l + 1, its adapter unit}; final norm
  // {L + 1}; LM head {head_unit_}. Call once units_, lora_ and head_unit_ are set.
  void BuildStages();

  // The LM head's matrix among `ctx`'s params.
  const void* HeadWeight(const StepContext& ctx) const {
    return At(ctx.params[head_unit_], head_unit_, head_tensor_);
  }

  // A frozen unit's gradient (g null): no weight gradient (matmuls skip it).
  void* Grad(void* g, int unit, int tensor) const {
    return g == nullptr ? nullptr : At(g, unit, tensor);
  }

  // (unit, tensor) pairs of shape [padded_vocab, C] (token embedding, LM head).
  virtual std::vector<std::pair<int, int>> PaddedVocabTensors() const = 0;

  // Address of tensor `tensor` of unit `unit` inside the unit's flat buffer `base`.
  template <typename Ptr>
  Ptr At(Ptr base, int unit, int tensor) const {
    using Byte =
        std::conditional_t<std::is_const_v<std::remove_pointer_t<Ptr>>, const char, char>;
    return reinterpret_cast<Byte*>(base) + units_[unit].tensor(tensor).offset * DTypeBytes(dtype_);
  }

  // Fails unless the micro-batch has the shape PrepareActivations was called with.
  Status CheckShape(const StepContext& ctx) const;

  // The element ranges of the token-embedding tensor (unit `unit`, tensor `tensor`, rows of
  // C) that a lookup of `inputs` adds to, sorted and merged; `extra` (if not empty) is
  // appended, merged with the last range where they touch.
  std::vector<std::pair<size_t, size_t>> TokenRowRanges(int unit, int tensor,
                                                        const int32_t* inputs, int batch,
                                                        int seq_len,
                                                        std::pair<size_t, size_t> extra) const;

  // The activation buffer of `elements` values of `type` on the device tier.
  static StatusOr<Buffer> Activation(Device& device, size_t elements, DType type,
                                     const std::string& what);

  size_t num_params() const;

  const DType dtype_;
  const int vocab_, padded_vocab_, channels_;
  const int layers_;
  const bool recompute_;
  std::vector<UnitLayout> units_;
  std::vector<StageSpec> stages_;
  int batch_ = 0, seq_len_ = 0;
  // The LM head's matrix: (0, the token embedding) when tied, else a unit of its own.
  int head_unit_ = 0, head_tensor_ = 0;
  LoraAdapters lora_;
  // Allocated by the family's PrepareActivations: the embedding's output [N, C], the final
  // norm's [N, C], logits [N, padded_vocab], losses [N] (fp32); the residual stream's
  // gradient [N, C] and a gradient scratch of at least [N, C]; the frozen norms' gradient
  // sink (LoRA: written, never read).
  Buffer encoded_, lnf_, logits_, losses_;
  Buffer dres_, dbtc_;
  Buffer norm_sink_;

 private:
  // The LM head: logits with the head's matrix, then the fused loss (and its gradient).
  Status LmHeadForward(const StepContext& ctx);
  Status LmHeadBackward(const StepContext& ctx);
};

// The shape checks both families share (layers, heads, channels divisible by heads unless
// the heads have a width of their own (`own_head_dim`: LLaMA's head_dim), vocab,
// padded_vocab >= vocab, max_seq_len), appended to `problems` as "model.<key> ..." lines.
void CheckDecoderShape(int layers, int heads, int channels, int vocab, int padded_vocab,
                       int max_seq_len, std::vector<std::string>* problems,
                       bool own_head_dim = false);

// OK when `problems` is empty, else kInvalidArgument: "invalid <what> configuration:" and
// one problem per line.
Status ConfigProblems(const std::string& what, const std::vector<std::string>& problems);

// "50257 (padded 50304)", or "256" where the two are equal: the vocabulary in Describe().
std::string VocabText(int vocab, int padded_vocab);

// The padded vocabulary a model uses when none is configured: `vocab` rounded up to a
// multiple of 64 (GPT-2: 50,257 -> 50,304), as llm.c pads it.
int DefaultPaddedVocab(int vocab);

}  // namespace strata
