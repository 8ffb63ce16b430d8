// MPI Communicator: the entry points of mpi_communicator.h. CreateMpiCommunicator checks the
// options, joins the process-wide MPI guard (mpi_process.h) and opens one communicator's
// State (mpi_state.h: the collectives, their deadline and the abort channel);
// MpiCommunicator enqueues each accepted collective on its stream as host work that runs it
// on the State. InstallMpiTerminationReport is defined in mpi_process.cc, next to the signal
// handler it installs.
// Invariant: the State outlives the communicator while collectives are still queued (the
// queued work holds a shared_ptr to it). Thread-safety: as Communicator.
#include "collectives/mpi_communicator.h"

#include <cmath>
#include <memory>
#include <utility>

#include "collectives/mpi_process.h"
#include "collectives/mpi_state.h"

namespace strata {
namespace {

using mpi_internal::Job;
using mpi_internal::MpiProcess;
using mpi_internal::State;

class MpiCommunicator : public CheckedCommunicator {
 public:
  explicit MpiCommunicator(std::shared_ptr<State> state) : state_(std::move(state)) {}

  int rank() const override { return state_->rank(); }
  int world_size() const override { return state_->size(); }
  int local_rank() const override { return state_->local_rank(); }
  int local_size() const override { return state_->local_size(); }

  void Abort(const std::string& reason) override { state_->Abort(reason); }

  std::string Describe() const override {
    return absl::StrCat("MPI rank ", rank(), " of ", world_size(), " on host ", state_->host());
  }

 private:
  Status Issue(const CollectiveCall& call, const void* input, void* output,
               Stream& stream) override {
    const Job job{call, input, output};
    std::shared_ptr<State> state = state_;
    state->Issued(call, stream.name());
    stream.EnqueueHost([state, job] { return state->Run(job); });
    return absl::OkStatus();
  }

  std::shared_ptr<State> state_;
};

}  // namespace

StatusOr<MpiWorld> GetMpiWorld() {
  ASSIGN_OR_RETURN(MpiProcess * process, MpiProcess::Get());
  return process->world();
}

StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(const MpiOptions& options) {
  if (!(options.timeout_s > 0) || !std::isfinite(options.timeout_s)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zero.comm_timeout_s must be a positive number of seconds, got ", options.timeout_s));
  }
  if (options.max_scratch_bytes < (4u << 10) || options.max_scratch_bytes > (1u << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MPI max_scratch_bytes must be within 4 KiB .. 1 GiB, got ", options.max_scratch_bytes));
  }
  ASSIGN_OR_RETURN(MpiProcess * process, MpiProcess::Get());
  auto state = std::make_shared<State>(process, options);
  RETURN_IF_ERROR(state->Open());
  return std::unique_ptr<Communicator>(new MpiCommunicator(std::move(state)));
}

}  // namespace strata
