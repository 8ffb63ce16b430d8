// A LoRA run's base as its checkpoints refer to it: a LoRA checkpoint holds the adapters
// alone, and names its base by where it came from and the XXH3 of its params, so that it
// loads only onto the same base (checkpoint_load.h) and export and sample can check a base
// they made again. Part of //checkpoint (see checkpoint.h).
// Thread-safety: BaseHash is collective (every rank of the engine calls it together); a
// BaseHasher is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "runtime/engine.h"
#include "runtime/model.h"

struct XXH3_state_s;

namespace strata {

// A LoRA run's base, as its checkpoints refer to it (they hold the adapters alone): where it
// came from (model.from, or "" with the seed of its random init) and the XXH3 (hex) of
// its params as training used them (BaseHash).
struct LoraBase {
  std::string from;
  uint64_t seed = 0;
  DType dtype = DType::kF32;  // train.dtype: the params hashed are the base in this dtype
  // lora.base_dtype: where not kTrain, the packed units' stored (quantized) bytes are
  // hashed instead of their values (version 7 on; older versions: kTrain).
  BaseDType base_dtype = BaseDType::kTrain;
  std::string xxh3;
};
// The XXH3 of every frozen unit's params (compute dtype widened to fp32, used elements, in
// unit order; a packed unit of a quantized base: its stored bytes, core/stored_layout.h). Collective (Engine::ReadParams gathers shards); one unit in memory at a time.
StatusOr<std::string> BaseHash(Engine& engine, const Model& model);
// The same hash fed unit by unit from elsewhere (a base made again from its source: export,
// sample): each base unit's used elements, in unit order.
class BaseHasher {
 public:
  BaseHasher();
  // A packed unit's stored bytes (StoredUnit::bytes() of them).
  void AddBytes(const uint8_t* bytes, size_t count);
  void Add(const float* values, size_t count);
  void Add(const std::vector<float>& values) { Add(values.data(), values.size()); }
  std::string Hex() const;  // 16 hex digits

 private:
  std::unique_ptr<XXH3_state_s, void (*)(XXH3_state_s*)> state_;
};

}  // namespace strata
