// An Ops that checks, before it forwards a call, that every buffer the call is handed lives
// in the tier its kernels run on (or in memory the device did not allocate: the caller's
// own), and otherwise fails with kInvalidArgument naming the op, the argument and the tier
// the buffer is in. A GPU kernel handed a host-tier buffer (or a CPU Adam handed a device
// buffer) crashes or reads garbage; the CPU backend runs both tiers in one address space, so
// without this the mix-up would pass every test. runtime/backend.cc wraps the CPU backend's
// kernels in it (device kernels on the device tier, the host kernels on the host tier).
// Thread-safety: as the wrapped Ops; Device::TierOf is thread-safe.
#pragma once

#include <memory>

#include "device/device.h"
#include "kernels/ops.h"

namespace strata {

// `device` must outlive the result.
std::unique_ptr<Ops> WithTierChecks(std::unique_ptr<Ops> ops, const Device& device, Tier tier);

}  // namespace strata
