// The process-wide MPI guard, MPI errors as Status and the SIGTERM termination report of
// the MPI Communicator. See mpi_process.h for the invariants and thread-safety.
//
// The report's writer fills the buffer the handler is not reading, then flips `active`; the
// handler calls only async-signal-safe functions (strlen, write, signal, raise).
#include "collectives/mpi_process.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

namespace strata {
namespace mpi_internal {
namespace {

std::string MpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return absl::StrCat("error ", code);
  return std::string(text, length);
}

// ---------------------------------------------------------------------------------------
// What a rank is doing, for the SIGTERM report: two buffers written by the thread running
// collectives and read, without locks, by the signal handler (a torn line is cosmetic).

struct TerminationReport {
  char prefix[128] = "strata MPI rank ?";
  char text[2][768] = {"outside any collective", "outside any collective"};
  std::atomic<int> active{0};
};
TerminationReport g_report;

void WriteAll(const char* text) {
  size_t length = std::strlen(text);
  while (length > 0) {
    const ssize_t written = write(STDERR_FILENO, text, length);
    if (written <= 0) return;
    text += written;
    length -= static_cast<size_t>(written);
  }
}

void OnTerminate(int signal_number) {
  WriteAll(g_report.prefix);
  WriteAll(
      ": terminated by SIGTERM (mpirun stops every rank when one dies or fails; look for "
      "the rank that did) while ");
  WriteAll(g_report.text[g_report.active.load()]);
  WriteAll("\n");
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);
}

}  // namespace

Status MpiError(int code, const char* call, const std::string& context) {
  return absl::InternalError(
      absl::StrCat(context, ": ", call, " failed: ", MpiErrorText(code), " (code ", code, ")"));
}

void SetReportText(const std::string& text) {
  const int next = 1 - g_report.active.load();
  const size_t length = std::min(text.size(), sizeof(g_report.text[0]) - 1);
  std::memcpy(g_report.text[next], text.data(), length);
  g_report.text[next][length] = '\0';
  g_report.active.store(next);
}

// ---------------------------------------------------------------------------------------
// The process: MPI_Init_thread once, MPI_Finalize at exit unless a collective failed.

std::atomic<bool> g_process_failed{false};

StatusOr<MpiProcess*> MpiProcess::Get() {
  static std::mutex mutex;
  static std::unique_ptr<MpiProcess> process;  // its destructor is the exit guard
  static Status init_status;
  static bool attempted = false;
  std::lock_guard<std::mutex> lock(mutex);
  if (!attempted) {
    attempted = true;
    auto created = std::unique_ptr<MpiProcess>(new MpiProcess());
    init_status = created->Init();
    if (init_status.ok()) process = std::move(created);
  }
  if (!init_status.ok()) return init_status;
  return process.get();
}

MpiProcess::~MpiProcess() {
  if (!initialized_by_us_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  // After a failed collective MPI_Finalize would wait for the dead or stuck peer: the
  // process exits without it and mpirun tears the job down.
  if (finalized || g_process_failed.load()) return;
  MPI_Finalize();
}

Status MpiProcess::Init() {
  int initialized = 0;
  MPI_RETURN_IF_ERROR(MPI_Initialized(&initialized), "initializing MPI");
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    MPI_RETURN_IF_ERROR(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided),
                        "initializing MPI");
    initialized_by_us_ = true;
    // Errors come back as codes (and become a Status) instead of aborting the job.
    MPI_RETURN_IF_ERROR(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
                        "initializing MPI");
  } else {
    MPI_RETURN_IF_ERROR(MPI_Query_thread(&provided), "querying MPI's thread level");
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    return absl::FailedPreconditionError(
        absl::StrCat("MPI provides thread level ", provided,
                     "; strata runs collectives on a stream's "
                     "worker thread and needs at least MPI_THREAD_SERIALIZED (",
                     MPI_THREAD_SERIALIZED, ")"));
  }
  multiple_ = provided >= MPI_THREAD_MULTIPLE;

  const std::string context = "reading this process's place in MPI_COMM_WORLD";
  MPI_RETURN_IF_ERROR(MPI_Comm_rank(MPI_COMM_WORLD, &world_.rank), context);
  MPI_RETURN_IF_ERROR(MPI_Comm_size(MPI_COMM_WORLD, &world_.size), context);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_RETURN_IF_ERROR(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_.rank, MPI_INFO_NULL, &node),
      context);
  MPI_RETURN_IF_ERROR(MPI_Comm_rank(node, &world_.local_rank), context);
  MPI_RETURN_IF_ERROR(MPI_Comm_size(node, &world_.local_size), context);
  // The node's lowest world rank names it (the split orders a node's ranks by world rank).
  int first_rank = world_.rank;
  MPI_RETURN_IF_ERROR(MPI_Bcast(&first_rank, 1, MPI_INT, 0, node), context);
  MPI_RETURN_IF_ERROR(MPI_Comm_free(&node), context);
  world_.first_rank_of_node.assign(world_.size, 0);
  MPI_RETURN_IF_ERROR(MPI_Allgather(&first_rank, 1, MPI_INT, world_.first_rank_of_node.data(), 1,
                                    MPI_INT, MPI_COMM_WORLD),
                      context);
  char host[MPI_MAX_PROCESSOR_NAME];
  int host_length = 0;
  MPI_RETURN_IF_ERROR(MPI_Get_processor_name(host, &host_length), context);
  world_.host.assign(host, host_length);

  std::snprintf(g_report.prefix, sizeof(g_report.prefix), "strata MPI rank %d of %d (%s)",
                world_.rank, world_.size, world_.host.c_str());
  return absl::OkStatus();
}

}  // namespace mpi_internal

// Declared in mpi_communicator.h; here, next to the handler it installs.
void InstallMpiTerminationReport() {
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = &mpi_internal::OnTerminate;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
}

}  // namespace strata
