// The local Communicator: N ranks as threads of one process (fast tests, and
// `--set zero.world=N` on one machine). The N communicators of a group share a rendezvous
// hub. A collective waits on the hub until every rank has issued it, then each rank's
// stream thread computes its own share of the result straight from the other ranks'
// buffers (rank r reduces chunk r of an all-reduce and writes it to every rank), and waits
// until every rank has finished before it completes, so no rank's buffers are touched after
// its collective is done. Sums follow communicator.h's fixed rank order, so results are
// bit-identical to the MPI and NCCL (fixed-order) communicators.
//
// Failure: a rank that waits longer than `timeout_s` for the others fails the group with
// kDeadlineExceeded naming the operation, its sequence number and the ranks that did not
// arrive; a collective that has not started timeout_s after its issue (queued on its stream
// behind work that never finishes) fails it naming the call and the stream
// (start_watch.h); Abort(reason) fails it with kAborted naming the aborting rank and the reason;
// ranks that issue different collectives fail it with kInvalidArgument naming both calls.
// Every waiting rank wakes at once with that error, and every later collective fails at
// once with it. A collective whose ranks all arrived always completes (its copies are
// bounded local work), so buffers are never used after a collective returned.
// Thread-safety: as Communicator; the hub is internally synchronized (one mutex).
#pragma once

#include <memory>
#include <vector>

#include "collectives/communicator.h"

namespace strata {

struct LocalGroupOptions {
  // zero.comm_timeout_s: how long a rank waits for the others to arrive at a collective
  // before the group fails with kDeadlineExceeded. Must be > 0.
  double timeout_s = 300.0;
};

// The `world_size` communicators of one group; element r is rank r. Each is handed to the
// thread that plays that rank. kInvalidArgument for world_size < 1 or a bad timeout.
StatusOr<std::vector<std::unique_ptr<Communicator>>> CreateLocalGroup(
    int world_size, const LocalGroupOptions& options);

}  // namespace strata
