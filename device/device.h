// The Device interface: memory per tier, streams, events and asynchronous copies, the
// same for the CPU backend (cpu_device.h) and CUDA (device/cuda/). Everything above it
// (kernels' Ops, the engine, tiers) runs unchanged on either.
//
// Semantics follow CUDA's: work enqueued on one Stream runs in order; Record(event,
// stream) marks the point after everything enqueued so far; Wait(stream, event) makes
// later work on `stream` wait for the event's most recent record. Errors inside enqueued
// work are sticky: the stream's next Synchronize returns the first one.
// Thread-safety: Device methods are thread-safe. A Stream may be used from several host
// threads, but ordering between them is the caller's business. Buffers, streams and
// events must not outlive the Device that made them.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "device/memory.h"
#include "core/status.h"
#include "core/trace.h"

namespace strata {

class Stream {
 public:
  virtual ~Stream() = default;
  // Enqueues host work that runs after everything enqueued before it. A non-OK return
  // becomes the stream's sticky error and later work is skipped.
  virtual void EnqueueHost(std::function<Status()> work) = 0;
  // Blocks until all enqueued work is done; returns the first error of the stream.
  virtual Status Synchronize() = 0;
  virtual const std::string& name() const = 0;
  // Total time this stream has spent blocked in Wait on events of other streams, in ms:
  // the stall the overlap logic tries to remove (CUDA: GPU time between timing events
  // recorded around each wait, counted once the stream has passed them).
  virtual double stalled_ms() const { return 0.0; }
  // Total time this stream has spent running work (not waiting on events), in ms; with
  // wall time it gives the time the stream sat idle or starved. Backends that cannot
  // observe it from the host report 0.
  virtual double busy_ms() const { return 0.0; }
  // Total time this stream had nothing to run, in ms, where the backend measures it
  // directly (CUDA: its stalls, plus the GPU time it sat drained after the host thread that
  // feeds it blocked in the device, until that thread fed it again); nullopt where only
  // busy_ms is known (the CPU device). IdleMeter below takes either.
  virtual std::optional<double> idle_ms() const { return std::nullopt; }

  // The timeline trace (core/trace.h): work enqueued from now on is shown under `label` on
  // this stream's track (consecutive work of one label as one span), until the label
  // changes; waits on events show as "wait" spans of category "stall". A no-op where the
  // device has no trace; see StreamLabel for the scoped form.
  virtual void SetTraceLabel(std::shared_ptr<const TraceLabel> label) {}
  virtual std::shared_ptr<const TraceLabel> trace_label() const { return nullptr; }
  // True while the device's trace records (labels are only built then).
  virtual bool tracing() const { return false; }
};

// A stream's idle time over a window of the host's wall time: from construction to the
// call. Measured idle time where the stream has it, else the wall time minus the time the
// stream was busy (0 where the stream reports neither).
class IdleMeter {
 public:
  explicit IdleMeter(const Stream& stream)
      : stream_(stream), busy_before_(stream.busy_ms()), idle_before_(stream.idle_ms()) {}
  double IdleMs(double wall_ms) const {
    if (idle_before_.has_value()) {
      return std::max(0.0, stream_.idle_ms().value_or(*idle_before_) - *idle_before_);
    }
    const double busy = stream_.busy_ms() - busy_before_;
    return busy > 0.0 ? std::max(0.0, wall_ms - busy) : 0.0;
  }

 private:
  const Stream& stream_;
  const double busy_before_;
  const std::optional<double> idle_before_;
};

class Event {
 public:
  virtual ~Event() = default;
  // Blocks the calling host thread until the most recent Record has completed.
  virtual Status Synchronize() = 0;
  // True when the most recent Record has completed (or there was none).
  virtual bool Query() = 0;
};

class Device {
 public:
  virtual ~Device() = default;

