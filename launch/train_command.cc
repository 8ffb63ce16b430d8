// `strata train`: parse and validate options, log them once, train with a progress line
// per step and an optional JSONL metrics file.
#include <cstdio>

#include "launch/commands.h"
#include "launch/metrics.h"
#include "launch/ranks.h"
#include "launch/session.h"
#include "core/logging.h"
#include "launch/options_parse.h"

namespace strata {
namespace {

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
  if (r.checkpoint) {
    record["checkpoint"] = {{"path", *r.checkpoint}, {"ms", r.checkpoint_ms}};
  }
  return record;
}

}  // namespace

Status RunTrain(const CommandArgs& args) {
  ASSIGN_OR_RETURN(Options options, ParseOptions(args.config_path, args.sets));
  return RunRanks(options, [&](Communicator& communicator) -> Status {
    const bool lead = communicator.rank() == 0;
    if (lead) {
      spdlog::info("resolved configuration:\n{}", FormatResolved(options));
      spdlog::info("ranks: {} ({})", communicator.world_size(), communicator.Describe());
    }
    std::unique_ptr<MetricsWriter> metrics;
    if (lead) {
      ASSIGN_OR_RETURN(metrics, MetricsWriter::Open(args.metrics_path,
                                                         !options.train.resume.empty()));
    }
    ASSIGN_OR_RETURN(auto session, TrainingSession::Create(options, &communicator));
    if (lead) {
      spdlog::info("data: {}", session->dataset().description);
      spdlog::info("model: {}", session->model().Describe());
      spdlog::info("device: {}", session->device().Describe());
      const PoolStats start = session->device().pool(Tier::kDevice).Stats();
      spdlog::info(
          "device tier of rank 0 after set-up: {} (params {}, grads {}, optimizer {}, "
          "activations {})",
          FormatBytes(start.current_bytes), FormatBytes(start.current_by_kind[0]),
          FormatBytes(start.current_by_kind[1]), FormatBytes(start.current_by_kind[2]),
          FormatBytes(start.current_by_kind[3]));
      const PoolStats host = session->device().pool(Tier::kHost).Stats();
      spdlog::info(
          "host tier of rank 0 after set-up (pinned with CUDA): {} of {} "
          "(tiers.host_memory_limit) (params {}, grads {}, optimizer {})",
          FormatBytes(host.current_bytes), FormatBytes(host.capacity_bytes),
          FormatBytes(host.current_by_kind[0]), FormatBytes(host.current_by_kind[1]),
          FormatBytes(host.current_by_kind[2]));
      if (options.zero.param_update == ParamUpdate::kDelayed) {
        spdlog::info(
            "zero.param_update=delayed: each step's CPU Adam runs during the next step, whose "
            "gradients are computed on params one update old (not the exact trajectory)");
      }
    }
    if (lead && !session->resumed_from().empty()) {
      spdlog::info("resumed from {}: steps {} to {}", session->resumed_from(),
                   session->first_step() + 1, options.train.steps);
    }
    for (int step = session->first_step(); step < options.train.steps; ++step) {
      ASSIGN_OR_RETURN(StepReport report, session->Step(step));
      if (!lead) continue;
      if (report.checkpoint) {
        spdlog::info("checkpoint: {} ({:.1f} s)", *report.checkpoint, report.checkpoint_ms / 1e3);
      }
      RETURN_IF_ERROR(metrics->Write(StepRecord(report)));
      const bool last = step + 1 == options.train.steps;
      if (step == 0 || (step + 1) % options.train.log_every == 0 || last || report.val_loss) {
        std::string val =
            report.val_loss ? absl::StrFormat(" | val %.4f", *report.val_loss) : std::string();
        spdlog::info("step {:>5}/{} | loss {:.4f}{} | lr {:.2e} | {:.1f} ms | {:.0f} tok/s | "
                     "peak device {} host {}",
                     step + 1, options.train.steps, report.result.loss, val, report.lr,
                     report.ms_per_step, report.tokens_per_s,
                     FormatBytes(report.device.peak_bytes), FormatBytes(report.host.peak_bytes));
      }
    }
    return session->Finish();
  });
}

}  // namespace strata
