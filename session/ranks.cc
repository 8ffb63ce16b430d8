// Rank launcher: MPI process or local threads; see ranks.h.
#include "session/ranks.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/local_communicator.h"
#include "collectives/mpi_communicator.h"
#include "core/exceptions.h"
#include "core/logging.h"
#include "core/run_identity.h"

namespace strata {

namespace {

// Prints `status` as main would, and marks it printed (kErrorPrintedPayload).
void PrintErrorNow(Status& status) {
  std::fprintf(stderr, "strata: error: %s\n", std::string(status.message()).c_str());
  std::fflush(stderr);
  status.SetPayload(kErrorPrintedPayload, absl::Cord("1"));
}

}  // namespace

const char* MpiLaunchVariable() {
  // Open MPI's mpirun, PMIx (srun --mpi=pmix, prterun), PMI-1/2 (Hydra: MPICH, Intel MPI,
  // MVAPICH; srun --mpi=pmi2), and a step srun started with more than one task. Not
  // SLURM_NTASKS: an allocation's batch script has it (and SLURM_PROCID) too, and is one
  // process that may run its ranks as threads.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') return name;
  }
  const char* tasks = std::getenv("SLURM_STEP_NUM_TASKS");
  if (tasks != nullptr && std::atoi(tasks) > 1 && std::getenv("SLURM_PROCID") != nullptr) {
    return "SLURM_STEP_NUM_TASKS";
  }
  return nullptr;
}

const char* MpiLauncherName() {
  const char* variable = MpiLaunchVariable();
  if (variable == nullptr) return nullptr;
  // mpirun inside a Slurm allocation (or inside a task srun started) sets Open MPI's own.
  if (std::string(variable) == "OMPI_COMM_WORLD_SIZE") return "mpirun";
  if (std::getenv("SLURM_STEP_NUM_TASKS") != nullptr && std::getenv("SLURM_PROCID") != nullptr) {
    return "srun";
  }
  return "the MPI launcher";
}

Status CheckMpiLaunch() {
  const char* variable = MpiLaunchVariable();
  if (variable == nullptr || std::string(variable) != "SLURM_STEP_NUM_TASKS") {
    return absl::OkStatus();
  }
  // srun started several tasks but gave them no process-management interface: MPI_Init
  // cannot join them into one job (Open MPI ends the process with a long message).
  const char* type = std::getenv("SLURM_MPI_TYPE");
  return absl::FailedPreconditionError(absl::StrCat(
      "srun started ", std::getenv("SLURM_STEP_NUM_TASKS"), " tasks without PMIx (srun --mpi=",
      type != nullptr && *type != '\0' ? type : "none",
      "), so they cannot join one MPI job: run srun --mpi=pmix (or set MpiDefault=pmix in "
      "slurm.conf); one task (srun -n 1) runs zero.world ranks as threads"));
}

bool UnderMpirun() { return MpiLaunchVariable() != nullptr; }

Status RunRanks(const Options& options, const std::function<Status(Communicator&)>& body) {
  return RunRanksWithControl(options, [&](Communicator& communicator, Communicator&) {
    return body(communicator);
  });
}

Status RunRanksWithControl(const Options& options, const RanksBody& body) {
  if (UnderMpirun()) {
    RETURN_IF_ERROR(CheckMpiLaunch());
    ASSIGN_OR_RETURN(MpiWorld world, GetMpiWorld());
    if (options.zero.world != 1 && options.zero.world != world.size) {
      const std::string launcher = MpiLauncherName();
      return absl::InvalidArgumentError(absl::StrFormat(
          "zero.world=%d but %s started %d ranks: leave zero.world at 1 under %s (the "
          "world is %s) or make them equal",
          options.zero.world, launcher, world.size, launcher,
          launcher == "mpirun" ? "mpirun's -np"
          : launcher == "srun" ? "srun's task count"
                               : "its process count"));
    }
    InitLogging(world.rank, world.size);
    MpiOptions mpi_options;
    mpi_options.timeout_s = options.zero.comm_timeout_s;
    ASSIGN_OR_RETURN(auto communicator, CreateMpiCommunicator(mpi_options));
    ASSIGN_OR_RETURN(auto control, CreateMpiCommunicator(mpi_options));
    Status status = body(*communicator, *control);
    // A stop every rank agreed on (kCancelled) needs no abort: they all stop together.
    if (!status.ok() && status.code() != absl::StatusCode::kCancelled) {
      // This rank's own error is printed before the others learn of it: once they exit,
      // mpirun may end this process before main could print it.
      Status own = Annotate(status, absl::StrCat("rank ", world.rank, " on host ", HostName()));
      PrintErrorNow(own);
      communicator->Abort(std::string(status.message()));
      control->Abort(std::string(status.message()));
      return own;
    }
    return status.ok() ? status
                       : Annotate(status, absl::StrCat("rank ", world.rank, " on host ",
                                                       HostName()));
  }

  const int world_size = options.zero.world;
  InitLogging(0, world_size);
  LocalGroupOptions group_options;
  group_options.timeout_s = options.zero.comm_timeout_s;
  ASSIGN_OR_RETURN(auto communicators, CreateLocalGroup(world_size, group_options));
  ASSIGN_OR_RETURN(auto controls, CreateLocalGroup(world_size, group_options));
  if (world_size == 1) return body(*communicators[0], *controls[0]);
  std::mutex mutex;
  Status first_error;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      Status status = StatusFromExceptions(
          [&] { return body(*communicators[rank], *controls[rank]); },
          absl::StrCat("rank ", rank));
      if (status.ok()) return;
      if (status.code() != absl::StatusCode::kCancelled) {
        communicators[rank]->Abort(std::string(status.message()));
        controls[rank]->Abort(std::string(status.message()));
      }
      std::lock_guard<std::mutex> lock(mutex);
      // Keep the root cause: the rank that failed first, not the ones it then aborted.
      if (first_error.ok() || (first_error.code() == absl::StatusCode::kAborted &&
                               status.code() != absl::StatusCode::kAborted)) {
        first_error = Annotate(status, absl::StrCat("rank ", rank));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  return first_error;
}

}  // namespace strata
