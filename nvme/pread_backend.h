// Internal to nvme/: the pread/pwrite TransferBackend, for where io_uring is unavailable.
// A pool of worker threads takes transfers from a queue and runs one pread or pwrite each,
// exactly as the kernel would run one io_uring request: the raw result (bytes or -errno)
// goes back to ChunkedEngine, which owns retries, short transfers and errors, so both
// engines share one set of semantics.
// Invariants: every started transfer is answered exactly once; the destructor joins the
// workers (ChunkedEngine drains before destroying it, so no transfer is lost).
// Thread-safety: Start and Reap are called by the engine's driving thread; the queues
// between it and the workers are guarded by one mutex.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "nvme/engine_core.h"

namespace strata::nvme {

class PreadBackend final : public TransferBackend {
 public:
  explicit PreadBackend(uint32_t num_threads);
  ~PreadBackend() override;

  void Start(const std::vector<Transfer*>& transfers) override;
  Status Reap(bool block, std::chrono::steady_clock::time_point deadline,
              std::vector<RawResult>* results) override;

 private:
  void WorkerLoop();

  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable results_ready_;
  std::deque<Transfer*> work_;
  std::vector<RawResult> done_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace strata::nvme
