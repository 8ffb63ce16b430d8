// How far each rank's clock is from rank 0's, measured over the host communicator, so that
// the ranks' traces share one timeline (core/trace.h): `rounds` times, the ranks meet at a
// barrier, each reads its clock as it leaves, and the readings are gathered; a rank's
// offset is the median over the rounds of its reading minus rank 0's. Its error is how far
// apart the ranks leave a barrier: tens of microseconds on one host, about a network
// latency across nodes (each rank's own clock drift over a run is not corrected).
// Thread-safety: as the communicator (one thread per rank); collective: every rank calls it
// together.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "collectives/communicator.h"
#include "core/status.h"

namespace strata {

// Every rank's clock minus rank 0's, in nanoseconds, in rank order (the same on every
// rank); `now_ns` reads this rank's clock. World 1: {0}. kInvalidArgument for rounds < 1.
StatusOr<std::vector<int64_t>> MeasureClockOffsets(Communicator& control,
                                                   const std::function<int64_t()>& now_ns,
                                                   int rounds = 7);

}  // namespace strata
