// The runtime's view of a model: an ordered list of units (flat parameter buffers, see
// unit_layout.h) and an ordered list of compute stages, each naming the units it reads.
// The engine runs forward over the stages in order and backward in reverse, making each
// stage's units available (gathered, fetched from a tier) before calling the model and
// releasing them after; the model never knows where its parameters live between uses.
// A unit may be used by several stages (a tied LM head reuses the embedding), so the
// access trace can name a unit more than once.
// Thread-safety: a Model is driven by one host thread; its work runs on ctx.stream.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/ops.h"
#include "device/device.h"
#include "core/status.h"
#include "core/unit_layout.h"

namespace strata {

struct StageSpec {
  std::string name;
  std::vector<int> units;  // units whose parameters the stage reads (and whose grads it adds to)
};

// Everything a stage needs for one micro-batch. params[u] / grads[u] point to unit u's
// full flat buffers (compute dtype) on the device tier; they are valid only for the units
// of the stage being run. grads are accumulated into (+=), never overwritten; a frozen
// unit's (UnitLayout::trainable false) is null: its backward computes input gradients
// only.
struct StepContext {
  Device* device = nullptr;
  Ops* ops = nullptr;
  Stream* stream = nullptr;
  std::vector<const void*> params;
  std::vector<void*> grads;
  const int32_t* inputs = nullptr;   // [B,T] device tier
  const int32_t* targets = nullptr;  // [B,T] device tier
  int batch = 0;                     // B
  int seq_len = 0;                   // T
  float dloss = 0.0f;                // d(total loss)/d(loss of one token); 0 = no backward
  // Dropout (LoRA's): the training micro-batch's key, a function of the seed, the step and
  // the micro-batch only; 0 = no dropout (evaluation, generation). first_row: the global
  // batch row of this rank's row 0, so masks follow the global sample whatever the split.
  uint64_t dropout_key = 0;
  int64_t first_row = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const std::vector<UnitLayout>& units() const = 0;
  virtual const std::vector<StageSpec>& stages() const = 0;
  // Writes unit `unit`'s initial values (fp32, laid out as units()[unit]; gaps and padding
  // left untouched) from `seed`, identically whatever the world size.
  virtual void InitUnit(int unit, uint64_t seed, float* values) const = 0;
  // Allocates activations for micro-batches of [batch, seq_len] on the device tier.
  virtual Status PrepareActivations(Device& device, int batch, int seq_len) = 0;
  virtual Status Forward(int stage, const StepContext& ctx) = 0;
  virtual Status Backward(int stage, const StepContext& ctx) = 0;
  // Per-token losses [B*T] (fp32, device tier) of the last forward.
  virtual const float* losses() const = 0;
  // Logits [B*T, padded vocabulary] (compute dtype, device tier) of the last forward that
  // asked for no gradient (dloss == 0; with a gradient they are overwritten by it).
  virtual const void* logits() const = 0;
  // Generation with a KV cache (strata sample), one sequence, no gradients. PrepareDecode
  // allocates, on the device tier, each block's cache of `max_len` positions and the
  // activations of `max_rows` tokens run at once. DecodeStep runs the `rows` tokens
  // ctx.inputs[0, rows) (device tier) at positions [position, position + rows) (rows <=
  // max_rows, position + rows <= max_len; every earlier position already run) through
  // every stage, with ctx.params[u] set for every unit: each matrix once for all rows (a
  // prompt's prefill costs one pass over the weights per max_rows tokens, not per token),
  // each row's attention over the cache up to its own position. The last token's next-token
  // logits [padded vocabulary] are then in logits(). ctx.batch and ctx.seq_len are not read.
  virtual Status PrepareDecode(Device& device, int max_len, int max_rows) = 0;
  virtual Status DecodeStep(const StepContext& ctx, int position, int rows) = 0;
  // For a unit used by several backward stages (a tied embedding): the element ranges
  // [begin, end) of the unit that its last backward stage may add to, given the
  // micro-batch's input tokens `inputs` ([batch, seq_len], host memory); sorted and
  // disjoint. Every other element's gradient is final after the unit's earlier backward
  // stages. Default: every element in use (nothing is final earlier).
  virtual std::vector<std::pair<size_t, size_t>> LastStageRanges(int unit, const int32_t* inputs,
                                                                 int batch, int seq_len) const {
    (void)inputs, (void)batch, (void)seq_len;
    return {{0, units()[unit].used_elements()}};
  }
  virtual std::string Describe() const = 0;
};

// The units of the base model, which weights files hold (imports, exports): every unit, or
// where some are frozen (LoRA: the base frozen, the adapters trainable) the frozen ones.
inline std::vector<int> BaseUnits(const Model& model) {
  const std::vector<UnitLayout>& units = model.units();
  bool any_frozen = false;
  for (const UnitLayout& unit : units) any_frozen = any_frozen || !unit.trainable();
  std::vector<int> out;
  for (size_t u = 0; u < units.size(); ++u) {
    if (!any_frozen || !units[u].trainable()) out.push_back(static_cast<int>(u));
  }
  return out;
}

}  // namespace strata
