// simgpu/nccl.cc: the C API of the NCCL double, libnccl_simgpu.so (docs/simgpu.md): the calls
// strata resolves with dlopen (collectives/nccl_library.cc) and a few more, with NCCL's own
// signatures from the toolkit's nccl.h. Each call checks its arguments as NCCL documents
// them (device buffers inside one cudaMalloc allocation, in-place positions, ranks, types)
// and enqueues one operation on the caller's stream of the simulated GPU, which it finds at
// run time through dlsym(RTLD_DEFAULT, "simgpu_api"): the library never links the CUDA
// runtime double, so the process has one simulated GPU whichever loads it. The data moves
// when the stream runs the operation (nccl_ops.h).
//
// Failures inside an operation (a timeout, a peer that aborted or exited, mismatched calls)
// go to the communicator, as a real NCCL's do: ncclCommGetAsyncError reports them and the
// stream itself stays healthy (the operation's work returns success), so a caller can abort
// the communicator and carry on, as strata's watchdog does.
// ncclGroupStart/End nest per host thread; a group's operations are launched at the
// outermost ncclGroupEnd, in call order, one enqueue per stream.
// Thread-safety: as NCCL's: calls on one communicator are serialized by the caller; calls on
// different communicators may come from any threads.
#include <dlfcn.h>
#include <nccl.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "simgpu/nccl_ops.h"
#include "simgpu/nccl_reduce.h"
#include "simgpu/nccl_shared.h"
#include "simgpu/nccl_state.h"
#include "simgpu/work.h"

#define SIMGPU_NCCL_EXPORT __attribute__((visibility("default")))

using simgpu::nccl::CommState;
using simgpu::nccl::Op;
using simgpu::nccl::OpKind;

// The handle: a live ncclComm_t is in g_live; its state may outlive it (queued work).
struct ncclComm {
  std::shared_ptr<CommState> state;
};

