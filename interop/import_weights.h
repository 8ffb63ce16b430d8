// Initial weights from a Hugging Face model directory (model.from=hf:DIR): its safetensors
// (one file, or shards with model.safetensors.index.json; F32, BF16 or F16) are checked
// against the model whole before anything is stored, then loaded unit by unit, each rank
// reading only the bytes of the elements it stores (its shard at stage 3, else the whole
// unit): no rank ever holds more than two units' ranges in memory, and with params or the
// optimizer on NVMe the values go straight to their swap files through the engine.
// Hugging Face's non-parameter buffers (GPT-2's attn.bias / attn.masked_bias masks,
// rotary inv_freq) are ignored; a tied model's lm_head.weight (GPT-2's, a tied LLaMA's:
// HfTiedCopyOf) is read and compared with the embedding in Open, loaded when it equals it
// (bit for bit) and refused naming both when it differs; any other tensor the model has no
// place for is an error.
// Thread-safety: one call per rank; ranks need not call it together.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/options.h"
#include "core/progress.h"
#include "models/hf/safetensors.h"
#include "runtime/engine.h"
#include "runtime/model.h"

namespace strata {

// A directory's weights matched to a model: every tensor present, of the right shape, and
// nothing left over (Open checks it all), then any element range of any unit on demand.
class HfWeights {
 public:
  // Errors name the file, the tensor and the problem (missing, extra, wrong shape, damaged).
  static StatusOr<HfWeights> Open(const std::string& dir, const ModelOptions& options,
                                  const Model& model);
  // Elements [begin, end) of unit `unit`'s flat fp32 values into out (zero where no tensor
  // lands: gaps, padding, padded vocabulary rows); `progress` (may be null) advances by
  // the bytes read. `params` (where not null; only for a unit with RawBf16): the same
  // elements as bf16 (the files' own values) into params, and `out` may then be null.
  Status Fill(int unit, size_t begin, size_t end, float* out, Progress* progress,
              bf16* params = nullptr) const;
  // Whether every tensor of `unit` is BF16 in its file and laid out as in the unit (not
  // transposed): its bf16 params are then the files' bytes, copied without a cast.
  bool RawBf16(int unit) const;
  uint64_t bytes() const { return bytes_; }  // of every tensor, in the files' dtypes

 private:
  struct Piece;
  HfWeights() = default;
  std::shared_ptr<const SafetensorsSet> set_;
  std::shared_ptr<const std::vector<std::vector<Piece>>> by_unit_;  // pieces per unit
  const Model* model_ = nullptr;
  uint64_t bytes_ = 0;
};

// Where ImportHfWeights puts one unit's values: fp32 straight into the master
// (EngineState::WriteTargets: master) or through the importer's fp32 buffers; a bf16 file's bits as the
// bf16 params (in a bf16 engine), straight into them (EngineState::WriteTargets: params) or through
// its bf16 buffers, and then no fp32 values at all for a unit without optimizer state.
struct UnitImportRoute {
  bool master_straight = false;  // the fp32 values go into the master itself
  bool raw_params = false;       // the bf16 params are the files' bits (no cast)
  bool params_straight = false;  // ... written into the params themselves
  bool fp32_buffer = false;      // the fp32 values go through a buffer
  bool bf16_buffer = false;      // the raw params go through a buffer
};
UnitImportRoute RouteUnit(const HfWeights& weights, const Engine& engine, const Model& model,
                          int unit);

// What an import of `weights` into `engine` does: each unit's route and the host memory
// of the importer's own buffers. On a dry-run engine (strata plan) it is the plan of the
// run that engine models.
struct ImportPlan {
  std::vector<int> units;               // those the files hold (BaseUnits), in import order
  std::vector<UnitImportRoute> routes;  // per entry of units
  // Units of a quantized base stored packed (EngineState::Packed): quantized as they are
  // read, a piece at a time (EngineState::WriteUnit), after the others.
  std::vector<int> packed;
  size_t largest_fp32 = 0;              // elements of the largest range through fp32 buffers
  size_t largest_bf16 = 0;              // ... through bf16 buffers
  int reader_threads = 0;               // Fill's threads, each with a bounce buffer
  // Two buffers of each kind (one unit read while another is stored) and the reading
  // threads' bounce buffers.
  uint64_t HostBytes() const;
};
ImportPlan PlanImport(const HfWeights& weights, const Engine& engine, const Model& model);

// Loads `dir` into every unit of `engine` (which runs `model`, made from `options`): Open,
// then each unit's stored range, the next unit read on a second thread while one is
// stored: straight into each unit's master where the engine allows it (WriteTargets),
// else through two buffers of one unit's range; a bf16 file's values also go to a bf16
// engine's params as they are, with no cast (straight where the host can write them,
// else through two buffers of their own). A quantized base's packed units are quantized as
// they are read, each rank reading the whole pieces its share of the stored bytes overlaps
// (a piece's absmaxes are the piece's), one piece in memory at a time, never the model.
// Nothing is written when Open fails.
// `show_progress`: a progress line for long imports.
Status ImportHfWeights(const std::string& dir, const ModelOptions& options, const Model& model,
                       Engine& engine, bool show_progress);

}  // namespace strata
