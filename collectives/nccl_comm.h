// The raw NCCL communicator under the NCCL Communicator, private to collectives/ and built
// only with CUDA: NCCL results as Status, the wait for a non-blocking ncclComm_t against a
// deadline, and its creation through a host bootstrap Communicator. See
// nccl_communicator.h.
//
// Invariants: every ncclComm_t here is non-blocking (ncclConfig_t.blocking = 0), so every
// NCCL call returns at once and AwaitComm bounds the wait (the unique id's broadcast is
// bounded by the bootstrap Communicator's own timeout).
// Thread-safety: an ncclComm_t is not thread-safe: callers serialize every use of one comm
// (AwaitComm included). CreateNcclComm uses the calling thread's current CUDA device.
#pragma once

#include <nccl.h>

#include <chrono>
#include <string>

#include "collectives/communicator.h"
#include "collectives/nccl_library.h"
#include "core/dtype.h"
#include "core/status.h"

namespace strata {
namespace nccl_internal {

using Clock = std::chrono::steady_clock;

// NCCL results as Status, at the call site: "<context>: <call> failed: <description>
// (<last error>) at <file>:<line>". ncclInProgress (a non-blocking call accepted) is OK;
// the caller awaits the communicator.
Status NcclStatus(ncclResult_t result, const char* call, const char* file, int line,
                  const std::string& context);

#define NCCL_STATUS(call, context) \
  ::strata::nccl_internal::NcclStatus((call), #call, __FILE__, __LINE__, (context))
#define NCCL_RETURN_IF_ERROR(call, context) RETURN_IF_ERROR(NCCL_STATUS(call, context))

inline ncclDataType_t NcclType(DType dtype) {
  return dtype == DType::kF32 ? ncclFloat32 : ncclBfloat16;
}

// Logs a failure that has nowhere else to go (cleanup, the watchdog).
void LogIfError(const Status& status);

// Waits until a non-blocking NCCL communicator has finished its last call (init, group,
// collective enqueue, finalize), or the deadline passes.
Status AwaitComm(ncclComm_t comm, Clock::time_point deadline, const std::string& context,
                 double timeout_s);

// Creates this rank's non-blocking NCCL communicator over the ranks of `bootstrap`, through
// which rank 0's ncclUniqueId (or why it has none) is broadcast; awaits its initialization
// for up to timeout_s and aborts it on failure. Collective: every rank of `bootstrap` calls
// it. `who` names this rank in errors ("NCCL rank R of N (GPU G)").
StatusOr<ncclComm_t> CreateNcclComm(Communicator& bootstrap, const std::string& who,
                                    double timeout_s);

}  // namespace nccl_internal
}  // namespace strata
