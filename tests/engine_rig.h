// One rank's engine over the built-in GPT, for tests that drive the Engine directly
// (gradients, master weights, steps) instead of a TrainingSession.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
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

// One micro-batch of random tokens below model.vocab (64 where unset), fixed seed: tests
// that compare engines on the same input.
struct RandomTokens {
  std::vector<int32_t> inputs, targets;
  MicroBatch micro() const { return {inputs.data(), targets.data()}; }
};

inline RandomTokens RandomBatch(const Options& options) {
  RandomTokens batch;
  std::mt19937 rng(5);
  const int vocab = options.model.vocab > 0 ? options.model.vocab : 64;
  for (int i = 0; i < options.train.micro_batch * options.train.seq_len; ++i) {
    batch.inputs.push_back(rng() % vocab);
    batch.targets.push_back(rng() % vocab);
  }
  return batch;
}

}  // namespace strata
