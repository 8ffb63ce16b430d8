// `strata bench nvme`: the I/O engine's sequential O_DIRECT read and write MB/s at several
// queue depths, against fio's io_uring engine on the same file and a plain pread loop over
// the same buffers, all in one run (nvme/disk_bench.h does the measuring).
#include <cstdio>

#include "bench/bench_nvme.h"
#include "core/logging.h"
#include "core/bytes.h"
#include "nvme/disk_bench.h"

namespace strata {

Status RunBenchNvme(const std::string& dir, const std::string& size, IoEngineKind engine) {
  InitLogging(0, 1);
  nvme::DiskBenchOptions options;
  options.dir = dir;
  ASSIGN_OR_RETURN(options.file_bytes, ParseBytes(size));
  options.engine = engine;
  ASSIGN_OR_RETURN(nvme::DiskBenchResult result, nvme::RunDiskBench(options));
  std::printf("%s", nvme::FormatDiskBench(result).c_str());
  return absl::OkStatus();
}

}  // namespace strata
