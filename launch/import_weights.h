// Initial weights from a Hugging Face model directory (model.from=hf:DIR): its safetensors
// (one file, or shards with model.safetensors.index.json; F32, BF16 or F16) are checked
// against the model whole before anything is stored, then loaded unit by unit, each rank
// reading only the bytes of the elements it stores (its shard at stage 3, else the whole
// unit): no rank ever holds more than one unit's range in memory, and with params or the
// optimizer on NVMe the values go straight to their swap files through the engine.
// Hugging Face's non-parameter buffers (GPT-2's attn.bias / attn.masked_bias masks,
// rotary inv_freq) are ignored; any other tensor the model has no place for is an error.
// Thread-safety: one call per rank; ranks need not call it together.
#pragma once

#include <string>

#include "core/options.h"
#include "runtime/engine.h"
#include "runtime/model.h"

namespace strata {

// Loads `dir` into every unit of `engine` (which runs `model`, made from `options`).
// Errors name the file, the tensor and the problem (missing, extra, wrong shape, damaged),
// before any unit is written. `show_progress`: a progress line for long imports.
Status ImportHfWeights(const std::string& dir, const ModelOptions& options, const Model& model,
                       Engine& engine, bool show_progress);

}  // namespace strata