namespace simgpu {
namespace nccl {
namespace {

std::mutex g_live_mutex;
std::unordered_set<ncclComm*>* g_live = new std::unordered_set<ncclComm*>();

// This host thread's group (ncclGroupStart/End).
struct Group {
  int depth = 0;
  std::vector<Op> ops;
  ncclResult_t error = ncclSuccess;  // the first failed call in the group
  std::string error_text;
};
thread_local Group t_group;

ncclResult_t Refuse(ncclResult_t code, const std::string& text) {
  SetLastError("simgpu NCCL: " + text);
  if (t_group.depth > 0 && t_group.error == ncclSuccess) {
    t_group.error = code;
    t_group.error_text = "simgpu NCCL: " + text;
  }
  return code;
}

// The simulated GPU of this process, or null.
const Api* SimulatedGpu() {
  using Getter = const Api* (*)();
  auto getter = reinterpret_cast<Getter>(dlsym(RTLD_DEFAULT, "simgpu_api"));
  return getter != nullptr ? getter() : nullptr;
}

std::shared_ptr<CommState> Find(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(g_live_mutex);
  if (comm == nullptr || g_live->count(comm) == 0) return nullptr;
  return comm->state;
}

// Removes `comm` from the live handles; false if it was not one.
bool Forget(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(g_live_mutex);
  return g_live->erase(comm) == 1;
}

std::string Pointer(const void* p) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", p);
  return text;
}

// "" when [ptr, ptr + bytes) lies inside one device allocation, else why not.
std::string CheckDeviceRange(const Api& api, const char* name, const void* ptr, size_t bytes) {
  if (ptr == nullptr) return std::string(name) + " is null";
  const Range range = api.find_device_allocation(ptr);
  if (range.base == nullptr) {
    return std::string(name) + " " + Pointer(ptr) +
           " is not device memory of the simulated GPU (cudaMalloc, cudaMallocAsync)";
  }
  const size_t offset = static_cast<const char*>(ptr) - static_cast<const char*>(range.base);
  if (offset + bytes > range.bytes) {
    return std::string(name) + " " + Pointer(ptr) + " + " + std::to_string(bytes) +
           " bytes runs past the end of its allocation (" + std::to_string(range.bytes) +
           " bytes at " + Pointer(range.base) + ")";
  }
  return "";
}

bool Overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const char* x = static_cast<const char*>(a);
  const char* y = static_cast<const char*>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

// NCCL's in-place rule: the buffers are disjoint, or sendbuff is exactly `in_place`.
std::string CheckInPlace(const Op& op, size_t send_bytes, size_t recv_bytes, const void* in_place,
                         const char* where) {
  if (op.send == in_place || !Overlap(op.send, send_bytes, op.recv, recv_bytes)) return "";
  return std::string("sendbuff ") + Pointer(op.send) + " overlaps recvbuff " + Pointer(op.recv) +
         " but is not the in-place position " + where;
}

// Why `op` is not a valid call on this rank, or "".
std::string CheckOp(const Api& api, const Op& op) {
  const int nranks = op.comm->nranks;
  const int rank = op.comm->rank;
  const size_t e = ElementBytes(op.type);
  if (e == 0) return TypeName(op.type) + " is not an ncclDataType_t";
  if (op.kind == OpKind::kAllReduce || op.kind == OpKind::kReduceScatter) {
    const std::string reduction = CheckReduction(op.type, op.reduction);
    if (!reduction.empty()) return reduction;
  }
  if (op.root < 0 || op.root >= nranks) {
    if (op.kind == OpKind::kBroadcast) {
      return "root " + std::to_string(op.root) + " is not a rank of " + std::to_string(nranks);
    }
    if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) {
      return "peer " + std::to_string(op.root) + " is not a rank of " + std::to_string(nranks);
    }
  }
  if (op.count == 0) return "";
  if (op.count > (SIZE_MAX / e) / static_cast<size_t>(nranks)) return "count is too large";
  const size_t bytes = op.count * e;
  const size_t all = bytes * nranks;
  std::string problem;
  switch (op.kind) {
    case OpKind::kAllReduce:
      problem = CheckDeviceRange(api, "sendbuff", op.send, bytes);
      if (problem.empty()) problem = CheckDeviceRange(api, "recvbuff", op.recv, bytes);
      if (problem.empty()) problem = CheckInPlace(op, bytes, bytes, op.recv, "recvbuff");
      return problem;
    case OpKind::kReduceScatter:
      problem = CheckDeviceRange(api, "sendbuff", op.send, all);
      if (problem.empty()) problem = CheckDeviceRange(api, "recvbuff", op.recv, bytes);
      if (problem.empty() && !Overlap(op.send, all, op.recv, bytes)) return "";
      if (problem.empty() && op.recv != op.send + rank * bytes) {
        problem = std::string("recvbuff ") + Pointer(op.recv) + " overlaps sendbuff " +
                  Pointer(op.send) + " but is not the in-place position sendbuff + rank * " +
                  "recvcount";
      }
      return problem;
    case OpKind::kAllGather:
      problem = CheckDeviceRange(api, "sendbuff", op.send, bytes);
      if (problem.empty()) problem = CheckDeviceRange(api, "recvbuff", op.recv, all);
      if (problem.empty()) {
        problem =
            CheckInPlace(op, bytes, all, op.recv + rank * bytes, "recvbuff + rank * sendcount");
      }
      return problem;
    case OpKind::kBroadcast:
      if (rank == op.root) {
        problem = CheckDeviceRange(api, "sendbuff", op.send, bytes);
        if (problem.empty()) problem = CheckInPlace(op, bytes, bytes, op.recv, "recvbuff");
      }
      if (problem.empty()) problem = CheckDeviceRange(api, "recvbuff", op.recv, bytes);
      return problem;
    case OpKind::kSend:
      return CheckDeviceRange(api, "sendbuff", op.send, bytes);
    case OpKind::kRecv:
      return CheckDeviceRange(api, "recvbuff", op.recv, bytes);
  }
  return "";
}

// One stream's share of a launch. Its communicators' pending counts drop when it has run,
// or when the runtime drops it unrun (its destructor).
struct Batch {
  std::vector<Op> ops;
  bool finished = false;
  void Finish() {
    if (finished) return;
    finished = true;
    for (Op& op : ops) op.comm->OperationDone();
  }
  ~Batch() { Finish(); }
};

// Numbers `ops` (in call order) and enqueues them, one operation per stream.
ncclResult_t Launch(const Api& api, std::vector<Op> ops) {
  for (Op& op : ops) {
    std::lock_guard<std::mutex> lock(op.comm->mutex);
    Sequence(op);
    op.comm->pending.fetch_add(1);
  }
  std::vector<cudaStream_t> streams;
  for (const Op& op : ops) {
    bool seen = false;
    for (cudaStream_t stream : streams) seen = seen || stream == op.stream;
    if (!seen) streams.push_back(op.stream);
  }
  ncclResult_t result = ncclSuccess;
  for (cudaStream_t stream : streams) {
    auto batch = std::make_shared<Batch>();
    std::vector<Access> accesses;
    std::string names;
    for (const Op& op : ops) {
      if (op.stream != stream) continue;
      batch->ops.push_back(op);
      for (const Access& access : Accesses(op)) accesses.push_back(access);
      names += (names.empty() ? "" : " ") + std::string(OpName(op.kind));
    }
    const std::string what = batch->ops.size() == 1 ? names : "ncclGroupEnd (" + names + ")";
    const cudaError_t enqueued = api.enqueue(
        stream, what, std::move(accesses),
        [batch]() {
          RunOps(batch->ops);
          batch->Finish();
          return std::string();
        },
        cudaErrorLaunchFailure);
    if (enqueued != cudaSuccess) {
      // The peers would wait for these operations: fail the communicators for all.
      const bool bad_stream = enqueued == cudaErrorInvalidResourceHandle;
      const ncclResult_t code = bad_stream ? ncclInvalidArgument : ncclUnhandledCudaError;
      const std::string text =
          what + ": the simulated GPU refused the stream operation (CUDA error " +
          std::to_string(static_cast<int>(enqueued)) +
          (bad_stream ? ": the stream is not one of this device's" : ": a sticky device error") +
          ")";
      for (const Op& op : batch->ops) op.comm->Fail(code, text, true);
      if (result == ncclSuccess) result = code;
    }
  }
  return result;
}

// An operation call's arguments (a Send has no receive buffer, a Recv no send buffer).
Op Call(OpKind kind, const void* send, void* recv, size_t count, ncclDataType_t type,
        cudaStream_t stream) {
  Op op;
  op.kind = kind;
  op.send = static_cast<const char*>(send);
  op.recv = static_cast<char*>(recv);
  op.count = count;
  op.type = type;
  op.stream = stream;
  return op;
}

// The common path of every operation call.
ncclResult_t Submit(ncclComm_t comm, Op op) {
  const char* call = OpName(op.kind);
  op.comm = Find(comm);
  if (op.comm == nullptr) {
    return Refuse(ncclInvalidArgument,
                  std::string(call) + ": comm " + Pointer(comm) +
                      " is not a live communicator (null, destroyed or aborted)");
  }
  std::string error_text;
  const ncclResult_t state = op.comm->AsyncError(&error_text);
  if (state != ncclSuccess && state != ncclInProgress) {
    return Refuse(state, std::string(call) + ": the communicator has failed: " + error_text);
  }
  if (!op.comm->joined.load()) {
    return Refuse(ncclInvalidUsage, std::string(call) +
                                        ": the communicator's initialization has not finished "
                                        "(wait until ncclCommGetAsyncError reports ncclSuccess)");
  }
  const Api* api = SimulatedGpu();
  if (api == nullptr) return Refuse(ncclInvalidUsage, "the simulated GPU went away");
  const std::string problem = CheckOp(*api, op);
  if (!problem.empty()) {
    return Refuse(ncclInvalidArgument, op.comm->Who() + ": " + call + ": " + problem);
  }
  if (op.count == 0) return ncclSuccess;  // nothing moves, on every rank alike
  if (t_group.depth > 0) {
    t_group.ops.push_back(std::move(op));
    return ncclSuccess;
  }
  std::vector<Op> ops;
  ops.push_back(std::move(op));
  return Launch(*api, std::move(ops));
}

ncclResult_t Init(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank,
                  const ncclConfig_t* config) {
  if (comm == nullptr) return Refuse(ncclInvalidArgument, "ncclCommInitRankConfig: comm is null");
  *comm = nullptr;
  const Api* api = SimulatedGpu();
  if (api == nullptr) {
    return Refuse(ncclInvalidUsage,
                  "ncclCommInitRankConfig: this libnccl is simgpu's test double and needs the "
                  "simulated GPU (the symbol simgpu_api, from strata built with "
                  "--config=simgpu), which this process does not have; with a real GPU, "
                  "load NVIDIA's libnccl.so.2 instead");
  }
  if (api->version != kApiVersion) {
    return Refuse(ncclInvalidUsage, "ncclCommInitRankConfig: simgpu_api is version " +
                                        std::to_string(api->version) + ", this library needs " +
                                        std::to_string(kApiVersion));
  }
  if (nranks < 1 || nranks > kMaxRanks) {
    return Refuse(ncclInvalidArgument, "ncclCommInitRankConfig: nranks " + std::to_string(nranks) +
                                           " is not in [1, " + std::to_string(kMaxRanks) + "]");
  }
  if (rank < 0 || rank >= nranks) {
    return Refuse(ncclInvalidArgument, "ncclCommInitRankConfig: rank " + std::to_string(rank) +
                                           " is not in [0, " + std::to_string(nranks) + ")");
  }
  bool blocking = true;
  if (config != nullptr) {
    if (config->magic != 0xcafebeef ||
        config->size < offsetof(ncclConfig_t, blocking) + sizeof(config->blocking)) {
      return Refuse(ncclInvalidArgument,
                    "ncclCommInitRankConfig: config was not initialized with "
                    "NCCL_CONFIG_INITIALIZER");
    }
    if (config->blocking != NCCL_CONFIG_UNDEF_INT) blocking = config->blocking != 0;
  }
  double timeout_s = 0;
  std::string error;
  ncclResult_t result = ReadTimeout(&timeout_s, &error);
  if (result != ncclSuccess) return Refuse(result, "ncclCommInitRankConfig: " + error);

  const int device = api->current_device();
  std::unique_ptr<Rendezvous> rendezvous;
  result = Rendezvous::Join(id, nranks, rank, device, &rendezvous, &error);
  if (result != ncclSuccess) return Refuse(result, "ncclCommInitRankConfig: " + error);
  auto state =
      std::make_shared<CommState>(rank, nranks, device, blocking, timeout_s, std::move(rendezvous));
  if (blocking) {
    result = AwaitJoin(*state);
    if (result != ncclSuccess) {
      state->LeaveWhenIdle();
      return result;  // AwaitJoin recorded the last error
    }
  } else {
    // The thread does not own the state: ~CommState joins it.
    CommState* raw = state.get();
    state->join_thread = std::thread([raw] { AwaitJoin(*raw); });
  }
  auto* handle = new ncclComm{std::move(state)};
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    g_live->insert(handle);
  }
  *comm = handle;
  return blocking ? ncclSuccess : ncclInProgress;
}

}  // namespace
}  // namespace nccl
}  // namespace simgpu

