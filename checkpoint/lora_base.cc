// A LoRA run's base: see lora_base.h.
#include "checkpoint/lora_base.h"

#include <xxhash.h>

#include "checkpoint/checkpoint_files.h"

namespace strata {

BaseHasher::BaseHasher() : state_(XXH3_createState(), [](XXH3_state_s* s) { XXH3_freeState(s); }) {
  XXH3_64bits_reset(state_.get());
}

void BaseHasher::Add(const float* values, size_t count) {
  XXH3_64bits_update(state_.get(), values, count * sizeof(float));
}

void BaseHasher::AddBytes(const uint8_t* bytes, size_t count) {
  XXH3_64bits_update(state_.get(), bytes, count);
}

std::string BaseHasher::Hex() const {
  return checkpoint_internal::Hex(XXH3_64bits_digest(state_.get()));
}

StatusOr<std::string> BaseHash(Engine& engine, const Model& model) {
  BaseHasher hasher;
  const std::vector<UnitLayout>& units = model.units();
  for (size_t u = 0; u < units.size(); ++u) {
    if (units[u].trainable()) continue;
    if (engine.state().Packed(static_cast<int>(u))) {
      ASSIGN_OR_RETURN(const std::vector<uint8_t> bytes,
                       engine.state().ReadStoredBytes(static_cast<int>(u)));
      hasher.AddBytes(bytes.data(), engine.state().stored(static_cast<int>(u)).bytes());
      continue;
    }
    ASSIGN_OR_RETURN(const std::vector<float> params,
                     engine.state().ReadParams(static_cast<int>(u)));
    hasher.Add(params.data(), units[u].used_elements());
  }
  return hasher.Hex();
}

}  // namespace strata
