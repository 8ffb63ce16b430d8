// The device half of the NCCL communicator's fixed-order reductions: a kernel that sums N
// chunks laid out in one scratch buffer, in chunk (= rank) order, exactly as the host
// reduction (reduce.h) does: acc = float(slot 0); acc += float(slot 1); ... in fp32 with
// IEEE round-to-nearest additions (__fadd_rn, never contracted), then one store (bf16:
// round to nearest even, NaN kept quiet, bit for bit as dtype.h's ToBf16). So a GPU result
// equals the local and MPI communicators' results bit for bit.
// Only built where CUDA is. Thread-safety: launches are asynchronous on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/dtype.h"
#include "core/status.h"

namespace strata {

// output[i] = slots[0 * stride + i] + slots[1 * stride + i] + ... (num_slots terms, in that
// order) for i < count; all device arrays of `dtype`. `output` must not overlap the slots.
// Fails on a launch error; faults inside the kernel surface at the stream's next sync.
Status SumSlotsInRankOrderAsync(const void* slots, size_t stride_elements, int num_slots,
                                void* output, size_t count, DType dtype, cudaStream_t stream);

}  // namespace strata
