// The raw NCCL communicator: NCCL results as Status, the bounded wait for a non-blocking
// ncclComm_t, and its creation through a host bootstrap Communicator. See nccl_comm.h for
// the invariants and thread-safety.
#include "collectives/nccl_comm.h"

#include <cstdint>
#include <cstdio>
#include <thread>

#include "collectives/inline_stream.h"
#include "core/logging.h"

namespace strata {
namespace nccl_internal {
namespace {

// What rank 0 broadcasts: its ncclUniqueId, or why it has none. A whole number of floats.
struct IdMessage {
  int32_t ok = 0;
  ncclUniqueId id;
  char error[256] = {};
};
static_assert(sizeof(IdMessage) % 4 == 0, "IdMessage is broadcast as floats");

}  // namespace

Status NcclStatus(ncclResult_t result, const char* call, const char* file, int line,
                  const std::string& context) {
  if (result == ncclSuccess || result == ncclInProgress) return absl::OkStatus();
  absl::StatusCode code = absl::StatusCode::kInternal;
  if (result == ncclInvalidArgument || result == ncclInvalidUsage) {
    code = absl::StatusCode::kInvalidArgument;
  } else if (result == ncclSystemError || result == ncclRemoteError) {
    code = absl::StatusCode::kUnavailable;
  }
  const char* detail = Nccl().GetLastError(nullptr);
  // The calls go through the loaded table (Nccl().AllReduce(...)): name them as NCCL does.
  std::string call_text = call;
  if (call_text.rfind("Nccl().", 0) == 0) call_text = "nccl" + call_text.substr(7);
  return Status(code,
                absl::StrCat(context, ": ", call_text, " failed: ", Nccl().GetErrorString(result),
                             detail != nullptr && *detail != '\0' ? absl::StrCat(" (", detail, ")")
                                                                  : std::string(),
                             " at ", file, ":", line));
}

void LogIfError(const Status& status) {
  if (!status.ok()) spdlog::error("{}", status.ToString());
}

Status AwaitComm(ncclComm_t comm, Clock::time_point deadline, const std::string& context,
                 double timeout_s) {
  while (true) {
    ncclResult_t state = ncclSuccess;
    NCCL_RETURN_IF_ERROR(Nccl().CommGetAsyncError(comm, &state), context);
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) {
      return NcclStatus(state, "ncclCommGetAsyncError (asynchronous error)", __FILE__, __LINE__,
                        context);
    }
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(context, ": did not finish within ", timeout_s,
                       " s (zero.comm_timeout_s); a rank died, hangs, or did not take part"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

StatusOr<ncclComm_t> CreateNcclComm(Communicator& bootstrap, const std::string& who,
                                    double timeout_s) {
  const int rank = bootstrap.rank();
  const int size = bootstrap.world_size();

  // NCCL itself, loaded at run time; a rank without it still takes part in the broadcast
  // below (rank 0 sends its failure), so no rank waits for a peer that gave up.
  const StatusOr<const NcclLibrary*> library = LoadNccl();

  // Rank 0's unique id (or its error) to every rank, through the host communicator.
  IdMessage message;
  if (rank == 0) {
    Status made = library.ok() ? NCCL_STATUS(Nccl().GetUniqueId(&message.id),
                                             who + ": making the unique id")
                               : library.status();
    message.ok = made.ok() ? 1 : 0;
    if (!made.ok()) {
      std::snprintf(message.error, sizeof(message.error), "%s", made.ToString().c_str());
    }
  }
  InlineStream bootstrap_stream("nccl bootstrap");
  RETURN_IF_ERROR(
      Annotate(bootstrap.Broadcast(&message, sizeof(message) / 4, DType::kF32, 0, bootstrap_stream),
               who + ": broadcasting the unique id"));
  RETURN_IF_ERROR(Annotate(bootstrap_stream.Synchronize(), who + ": broadcasting the unique id"));
  if (!library.ok()) return Annotate(library.status(), who);
  if (!message.ok) {
    message.error[sizeof(message.error) - 1] = '\0';
    return absl::UnavailableError(
        absl::StrCat(who, ": rank 0 could not make the NCCL unique id: ", message.error));
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // init and every call return at once; AwaitComm bounds the wait
  ncclComm_t comm = nullptr;
  const std::string initializing = who + ": initializing the NCCL communicator";
  NCCL_RETURN_IF_ERROR(Nccl().CommInitRankConfig(&comm, size, message.id, rank, &config),
                       initializing);
  Status joined = AwaitComm(comm,
                            Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(timeout_s)),
                            initializing, timeout_s);
  if (!joined.ok()) {
    LogIfError(NCCL_STATUS(Nccl().CommAbort(comm), who + ": aborting a failed initialization"));
    return joined;
  }
  return comm;
}

}  // namespace nccl_internal
}  // namespace strata
