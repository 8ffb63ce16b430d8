// How a frozen unit is stored where its base is quantized (lora.base_dtype nf4, int8 or
// bf16): its tensors one after the other in one byte buffer, each linear matrix as its
// pieces in the base's format (core/quant_format.h), every other tensor (norms, biases) as
// its compute-dtype values. The runtime keeps, moves, shards and gathers that buffer like
// any unit's params (as a unit of one tensor of stored_elements() compute-dtype elements:
// StoredLayout()) and dequantizes it into the unit's usual flat buffer just before each
// use. Quantization is per piece, never per shard: every world size stores the same bytes.
// A unit that is trainable, or has no linear matrix, or whose base is kTrain, is not packed:
// stored as the model lays it out.
// Thread-safety: plain values.
#pragma once

#include <cstddef>
#include <vector>

#include "core/dtype.h"
#include "core/quant_format.h"
#include "core/unit_layout.h"

namespace strata {

struct StoredPiece {
  size_t first = 0;   // the piece's first element within its tensor
  size_t byte = 0;    // the piece's first byte within the unit's stored buffer
  QuantPiece layout;  // its arrays, from `byte`
};

struct StoredTensor {
  int tensor = 0;          // index in the unit's layout
  bool quantized = false;  // a linear matrix in the base's format, else compute-dtype values
  size_t byte = 0;         // first byte within the stored buffer (kQuantArrayAlign-aligned)
  size_t bytes = 0;        // its stored bytes
  std::vector<StoredPiece> pieces;  // quantized: the pieces in row order
};

class StoredUnit {
 public:
  StoredUnit() = default;
  // The stored form of `unit` for `base` with compute dtype `dtype`.
  static StoredUnit Of(const UnitLayout& unit, BaseDType base, DType dtype);

  bool packed() const { return packed_; }
  BaseDType base() const { return base_; }
  DType dtype() const { return dtype_; }
  size_t bytes() const { return bytes_; }
  // The buffer as compute-dtype elements (bytes rounded up).
  size_t stored_elements() const { return (bytes_ + DTypeBytes(dtype_) - 1) / DTypeBytes(dtype_); }
  const std::vector<StoredTensor>& tensors() const { return tensors_; }
  // Elements of the unit's matrices padded up to whole blocks (0: none padded).
  size_t padding_elements() const { return padding_; }
  // The packed unit as the runtime sees it: one tensor "stored" of stored_elements(),
  // frozen, with the unit's name. Not packed: `unit` itself.
  UnitLayout StoredLayout(const UnitLayout& unit) const;

 private:
  bool packed_ = false;
  BaseDType base_ = BaseDType::kTrain;
  DType dtype_ = DType::kF32;
  size_t bytes_ = 0;
  size_t padding_ = 0;
  std::vector<StoredTensor> tensors_;
};

// The stored form of every unit of a model.
std::vector<StoredUnit> StoredUnits(const std::vector<UnitLayout>& units, BaseDType base,
                                    DType dtype);

}  // namespace strata
