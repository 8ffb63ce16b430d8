// The io_uring TransferBackend; see uring_backend.h.
#include "nvme/uring_backend.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "core/logging.h"

namespace strata::nvme {
namespace {

// user_data of SQEs neutralised after a failed submission; their CQEs are ignored.
constexpr uint64_t kIgnoredUserData = 0;
// Registered buffers are at most 1 GiB each (a kernel limit); larger regions are split.
constexpr uint64_t kMaxFixedBufferBytes = 1ull << 30;

std::string MemlockLimit() {
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return "unknown";
  if (limit.rlim_cur == RLIM_INFINITY) return "unlimited";
  return absl::StrCat(limit.rlim_cur, " bytes");
}

}  // namespace

StatusOr<std::unique_ptr<UringBackend>> UringBackend::Create(const IoEngineOptions& options) {
  std::unique_ptr<UringBackend> backend(new UringBackend(options));
  int result = -options.test_uring_init_errno;
  if (result == 0) result = io_uring_queue_init(options.queue_depth, &backend->ring_, 0);
  if (result < 0) {
    return ErrnoError(-result,
                      absl::StrFormat("io_uring_queue_init(%d entries)", options.queue_depth));
  }
  backend->ring_ready_ = true;
  return backend;
}

UringBackend::~UringBackend() {
  if (!ring_ready_) return;
  if (buffers_registered_) io_uring_unregister_buffers(&ring_);
  io_uring_queue_exit(&ring_);
}

int UringBackend::FindFixed(const char* buffer, uint64_t length) const {
  auto after = std::upper_bound(fixed_.begin(), fixed_.end(), buffer,
                                [](const char* b, const FixedRegion& r) { return b < r.begin; });
  if (after == fixed_.begin()) return -1;
  const FixedRegion& region = *std::prev(after);
  if (buffer >= region.begin && buffer + length <= region.end) return region.index;
  return -1;
}

void UringBackend::Start(const std::vector<Transfer*>& transfers) {
  if (!broken_.ok()) {
    for (Transfer* transfer : transfers) {
      synthetic_.push_back({transfer, -static_cast<int64_t>(broken_errno_)});
    }
    return;
  }
  std::vector<Transfer*> batch;
  for (Transfer* transfer : transfers) {
    struct io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {  // not expected (the engine bounds what is in flight); flush
      SubmitPrepared(batch);
      batch.clear();
      sqe = broken_.ok() ? io_uring_get_sqe(&ring_) : nullptr;
      if (sqe == nullptr) {
        synthetic_.push_back({transfer, -int64_t{EBUSY}});
        continue;
      }
    }
    const unsigned length = static_cast<unsigned>(transfer->length);
    const int fixed = FindFixed(transfer->buffer, transfer->length);
    if (transfer->op == IoOp::kRead) {
      if (fixed >= 0) {
        io_uring_prep_read_fixed(sqe, transfer->fd, transfer->buffer, length, transfer->offset,
                                 fixed);
      } else {
        io_uring_prep_read(sqe, transfer->fd, transfer->buffer, length, transfer->offset);
      }
    } else {
      if (fixed >= 0) {
        io_uring_prep_write_fixed(sqe, transfer->fd, transfer->buffer, length, transfer->offset,
                                  fixed);
      } else {
        io_uring_prep_write(sqe, transfer->fd, transfer->buffer, length, transfer->offset);
      }
    }
    if (fixed >= 0) ++fixed_buffer_transfers_;
    io_uring_sqe_set_data(sqe, transfer);
    batch.push_back(transfer);
  }
  SubmitPrepared(batch);
}

void UringBackend::SubmitPrepared(const std::vector<Transfer*>& batch) {
  unsubmitted_ += batch.size();
  while (unsubmitted_ > 0) {
    int submitted = io_uring_submit(&ring_);
    if (submitted >= 0) {
      unsubmitted_ -= std::min<unsigned>(unsubmitted_, submitted);
      if (submitted == 0) return;  // nothing taken: retried from Reap
      continue;
    }
    if (submitted == -EINTR) continue;
    if (submitted == -EAGAIN || submitted == -EBUSY) return;  // retried from Reap
    // A hard failure: the kernel did not take the SQEs since its head. Turn them into
    // no-ops whose completions are ignored and fail their transfers, so nothing is
    // completed twice and nothing waits forever. The ring accepts nothing more.
    broken_errno_ = -submitted;
    broken_ = ErrnoError(broken_errno_, "nvme: io_uring_submit");
    spdlog::error("{}", std::string(broken_.message()));
    const unsigned mask = *ring_.sq.kring_mask;
    const unsigned head = io_uring_smp_load_acquire(ring_.sq.khead);
    for (unsigned i = head; i != ring_.sq.sqe_tail; ++i) {
      struct io_uring_sqe* sqe = &ring_.sq.sqes[i & mask];
      auto* transfer = reinterpret_cast<Transfer*>(static_cast<uintptr_t>(sqe->user_data));
      if (transfer != nullptr) synthetic_.push_back({transfer, static_cast<int64_t>(submitted)});
      io_uring_prep_nop(sqe);
      io_uring_sqe_set_data64(sqe, kIgnoredUserData);
    }
    unsubmitted_ = 0;
    return;
  }
}

Status UringBackend::Reap(bool block, std::chrono::steady_clock::time_point deadline,
                          std::vector<RawResult>* results) {
  for (;;) {
    if (unsubmitted_ > 0 && broken_.ok()) SubmitPrepared({});
    results->insert(results->end(), synthetic_.begin(), synthetic_.end());
    synthetic_.clear();
    unsigned head;
    unsigned seen = 0;
    struct io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++seen;
      const uint64_t data = io_uring_cqe_get_data64(cqe);
      if (data == kIgnoredUserData || data == LIBURING_UDATA_TIMEOUT) continue;
      results->push_back({reinterpret_cast<Transfer*>(data), cqe->res});
    }
    if (seen > 0) io_uring_cq_advance(&ring_, seen);
    if (!results->empty() || !block) return Status();

    int waited;
    if (unsubmitted_ > 0) {
      // The kernel refused new SQEs for now (EAGAIN/EBUSY); back off briefly.
      if (std::chrono::steady_clock::now() >= deadline) return Status();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    if (deadline == std::chrono::steady_clock::time_point::max()) {
      waited = io_uring_wait_cqe(&ring_, &cqe);
    } else {
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::steady_clock::duration::zero()) return Status();
      const auto left_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
      struct __kernel_timespec timeout {};
      timeout.tv_sec = left_ns / 1000000000;
      timeout.tv_nsec = left_ns % 1000000000;
      waited = io_uring_wait_cqe_timeout(&ring_, &cqe, &timeout);
    }
    if (waited == -ETIME) return Status();
    if (waited < 0 && waited != -EINTR && waited != -EAGAIN) {
      return ErrnoError(-waited, "nvme: io_uring_wait_cqe");
    }
  }
}

