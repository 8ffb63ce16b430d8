// What the decoder models (models/gpt, models/llama) share: the seeded initialisation of
// units, tensor addressing inside a unit's flat buffer, the micro-batch shape check, and the
// element ranges a tied embedding's last backward stage adds to. Each model derives from
// DecoderBase, fills units_ and stages_ in its constructor and writes Forward/Backward.
// Thread-safety: as Model.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

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

 protected:
  DecoderBase(DType dtype, int vocab, int padded_vocab, int channels)
      : dtype_(dtype), vocab_(vocab), padded_vocab_(padded_vocab), channels_(channels) {}

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
  std::vector<UnitLayout> units_;
  std::vector<StageSpec> stages_;
  int batch_ = 0, seq_len_ = 0;
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
