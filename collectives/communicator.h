// The Communicator interface: the five collectives ZeRO needs (all-reduce, reduce-scatter,
// all-gather, broadcast, barrier) among the `world_size()` ranks of one group, each
// ENQUEUED on a strata::Stream (the caller's comm stream), with three implementations:
// local (threads of one process, local_communicator.h), MPI (processes, host buffers,
// mpi_communicator.h) and NCCL (GPUs, device buffers, nccl_communicator.h).
//
// Contract, the same for every implementation:
// - Every rank issues the same collectives, with the same dtype, count (and root), in the
//   same order. Each collective gets the next sequence number (#0, #1, ...) of its
//   communicator when it is issued; errors name the operation and its number.
// - A call checks its arguments and returns an error at once (nothing is enqueued then);
//   otherwise it enqueues the collective and returns OK. Failures while the collective runs
//   (a rank that does not arrive within the timeout, an aborted group, ranks that disagree)
//   become the stream's sticky error, seen at Synchronize. A communicator that failed stays
//   failed: every later collective fails at once with the first error.
// - Sums are FIXED-ORDER: element i of a result is ((x_0[i] + x_1[i]) + x_2[i]) + ... in
//   rank order 0..N-1, accumulated in fp32 and, for bf16, rounded to bf16 once at the end
//   (round to nearest even). Results are deterministic and bit-identical on every rank and
//   across implementations (local, MPI, NCCL with fixed_order) for the same inputs.
// - Counts are per rank and need not divide anything (callers pad their flat buffers).
//   count = 0 is valid: it moves nothing but still takes a sequence number on every rank
//   (whether it waits for the other ranks depends on the implementation).
// - Buffers must stay valid and untouched until the collective completes on its stream.
//   All collectives of one communicator go to one stream (NCCL refuses a second one; local
//   and MPI fail the communicator when its collectives run out of order).
// Thread-safety: a Communicator may be called from any host thread, but the order of its
// collectives is the order of the calls, so one thread (or the caller's ordering) issues
// them. Abort() may be called from any thread at any time. Destroying a Communicator while
// its collectives are still queued is safe: enqueued work keeps the state it needs alive.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "device/device.h"
#include "core/dtype.h"
#include "core/status.h"

namespace strata {

enum class CollectiveOp { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kBarrier };

// "all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier".
const char* CollectiveName(CollectiveOp op);

// One collective as issued by one rank: what errors and mismatch checks describe.
struct CollectiveCall {
  CollectiveOp op = CollectiveOp::kBarrier;
  uint64_t sequence = 0;  // this communicator's count of collectives issued before it
  DType dtype = DType::kF32;
  size_t count = 0;  // elements per rank, as passed
  int root = -1;     // broadcast only
};

// "all_reduce #7 (1000003 x bf16)", "broadcast #2 (5 x fp32, root 1)", "barrier #9".
std::string DescribeCall(const CollectiveCall& call);

// True when two ranks' calls describe the same collective (op, dtype, count, root).
bool SameCollective(const CollectiveCall& a, const CollectiveCall& b);

// Payload bytes one rank has sent to peers on its own node and on other nodes.
struct TrafficBytes {
  uint64_t within_node = 0;
  uint64_t across_nodes = 0;
};

class Communicator;

// The two communicators of hybrid sharding (NodeTraffic::SplitByNode).
struct NodeGroups {
  std::unique_ptr<Communicator> node;  // the ranks of this rank's node, in rank order
  std::unique_ptr<Communicator> rail;  // the rank at this rank's place on every node, in node order
};

// Capability of a communicator that knows which node each rank is on (the MPI one): the
// node layout its collectives assume and what this rank sent. Counters are cumulative from
// the communicator's creation, over the payloads of collectives (not the abort channel);
// take differences for a step. Thread-safety: every method from any thread.
class NodeTraffic {
 public:
  virtual ~NodeTraffic() = default;
  virtual int node() const = 0;            // this rank's node, 0 .. nodes()-1
  virtual int nodes() const = 0;
  virtual int ranks_per_node() const = 0;  // 0 when the nodes differ in size
  virtual TrafficBytes sent() const = 0;
  // Collectives that took the hierarchical path so far (the rest took the flat one).
  virtual uint64_t hierarchical_collectives() const = 0;
  // New communicators over this rank's node and its rail, with this one's options. Every
  // rank must call it, at set-up (not while collectives of this communicator run); needs
  // nodes in rank blocks (FailedPrecondition naming the layout otherwise).
  virtual StatusOr<NodeGroups> SplitByNode() const = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // This rank among the ranks sharing its node (its machine), and their number: which GPU
  // it uses and how the machine's memory is shared. Ranks as threads of one process share
  // one node (the defaults); MPI asks MPI (MPI_Comm_split_type over shared memory), so any
  // launcher (mpirun, srun --mpi=pmix, ...) gives the right answer.
  virtual int local_rank() const { return rank(); }
  virtual int local_size() const { return world_size(); }

