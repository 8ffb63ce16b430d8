// The process side of the MPI Communicator, private to collectives/: MPI results as
// Status, the process-wide MPI guard (MpiProcess) and the SIGTERM termination report. See
// mpi_communicator.h.
//
// Invariants: MPI is initialized at most once per process, by the first MpiProcess::Get()
// (MPI_Init_thread asking for MPI_THREAD_MULTIPLE, needing at least MPI_THREAD_SERIALIZED),
// and finalized at process exit by the guard unless g_process_failed is set: after a failed
// collective MPI_Finalize would wait for the dead or stuck peer. Where MPI is only
// MPI_THREAD_SERIALIZED, every MPI call of strata holds MpiProcess::Lock().
// Thread-safety: Get(), Lock() and world() from any thread. SetReportText has one writer at
// a time in mind (the thread running collectives); the signal handler reads the report
// without locks (a torn line is cosmetic).
#pragma once

#include <mpi.h>

#include <atomic>
#include <mutex>
#include <string>

#include "collectives/mpi_world.h"
#include "core/status.h"

namespace strata {
namespace mpi_internal {

// "<context>: <call> failed: <MPI's text> (code <code>)", as kInternal.
Status MpiError(int code, const char* call, const std::string& context);

// MPI results as Status, at the call site.
#define MPI_RETURN_IF_ERROR(call, context)                                         \
  do {                                                                             \
    const int strata_mpi_code_ = (call);                                           \
    if (strata_mpi_code_ != MPI_SUCCESS) {                                         \
      return ::strata::mpi_internal::MpiError(strata_mpi_code_, #call, (context)); \
    }                                                                              \
  } while (0)

// Set once a collective (or the communicator's set-up) failed: the exit guard then skips
// MPI_Finalize, the process exits without it and mpirun tears the job down.
extern std::atomic<bool> g_process_failed;

// What this rank is doing, for the SIGTERM report ("in <collective> waiting for rank(s)
// ...", "outside any collective"). Truncated to the report's buffer.
void SetReportText(const std::string& text);

// The process: MPI_Init_thread once, MPI_Finalize at exit unless a collective failed.
class MpiProcess {
 public:
  // The process's MPI, initializing it on the first call; later calls return the first
  // call's result (a failed initialization is not retried).
  static StatusOr<MpiProcess*> Get();

  ~MpiProcess();

  // Holds the process-wide MPI lock where MPI is only MPI_THREAD_SERIALIZED.
  std::unique_lock<std::mutex> Lock() {
    return multiple_ ? std::unique_lock<std::mutex>() : std::unique_lock<std::mutex>(mutex_);
  }

  const MpiWorld& world() const { return world_; }

 private:
  MpiProcess() = default;

  Status Init();

  bool initialized_by_us_ = false;
  bool multiple_ = false;
  std::mutex mutex_;
  MpiWorld world_;
};

}  // namespace mpi_internal
}  // namespace strata
