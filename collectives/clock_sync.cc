// See clock_sync.h.
#include "collectives/clock_sync.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "collectives/agreement.h"
#include "collectives/inline_stream.h"

namespace strata {

StatusOr<std::vector<int64_t>> MeasureClockOffsets(Communicator& control,
                                                   const std::function<int64_t()>& now_ns,
                                                   int rounds) {
  if (rounds < 1) {
    return absl::InvalidArgumentError(absl::StrCat("clock sync: ", rounds, " rounds"));
  }
  const int world = control.world_size();
  if (world == 1) return std::vector<int64_t>{0};
  std::vector<std::vector<int64_t>> differences(world);
  for (int round = 0; round < rounds; ++round) {
    InlineStream stream("clock sync");
    RETURN_IF_ERROR(control.Barrier(stream));
    RETURN_IF_ERROR(stream.Synchronize());
    const uint64_t now = static_cast<uint64_t>(now_ns());
    std::vector<uint32_t> all;
    RETURN_IF_ERROR(GatherWords(control, {static_cast<uint32_t>(now), static_cast<uint32_t>(now >> 32)},
                                &all));
    const auto reading = [&](int r) {
      return static_cast<int64_t>(static_cast<uint64_t>(all[2 * r]) |
                                  (static_cast<uint64_t>(all[2 * r + 1]) << 32));
    };
    for (int r = 0; r < world; ++r) differences[r].push_back(reading(r) - reading(0));
  }
  std::vector<int64_t> offsets(world);
  for (int r = 0; r < world; ++r) {
    std::vector<int64_t>& d = differences[r];
    std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
    offsets[r] = d[d.size() / 2];
  }
  return offsets;
}

}  // namespace strata
