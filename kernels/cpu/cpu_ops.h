// The CPU backend's Ops (kernels/ops.h): every call checks its sizes, then enqueues the fast
// CPU kernel (kernels/cpu/*.h; matmul through oneDNN) on the stream as host work and
// returns; the kernel runs later on the stream's worker thread, using an OpenMP team of
// `threads` threads (set on that thread before each kernel, since OpenMP's thread count is
// per calling thread).
// Invariants: the Ops object is created for one compute dtype; every `void*` it receives
// points to elements of that dtype. Size errors (negative sizes, C not divisible by NH, a
// required pointer that is null) are returned at once as InvalidArgument and nothing is
// enqueued; the kernels themselves do not fail.
// Thread-safety: as Ops: stateless apart from its configuration, usable from any thread.
#pragma once

#include <memory>

#include "kernels/ops.h"
#include "core/dtype.h"

namespace strata {

// `threads`: OpenMP threads per kernel; 0 (or less) means all cores (omp_get_num_procs()).
// AdamW runs the SIMD CPU Adam (cpu_adam.h); a bad STRATA_CPU_ADAM value is an error here.
StatusOr<std::unique_ptr<Ops>> CreateCpuOps(DType dtype, int threads);

}  // namespace strata
