// See agreement.h.
#include "collectives/agreement.h"

#include <algorithm>
#include <cstring>

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

StatusOr<std::vector<std::string>> GatherTexts(Communicator& communicator,
                                               const std::string& mine) {
  std::vector<uint32_t> lengths;
  RETURN_IF_ERROR(GatherWords(communicator, {static_cast<uint32_t>(mine.size())}, &lengths));
  const uint32_t longest = *std::max_element(lengths.begin(), lengths.end());
  std::vector<uint32_t> packed((longest + 3) / 4, 0);
  std::memcpy(packed.data(), mine.data(), mine.size());
  std::vector<uint32_t> all;
  if (!packed.empty()) RETURN_IF_ERROR(GatherWords(communicator, packed, &all));
  std::vector<std::string> texts;
  for (int r = 0; r < communicator.world_size(); ++r) {
    texts.emplace_back(reinterpret_cast<const char*>(all.data() + r * packed.size()),
                       lengths[r]);
  }
  return texts;
}

StatusOr<std::vector<uint32_t>> AgreeOnOutcomes(Communicator& communicator, uint32_t outcome) {
  if (communicator.world_size() == 1) return std::vector<uint32_t>{outcome};
  std::vector<uint32_t> all;
  RETURN_IF_ERROR(GatherWords(communicator, {outcome}, &all));
  return all;
}

}  // namespace strata