Status UringBackend::RegisterBuffers(absl::Span<const BufferRegion> regions, EngineInfo* info) {
  RETURN_IF_ERROR(UnregisterBuffers());
  std::vector<struct iovec> iovecs;
  std::vector<FixedRegion> fixed;
  uint64_t total_bytes = 0;
  for (const BufferRegion& region : regions) {
    if (region.data == nullptr || region.bytes == 0) {
      return absl::InvalidArgumentError("nvme: RegisterBuffers: empty or null region");
    }
    total_bytes += region.bytes;
    for (uint64_t done = 0; done < region.bytes; done += kMaxFixedBufferBytes) {
      char* begin = static_cast<char*>(region.data) + done;
      const uint64_t bytes = std::min(kMaxFixedBufferBytes, region.bytes - done);
      fixed.push_back({begin, begin + bytes, static_cast<int>(iovecs.size())});
      iovecs.push_back({begin, bytes});
    }
  }
  if (iovecs.empty()) {
    info->buffers_registered = false;
    return Status();
  }
  int result = -options_.test_registration_errno;
  if (result == 0) {
    result = io_uring_register_buffers(&ring_, iovecs.data(), static_cast<unsigned>(iovecs.size()));
  }
  if (result == -ENOMEM || result == -EPERM || result == -EAGAIN) {
    // Usually the memlock limit (ulimit -l) for an unprivileged user: carry on unregistered.
    info->buffers_registered = false;
    info->buffer_registration_note = absl::StrFormat(
        "io_uring_register_buffers (%d bytes in %d buffers): %s (RLIMIT_MEMLOCK %s); using "
        "unregistered buffers",
        total_bytes, iovecs.size(), std::strerror(-result), MemlockLimit());
    spdlog::debug("nvme: {}", info->buffer_registration_note);
    return Status();
  }
  if (result < 0) {
    return ErrnoError(-result, absl::StrFormat("nvme: io_uring_register_buffers (%d bytes in %d "
                                               "buffers)",
                                               total_bytes, iovecs.size()));
  }
  std::sort(fixed.begin(), fixed.end(),
            [](const FixedRegion& a, const FixedRegion& b) { return a.begin < b.begin; });
  fixed_ = std::move(fixed);
  buffers_registered_ = true;
  info->buffers_registered = true;
  info->buffer_registration_note.clear();
  return Status();
}

Status UringBackend::UnregisterBuffers() {
  if (!buffers_registered_) return Status();
  fixed_.clear();
  buffers_registered_ = false;
  int result = io_uring_unregister_buffers(&ring_);
  if (result < 0) return ErrnoError(-result, "nvme: io_uring_unregister_buffers");
  return Status();
}

}  // namespace strata::nvme
