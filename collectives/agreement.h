// Small agreements among the ranks on the host communicator (the one RunRanks gives: an
// InlineStream, so no device is needed): fixed-size words gathered from every rank, and
// every rank's outcome of a check it made alone (e.g. its share of a checkpoint's files).
// Values travel as fp32 words through AllGather, which copies bytes and never computes, so
// any bit pattern (a hash half, packed text) arrives intact. Every rank must call them
// together, in the same order, with the same number of words.
// Thread-safety: as the communicator (one thread per rank).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "core/status.h"

namespace strata {

// Every rank's `mine` (the same size on every rank), rank after rank, into `all`.
Status GatherWords(Communicator& communicator, const std::vector<uint32_t>& mine,
                   std::vector<uint32_t>* all);

// Every rank's `mine` (texts of any length: lengths first, then the texts padded to the
// longest, so the sizes never disagree), in rank order.
StatusOr<std::vector<std::string>> GatherTexts(Communicator& communicator,
                                               const std::string& mine);

// Every rank's `outcome`, in rank order (no collective at world 1).
StatusOr<std::vector<uint32_t>> AgreeOnOutcomes(Communicator& communicator, uint32_t outcome);

}  // namespace strata
