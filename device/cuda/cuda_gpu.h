// The GPU a CUDA call is for (internal to //device/cuda:cuda_device: in its srcs, so nothing
// outside that library can include it): made current on the calling thread before the call
// (CUDA's current device is per thread, and streams, events and allocations belong to the
// device that was current), and named in the call's error context. Errors of destructors,
// which cannot be returned, are logged.
// Thread-safety: stateless; each call acts on the calling thread only.
#pragma once

#include <string>

#include "core/status.h"

namespace strata {
namespace cuda_internal {

// "GPU <device_id>", as errors name it.
std::string Gpu(int device_id);

// Makes `device_id` current on the calling thread: CUDA's current device is per thread,
// and streams, events and allocations belong to the device that was current.
Status Activate(int device_id);

// Errors in destructors cannot be returned; they are logged once, with their context.
void LogIfError(const Status& status);

}  // namespace cuda_internal
}  // namespace strata
