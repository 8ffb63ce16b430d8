// A frozen unit's stored form; see stored_layout.h.
#include "core/stored_layout.h"

namespace strata {

StoredUnit StoredUnit::Of(const UnitLayout& unit, BaseDType base, DType dtype) {
  StoredUnit out;
  out.base_ = base;
  out.dtype_ = dtype;
  bool any_linear = false;
  for (const TensorSpec& t : unit.tensors()) any_linear = any_linear || t.linear;
  out.packed_ = !unit.trainable() && base != BaseDType::kTrain && any_linear;
  if (!out.packed_) return out;
  size_t at = 0;
  for (size_t i = 0; i < unit.tensors().size(); ++i) {
    const TensorSpec& spec = unit.tensor(static_cast<int>(i));
    StoredTensor t;
    t.tensor = static_cast<int>(i);
    t.quantized = spec.linear;
    t.byte = at;
    if (!spec.linear) {
      t.bytes = spec.numel * DTypeBytes(dtype);
    } else {
      const size_t cols = spec.shape.size() == 2 ? static_cast<size_t>(spec.shape[1]) : 1;
      std::vector<size_t> pieces;
      for (int rows : spec.piece_rows) pieces.push_back(static_cast<size_t>(rows) * cols);
      if (pieces.empty()) pieces.push_back(spec.numel);
      size_t first = 0;
      for (size_t elements : pieces) {
        StoredPiece piece;
        piece.first = first;
        piece.byte = at + t.bytes;
        piece.layout = PieceLayout(base, elements);
        if (piece.layout.padded()) out.padding_ += piece.layout.blocks * kQuantBlock - elements;
        t.bytes += piece.layout.bytes;
        first += elements;
        t.pieces.push_back(piece);
      }
    }
    at += AlignQuant(t.bytes);
    out.tensors_.push_back(std::move(t));
  }
  out.bytes_ = at;
  return out;
}

UnitLayout StoredUnit::StoredLayout(const UnitLayout& unit) const {
  if (!packed_) return unit;
  UnitLayout stored(unit.name());
  stored.Add("stored", {static_cast<int>(stored_elements())}, false, InitKind::kZeros);
  stored.set_trainable(false);
  return stored;
}

std::vector<StoredUnit> StoredUnits(const std::vector<UnitLayout>& units, BaseDType base,
                                    DType dtype) {
  std::vector<StoredUnit> out;
  out.reserve(units.size());
  for (const UnitLayout& unit : units) out.push_back(StoredUnit::Of(unit, base, dtype));
  return out;
}

}  // namespace strata
