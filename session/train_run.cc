// `strata train`: see train_run.h.
#include <algorithm>
#include <cstdint>
#include <cstdio>

#include <signal.h>

#include "checkpoint/checkpoint.h"
#include "collectives/agreement.h"
#include "config/options_parse.h"
#include "core/atomic_file.h"
#include "core/bytes.h"
#include "core/logging.h"
#include "core/run_identity.h"
#include "core/trace.h"
#include "runtime/quantized_base.h"
#include "session/file_checks.h"
#include "session/interrupt.h"
#include "session/content_agreement.h"
#include "session/metrics.h"
#include "session/node_shares.h"
#include "session/rank_agreement.h"
#include "session/ranks.h"
#include "session/session.h"
#include "session/train_run.h"

namespace strata {
namespace {

// The most the ranks' traces may hold together for rank 0 to merge them (every rank
// receives all of them on the way: GatherTexts).
constexpr uint64_t kMergedTraceLimit = 256ull << 20;

nlohmann::json StepRecord(const StepReport& r) {
  nlohmann::json record = {
      {"step", r.step + 1},
      {"loss", r.result.loss},
      {"lr", r.lr},
      {"grad_norm", r.result.grad_norm},
      {"ms_per_step", r.ms_per_step},
      {"forward_ms", r.result.forward_ms},
      {"backward_ms", r.result.backward_ms},
      {"optimizer_ms", r.result.optimizer_ms},
      {"optimizer_exposed_ms", r.result.optimizer_exposed_ms},
      {"tokens_per_s", r.tokens_per_s},
      {"peak_bytes", {{"device", r.device.peak_bytes}, {"host", r.host.peak_bytes}}},
  };
  nlohmann::json state;
  for (int k = 0; k < kNumStateKinds; ++k) {
    state[StateKindName(static_cast<StateKind>(k))] = {
        {"device", r.device.peak_by_kind[k]}, {"host", r.host.peak_by_kind[k]}};
  }
  record["state_bytes"] = state;
  if (r.val_loss) record["val_loss"] = *r.val_loss;
  record["gathers"] = r.result.gather.gathers;
  record["prefetch_deviations"] = r.result.gather.deviations;
  record["compute_stall_ms"] = r.result.compute_stall_ms;
  record["compute_idle_ms"] = r.result.compute_idle_ms;
  record["split_units"] = r.result.split_units;
  record["driver_calls"] = r.result.driver_calls;
  record["nvme_bytes"] = {{"read", r.result.nvme_read_bytes},
                          {"written", r.result.nvme_written_bytes}};
  record["nvme_busy_ms"] = {{"optimizer", r.result.nvme_busy_ms},
                            {"params", r.result.param_nvme_busy_ms}};
  if (r.comm_bytes) {
    record["comm_bytes"] = {{"within_node", r.comm_bytes->within_node},
                            {"across_nodes", r.comm_bytes->across_nodes}};
  }
  if (r.checkpoint) {
    // ms: what checkpoints held this step up (the whole write, or in the background the
    // completion and any snapshot).
    record["checkpoint"] = {{"path", *r.checkpoint}, {"ms", r.checkpoint_ms}};
  }
  if (r.checkpoint_started > 0) {  // a background checkpoint's snapshot after this step
    record["checkpoint_started"] = {{"step", r.checkpoint_started}, {"ms", r.checkpoint_ms}};
  }
  return record;
}

// Logs what was set up (rank 0).
void LogSetUp(TrainingSession& session, const Options& options) {
  spdlog::info("data: {}", session.dataset().description);
  spdlog::info("model: {}", session.model().Describe());
  spdlog::info("device: {}", session.device().Describe());
  const PoolStats start = session.device().pool(Tier::kDevice).Stats();
  spdlog::info(
      "device tier of rank 0 after set-up: {} (params {}, grads {}, optimizer {}, "
      "activations {})",
      FormatBytes(start.current_bytes), FormatBytes(start.current_by_kind[0]),
      FormatBytes(start.current_by_kind[1]), FormatBytes(start.current_by_kind[2]),
      FormatBytes(start.current_by_kind[3]));
  const PoolStats host = session.device().pool(Tier::kHost).Stats();
  spdlog::info(
      "host tier of rank 0 after set-up (pinned with CUDA): {} of {} "
      "(tiers.host_memory_limit) (params {}, grads {}, optimizer {})",
      FormatBytes(host.current_bytes), FormatBytes(host.capacity_bytes),
      FormatBytes(host.current_by_kind[0]), FormatBytes(host.current_by_kind[1]),
      FormatBytes(host.current_by_kind[2]));
  if (const std::string base = DescribeQuantizedBase(session.model().units(),
                                                     options.lora.base_dtype,
                                                     options.train.dtype);
      options.lora.enabled() && !base.empty()) {
    spdlog::info("{}", base);
  }
  if (options.zero.param_update == ParamUpdate::kDelayed) {
    spdlog::info(
        "zero.param_update=delayed: each step's CPU Adam runs during the next step, whose "
        "gradients are computed on params one update old (not the exact trajectory)");
  }
}

// One rank's run, from the agreement on the configuration to the last step: each step's
// stop check, the step, and (lead rank) its progress line and metrics record.
class RankRun {
 public:
  RankRun(const TrainArgs& args, const Options& options, Communicator& communicator,
          Communicator& control)
      : args_(args), options_(options), communicator_(communicator), control_(control),
        lead_(communicator.rank() == 0) {}

