// The disk benchmark behind `strata bench nvme --dir DIR` (and nvme/nvme_bench_main):
// sequential read and write throughput of an IoEngine on one file, next to fio on the same
// file in the same run and a plain synchronous pread loop over the same buffers, so that
// figures are quoted as ratios (the disk of a VM varies between runs and with its
// neighbours' load; engine and reference passes alternate, and each figure is the median
// of its passes).
// Avoiding the page cache: everything is O_DIRECT, the file is written with O_DIRECT before
// it is read, and nothing is dropped globally. The engine uses IoBuffers (2 MiB huge pages
// by default, registered with io_uring where allowed). fio runs in its best configuration:
// io_uring, O_DIRECT, fixed (registered) buffers on SysV huge pages (iomem=shmhuge),
// registered files. Huge pages for fio must be reserved: with reserve_huge_pages the bench
// raises vm.nr_hugepages for the run (and restores it) and lifts the locked-memory limit to
// its hard maximum, saying what it did; where it cannot, fio uses 4 KiB-page buffers and
// the output says so.
// Goals (reliability issue): at the best depth of each, the engine's reads and writes
// >= 1.0x fio's; at each depth from 4 to 32, >= 0.95x; and the engine at its shallowest
// depth >= 0.95x the plain loop over the same buffers. A missing fio is stated, not an
// error; a goal not met says so.
// Thread-safety: RunDiskBench is a plain function; do not run two on one file at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nvme/io_engine.h"
#include "core/status.h"

namespace strata::nvme {

struct DiskBenchOptions {
  // Directory for the test file (created, preallocated, removed afterwards). Required.
  std::string dir;
  // Size of the test file; large enough not to be trivially cached. Default 1 GiB.
  uint64_t file_bytes = 1ull << 30;
  // Size of each request (engine, fio and the plain loop alike). Default 1 MiB.
  uint64_t request_bytes = 1ull << 20;
  // Queue depths measured for the engine and fio. Default 1, 4, 8, 16, 32.
  std::vector<uint32_t> queue_depths = {1, 4, 8, 16, 32};
  // nvme.engine for the engine under test. Default kAuto.
  IoEngineKind engine = IoEngineKind::kAuto;
  // Engine buffers on 2 MiB huge pages (the default, as the NVMe tier uses).
  bool huge_page_buffers = true;
  // Also measure engine reads into 4 KiB-page buffers at the deepest depth. Default true.
  bool measure_small_page_buffers = true;
  // Run fio (fio_path, looked up in PATH) for the reference figures. Default true.
  bool run_fio = true;
  std::string fio_path = "fio";
  // Raise vm.nr_hugepages (restored afterwards) and RLIMIT_MEMLOCK so fio gets huge-page
  // fixed buffers. Default true; tests turn it off (no system settings change).
  bool reserve_huge_pages = true;
  // Passes of each measurement, alternating engine and reference (fio, or the plain loop)
  // so that both see the same drift of a shared virtual disk; each figure is the median of
  // its passes (fio's figure is bimodal: its malloc'd 4 KiB pages are sometimes physically
  // contiguous, which the disk merges into fewer segments). Default 3.
  uint32_t passes = 3;
  // Keep the test file afterwards. Default false.
  bool keep_file = false;
};

// Throughputs are in MB/s (10^6 bytes per second), medians of the passes; 0 where not
// measured.
struct DepthFigures {
  uint32_t queue_depth = 0;
  double engine_write_mb_per_s = 0;
  double engine_read_mb_per_s = 0;
  double fio_write_mb_per_s = 0;
  double fio_read_mb_per_s = 0;
  double read_vs_fio = 0;   // engine read / fio read at this depth
  double write_vs_fio = 0;  // engine write / fio write at this depth
};

struct DiskBenchResult {
  std::string file;
  uint64_t file_bytes = 0;
  uint64_t request_bytes = 0;
  uint32_t passes = 0;
  EngineInfo engine;
  // The engine's buffers: huge pages asked for and obtained (bytes), and why not.
  bool buffers_huge_pages_requested = false;
  uint64_t buffer_bytes = 0;
  uint64_t buffer_huge_page_bytes = 0;
  std::string buffer_note;
  std::string transparent_huge_pages;  // THP mode of the machine

  std::vector<DepthFigures> depths;

  // Plain synchronous pread loop, one request at a time, over the same buffers and file.
  double plain_loop_read_mb_per_s = 0;
  // The engine at `compared_depth` in the same alternating passes as the plain loop.
  uint32_t compared_depth = 0;
  double engine_read_compared_mb_per_s = 0;
  // Engine reads into 4 KiB-page buffers at the deepest depth (0 if not measured).
  double engine_read_small_pages_mb_per_s = 0;

  bool fio_available = false;
  std::string fio_version;
  std::string fio_note;     // why fio figures are missing (not installed, failed, skipped)
  std::string fio_buffers;  // "fixed buffers on 2 MiB huge pages (shmhuge)" or the fallback
  std::string huge_page_note;  // what was reserved or raised for fio, or why not

  // Best depth of each (the highest median), and the ratios of the bests.
  double best_engine_read_mb_per_s = 0;
  double best_fio_read_mb_per_s = 0;
  double best_engine_write_mb_per_s = 0;
  double best_fio_write_mb_per_s = 0;
  double best_read_vs_fio = 0;
  double best_write_vs_fio = 0;
  // The lowest engine/fio ratio over the depths in [4, 32] measured (reads and writes),
  // and the depths below kGoalVsFioPerDepth.
  double worst_depth_ratio = 0;
  std::vector<std::string> depths_below_goal;  // e.g. "read at depth 16: 0.81"
  double read_vs_plain_loop = 0;               // engine_read_compared / plain_loop_read
  bool goal_vs_fio_best_met = false;   // both best ratios >= kGoalVsFioBest (false w/o fio)
  bool goal_vs_fio_depths_met = false; // every ratio at depths 4-32 >= kGoalVsFioPerDepth
  bool goal_vs_plain_loop_met = false; // read_vs_plain_loop >= kGoalReadVsPlainLoop
};

inline constexpr double kGoalVsFioBest = 1.0;
inline constexpr double kGoalVsFioPerDepth = 0.95;
inline constexpr double kGoalReadVsPlainLoop = 0.95;

// Runs the benchmark. Errors: bad options (every problem listed), not enough free space in
// `dir` (bytes needed and free), and I/O errors of the engine or the plain loop (naming
// file, offset, length). fio's absence or failure is reported in the result instead.
StatusOr<DiskBenchResult> RunDiskBench(const DiskBenchOptions& options);

// Human-readable figures, ratios and goal verdicts (several lines, ends with a newline).
std::string FormatDiskBench(const DiskBenchResult& result);

}  // namespace strata::nvme