using namespace simgpu::nccl;  // NOLINT: the C API below is this library's only face

SIMGPU_NCCL_EXPORT ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return Refuse(ncclInvalidArgument, "ncclGetVersion: version is null");
  *version = NCCL_VERSION_CODE;  // the nccl.h it was built against: the signatures are its
  return ncclSuccess;
}

SIMGPU_NCCL_EXPORT const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (a CUDA call failed)";
    case ncclSystemError:
      return "unhandled system error (a system call failed, or a wait timed out)";
    case ncclInternalError:
      return "internal error (a bug in the library)";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage (the calls do not follow NCCL's rules)";
    case ncclRemoteError:
      return "remote process exited or there was a network error (another rank failed)";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

SIMGPU_NCCL_EXPORT const char* ncclGetLastError(ncclComm_t comm) {
  (void)comm;  // one last error per process, as NCCL keeps it
  return LastError();
}

SIMGPU_NCCL_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr) return Refuse(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is null");
  std::string error;
  const ncclResult_t result = MakeRendezvous(uniqueId, &error);
  if (result != ncclSuccess) return Refuse(result, "ncclGetUniqueId: " + error);
  return ncclSuccess;
}

SIMGPU_NCCL_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks,
                                                       ncclUniqueId commId, int rank,
                                                       ncclConfig_t* config) {
  return Init(comm, nranks, commId, rank, config);
}

