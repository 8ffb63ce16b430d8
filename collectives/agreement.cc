// See agreement.h.
#include "collectives/agreement.h"

#include "collectives/inline_stream.h"

namespace strata {

Status GatherWords(Communicator& communicator, const std::vector<uint32_t>& mine,
                   std::vector<uint32_t>* all) {
  InlineStream stream("rank agreement");
  all->assign(mine.size() * communicator.world_size(), 0);
  RETURN_IF_ERROR(
      communicator.AllGather(mine.data(), all->data(), mine.size(), DType::kF32, stream));
  return stream.Synchronize();
}

StatusOr<std::vector<uint32_t>> AgreeOnOutcomes(Communicator& communicator, uint32_t outcome) {
  if (communicator.world_size() == 1) return std::vector<uint32_t>{outcome};
  std::vector<uint32_t> all;
  RETURN_IF_ERROR(GatherWords(communicator, {outcome}, &all));
  return all;
}

}  // namespace strata