  Status Run() {
    RETURN_IF_ERROR(SetUp());
    GracefulStop graceful;  // from here a first signal stops at the next step boundary
    last_checkpoint_step_ = session_->first_step();
    for (int step = session_->first_step(); step < options_.train.steps; ++step) {
      if (lead_) {
        MaybeRaiseFaultSignal(args_.faults.signal ? &*args_.faults.signal : nullptr, step);
      }
      ASSIGN_OR_RETURN(const int stop, AgreeOnStop(control_, StopSignal()));
      if (stop != 0) return StopAfter(step, stop);
      StatusOr<StepReport> stepped = session_->Step(step);
      if (!stepped.ok()) {
        // What was traced up to the failure is what a user debugging it wants to see.
        if (Status written = WriteTrace(/*merge=*/false); !written.ok()) {
          spdlog::warn("the trace of the failed run could not be written: {}",
                       std::string(written.message()));
        }
        return stepped.status();
      }
      RETURN_IF_ERROR(Report(step, std::move(stepped).value()));
    }
    RETURN_IF_ERROR(session_->Finish());
    return WriteTrace(/*merge=*/true);
  }

 private:
  // The run's first collective (the ranks agree on the configuration, or stop), the
  // session, and on the lead rank the checkpoint directory, the metrics file and the log.
  Status SetUp() {
    RETURN_IF_ERROR(AgreeOnStart(control_, FormatResolved(options_)));
    ASSIGN_OR_RETURN(const std::vector<std::string> hosts, GatherHostNames(control_));
    if (lead_) {
      spdlog::info("resolved configuration:\n{}", FormatResolved(options_));
      spdlog::info("ranks: {} ({}), run {}; {}", communicator_.world_size(),
                   communicator_.Describe(), RunId(), DescribeNodeLayout(hosts));
    }
    // The same content at the same paths on every rank (and node), before any is used.
    RETURN_IF_ERROR(AgreeOnContent(control_, ContentClaims(options_), hosts).status());
    ASSIGN_OR_RETURN(session_, TrainingSession::Create(options_, &communicator_,
                                                       !args_.trace_path.empty(), args_.faults));
    last_checkpoint_ = session_->resumed_from();
    // Every rank's trace on rank 0's timeline (measured now, before any step).
    RETURN_IF_ERROR(session_->AlignTraceClock(control_));
    // What each rank got of its node: its local rank (its GPU) and its tiers (its share of
    // the node's memory), as its launcher told MPI (mpirun, srun with PMIx) or as threads.
    RankPlace place;
    place.host = hosts[communicator_.rank()];
    place.local_rank = communicator_.local_rank();
    place.local_size = communicator_.local_size();
    place.device_bytes = session_->device().pool(Tier::kDevice).Stats().capacity_bytes;
    place.host_bytes = session_->device().pool(Tier::kHost).Stats().capacity_bytes;
    ASSIGN_OR_RETURN(const std::vector<RankPlace> places, GatherRankPlaces(control_, place));
    if (!lead_) return absl::OkStatus();
    spdlog::info("node shares: {}", DescribeNodeShares(places));
    if (const std::string mismatch = NodePlaceMismatch(places); !mismatch.empty()) {
      spdlog::warn("MPI's grouping of ranks into nodes differs from their host names ({}): "
                   "each rank's GPU and memory share follow MPI's grouping", mismatch);
    }
    ASSIGN_OR_RETURN(checkpoint_lock_,
                     ClaimCheckpointDir(options_, CheckpointBytes(session_->model())));
    if (!options_.train.checkpoint_dir.empty()) {
      for (const std::string& path : RemovePartialCheckpoints(options_.train.checkpoint_dir)) {
        spdlog::info("removed {}, a checkpoint an earlier run did not finish", path);
      }
      if (last_checkpoint_.empty()) {
        last_checkpoint_ = LatestCheckpoint(options_.train.checkpoint_dir);
      }
    }
    ASSIGN_OR_RETURN(metrics_, MetricsWriter::Open(args_.metrics_path,
                                                   !options_.train.resume.empty()));
    LogSetUp(*session_, options_);
    if (!session_->resumed_from().empty()) {
      spdlog::info("resumed from {}: steps {} to {}", session_->resumed_from(),
                   session_->first_step() + 1, options_.train.steps);
    }
    return absl::OkStatus();
  }

