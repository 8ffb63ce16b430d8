// The NCCL Communicator: one rank per GPU, device buffers, collectives enqueued on the CUDA
// stream behind a strata Stream of the CUDA Device (device/cuda/cuda_native.h).
//
// Set-up: the rank and world come from a host `bootstrap` Communicator (MPI across
// processes under mpirun; a local group across threads), through which rank 0's
// ncclUniqueId is broadcast. The GPU is the CUDA Device's, which CudaDeviceOptions picks
// from the local rank. The NCCL communicator is created non-blocking
// (ncclConfig_t.blocking = 0) and awaited against the timeout.
//
// Reductions: with fixed_order (the default) all-reduce and reduce-scatter use the same
// algorithm as the MPI communicator, so results are bit-identical to local and MPI: chunks
// go to their owner by grouped ncclSend/ncclRecv, and a kernel sums the N chunks in rank
// order 0..N-1 in fp32, rounding once for bf16. NCCL's own ncclAllReduce/ncclReduceScatter
// order depends on topology and rounds bf16 partial sums at each hop; fixed_order = false
// uses them (faster on large worlds, not bit-reproducible across worlds or implementations).
// All-gather and broadcast are NCCL's (byte copies, exact). Barrier is a one-element
// all-reduce. Scratch for fixed-order reductions comes from the Device's device tier
// (accounted as workspace), at most max_scratch_bytes; larger reductions run in segments.
//
// Failure: a watchdog thread follows every collective with two events (start, end). A
// collective still running timeout_s after it STARTED on the GPU, one that has not started
// timeout_s after its issue (queued behind work that never finishes; time behind an earlier
// collective of this communicator does not count), or an asynchronous NCCL error
// (ncclCommGetAsyncError), fails the communicator: the error is recorded and ncclCommAbort ends the
// kernels, so the stream moves on and its next host work returns the error (sticky), naming the
// operation and its sequence number. NCCL cannot tell which peer is missing; the message says so
// and the other ranks' errors name theirs. Abort(reason) aborts this rank's communicator; peers
// then fail by their own timeout (or sooner if NCCL reports the remote error).
// Destruction waits (up to timeout_s) for queued collectives, then finalizes and destroys
// the NCCL communicator, or aborts it after a failure or a timeout.
// The Device must outlive the communicator. Thread-safety: as Communicator.
//
// This header builds everywhere; where strata is built without CUDA, CreateNcclCommunicator
// returns kUnavailable and BuiltWithNccl() is false.
#pragma once

#include <cstddef>
#include <memory>

#include "collectives/communicator.h"
#include "device/device.h"

namespace strata {

struct NcclOptions {
  // zero.comm_timeout_s: how long a collective may run on the GPU (and set-up may take)
  // before the communicator is aborted with kDeadlineExceeded. Must be > 0.
  double timeout_s = 300.0;

  // Rank-order reductions, bit-identical to the local and MPI communicators. false: NCCL's
  // ring/tree reductions (see above).
  bool fixed_order = true;

  // Performance: the most device scratch one fixed-order reduction uses (N chunks of a
  // segment); larger reductions run in segments. At least 4 KiB.
  size_t max_scratch_bytes = 256u << 20;
};

// Creates this rank's NCCL communicator; every rank of `bootstrap` must call it (from its
// own thread, for a local group). `device` is this rank's CUDA Device; `bootstrap` is only
// used during the call. Errors: kInvalidArgument (not a CUDA Device, bad options),
// kUnavailable (built without CUDA, no GPU), kDeadlineExceeded (not every rank joined).
StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(Device& device,
                                                               Communicator& bootstrap,
                                                               const NcclOptions& options);

// True where strata was compiled with CUDA and NCCL.
bool BuiltWithNccl();

}  // namespace strata
