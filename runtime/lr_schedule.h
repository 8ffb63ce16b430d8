// Learning-rate schedule: linear warmup to train.lr over train.warmup_steps, then cosine
// decay to train.lr * train.min_lr_fraction at the last step. `step` is 0-based.
// Thread-safety: pure function.
#pragma once

#include <cmath>

#include "core/options.h"

namespace strata {

inline float LearningRate(const TrainOptions& train, int step) {
  if (step < train.warmup_steps) {
    return train.lr * static_cast<float>(step + 1) / static_cast<float>(train.warmup_steps);
  }
  const float min_lr = train.lr * train.min_lr_fraction;
  const int decay_steps = train.steps - train.warmup_steps;
  if (decay_steps <= 1) return train.lr;
  const float progress =
      static_cast<float>(step - train.warmup_steps) / static_cast<float>(decay_steps - 1);
  const float cosine = 0.5f * (1.0f + std::cos(static_cast<float>(M_PI) * progress));
  return min_lr + (train.lr - min_lr) * cosine;
}

}  // namespace strata
