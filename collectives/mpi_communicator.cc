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
#include <cstdlib>
#include <memory>
#include <utility>

#include "collectives/mpi_process.h"
#include "collectives/mpi_state.h"
#include "collectives/node_layout.h"
#include "core/bytes.h"

namespace strata {
namespace {

using mpi_internal::Job;
using mpi_internal::MpiProcess;
using mpi_internal::State;

// The node layout and byte counters of one communicator's State.
class StateTraffic : public NodeTraffic {
 public:
  explicit StateTraffic(const State* state) : state_(state) {}
  int node() const override { return state_->layout().node_of_rank[state_->rank()]; }
  int nodes() const override { return state_->layout().nodes; }
  int ranks_per_node() const override { return state_->layout().ranks_per_node; }
  TrafficBytes sent() const override { return state_->sent(); }
  uint64_t hierarchical_collectives() const override { return state_->hierarchical_collectives(); }
  StatusOr<NodeGroups> SplitByNode() const override;

 private:
  const State* state_;
};

class MpiCommunicator : public CheckedCommunicator {
 public:
  explicit MpiCommunicator(std::shared_ptr<State> state)
      : state_(std::move(state)), traffic_(state_.get()) {}

  const NodeTraffic* node_traffic() const override { return &traffic_; }

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
  StateTraffic traffic_;
};

StatusOr<NodeGroups> StateTraffic::SplitByNode() const {
  const NodeLayout& layout = state_->layout();
  if (!layout.blocks) {
    return absl::FailedPreconditionError(absl::StrCat(
        "splitting the ranks by node needs nodes of equal size in rank blocks; the layout is ",
        layout.Describe(), " (start the ranks with mpirun's default --map-by slot, or set "
        "STRATA_RANKS_PER_NODE)"));
  }
  const int k = layout.ranks_per_node;
  const int node = state_->rank() / k, local = state_->rank() % k;
  MpiOptions node_options = state_->options();
  node_options.ranks_per_node = k;  // one node of k ranks: all its traffic within the node
  auto node_state = std::make_shared<State>(state_->process(), node_options);
  RETURN_IF_ERROR(
      node_state->Open(node, absl::StrCat("node ", node, " (", layout.Describe(), ")")));
  MpiOptions rail_options = state_->options();
  rail_options.ranks_per_node = 1;  // one rank on each of n nodes: all its traffic across
  auto rail_state = std::make_shared<State>(state_->process(), rail_options);
  RETURN_IF_ERROR(rail_state->Open(
      k + local, absl::StrCat("rail ", local, " (", layout.Describe(), ")")));
  NodeGroups groups;
  groups.node.reset(new MpiCommunicator(std::move(node_state)));
  groups.rail.reset(new MpiCommunicator(std::move(rail_state)));
  return groups;
}

// The environment's STRATA_RANKS_PER_NODE and STRATA_MPI_HIERARCHICAL_MIN_BYTES, where set,
// replace the options' values (mpi_world.h).
Status ApplyEnvironment(MpiOptions& options) {
  if (const char* text = std::getenv("STRATA_RANKS_PER_NODE"); text != nullptr) {
    ASSIGN_OR_RETURN(options.ranks_per_node, ParseRanksPerNode(text));
  }
  if (const char* text = std::getenv("STRATA_MPI_HIERARCHICAL_MIN_BYTES"); text != nullptr) {
    if (std::string(text) == "never") {
      options.hierarchical_min_bytes = MpiOptions::kNeverHierarchical;
    } else {
      StatusOr<uint64_t> bytes = ParseBytes(text);
      if (!bytes.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("STRATA_MPI_HIERARCHICAL_MIN_BYTES='", text,
                         "': a byte size (\"0\", \"256KiB\") or \"never\": ",
                         bytes.status().message()));
      }
      options.hierarchical_min_bytes = *bytes;
    }
  }
  return absl::OkStatus();
}

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
  MpiOptions resolved = options;
  RETURN_IF_ERROR(ApplyEnvironment(resolved));
  if (resolved.ranks_per_node < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("MPI ranks_per_node must be 0 (from MPI) or >= 1, got ",
                     resolved.ranks_per_node));
  }
  ASSIGN_OR_RETURN(MpiProcess * process, MpiProcess::Get());
  auto state = std::make_shared<State>(process, resolved);
  RETURN_IF_ERROR(state->Open());
  return std::unique_ptr<Communicator>(new MpiCommunicator(std::move(state)));
}

}  // namespace strata
