// One test body for every device and communicator: a collective queued on its stream behind
// work that never finishes fails after the communicator's timeout, naming itself and the
// stream, instead of hanging (local on the CPU device, NCCL on CUDA).
#pragma once

#include "collectives/communicator.h"
#include "device/device.h"

namespace strata {

// `communicator` was made with timeout_s; `stream` is the one its collectives go to and has
// nothing queued. Blocks for about timeout_s + 1 s. Reports through gtest.
void ExpectCollectiveBehindStuckWorkFails(Device& device, Communicator& communicator,
                                          Stream& stream, double timeout_s);

}  // namespace strata
