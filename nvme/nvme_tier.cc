// The I/O thread over the NvmeStore; see nvme_tier.h.
#include "nvme/nvme_tier.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "core/logging.h"

namespace strata {
namespace {

constexpr uint64_t kPartBits = 4;  // store tag = ticket << kPartBits | part index
constexpr int kIoThreadNice = -10;  // the I/O thread's CPU priority (see Loop)

bool SharesKind(const std::vector<NvmeTier::Part>& a, const std::vector<NvmeTier::Part>& b) {
  for (const auto& x : a) {
    for (const auto& y : b) {
      if (x.kind == y.kind) return true;
    }
  }
  return false;
}

}  // namespace

StatusOr<std::unique_ptr<NvmeTier>> NvmeTier::Create(const NvmeStoreOptions& options,
                                                      const std::vector<ExtentSpec>& extents) {
  ASSIGN_OR_RETURN(std::unique_ptr<NvmeStore> store, NvmeStore::Create(options, extents));
  std::unique_ptr<NvmeTier> tier(new NvmeTier(std::move(store)));
  tier->thread_ = std::thread([raw = tier.get()] { raw->Loop(); });
  return tier;
}

NvmeTier::NvmeTier(std::unique_ptr<NvmeStore> store) : store_(std::move(store)) {}

NvmeTier::~NvmeTier() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Held writes never released cannot run: drop them so the drain ends.
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (!it->released && it->submitted == 0) {
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    stopping_ = true;
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

NvmeTier::Ticket NvmeTier::Read(int unit, std::vector<Part> parts) {
  return Post(unit, false, std::move(parts), false, nullptr);
}

NvmeTier::Ticket NvmeTier::ReadAfter(int unit, std::vector<Part> parts, Ticket after) {
  return Post(unit, false, std::move(parts), after != 0, nullptr, after);
}

NvmeTier::Ticket NvmeTier::Write(int unit, std::vector<Part> parts, bool held) {
  return Post(unit, true, std::move(parts), held, nullptr);
}

NvmeTier::Ticket NvmeTier::WriteAfter(int unit, std::vector<Part> parts, Event* release_after) {
  return Post(unit, true, std::move(parts), release_after != nullptr, release_after);
}

NvmeTier::Ticket NvmeTier::Post(int unit, bool write, std::vector<Part> parts, bool held,
                                Event* release_after, Ticket after) {
  std::lock_guard<std::mutex> lock(mutex_);
  Request request;
  request.ticket = next_ticket_++;
  request.unit = unit;
  request.write = write;
  request.released = !held;
  request.release_after = release_after;
  request.after = after;
  request.parts = std::move(parts);
  const Ticket ticket = request.ticket;
  if (request.parts.empty() || request.parts.size() >= (1u << kPartBits)) {
    request.status = absl::InvalidArgumentError(
        absl::StrCat("nvme tier: a request needs 1..", (1u << kPartBits) - 1, " extents"));
    failed_[ticket] = request.status;
    if (first_error_.ok()) first_error_ = request.status;
    return ticket;
  }
  for (const Part& part : request.parts) {  // counted when posted: see bytes_read()
    (write ? bytes_written_ : bytes_read_) += store_->PaddedBytes(unit, part.kind);
  }
  queue_.push_back(std::move(request));
  work_cv_.notify_all();
  return ticket;
}

void NvmeTier::Release(Ticket ticket) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Request& request : queue_) {
    if (request.ticket == ticket) request.released = true;
  }
  work_cv_.notify_all();
}

bool NvmeTier::Outstanding(Ticket ticket) const {
  for (const Request& request : queue_) {
    if (request.ticket == ticket) return true;
  }
  return false;
}

bool NvmeTier::Done(Ticket ticket) {
  std::lock_guard<std::mutex> lock(mutex_);
  return ticket < next_ticket_ && !Outstanding(ticket);
}

Status NvmeTier::Wait(Ticket ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return !Outstanding(ticket); });
  auto it = failed_.find(ticket);
  return it == failed_.end() ? absl::OkStatus() : it->second;
}

Status NvmeTier::Drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  // Writes held on an event count: their event completes once its stream gets there.
  done_cv_.wait(lock, [&] {
    for (const Request& request : queue_) {
      if (request.released || request.release_after != nullptr || request.after != 0) {
        return false;
      }
    }
    return true;
  });
  Status error = first_error_;
  first_error_ = absl::OkStatus();
  return error;
}

