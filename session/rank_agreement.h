// What every rank of a run must agree on, checked with small fixed-size collectives on the
// host communicator (the one RunRanks gives; an InlineStream, so no device is needed):
// - AgreeOnStart, the first collective of a run: every rank's resolved configuration
//   (FormatResolved: the model shape follows from it) is compared by XXH3 hash; on a
//   mismatch, every rank learns every other's configuration text (lengths first, then the
//   texts padded to the longest, so the sizes never disagree) and all return the same
//   kInvalidArgument naming each differing key with its value per rank. Keys that are a
//   machine's own business may differ (the key table's rank-local keys: RankLocalKeys in
//   config/options_parse.h). On agreement every rank takes
//   rank 0's run id (core/run_identity.h), so its swap and lock files carry one identity.
// - AgreeOnStop, at each step boundary: the first stop signal of any rank (by rank
//   order), so every rank stops after the same step.
// Every rank must call them together, in the same order.
// Thread-safety: as the communicator (one thread per rank).
#pragma once

#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "core/options.h"
#include "core/status.h"

namespace strata {


// `resolved` is FormatResolved(options) of this rank ("section.key=value" lines).
Status AgreeOnStart(Communicator& communicator, const std::string& resolved);

// Returns the first non-zero `signal_number` in rank order, or 0.
StatusOr<int> AgreeOnStop(Communicator& communicator, int signal_number);


}  // namespace strata