SIMGPU_NCCL_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                                 int rank) {
  return Init(comm, nranks, commId, rank, nullptr);
}

SIMGPU_NCCL_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  std::shared_ptr<CommState> state = Find(comm);
  if (state == nullptr || asyncError == nullptr) {
    return Refuse(ncclInvalidArgument,
                  "ncclCommGetAsyncError: not a live communicator, or asyncError is null");
  }
  *asyncError = state->AsyncError(nullptr);
  return ncclSuccess;
}

SIMGPU_NCCL_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  std::shared_ptr<CommState> state = Find(comm);
  if (state == nullptr) {
    return Refuse(ncclInvalidArgument, "ncclCommFinalize: not a live communicator");
  }
  std::string error_text;
  if (!state->joined.load() && !state->failed.load()) {
    return Refuse(ncclInvalidUsage, "ncclCommFinalize: the initialization has not finished");
  }
  state->finalizing.store(true);
  if (!state->blocking) {
    const ncclResult_t now = state->AsyncError(&error_text);
    if (now != ncclSuccess && now != ncclInProgress) {
      return Refuse(now, "ncclCommFinalize: " + error_text);
    }
    return now;
  }
  // Blocking: until this rank's queued operations ran; each is bounded by the timeout.
  Waiter waiter(state->timeout_s);
  int64_t seen = state->pending.load();
  while (state->pending.load() > 0) {
    if (state->pending.load() != seen) {
      seen = state->pending.load();
      waiter.Progressed();
    }
    if (waiter.Expired()) {
      return Refuse(ncclSystemError, "ncclCommFinalize: " + std::to_string(seen) +
                                         " operations still queued after " +
                                         std::to_string(state->timeout_s) +
                                         " s (STRATA_SIMGPU_NCCL_TIMEOUT_S): their streams "
                                         "do not reach them");
    }
    waiter.Pause();
  }
  const ncclResult_t done = state->AsyncError(&error_text);
  if (done != ncclSuccess) return Refuse(done, "ncclCommFinalize: " + error_text);
  return ncclSuccess;
}

