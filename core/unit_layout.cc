// Flat-buffer layout of a unit; see unit_layout.h.
#include "core/unit_layout.h"

namespace strata {

int UnitLayout::Add(const std::string& name, std::vector<int> shape, bool weight_decay,
                    InitKind init, float init_std) {
  TensorSpec spec;
  spec.name = name;
  spec.numel = 1;
  for (int dim : shape) spec.numel *= static_cast<size_t>(dim);
  spec.shape = std::move(shape);
  spec.offset = (used_elements_ + kTensorAlignElements - 1) / kTensorAlignElements *
                kTensorAlignElements;
  spec.weight_decay = weight_decay;
  spec.init = init;
  spec.init_std = init_std;
  used_elements_ = spec.offset + spec.numel;
  tensors_.push_back(std::move(spec));
  return static_cast<int>(tensors_.size()) - 1;
}

void UnitLayout::MarkLinear(int index, std::vector<int> piece_rows) {
  tensors_[index].linear = true;
  tensors_[index].piece_rows = std::move(piece_rows);
}

size_t UnitLayout::num_params() const {
  size_t total = 0;
  for (const TensorSpec& t : tensors_) total += t.numel;
  return total;
}

size_t UnitLayout::PaddedElements(int world_size) const {
  size_t grain = kShardAlignElements * static_cast<size_t>(world_size);
  size_t used = used_elements_ == 0 ? 1 : used_elements_;
  return (used + grain - 1) / grain * grain;
}

}  // namespace strata
