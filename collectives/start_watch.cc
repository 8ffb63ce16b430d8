// StartWatch: see start_watch.h.
#include "collectives/start_watch.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/logging.h"

namespace strata {

StartWatch::StartWatch(std::string who, double timeout_s,
                       std::function<void(const Status&, uint64_t sequence)> fail)
    : who_(std::move(who)),
      timeout_(
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s))),
      fail_(std::move(fail)) {}

StartWatch::~StartWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StartWatch::Issued(const CollectiveCall& call, const std::string& stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failed_ || stopping_) return;
  pending_.push_back({call, stream, Clock::now()});
  if (!thread_.joinable()) thread_ = std::thread([this] { Watch(); });
  cv_.notify_all();
}

void StartWatch::Started(uint64_t sequence) {
  std::lock_guard<std::mutex> lock(mutex_);
  while (!pending_.empty() && pending_.front().call.sequence <= sequence) pending_.pop_front();
  running_ = true;
  cv_.notify_all();
}

void StartWatch::Finished() {
  std::lock_guard<std::mutex> lock(mutex_);
  running_ = false;
  const Clock::time_point now = Clock::now();
  if (!pending_.empty() && pending_.front().since < now) pending_.front().since = now;
  cv_.notify_all();
}

void StartWatch::Watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_ && !failed_) {
    if (pending_.empty() || running_) {
      cv_.wait(lock);
      continue;
    }
    const Pending& oldest = pending_.front();
    const Clock::time_point deadline = oldest.since + timeout_;
    if (Clock::now() < deadline) {
      cv_.wait_until(lock, deadline);
      continue;
    }
    const double waited = std::chrono::duration<double>(Clock::now() - oldest.since).count();
    const Status status = absl::DeadlineExceededError(absl::StrCat(
        who_, ": ", DescribeCall(oldest.call), " issued on stream '", oldest.stream,
        "' did not start within ", std::chrono::duration<double>(timeout_).count(),
        " s (zero.comm_timeout_s; waited ", absl::SixDigits(waited),
        " s): the work queued before it on that stream has not finished (a task that hangs, "
        "or a wait for an event that is never recorded)"));
    const uint64_t sequence = oldest.call.sequence;
    failed_ = true;
    pending_.clear();
    lock.unlock();
    // Logged here: the thread that issued it may be blocked behind the same stuck work.
    spdlog::error("{}", status.ToString());
    fail_(status, sequence);
    lock.lock();
  }
}

}  // namespace strata
