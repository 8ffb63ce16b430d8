// Runs one body per rank. Under mpirun (Open MPI's environment is present) this process
// is one rank of mpirun's world and talks to the others over MPI; otherwise zero.world
// ranks run as threads of this process with the local communicator. The first failing
// rank aborts the group so the others stop promptly instead of waiting for collectives.
// Thread-safety: call from the main thread; `body` runs on one thread per rank.
#pragma once

#include <functional>

#include "collectives/communicator.h"
#include "core/options.h"
#include "core/status.h"

namespace strata {

// The environment variable that shows this process was started by an MPI launcher (Open
// MPI's OMPI_COMM_WORLD_SIZE, PMIx's PMIX_RANK, PMI's PMI_RANK/PMI_SIZE, or Slurm's
// SLURM_STEP_NUM_TASKS above 1 with SLURM_PROCID: a step srun started), or null: not
// under MPI. An allocation's batch script (SLURM_NTASKS, SLURM_PROCID, no step) is not.
const char* MpiLaunchVariable();
// True when MpiLaunchVariable() found one: ranks are MPI processes.
bool UnderMpirun();
// "mpirun", "srun" or "the MPI launcher" (for messages); null when not under MPI.
const char* MpiLauncherName();
// kFailedPrecondition where srun started several tasks without PMIx or PMI (srun
// --mpi=none), which MPI_Init cannot join into one job: the message says srun --mpi=pmix.
Status CheckMpiLaunch();

// Calls body(communicator) for every rank this process plays; returns the first error,
// prefixed with its rank. zero.world must be 1 or mpirun's -np under mpirun.
Status RunRanks(const Options& options, const std::function<Status(Communicator&)>& body);

// The same with a second communicator per rank for control traffic (rank agreement, stop
// requests) that never interleaves with the engine's collectives: each communicator
// orders its own collectives, and the engine's may still be in flight between steps.
// A failing rank aborts both.
using RanksBody = std::function<Status(Communicator& engine, Communicator& control)>;
Status RunRanksWithControl(const Options& options, const RanksBody& body);

}  // namespace strata