uint64_t NvmeTier::bytes_read() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_read_;
}

uint64_t NvmeTier::bytes_written() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_written_;
}

double NvmeTier::busy_ms() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!busy_) return busy_ms_;
  return busy_ms_ + std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                              busy_since_)
                        .count();
}

bool NvmeTier::CanStart(const Request& request) const {
  for (const Request& earlier : queue_) {
    if (&earlier == &request) return true;
    if (earlier.unit == request.unit && (earlier.write || request.write) &&
        SharesKind(earlier.parts, request.parts)) {
      return false;
    }
  }
  return true;
}

void NvmeTier::Finish(Request& request) {
  if (!request.status.ok()) {
    failed_[request.ticket] = request.status;
    if (first_error_.ok()) first_error_ = request.status;
  }
}

void NvmeTier::Loop() {
  // The disk waits on this thread's submissions and completions: ahead of the compute
  // threads for the CPU (measured on 2 shared cores: the disk then moves the optimizer's
  // bytes at its own rates instead of ~70-90% of them). Needs CAP_SYS_NICE; without it
  // the thread keeps the default priority, said once.
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), kIoThreadNice) != 0) {
    static std::once_flag said;
    std::call_once(said, [] {
      spdlog::info("nvme: the I/O thread keeps the default CPU priority ({}); under full CPU "
                   "load the disk may wait for it",
                   std::strerror(errno));
    });
  }
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    // Holds whose event has completed are released.
    bool watching = false;
    for (Request& request : queue_) {
      if (!request.released && request.after != 0 && !Outstanding(request.after)) {
        request.released = true;
      }
      if (request.released || request.release_after == nullptr) continue;
      if (request.release_after->Query()) {
        request.released = true;
      } else {
        watching = true;
      }
    }
    // Submit what may start, in posting order.
    for (Request& request : queue_) {
      if (!request.released || request.submitted > 0 || !CanStart(request)) continue;
      for (size_t i = 0; i < request.parts.size(); ++i) {
        const Part& part = request.parts[i];
        const uint64_t tag = request.ticket << kPartBits | i;
        Status status = request.write
                            ? store_->SubmitWrite(request.unit, part.kind, part.buffer, tag)
                            : store_->SubmitRead(request.unit, part.kind, part.buffer, tag);
        ++request.submitted;
        if (!status.ok()) {
          request.status.Update(status);
          ++request.completed;  // never in flight
        }
      }
      // Submitted every part (some may have failed to submit).
      request.submitted = request.parts.size();
    }
    // Retire requests whose parts are all back.
    bool retired = false;
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (it->submitted == it->parts.size() && it->completed == it->parts.size()) {
        Finish(*it);
        it = queue_.erase(it);
        retired = true;
      } else {
        ++it;
      }
    }
    if (retired) {
      done_cv_.notify_all();
      continue;  // retiring may let others start
    }
    const bool busy = store_->in_flight() > 0;
    if (busy != busy_) {
      const auto now = std::chrono::steady_clock::now();
      if (busy) {
        busy_since_ = now;
      } else {
        busy_ms_ += std::chrono::duration<double, std::milli>(now - busy_since_).count();
      }
      busy_ = busy;
    }
    if (!busy) {
      if (stopping_ && queue_.empty()) return;
      if (stopping_) {
        // Only never-released holds may remain: drop them.
        bool any_runnable = false;
        for (const Request& request : queue_) any_runnable |= request.released;
        if (!any_runnable) {
          queue_.clear();
          done_cv_.notify_all();
          return;
        }
      }
      if (watching) {
        work_cv_.wait_for(lock, std::chrono::microseconds(200));
      } else {
        work_cv_.wait(lock);
      }
      continue;
    }
    // Wait for at least one completion without holding the lock.
    lock.unlock();
    StatusOr<std::vector<NvmeStore::Completion>> completions = store_->Wait(1);
    lock.lock();
    if (!completions.ok()) {
      if (first_error_.ok()) first_error_ = completions.status();
      continue;
    }
    for (const NvmeStore::Completion& completion : *completions) {
      const Ticket ticket = completion.tag >> kPartBits;
      for (Request& request : queue_) {
        if (request.ticket != ticket) continue;
        ++request.completed;
        request.status.Update(completion.status);
        break;
      }
    }
  }
}

}  // namespace strata