  // The ranks stop together after `step` for signal `stop`: SIGTERM first writes a
  // checkpoint of the steps done (schedulers send it before they preempt).
  Status StopAfter(int step, int stop) {
    NoteAgreedStop(stop);  // a rank that did not get the signal exits with its status too
    // A background checkpoint still being written is completed first (collective).
    ASSIGN_OR_RETURN(const auto completed, session_->FinishPendingCheckpoint());
    if (completed) {
      last_checkpoint_ = completed->path;
      last_checkpoint_step_ = completed->step;
    }
    std::string saved;
    if (stop == SIGTERM && !options_.train.checkpoint_dir.empty() &&
        step > last_checkpoint_step_) {
      if (lead_) spdlog::warn("SIGTERM: writing a checkpoint of step {} before stopping", step);
      ASSIGN_OR_RETURN(last_checkpoint_, session_->Checkpoint(step));
      saved = " (written on SIGTERM)";
    }
    RETURN_IF_ERROR(session_->Finish());
    RETURN_IF_ERROR(WriteTrace(/*merge=*/true));
    if (lead_) {
      SetInterruptSummary(absl::StrCat(
          "interrupted by ", SignalName(stop), " after step ", step, " of ", options_.train.steps,
          "; last checkpoint: ",
          last_checkpoint_.empty() ? std::string("none") : last_checkpoint_ + saved));
    }
    return absl::CancelledError(absl::StrCat("stopped by ", SignalName(stop)));
  }

  // A finished step: its checkpoint remembered; on the lead rank its metrics record and,
  // when train.log_every says so, its progress line.
  Status Report(int step, const StepReport& report) {
    if (report.checkpoint) {
      last_checkpoint_ = *report.checkpoint;
      last_checkpoint_step_ = report.checkpoint_step;
    }
    if (!lead_) return absl::OkStatus();
    if (report.checkpoint_completed_before) {
      spdlog::info("checkpoint: {}", *report.checkpoint_completed_before);
    }
    if (report.checkpoint) {
      spdlog::info("checkpoint: {} ({:.1f} s{})", *report.checkpoint, report.checkpoint_ms / 1e3,
                   options_.train.checkpoint_async ? " held up training" : "");
    }
    RETURN_IF_ERROR(metrics_->Write(StepRecord(report)));
    const bool last = step + 1 == options_.train.steps;
    if (step == 0 || (step + 1) % options_.train.log_every == 0 || last || report.val_loss) {
      std::string val =
          report.val_loss ? absl::StrFormat(" | val %.4f", *report.val_loss) : std::string();
      spdlog::info("step {:>5}/{} | loss {:.4f}{} | lr {:.2e} | {:.1f} ms | {:.0f} tok/s | "
                   "peak device {} host {}",
                   step + 1, options_.train.steps, report.result.loss, val, report.lr,
                   report.ms_per_step, report.tokens_per_s,
                   FormatBytes(report.device.peak_bytes), FormatBytes(report.host.peak_bytes));
    }
    return absl::OkStatus();
  }

