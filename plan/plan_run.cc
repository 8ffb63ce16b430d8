// `strata plan`: see plan_run.h and plan.h.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "config/options_parse.h"
#include "core/atomic_file.h"
#include "core/cpu_info.h"
#include "core/input_file.h"
#include "core/run_inputs.h"
#include "plan/plan.h"
#include "plan/plan_probe.h"
#include "plan/plan_run.h"

namespace strata {
namespace {

// Where a probe's figures are kept between plans: $XDG_CACHE_HOME/strata or ~/.cache/strata.
std::string HardwareCachePath() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string dir = xdg != nullptr && *xdg != '\0'
                              ? std::string(xdg) + "/strata"
                              : std::string(home != nullptr ? home : "/tmp") + "/.cache/strata";
  return dir + "/hardware.json";
}

}  // namespace

Status RunPlan(const PlanArgs& args) {
  ASSIGN_OR_RETURN(const Options job, ParseOptions(args.config_path, args.sets));
  // The outputs, before any work: never over an input (the --config file is one now).
  if (args.hardware != "probe") {
    RETURN_IF_ERROR(NoteRunInputPath(args.hardware, "the --hardware file"));
  }
  if (!args.emit_path.empty()) RETURN_IF_ERROR(CheckWholeFileOutput(args.emit_path, "--emit file"));
  if (!args.save_hardware.empty()) {
    RETURN_IF_ERROR(CheckWholeFileOutput(args.save_hardware, "--save-hardware file"));
  }
  const int world = job.zero.world;
  // A cluster's shape, before any probe.
  if (args.nodes > 0 && world % args.nodes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plan: --nodes ", args.nodes, " does not divide zero.world=", world,
        " (the ranks per node are zero.world / --nodes)"));
  }
  if (args.nodes > 1 && args.inter_node_bandwidth <= 0 && args.hardware == "probe") {
    return absl::InvalidArgumentError(
        "plan: --nodes without --inter-node-bandwidth: a probe of this machine cannot measure "
        "the link between nodes (give it in bytes per second)");
  }
  Hardware hardware;
  if (args.hardware == "probe") {
    // A probe of this machine, cached (keyed by the CPU, the memory and the nvme_dir).
    const std::string cache = HardwareCachePath();
    const std::string key = ProbeSource(job);
    StatusOr<std::string> cached = ReadInputFile(cache, "hardware cache", kJsonInputLimit);
    StatusOr<Hardware> loaded = cached.ok() ? ParseHardware(*cached, cache)
                                            : StatusOr<Hardware>(cached.status());
    if (!args.reprobe && loaded.ok() && loaded->source == key) {
      hardware = *loaded;
      RETURN_IF_ERROR(FillMachineMemory(job, world, &hardware));
      std::cout << "hardware: cached probe " << cache << " (--reprobe measures again)\n";
    } else {
      std::cout << "hardware: probing this machine (a few seconds)...\n";
      ASSIGN_OR_RETURN(hardware, ProbeHardware(job, world));
      std::error_code error;
      std::filesystem::create_directories(std::filesystem::path(cache).parent_path(), error);
      if (!error) WriteFileAtomically(cache, HardwareJson(hardware)).IgnoreError();
    }
  } else {
    StatusOr<std::string> text = ReadInputFile(args.hardware, "--hardware file", kJsonInputLimit);
    if (!text.ok()) return Annotate(text.status(), "plan: cannot read --hardware");
    ASSIGN_OR_RETURN(hardware, ParseHardware(*text, args.hardware));
  }
  if (args.nodes > 0) {  // a cluster of such nodes
    hardware.nodes = args.nodes;
    hardware.ranks_per_node = world / args.nodes;
  }
  if (args.inter_node_bandwidth > 0) hardware.inter_node_network = args.inter_node_bandwidth;
  if (hardware.nodes > 1 && hardware.inter_node_network <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plan: ", hardware.nodes, " nodes but no rate between them: give "
        "--inter-node-bandwidth BYTES_PER_S (or inter_node_network in the hardware file)"));
  }
  if (!args.save_hardware.empty()) {
    RETURN_IF_ERROR(
        WriteFileAtomically(args.save_hardware, HardwareJson(hardware), "--save-hardware file"));
  }
  // Planning this machine's CPU backend: each GEMM and attention shape is timed here.
  std::optional<ShapeTimer> timer;
  if (args.hardware == "probe" && job.device.backend == BackendKind::kCpu) timer.emplace(job);
  ASSIGN_OR_RETURN(const Plan plan,
                   MakePlan(job, world, hardware, timer ? &*timer : nullptr));
  std::cout << RenderPlan(plan, hardware);
  if (!args.emit_path.empty()) {
    if (plan.recommended < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("plan: nothing fits, so nothing was written to ", args.emit_path));
    }
    RETURN_IF_ERROR(WriteFileAtomically(
        args.emit_path, FormatConfigJson(plan.configs[plan.recommended].options), "--emit file"));
    std::cout << "wrote " << args.emit_path << " (strata train --config " << args.emit_path
              << ")\n";
  }
  return absl::OkStatus();
}

}  // namespace strata
