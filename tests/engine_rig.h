// One rank's engine over the built-in GPT, for tests that drive the Engine directly
// (gradients, master weights, steps) instead of a TrainingSession.
#pragma once

#include <memory>
#include <vector>

#include "collectives/communicator.h"
#include "models/create_model.h"
#include "runtime/backend.h"
#include "core/options.h"
#include "runtime/engine.h"

namespace strata {

struct EngineRig {
  std::vector<std::unique_ptr<Communicator>> group;  // a local group of one
  Backend backend;
  std::unique_ptr<Model> model;
  std::unique_ptr<Engine> engine;
};

// The model of options.model (weights from options.train.seed) on options.device's backend,
// in an engine of one rank with options.zero's stage and placement.
StatusOr<std::unique_ptr<EngineRig>> MakeEngineRig(const Options& options);

}  // namespace strata
