// `strata report METRICS [--trace F] --out DIR`: reads the run's files (every problem named
// before anything is written), then writes DIR/index.html (report/report.h renders it).
// Thread-safety: called once, from main.
#pragma once

#include <string>

#include "core/status.h"

namespace strata {

// `trace_path` may be "" (no overlap plots).
Status RunReport(const std::string& metrics_path, const std::string& trace_path,
                 const std::string& out_dir);

}  // namespace strata
