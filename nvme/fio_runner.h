// fio as the disk benchmark's reference (disk_bench.h; internal: in the disk_bench
// library's srcs): one fio run on the bench's file in fio's best configuration (io_uring,
// O_DIRECT, registered files, fixed buffers, on SysV huge pages where it can have them), its
// JSON output parsed into MB/s; and the huge pages those buffers need, reserved for the
// bench's lifetime where allowed.
// Invariants: fio's output files (<file>.fio.json, <file>.fio.log) are removed after each
// run, whatever its outcome; a HugePagesForFio restores vm.nr_hugepages when destroyed if it
// raised it (the locked-memory limit it lifts stays lifted for the process). A missing fio is
// NotFound (from the spawn's ENOENT), so the caller can say so instead of failing.
// Thread-safety: RunFio is a plain function (two on one file at once would share its output
// files: do not); a HugePagesForFio changes system settings, so at most one per process.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "nvme/io_engine.h"

namespace strata::nvme {

// Huge pages for fio's buffers: enough free 2 MiB pages for `bytes`, reserved for the
// bench's lifetime where allowed (vm.nr_hugepages raised, restored at destruction), and the
// locked-memory limit raised to its hard maximum (fixed buffers are locked).
class HugePagesForFio {
 public:
  HugePagesForFio(uint64_t bytes, bool reserve);
  ~HugePagesForFio();
  HugePagesForFio(const HugePagesForFio&) = delete;
  HugePagesForFio& operator=(const HugePagesForFio&) = delete;

  bool available() const { return available_; }
  const std::string& note() const { return note_; }

 private:
  int64_t original_ = -1;
  bool available_ = false;
  std::string note_;
};

// One sequential pass of fio over the whole file.
struct FioJob {
  std::string fio_path;  // the program, looked up in PATH
  std::string path;      // the test file, already at its full size
  IoOp op = IoOp::kRead;
  uint64_t request_bytes = 0;
  uint64_t file_bytes = 0;
  uint32_t depth = 1;
  bool huge_pages = false;  // buffers on huge pages (--iomem=shmhuge), else malloc'd
};

struct FioFigures {
  double mb_per_s = 0;  // 10^6 bytes per second
  std::string version;
};

// Runs `spec`. Errors: NotFound when fio is not installed; Internal (with the start of fio's
// log) when it exits non-zero or its JSON lacks the figure.
StatusOr<FioFigures> RunFio(const FioJob& spec);

}  // namespace strata::nvme