SIMGPU_NCCL_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  std::shared_ptr<CommState> state = Find(comm);
  if (state == nullptr || !Forget(comm)) {
    return Refuse(ncclInvalidArgument, "ncclCommDestroy: not a live communicator");
  }
  if (!state->joined.load() && !state->failed.load()) {
    state->aborted.store(true);  // ends the joining thread
    state->rendezvous->PublishFailure(
        state->rank, state->Who() + " destroyed its communicator during initialization");
  }
  state->LeaveWhenIdle();
  delete comm;
  return ncclSuccess;
}

SIMGPU_NCCL_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  std::shared_ptr<CommState> state = Find(comm);
  if (state == nullptr || !Forget(comm)) {
    return Refuse(ncclInvalidArgument, "ncclCommAbort: not a live communicator");
  }
  state->aborted.store(true);  // this rank's queued and running operations end
  state->rendezvous->PublishFailure(state->rank,
                                    state->Who() + " aborted its communicator (ncclCommAbort)");
  state->LeaveWhenIdle();
  delete comm;
  return ncclSuccess;
}

SIMGPU_NCCL_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  std::shared_ptr<CommState> state = Find(comm);
  if (state == nullptr || count == nullptr) {
    return Refuse(ncclInvalidArgument, "ncclCommCount: not a live communicator, or count is null");
  }
  *count = state->nranks;
  return ncclSuccess;
}

