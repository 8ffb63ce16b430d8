// simgpu/nccl_ops.cc: see nccl_ops.h. A StepHeader or a chunk's header is written with plain
// stores before the release store of `posted` or `written` that publishes it, and read
// after the acquire load that saw it, so a reader never sees a half-written one.
#include "simgpu/nccl_ops.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "simgpu/nccl_reduce.h"

namespace simgpu {
namespace nccl {
namespace {

// Where an Advance stopped: moved (some data went), blocked on a rank, or failed.
struct Progress {
  bool moved = false;
  int waiting_for = -1;
  std::string waiting_what;
  ncclResult_t code = ncclSuccess;
  std::string error;
};

std::string DescribeHeader(const StepHeader& header) {
  Op op;
  op.kind = static_cast<OpKind>(header.kind);
  op.sequence = header.sequence;
  op.count = header.count;
  op.type = static_cast<ncclDataType_t>(header.type);
  op.reduction = static_cast<ncclRedOp_t>(header.reduction);
  op.root = header.root;
  return Describe(op);
}

bool SameCollective(const StepHeader& a, const StepHeader& b) {
  return a.sequence == b.sequence && a.step == b.step && a.count == b.count && a.kind == b.kind &&
         a.type == b.type && a.reduction == b.reduction && a.root == b.root;
}

StepHeader HeaderOf(const Op& op, uint64_t step) {
  StepHeader header = {};
  header.sequence = op.sequence;
  header.step = step;
  header.count = op.count;
  header.kind = static_cast<int32_t>(op.kind);
  header.type = static_cast<int32_t>(op.type);
  const bool reduces = op.kind == OpKind::kAllReduce || op.kind == OpKind::kReduceScatter;
  header.reduction = reduces ? static_cast<int32_t>(op.reduction) : -1;
  header.root = op.kind == OpKind::kBroadcast ? op.root : -1;
  return header;
}

// This rank's part of a step, into its slot.
void Fill(const Op& op, char* slot, size_t begin, size_t length, int nranks, int rank) {
  const size_t e = ElementBytes(op.type);
  switch (op.kind) {
    case OpKind::kAllReduce:
    case OpKind::kAllGather:
      std::memcpy(slot, op.send + begin * e, length * e);
      break;
    case OpKind::kReduceScatter:
      for (int j = 0; j < nranks; ++j) {
        std::memcpy(slot + j * op.step_elements * e, op.send + (j * op.count + begin) * e,
                    length * e);
      }
      break;
    case OpKind::kBroadcast:
      if (rank == op.root) std::memcpy(slot, op.send + begin * e, length * e);
      break;
    default:
      break;
  }
}

// This rank's output of a step, from every rank's slot.
void Collect(const Op& op, const Rendezvous& rendezvous, size_t begin, size_t length) {
  const size_t e = ElementBytes(op.type);
  const int nranks = rendezvous.nranks();
  const int rank = op.comm->rank;
  std::vector<const void*> sources(nranks);
  switch (op.kind) {
    case OpKind::kAllReduce:
      for (int r = 0; r < nranks; ++r) sources[r] = rendezvous.slot(r);
      Reduce(sources.data(), nranks, op.recv + begin * e, length, op.type, op.reduction);
      break;
    case OpKind::kReduceScatter:
      for (int r = 0; r < nranks; ++r)
        sources[r] = rendezvous.slot(r) + rank * op.step_elements * e;
      Reduce(sources.data(), nranks, op.recv + begin * e, length, op.type, op.reduction);
      break;
    case OpKind::kAllGather:
      for (int q = 0; q < nranks; ++q) {
        std::memcpy(op.recv + (q * op.count + begin) * e, rendezvous.slot(q), length * e);
      }
      break;
    case OpKind::kBroadcast:
      std::memcpy(op.recv + begin * e, rendezvous.slot(op.root), length * e);
      break;
    default:
      break;
  }
}

Progress AdvanceCollective(Op& op) {
  Progress progress;
  const CommState& comm = *op.comm;
  const Rendezvous& rendezvous = *comm.rendezvous;
  RankControl* mine = rendezvous.control(comm.rank);
  while (op.step < op.num_steps) {
    const uint64_t k = op.first_step + op.step;
    const size_t begin = op.step * op.step_elements;
    const size_t length = std::min(op.step_elements, op.count - begin);
    auto of_step = [&] {  // only when blocked: the polls build no strings
      return " of step " + std::to_string(op.step + 1) + "/" + std::to_string(op.num_steps) +
             " (communicator step " + std::to_string(k) + ")";
    };
    if (!op.posted) {
      for (int r = 0; r < comm.nranks; ++r) {
        const uint64_t consumed = AtomicLoad(&rendezvous.control(r)->consumed);
        if (consumed + 1 < k) {
          progress.waiting_for = r;
          progress.waiting_what = "to read communicator step " + std::to_string(k - 1) +
                                  " (it has read up to step " + std::to_string(consumed) +
                                  "), before this rank's slot is reused for its part" + of_step();
          return progress;
        }
      }
      Fill(op, rendezvous.slot(comm.rank), begin, length, comm.nranks, comm.rank);
      mine->header = HeaderOf(op, k);
      AtomicStore(&mine->posted, k);
      op.posted = true;
      progress.moved = true;
    }
    for (int r = 0; r < comm.nranks; ++r) {
      const uint64_t posted = AtomicLoad(&rendezvous.control(r)->posted);
      if (posted < k) {
        progress.waiting_for = r;
        progress.waiting_what = "to post its part" + of_step() + " (it has posted up to step " +
                                std::to_string(posted) + ")";
        return progress;
      }
    }
    const StepHeader expected = HeaderOf(op, k);
    for (int r = 0; r < comm.nranks; ++r) {
      const StepHeader theirs = rendezvous.control(r)->header;
      if (!SameCollective(theirs, expected)) {
        progress.code = ncclInvalidUsage;
        progress.error = "collective mismatch at communicator step " + std::to_string(k) +
                         ": rank " + std::to_string(r) + " is in " + DescribeHeader(theirs) +
                         " (its step " + std::to_string(theirs.step) +
                         "); every rank must call the same collectives with the same "
                         "counts, types, operators and roots in the same order";
        return progress;
      }
    }
    Collect(op, rendezvous, begin, length);
    AtomicStore(&mine->consumed, k);
    op.posted = false;
    ++op.step;
    progress.moved = true;
  }
  op.done = true;
  return progress;
}

Progress AdvanceSend(Op& op) {
  Progress progress;
  const CommState& comm = *op.comm;
  ChannelControl* channel = comm.rendezvous->channel(comm.rank, op.root);
  char* data = comm.rendezvous->channel_data(comm.rank, op.root);
  const size_t bytes = op.count * ElementBytes(op.type);
  if (op.offset == 0) {
    const uint64_t sent = AtomicLoad(&channel->sent_messages);
    if (sent != op.sequence) {  // an earlier send to this peer, on another stream, is not done
      progress.waiting_for = op.root;
      progress.waiting_what = "to receive ncclSend #" + std::to_string(sent) +
                              " of this rank (issued before this one, on another stream)";
      return progress;
    }
  }
  while (op.offset < bytes) {
    const uint64_t written = AtomicLoad(&channel->written);
    if (AtomicLoad(&channel->read) != written) {
      progress.waiting_for = op.root;
      progress.waiting_what = "to receive the previous chunk (this message has " +
                              std::to_string(op.offset) + " of " + std::to_string(bytes) +
                              " bytes sent)";
      return progress;
    }
    const size_t chunk = std::min(kChannelBytes, bytes - op.offset);
    std::memcpy(data, op.send + op.offset, chunk);
    channel->message = op.sequence;
    channel->message_bytes = bytes;
    channel->offset = op.offset;
    channel->bytes = chunk;
    AtomicStore(&channel->written, written + 1);
    op.offset += chunk;
    progress.moved = true;
  }
  AtomicStore(&channel->sent_messages, op.sequence + 1);
  op.done = true;
  return progress;
}

Progress AdvanceRecv(Op& op) {
  Progress progress;
  const CommState& comm = *op.comm;
  ChannelControl* channel = comm.rendezvous->channel(op.root, comm.rank);
  const char* data = comm.rendezvous->channel_data(op.root, comm.rank);
  const size_t bytes = op.count * ElementBytes(op.type);
  if (op.offset == 0) {
    const uint64_t received = AtomicLoad(&channel->received_messages);
    if (received != op.sequence) {
      progress.waiting_for = comm.rank;
      progress.waiting_what = "to finish ncclRecv #" + std::to_string(received) + " from rank " +
                              std::to_string(op.root) +
                              " (issued before this one, on another stream)";
      return progress;
    }
  }
  while (op.offset < bytes) {
    const uint64_t read = AtomicLoad(&channel->read);
    if (AtomicLoad(&channel->written) == read) {
      progress.waiting_for = op.root;
      progress.waiting_what = "to send (ncclSend #" + std::to_string(op.sequence) +
                              " to this rank; " + std::to_string(op.offset) + " of " +
                              std::to_string(bytes) + " bytes received)";
      return progress;
    }
    if (channel->message != op.sequence || channel->message_bytes != bytes ||
        channel->offset != op.offset) {
      progress.code = ncclInvalidUsage;
      progress.error = "send/receive mismatch: rank " + std::to_string(op.root) + "'s ncclSend #" +
                       std::to_string(channel->message) + " has " +
                       std::to_string(channel->message_bytes) + " bytes, this rank's ncclRecv #" +
                       std::to_string(op.sequence) + " expects " + std::to_string(bytes) +
                       " (at offset " + std::to_string(op.offset) + ")";
      return progress;
    }
    std::memcpy(op.recv + op.offset, data, channel->bytes);
    op.offset += channel->bytes;
    AtomicStore(&channel->read, read + 1);
    progress.moved = true;
  }
  AtomicStore(&channel->received_messages, op.sequence + 1);
  op.done = true;
  return progress;
}

Progress Advance(Op& op) {
  switch (op.kind) {
    case OpKind::kSend:
      return AdvanceSend(op);
    case OpKind::kRecv:
      return AdvanceRecv(op);
    default:
      return AdvanceCollective(op);
  }
}

// Why a blocked `op` must stop now, or ncclSuccess to keep waiting. `publish`: whether the
// error is news to the other ranks.
ncclResult_t Blocked(const Op& op, bool check_peers, const Waiter& waiter, std::string* why,
                     bool* publish) {
  const CommState& comm = *op.comm;
  const Rendezvous& rendezvous = *comm.rendezvous;
  const std::string waiting =
      op.waiting_for == comm.rank
          ? "this rank " + op.waiting_what
          : "rank " + std::to_string(op.waiting_for) + " " + op.waiting_what;
  int failed_rank = -1;
  std::string failure;
  if (rendezvous.Failure(&failed_rank, &failure) && failed_rank != comm.rank) {
    *why = Describe(op) + " ended while waiting for " + waiting + ": " + failure;
    *publish = false;
    return ncclRemoteError;
  }
  *publish = true;
  if (op.waiting_for >= 0 && op.waiting_for != comm.rank &&
      AtomicLoad(&rendezvous.control(op.waiting_for)->left) != 0) {
    *why = Describe(op) + ": rank " + std::to_string(op.waiting_for) +
           " destroyed or aborted its communicator while this rank waits for " + waiting;
    return ncclRemoteError;
  }
  if (check_peers && op.waiting_for >= 0) {
    const std::string dead = rendezvous.DeadPeer(op.waiting_for);
    if (!dead.empty()) {
      *why = Describe(op) + ": " + dead + " while this rank waits for " + waiting;
      return ncclRemoteError;
    }
  }
  if (waiter.Expired()) {
    char waited[32];
    std::snprintf(waited, sizeof(waited), "%.3g", waiter.waited_s());
    *why = Describe(op) + ": waited " + waited +
           " s (STRATA_SIMGPU_NCCL_TIMEOUT_S) without progress for " + waiting;
    return ncclSystemError;
  }
  return ncclSuccess;
}

}  // namespace

const char* OpName(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce:
      return "ncclAllReduce";
    case OpKind::kReduceScatter:
      return "ncclReduceScatter";
    case OpKind::kAllGather:
      return "ncclAllGather";
    case OpKind::kBroadcast:
      return "ncclBroadcast";
    case OpKind::kSend:
      return "ncclSend";
    case OpKind::kRecv:
      return "ncclRecv";
  }
  return "an unknown NCCL operation";
}

void Sequence(Op& op) {
  CommState& comm = *op.comm;
  if (op.kind == OpKind::kSend) {
    op.sequence = comm.next_send[op.root]++;
    return;
  }
  if (op.kind == OpKind::kRecv) {
    op.sequence = comm.next_recv[op.root]++;
    return;
  }
  const size_t e = ElementBytes(op.type);
  op.step_elements =
      op.kind == OpKind::kReduceScatter ? kSlotBytes / (e * comm.nranks) : kSlotBytes / e;
  op.num_steps = (op.count + op.step_elements - 1) / op.step_elements;
  op.sequence = comm.next_collective++;
  op.first_step = comm.next_step;
  comm.next_step += op.num_steps;
}

std::string Describe(const Op& op) {
  const std::string name = std::string(OpName(op.kind)) + " #" + std::to_string(op.sequence);
  const std::string elements = std::to_string(op.count) + " x " + TypeName(op.type);
  switch (op.kind) {
    case OpKind::kAllReduce:
    case OpKind::kReduceScatter:
      return name + " (" + elements + ", " + ReductionName(op.reduction) + ")";
    case OpKind::kAllGather:
      return name + " (" + elements + ")";
    case OpKind::kBroadcast:
      return name + " (" + elements + " from rank " + std::to_string(op.root) + ")";
    case OpKind::kSend:
      return name + " to rank " + std::to_string(op.root) + " (" + elements + ")";
    case OpKind::kRecv:
      return name + " from rank " + std::to_string(op.root) + " (" + elements + ")";
  }
  return name;
}

std::vector<Access> Accesses(const Op& op) {
  const size_t bytes = op.count * ElementBytes(op.type);
  const size_t nranks = static_cast<size_t>(op.comm->nranks);
  Access read{op.send, bytes, false};
  Access write{op.recv, bytes, true};
  switch (op.kind) {
    case OpKind::kReduceScatter:
      read.bytes = nranks * bytes;
      break;
    case OpKind::kAllGather:
      write.bytes = nranks * bytes;
      break;
    case OpKind::kBroadcast:
      if (op.comm->rank != op.root) return {write};
      break;
    case OpKind::kSend:
      return {read};
    case OpKind::kRecv:
      return {write};
    default:
      break;
  }
  // In place over the same bytes: the write covers the read.
  if (read.ptr == write.ptr && read.bytes == write.bytes) return {write};
  return {read, write};
}

void RunOps(std::vector<Op>& ops) {
  if (ops.empty()) return;
  Waiter waiter(ops.front().comm->timeout_s);
  while (true) {
    bool moved = false;
    bool all_done = true;
    for (Op& op : ops) {
      if (op.done) continue;
      if (op.comm->Stopped()) {  // aborted, or failed: nothing more moves
        op.done = true;
        continue;
      }
      if (!op.started) {  // a communicator another rank gave up on runs nothing more
        op.started = true;
        int failed_rank = -1;
        std::string failure;
        if (op.comm->rendezvous->Failure(&failed_rank, &failure) && failed_rank != op.comm->rank) {
          op.comm->Fail(ncclRemoteError, Describe(op) + " not run: " + failure, false);
          op.done = true;
          continue;
        }
      }
      Progress progress = Advance(op);
      if (!progress.error.empty()) {
        op.comm->Fail(progress.code, Describe(op) + ": " + progress.error, true);
        op.done = true;
        continue;
      }
      moved = moved || progress.moved;
      if (!op.done) {
        all_done = false;
        op.waiting_for = progress.waiting_for;
        op.waiting_what = progress.waiting_what;
      }
    }
    if (all_done) return;
    if (moved) {
      waiter.Progressed();
      continue;
    }
    const bool check_peers = waiter.TimeToCheckPeers();
    for (Op& op : ops) {
      if (op.done || op.comm->Stopped()) continue;
      std::string why;
      bool publish = false;
      const ncclResult_t code = Blocked(op, check_peers, waiter, &why, &publish);
      if (code != ncclSuccess) {
        op.comm->Fail(code, why, publish);
        op.done = true;
      }
    }
    waiter.Pause();
  }
}

}  // namespace nccl
}  // namespace simgpu
