// A fill kernel: the smallest real .cu in strata. It proves the cuda_library rule (nvcc
// objects linked into C++ targets) and gives GPU tests device work to order with events.
// Only built where CUDA is. Thread-safety: launches are asynchronous on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/status.h"

namespace strata {

// Enqueues dst[i] = value for i in [0, count) on `stream`. Fails on a launch error (e.g. no
// kernel image for this GPU); faults inside the kernel surface at the stream's next sync.
Status FillAsync(float* dst, float value, size_t count, cudaStream_t stream);

}  // namespace strata
