// Internal to nvme/: the io_uring TransferBackend (liburing). One ring of queue_depth
// entries, no SQPOLL (it would cost one of the machine's cores) and no IOPOLL (virtual
// disks have no poll queues). Transfers are prepared as SQEs and submitted with one
// io_uring_submit per batch; completions are harvested from the CQ in bulk. Buffers
// inside regions given to RegisterBuffers use the fixed-buffer opcodes.
// Invariants: at most queue_depth transfers in the ring (ChunkedEngine guarantees it), so
// the SQ never overflows and the CQ (twice the size) never does either; the ring is torn
// down only after every transfer came back (ChunkedEngine drains before destroying it).
// Thread-safety: thread-compatible; driven by the engine's one driving thread.
#pragma once

#include <liburing.h>

#include <memory>
#include <vector>

#include "nvme/engine_core.h"

namespace strata::nvme {

class UringBackend final : public TransferBackend {
 public:
  // Sets up the ring; the error (e.g. -EPERM, -ENOSYS) names io_uring_queue_init.
  // options.test_uring_init_errno != 0 pretends the set-up failed with it.
  static StatusOr<std::unique_ptr<UringBackend>> Create(const IoEngineOptions& options);
  ~UringBackend() override;

  void Start(const std::vector<Transfer*>& transfers) override;
  Status Reap(bool block, std::chrono::steady_clock::time_point deadline,
              std::vector<RawResult>* results) override;
  Status RegisterBuffers(absl::Span<const BufferRegion> regions, EngineInfo* info) override;
  Status UnregisterBuffers() override;
  uint64_t fixed_buffer_transfers() const override { return fixed_buffer_transfers_; }

 private:
  struct FixedRegion {
    const char* begin;
    const char* end;
    int index;
  };
  explicit UringBackend(const IoEngineOptions& options) : options_(options) {}
  // Index of the registered buffer holding [buffer, buffer + length), or -1.
  int FindFixed(const char* buffer, uint64_t length) const;
  // Hands prepared SQEs to the kernel; a hard failure fails the batch's transfers.
  void SubmitPrepared(const std::vector<Transfer*>& batch);

  const IoEngineOptions options_;
  struct io_uring ring_ {};
  bool ring_ready_ = false;
  std::vector<FixedRegion> fixed_;  // sorted by begin
  bool buffers_registered_ = false;
  unsigned unsubmitted_ = 0;          // SQEs prepared but not yet taken by the kernel
  std::vector<RawResult> synthetic_;  // transfers failed before reaching the kernel
  Status broken_;  // a submission failed hard: later transfers fail with broken_errno_
  int broken_errno_ = 0;
  uint64_t fixed_buffer_transfers_ = 0;
};

}  // namespace strata::nvme