  // Allocates `bytes` in `tier`, accounted under `kind`; `what` names it in errors.
  // Memory is 4 KiB-aligned and uninitialised.
  virtual StatusOr<Buffer> Allocate(Tier tier, StateKind kind, size_t bytes,
                                    const std::string& what) = 0;
  virtual StatusOr<std::unique_ptr<Stream>> CreateStream(const std::string& name) = 0;
  virtual StatusOr<std::unique_ptr<Event>> CreateEvent() = 0;
  virtual Status Record(Event& event, Stream& stream) = 0;
  virtual Status Wait(Stream& stream, Event& event) = 0;
  // Copies bytes between any two tiers, ordered on `stream`.
  virtual Status CopyAsync(void* dst, const void* src, size_t bytes, Stream& stream) = 0;
  virtual Status MemsetAsync(void* dst, int value, size_t bytes, Stream& stream) = 0;

  virtual MemoryPool& pool(Tier tier) = 0;
  virtual std::string Describe() const = 0;
  // Calls to the memory driver so far (allocations and frees: cudaMalloc, cudaFree and
  // their pinned-host kin on CUDA, the allocator on the CPU device). Freed buffers are
  // cached and reused, so a steady-state training step makes none.
  virtual uint64_t driver_calls() const = 0;
  // The tier of the buffer `pointer` points into (start or inside), or nullopt for memory
  // this device did not allocate (the caller's own). For checks: kernels of one tier handed
  // a buffer of the other (WithTierChecks, kernels/tier_checked_ops.h).
  virtual std::optional<Tier> TierOf(const void* pointer) const = 0;

  // The trace its streams record into (null: none, the default); `trace` must outlive the
  // device's streams or be reset to null first. Devices that cannot trace ignore it.
  virtual void SetTrace(Trace* trace) {}
  virtual Trace* trace() const { return nullptr; }

  // True for a device that only accounts (a dry run: device/cpu_device.h): its buffers must
  // not be read or written, so the NVMe tiers on it touch no disk either.
  virtual bool dry_run() const { return false; }
  // True where a run's buffers of `tier` are host memory: pinned host memory, and every
  // tier of a CPU device; a dry run answers for the device it models (a GPU's device tier
  // is not). Plans ask it to know where a real run's importer writes (UnitWriteTargets::master_straight).
  virtual bool InHostMemory(Tier tier) const { return tier == Tier::kHost; }
  // True where the host may read and write this device's buffers of `tier` with plain
  // loads and stores (once the streams that use them are idle): InHostMemory, on a device
  // that really allocates. An importer then writes values straight into their home
  // (EngineState::WriteTargets: master) instead of copying them there.
  virtual bool HostAccessible(Tier tier) const { return InHostMemory(tier) && !dry_run(); }
  // A dry run's copies so far by direction, in bytes (host_to_device, device_to_host,
  // within a tier); zeros elsewhere.
  virtual std::array<uint64_t, 3> dry_copy_bytes() const { return {0, 0, 0}; }
};

// Labels the work enqueued on `stream` within a scope (restoring the label before it):
// StreamLabel label(*compute_, "forward h3", "compute", {{"units", "h3"}}). Costs nothing
// when the stream is not tracing. A label nested in another records the outer's name as
// its "for" argument (an all-gather "for" "gather h3").
class StreamLabel {
 public:
  StreamLabel(Stream& stream, std::string name, std::string category, Trace::Args args = {})
      : stream_(stream.tracing() ? &stream : nullptr) {
    if (stream_ == nullptr) return;
    previous_ = stream.trace_label();
    if (previous_ != nullptr) args.emplace_back("for", previous_->name);
    stream.SetTraceLabel(std::make_shared<const TraceLabel>(
        TraceLabel{std::move(name), std::move(category), std::move(args)}));
  }
  ~StreamLabel() {
    if (stream_ != nullptr) stream_->SetTraceLabel(std::move(previous_));
  }
  StreamLabel(const StreamLabel&) = delete;
  StreamLabel& operator=(const StreamLabel&) = delete;

 private:
  Stream* stream_;
  std::shared_ptr<const TraceLabel> previous_;
};

}  // namespace strata
