// `strata report metrics.jsonl [--trace F.json] --out DIR`: reads the run's files (every
// problem named before anything is written), then writes DIR/index.html (see report.h).
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/atomic_file.h"
#include "report/report.h"
#include "report/report_run.h"

namespace strata {

Status RunReport(const std::string& metrics_path, const std::string& trace_path,
                 const std::string& out_dir) {
  ASSIGN_OR_RETURN(const std::vector<nlohmann::json> metrics, ReadMetrics(metrics_path));
  std::optional<std::vector<StepOverlap>> overlap;
  if (!trace_path.empty()) {
    ASSIGN_OR_RETURN(const nlohmann::json trace, ReadTrace(trace_path));
    StatusOr<std::vector<StepOverlap>> summary = SummarizeTrace(trace);
    if (!summary.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(trace_path, ": ", summary.status().message()));
    }
    overlap = std::move(summary).value();
  }
  ASSIGN_OR_RETURN(const std::string chart_js, LoadChartJs());
  RETURN_IF_ERROR(CheckOutputDirectory(out_dir, "report: --out directory"));
  std::error_code error;
  std::filesystem::create_directories(out_dir, error);
  if (error || !std::filesystem::is_directory(out_dir)) {
    return absl::PermissionDeniedError(
        absl::StrCat("report: --out ", out_dir, " is not a directory that can be made"));
  }
  const std::string page = RenderReport(
      absl::StrCat("strata run: ", std::filesystem::path(metrics_path).filename().string()),
      metrics, overlap, chart_js);
  const std::string path = out_dir + "/index.html";
  RETURN_IF_ERROR(WriteFileAtomically(path, page, "report: --out page"));
  const std::string traced = overlap ? absl::StrCat(", ", overlap->size(), " traced") : "";
  std::printf("report: %s (%zu steps%s)\n", path.c_str(), metrics.size(), traced.c_str());
  return absl::OkStatus();
}

}  // namespace strata
