// Making an IoEngine (nvme/io_engine.h): the one nvme.engine names, io_uring where it
// works, else (nvme.engine=auto) the pread/pwrite thread pool.
// Thread-safety: plain functions.
#pragma once

#include <memory>

#include "core/status.h"
#include "nvme/io_engine.h"

namespace strata::nvme {

// Creates the engine options.engine names (see IoEngineOptions). Bad options are
// kInvalidArgument listing every problem; "io_uring" where it is unavailable is
// kUnavailable naming nvme.engine and the reason.
StatusOr<std::unique_ptr<IoEngine>> CreateIoEngine(const IoEngineOptions& options);

// Probes io_uring by setting up (and tearing down) a small ring: OK where usable, else the
// reason (-EPERM in strict containers, -ENOSYS on old kernels, ...).
Status ProbeIoUring();

}  // namespace strata::nvme
