// simgpu/nccl_ops.h: the NCCL double's operations and the protocol that moves their data
// through the rendezvous (nccl_shared.h).
//
// Collectives go in steps of at most kSlotBytes per rank, numbered communicator-wide. In
// step k every rank waits until every rank has consumed step k-1 (its slot is free), writes
// its part and a StepHeader into its own slot, publishes posted = k, waits until every rank
// posted k, checks that all headers name the same collective, computes its output from the
// slots (reductions in rank order 0..n-1), and publishes consumed = k. Send/Recv go in
// chunks of at most kChannelBytes through the channel (from, to), one chunk in flight.
// Every wait is a poll that stops at the communicator's timeout, a failure any rank
// published, a peer that left or whose process exited, or a local abort.
// Thread-safety: an Op is used by one thread at a time (its launcher, then the stream's).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "simgpu/nccl_state.h"
#include "simgpu/work.h"

namespace simgpu {
namespace nccl {

enum class OpKind : int32_t {
  kAllReduce = 1,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kSend,
  kRecv,
};

// "ncclAllReduce", ...
const char* OpName(OpKind kind);

struct Op {
  OpKind kind = OpKind::kAllReduce;
  std::shared_ptr<CommState> comm;
  const char* send = nullptr;  // null for Recv
  char* recv = nullptr;        // null for Send
  size_t count = 0;            // as the call names it: per rank for AllGather, ReduceScatter
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t reduction = ncclSum;  // AllReduce, ReduceScatter
  int root = -1;                    // Broadcast's root; Send's and Recv's peer
  cudaStream_t stream = nullptr;

  // Set by Sequence when the operation is launched.
  uint64_t sequence = 0;  // the collective's number, or the message's number with the peer
  uint64_t first_step = 0;
  uint64_t num_steps = 0;
  size_t step_elements = 0;

  // Progress, on the thread that runs it.
  bool started = false;
  uint64_t step = 0;
  bool posted = false;
  size_t offset = 0;  // bytes sent or received
  bool done = false;
  int waiting_for = -1;  // the rank it last waited for
  std::string waiting_what;
};

// Numbers `op` among its communicator's operations; the caller holds op.comm->mutex and
// launches operations in call order, as every rank does.
void Sequence(Op& op);

// "ncclAllReduce #3 (1000 x float, sum)", "ncclSend #0 to rank 1 (4000 bytes)".
std::string Describe(const Op& op);

// The exact byte ranges `op` reads and writes on this rank.
std::vector<Access> Accesses(const Op& op);

// Runs `ops` (one stream's share of a launch) to the end together: each advances as far as
// it can, in turn, so the sends and receives of one group never wait on each other. An
// operation that fails records the error on its communicator (publishing it to the other
// ranks); an operation of a communicator that was aborted or has an error ends at once.
void RunOps(std::vector<Op>& ops);

}  // namespace nccl
}  // namespace simgpu
