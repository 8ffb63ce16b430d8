// The pread/pwrite thread-pool TransferBackend; see pread_backend.h.
#include "nvme/pread_backend.h"

#include <unistd.h>

#include <cerrno>

namespace strata::nvme {

PreadBackend::PreadBackend(uint32_t num_threads) {
  workers_.reserve(num_threads);
  for (uint32_t i = 0; i < num_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

PreadBackend::~PreadBackend() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void PreadBackend::Start(const std::vector<Transfer*>& transfers) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    work_.insert(work_.end(), transfers.begin(), transfers.end());
  }
  if (transfers.size() == 1) {
    work_ready_.notify_one();
  } else {
    work_ready_.notify_all();
  }
}

void PreadBackend::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_ready_.wait(lock, [this] { return stopping_ || !work_.empty(); });
    // Stop only once the queue is empty: the engine drains first, so this is a safeguard.
    if (work_.empty()) return;
    Transfer* transfer = work_.front();
    work_.pop_front();
    lock.unlock();
    ssize_t result;
    do {
      result = transfer->op == IoOp::kRead
                   ? ::pread(transfer->fd, transfer->buffer, transfer->length,
                             static_cast<off_t>(transfer->offset))
                   : ::pwrite(transfer->fd, transfer->buffer, transfer->length,
                              static_cast<off_t>(transfer->offset));
    } while (result < 0 && errno == EINTR);
    const int64_t raw = result < 0 ? -static_cast<int64_t>(errno) : result;
    lock.lock();
    done_.push_back({transfer, raw});
    results_ready_.notify_one();
  }
}

Status PreadBackend::Reap(bool block, std::chrono::steady_clock::time_point deadline,
                          std::vector<RawResult>* results) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (block && done_.empty()) {
    if (deadline == std::chrono::steady_clock::time_point::max()) {
      results_ready_.wait(lock, [this] { return !done_.empty(); });
    } else {
      results_ready_.wait_until(lock, deadline, [this] { return !done_.empty(); });
    }
  }
  results->insert(results->end(), done_.begin(), done_.end());
  done_.clear();
  return Status();
}

}  // namespace strata::nvme