  // The trace, whenever training ends (finished, failed or stopped by a signal): each
  // rank's own file, and where the ranks ended together (`merge`: not after a failed step,
  // when the others may be gone) one file of all ranks, written by rank 0 at the path
  // given, unless the ranks' traces together exceed kMergedTraceLimit.
  Status WriteTrace(bool merge) {
    if (args_.trace_path.empty()) return absl::OkStatus();
    const int world = communicator_.world_size();
    const std::string path = TracePathOfRank(args_.trace_path, communicator_.rank(), world);
    RETURN_IF_ERROR(session_->WriteTrace(path));
    const Trace& trace = *session_->trace();
    std::string merged;
    if (merge && world > 1) {
      const std::string mine = trace.ToJson();
      ASSIGN_OR_RETURN(const std::vector<uint32_t> sizes,
                       AgreeOnOutcomes(control_, static_cast<uint32_t>(
                                                     std::min<size_t>(mine.size(), UINT32_MAX))));
      const uint64_t longest = *std::max_element(sizes.begin(), sizes.end());
      if (longest * world > kMergedTraceLimit) {
        if (lead_) {
          spdlog::warn("trace: the ranks' traces are too large to merge ({} ranks, up to {} "
                       "each; limit {} in all): open the per-rank files together instead",
                       world, FormatBytes(longest), FormatBytes(kMergedTraceLimit));
        }
      } else {
        ASSIGN_OR_RETURN(const std::vector<std::string> all, GatherTexts(control_, mine));
        if (lead_) {
          ASSIGN_OR_RETURN(const std::string text, MergeTraces(all));
          RETURN_IF_ERROR(Annotate(WriteFileAtomically(args_.trace_path, text), "trace"));
          merged = absl::StrCat(" (every rank's file merged into ", args_.trace_path, ")");
        }
      }
    }
    if (lead_) {
      spdlog::info("trace: {}{}{} ({} events, steps {}){}", path,
                   world > 1 ? " and one file per other rank" : "", merged, trace.events(),
                   options_.train.trace_steps,
                   trace.dropped() > 0
                       ? absl::StrCat("; truncated: ", trace.dropped(), " events past the bound")
                       : std::string());
    }
    return absl::OkStatus();
  }

  const TrainArgs& args_;
  const Options& options_;
  Communicator& communicator_;
  Communicator& control_;
  const bool lead_;
  std::unique_ptr<TrainingSession> session_;
  std::unique_ptr<MetricsWriter> metrics_;  // lead rank only
  std::unique_ptr<DirLock> checkpoint_lock_;  // lead rank, with train.checkpoint_dir
  std::string last_checkpoint_;
  int last_checkpoint_step_ = 0;
};

}  // namespace

Status RunTrain(const TrainArgs& args) {
  InstallInterruptHandlers();
  ASSIGN_OR_RETURN(Options options, ParseOptions(args.config_path, args.sets));
  // No output may be an input; the inputs themselves are checked as they are read (the data
  // in TrainingSession::Create), all before any output is opened.
  RETURN_IF_ERROR(CheckOutputsAreNotInputs(
      args.config_path, {{"--metrics", args.metrics_path, false}, {"--trace", args.trace_path, true}},
      options));
  return RunRanksWithControl(options, [&](Communicator& communicator,
                                           Communicator& control) -> Status {
    return RankRun(args, options, communicator, control).Run();
  });
}

}  // namespace strata