SIMGPU_NCCL_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  std::shared_ptr<CommState> state = Find(comm);
  if (state == nullptr || device == nullptr) {
    return Refuse(ncclInvalidArgument,
                  "ncclCommCuDevice: not a live communicator, or device is null");
  }
  *device = state->device;
  return ncclSuccess;
}

SIMGPU_NCCL_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  std::shared_ptr<CommState> state = Find(comm);
  if (state == nullptr || rank == nullptr) {
    return Refuse(ncclInvalidArgument,
                  "ncclCommUserRank: not a live communicator, or rank is null");
  }
  *rank = state->rank;
  return ncclSuccess;
}

SIMGPU_NCCL_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                              ncclDataType_t datatype, ncclRedOp_t op,
                                              ncclComm_t comm, cudaStream_t stream) {
  Op call = Call(OpKind::kAllReduce, sendbuff, recvbuff, count, datatype, stream);
  call.reduction = op;
  return Submit(comm, std::move(call));
}

SIMGPU_NCCL_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff,
                                                  size_t recvcount, ncclDataType_t datatype,
                                                  ncclRedOp_t op, ncclComm_t comm,
                                                  cudaStream_t stream) {
  Op call = Call(OpKind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, stream);
  call.reduction = op;
  return Submit(comm, std::move(call));
}

SIMGPU_NCCL_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff,
                                              size_t sendcount, ncclDataType_t datatype,
                                              ncclComm_t comm, cudaStream_t stream) {
  return Submit(comm, Call(OpKind::kAllGather, sendbuff, recvbuff, sendcount, datatype, stream));
}

SIMGPU_NCCL_EXPORT ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                              ncclDataType_t datatype, int root, ncclComm_t comm,
                                              cudaStream_t stream) {
  Op call = Call(OpKind::kBroadcast, sendbuff, recvbuff, count, datatype, stream);
  call.root = root;
  return Submit(comm, std::move(call));
}

SIMGPU_NCCL_EXPORT ncclResult_t ncclSend(const void* sendbuff, size_t count,
                                         ncclDataType_t datatype, int peer, ncclComm_t comm,
                                         cudaStream_t stream) {
  Op call = Call(OpKind::kSend, sendbuff, nullptr, count, datatype, stream);
  call.root = peer;
  return Submit(comm, std::move(call));
}

SIMGPU_NCCL_EXPORT ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype,
                                         int peer, ncclComm_t comm, cudaStream_t stream) {
  Op call = Call(OpKind::kRecv, nullptr, recvbuff, count, datatype, stream);
  call.root = peer;
  return Submit(comm, std::move(call));
}

SIMGPU_NCCL_EXPORT ncclResult_t ncclGroupStart() {
  ++t_group.depth;
  return ncclSuccess;
}

SIMGPU_NCCL_EXPORT ncclResult_t ncclGroupEnd() {
  if (t_group.depth == 0) {
    return Refuse(ncclInvalidUsage, "ncclGroupEnd without a matching ncclGroupStart");
  }
  if (--t_group.depth > 0) return ncclSuccess;
  std::vector<Op> ops = std::move(t_group.ops);
  t_group.ops.clear();
  const ncclResult_t error = t_group.error;
  const std::string error_text = t_group.error_text;
  t_group.error = ncclSuccess;
  t_group.error_text.clear();
  if (error != ncclSuccess) {  // as NCCL: a group with a failed call launches nothing
    SetLastError(error_text);
    return error;
  }
  if (ops.empty()) return ncclSuccess;
  const simgpu::Api* api = SimulatedGpu();
  if (api == nullptr) return Refuse(ncclInvalidUsage, "ncclGroupEnd: no simulated GPU");
  return Launch(*api, std::move(ops));
}
