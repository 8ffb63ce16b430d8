// Backend selection: the Device and the Ops (kernels) for `device.backend`, made together
// so that the kernels match the device's memory. Only "cpu" exists in this build; "cuda"
// comes with the CUDA issue.
// Thread-safety: plain factory.
#pragma once

#include <memory>

#include "kernels/ops.h"
#include "runtime/core/device.h"
#include "runtime/core/options.h"

namespace strata {

struct Backend {
  std::unique_ptr<Device> device;
  std::unique_ptr<Ops> ops;
};

StatusOr<Backend> CreateBackend(const Options& options);

}  // namespace strata
