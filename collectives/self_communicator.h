// The Communicator of a world of one on any Device: every collective is at most one copy on
// the caller's stream (a reduction over one rank is its input; an all-gather or
// reduce-scatter out of place copies the input to the output; in place, a broadcast and a
// barrier do nothing). For a single GPU, so that a one-rank run needs no NCCL at all (a
// machine's NCCL set-up problems must not fail single-GPU runs), and equally on the CPU
// device. Results are bit-identical to every other implementation's at world size 1.
// Thread-safety: as Communicator (arguments checked by CheckedCommunicator).
#pragma once

#include <memory>

#include "collectives/communicator.h"
#include "device/device.h"

namespace strata {

// `device` (which owns the buffers the collectives get) must outlive the communicator.
std::unique_ptr<Communicator> CreateSelfCommunicator(Device& device);

}  // namespace strata
