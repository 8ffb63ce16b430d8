// Stream helpers shared by the state homes (tiers/) and the ZeRO components (runtime/):
// event lists, joins between streams, zeroed allocations, rotating events with held NVMe
// writes, deferred frees, a bound on how far the host runs ahead of a stream, and a timer
// of stream work. Internal: visible to tiers/ and runtime/ only.
// Thread-safety: each object is driven by one host thread (StreamTimer's total is read from
// any thread).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device/device.h"
#include "tiers/home_context.h"
#include "nvme/nvme_tier.h"

namespace strata {

// `count` new events of `device`.
StatusOr<std::vector<std::unique_ptr<Event>>> MakeEvents(Device& device, size_t count);

// Allocates `bytes` in `tier` and zeroes it: device memory on the compute stream, host
// memory right away (before any stream can touch it).
StatusOr<Buffer> AllocateZeroedIn(const HomeContext& ctx, Tier tier, StateKind kind,
                                  size_t bytes, const std::string& what);

// Records `event` on `after` and makes `waiter` wait for it: later work on `waiter` runs
// after everything enqueued on `after` so far. A no-op when they are the same stream.
Status Join(Device& device, Stream& waiter, Stream& after, Event& event);

// Events a host buffer set records in rotation, one per use, and the NVMe writes held on
// each (NvmeTier::WriteAfter): a write held on an event must be out before the event is
// recorded again (nvme_tier.h), which with several events per buffer set almost never
// waits.
class RotatingEvents {
 public:
  Status Create(Device& device, size_t count) {
    ASSIGN_OR_RETURN(events_, MakeEvents(device, count));
    held_.assign(count, {});
    return absl::OkStatus();
  }
  // Starts the next use: waits for the writes held on its event; returns the use's index.
  StatusOr<size_t> Next() {
    const size_t use = uses_++ % events_.size();
    for (const auto& [tier, ticket] : held_[use]) RETURN_IF_ERROR(tier->Wait(ticket));
    held_[use].clear();
    return use;
  }
  Event& operator[](size_t use) { return *events_[use]; }
  // The event of the use before `use` (the current one), or null for the first use.
  Event* previous(size_t use) {
    return uses_ > 1 ? events_[(use + events_.size() - 1) % events_.size()].get() : nullptr;
  }
  // `ticket` of `tier` is a write held on event `use`.
  void Hold(size_t use, NvmeTier* tier, NvmeTier::Ticket ticket) {
    held_[use].push_back({tier, ticket});
  }

 private:
  std::vector<std::unique_ptr<Event>> events_;
  std::vector<std::vector<std::pair<NvmeTier*, NvmeTier::Ticket>>> held_;
  size_t uses_ = 0;
};

// Accumulates the time between two points of a stream (the AdamW sub-steps).
class StreamTimer {
 public:
  void Start(Stream& stream) {
    stream.EnqueueHost([this] {
      start_ = std::chrono::steady_clock::now();
      return absl::OkStatus();
    });
  }
  void Stop(Stream& stream) {
    stream.EnqueueHost([this] {
      const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::steady_clock::now() - start_)
                          .count();
      total_us_.fetch_add(us, std::memory_order_relaxed);
      return absl::OkStatus();
    });
  }
  double ms() const { return total_us_.load(std::memory_order_relaxed) / 1000.0; }

 private:
  std::chrono::steady_clock::time_point start_;  // touched by the stream's work only
  std::atomic<int64_t> total_us_{0};
};

// Buffers to free once a stream has run everything enqueued before their release. The
// free happens on the host thread (CUDA forbids cudaFree inside a stream's host function):
// Collect(), called before each allocation, frees those whose stream got there.
class DeferredFrees {
 public:
  explicit DeferredFrees(Device* device) : device_(device) {}
  ~DeferredFrees() {
    for (Pending& pending : pending_) pending.done->Synchronize().IgnoreError();
  }
  Status Add(Stream& stream, std::shared_ptr<Buffer> buffer) {
    Pending pending{std::move(buffer), nullptr};
    ASSIGN_OR_RETURN(pending.done, device_->CreateEvent());
    RETURN_IF_ERROR(device_->Record(*pending.done, stream));
    pending_.push_back(std::move(pending));
    return absl::OkStatus();
  }
  // Collect(), then waits for the oldest releases' streams until at most `max_pending`
  // buffers are still waiting: a bound on how many released buffers exist at once however
  // far the host runs ahead of the stream.
  Status Bound(size_t max_pending) {
    Collect();
    while (pending_.size() > max_pending) {
      RETURN_IF_ERROR(pending_.front().done->Synchronize());
      pending_.pop_front();
    }
    return absl::OkStatus();
  }
  void Collect() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->done->Query()) {
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }

 private:
  struct Pending {
    std::shared_ptr<Buffer> buffer;
    std::unique_ptr<Event> done;
  };
  Device* device_;
  std::deque<Pending> pending_;
};

// Bounds how far the host runs ahead of a stream: Mark() records a point on the stream,
// Limit() blocks the host until at most `max_pending` marked points are still pending.
// Memory that a stream frees when it passes a point is then really free before the host
// allocates more.
class LagLimiter {
 public:
  LagLimiter(Device* device, size_t max_pending) : device_(device), max_pending_(max_pending) {}
  Status Mark(Stream& stream) {
    ASSIGN_OR_RETURN(std::unique_ptr<Event> event, device_->CreateEvent());
    RETURN_IF_ERROR(device_->Record(*event, stream));
    pending_.push_back(std::move(event));
    return absl::OkStatus();
  }
  Status Limit() {
    while (pending_.size() > max_pending_) {
      RETURN_IF_ERROR(pending_.front()->Synchronize());
      pending_.pop_front();
    }
    return absl::OkStatus();
  }

 private:
  Device* device_;
  size_t max_pending_;
  std::deque<std::unique_ptr<Event>> pending_;
};

}  // namespace strata