  // data[count] on every rank becomes the rank-order sum of all ranks' data.
  virtual Status AllReduce(void* data, size_t count, DType dtype, Stream& stream) = 0;

  // input[world_size * count] on every rank; output[count] on rank r becomes the
  // rank-order sum of every rank's input[r * count, (r + 1) * count). In place when
  // output == input + rank * count; any other overlap is an error.
  virtual Status ReduceScatter(const void* input, void* output, size_t count, DType dtype,
                               Stream& stream) = 0;

  // input[count] on every rank; output[world_size * count] gets rank j's input at
  // output + j * count. In place when input == output + rank * count; any other overlap
  // is an error.
  virtual Status AllGather(const void* input, void* output, size_t count, DType dtype,
                           Stream& stream) = 0;

  // data[count] of rank `root` is copied into data[count] of every other rank (bytes as
  // they are: no arithmetic, so any bit pattern survives).
  virtual Status Broadcast(void* data, size_t count, DType dtype, int root, Stream& stream) = 0;

  // Completes on the stream once every rank has reached it.
  virtual Status Barrier(Stream& stream) = 0;

  // Fails this communicator and tells the other ranks, whose pending and later collectives
  // fail promptly (kAborted) with a message naming this rank and `reason`, instead of
  // waiting for the timeout. Idempotent; the first reason is kept. For a rank that cannot
  // go on (e.g. its step failed) so that its peers do not hang.
  virtual void Abort(const std::string& reason) = 0;

  // "local rank 1 of 4", "MPI rank 0 of 2 on host vm", "NCCL rank 0 of 2 on GPU 0".
  virtual std::string Describe() const = 0;

  // Capability: the node layout and the bytes sent within and across nodes; null where
  // the implementation does not count them (local, NCCL, dry run).
  virtual const NodeTraffic* node_traffic() const { return nullptr; }
};

// The common front end of host-driven implementations (local, MPI): each call's
// arguments are checked against the contract above (a rejected call fails at once and
// takes no sequence number), then the accepted call is numbered in issue order and handed
// to Issue with its validated input and output. Thread-safety: as Communicator.
class CheckedCommunicator : public Communicator {
 public:
  Status AllReduce(void* data, size_t count, DType dtype, Stream& stream) final;
  Status ReduceScatter(const void* input, void* output, size_t count, DType dtype,
                       Stream& stream) final;
  Status AllGather(const void* input, void* output, size_t count, DType dtype,
                   Stream& stream) final;
  Status Broadcast(void* data, size_t count, DType dtype, int root, Stream& stream) final;
  Status Barrier(Stream& stream) final;

 protected:
  // Enqueues the accepted, numbered `call` on `stream` (in-place calls pass the same
  // buffer as input and output; a barrier passes null for both).
  virtual Status Issue(const CollectiveCall& call, const void* input, void* output,
                       Stream& stream) = 0;

 private:
  // The call's description with the next sequence number (for the checks' messages).
  CollectiveCall Next(CollectiveOp op, DType dtype, size_t count) const;
  Status Accept(CollectiveCall call, const void* input, void* output, Stream& stream);

  std::atomic<uint64_t> issued_{0};
};

// Argument checks shared by the implementations: OK, or kInvalidArgument naming the call
// and the problem (a null buffer with count > 0, a root out of range, partial overlap of
// input and output, a count whose byte size overflows).
Status CheckAllReduce(const void* data, const CollectiveCall& call);
Status CheckReduceScatter(const void* input, const void* output, const CollectiveCall& call,
                          int rank, int world_size);
Status CheckAllGather(const void* input, const void* output, const CollectiveCall& call, int rank,
                      int world_size);
Status CheckBroadcast(const void* data, const CollectiveCall& call, int world_size);

}  // namespace strata
