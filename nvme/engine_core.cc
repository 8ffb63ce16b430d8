// The shared bookkeeping of the io_uring and pread engines; see engine_core.h.
#include "nvme/engine_core.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "core/logging.h"

namespace strata::nvme {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

StatusOr<UniqueFd> OpenFileForIo(const std::string& path, const FileOptions& options) {
  if (options.preallocate_bytes > 0 && !options.writable) {
    return absl::InvalidArgumentError(
        absl::StrCat("nvme: open ", path, ": preallocate_bytes needs a writable file"));
  }
  int flags = (options.writable ? O_RDWR : O_RDONLY) | O_CLOEXEC;
  if (options.create) flags |= O_CREAT;
  if (options.truncate) flags |= O_TRUNC;
  if (options.exclusive) flags |= O_EXCL | O_NOFOLLOW;
  if (options.direct_io) flags |= O_DIRECT;
  int fd;
  do {
    fd = ::open(path.c_str(), flags, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    int error_number = errno;
    if (error_number == EINVAL && options.direct_io) {
      return absl::InvalidArgumentError(
          absl::StrCat("nvme: open ", path,
                       " with O_DIRECT: the filesystem does not support direct I/O "
                       "(tmpfs, some overlay filesystems); use a directory on a disk filesystem"));
    }
    if (error_number == EEXIST && options.exclusive) {
      return absl::AlreadyExistsError(absl::StrCat(
          "nvme: open ", path, ": a file or symlink of that name is already there (swap files "
          "are created fresh, never reused or followed)"));
    }
    return ErrnoError(error_number, absl::StrCat("nvme: open ", path));
  }
  UniqueFd owner(fd);
  // In pieces, so a long preallocation can show progress; the file ends at the size asked.
  constexpr uint64_t kPieceBytes = 1ull << 30;
  for (uint64_t offset = 0; offset < options.preallocate_bytes;) {
    const uint64_t piece = std::min(kPieceBytes, options.preallocate_bytes - offset);
    int result;
    do {
      result = ::fallocate(fd, 0, static_cast<off_t>(offset), static_cast<off_t>(piece));
    } while (result != 0 && errno == EINTR);
    offset += piece;
    if (result == 0 && options.on_preallocated) options.on_preallocated(piece);
    if (result != 0) {
      int error_number = errno;
      if (error_number == ENOSPC) {
        struct statvfs fs {};
        uint64_t free_bytes = 0;
        if (::fstatvfs(fd, &fs) == 0) free_bytes = uint64_t{fs.f_bavail} * fs.f_frsize;
        return absl::ResourceExhaustedError(absl::StrFormat(
            "nvme: preallocating %d bytes for %s: not enough space (%d bytes free on its "
            "filesystem)",
            options.preallocate_bytes, path, free_bytes));
      }
      return ErrnoError(error_number, absl::StrFormat("nvme: fallocate %s (%d bytes)", path,
                                                      options.preallocate_bytes));
    }
  }
  return owner;
}

ChunkedEngine::ChunkedEngine(std::string engine_name, const IoEngineOptions& options,
                             std::unique_ptr<TransferBackend> backend)
    : options_(options), backend_(std::move(backend)) {
  info_.engine = std::move(engine_name);
  info_.queue_depth = options.queue_depth;
  info_.max_request_bytes = options.max_request_bytes;
  transfer_pool_.reserve(options.queue_depth);
  for (uint32_t i = 0; i < options.queue_depth; ++i) {
    transfer_pool_.push_back(std::make_unique<Transfer>());
    transfer_pool_.back()->slot = i;
    free_transfers_.push_back(transfer_pool_.back().get());
  }
  std::reverse(free_transfers_.begin(), free_transfers_.end());  // slot 0 is taken first
  slot_tracks_.assign(options.queue_depth, -1);
}

ChunkedEngine::~ChunkedEngine() {
  Status drained = Drain();
  if (!drained.ok())
    spdlog::error("nvme: draining {} engine: {}", info_.engine, std::string(drained.message()));
  backend_.reset();  // joins workers / tears down the ring before the files close
  for (OpenedFile& file : files_) {
    if (file.fd >= 0) ::close(file.fd);
  }
}

StatusOr<FileHandle> ChunkedEngine::OpenFile(const std::string& path, const FileOptions& options) {
  ASSIGN_OR_RETURN(UniqueFd fd, OpenFileForIo(path, options));
  OpenedFile file;
  file.path = path;
  file.direct = options.direct_io;
  file.fd = fd.release();
  files_.push_back(std::move(file));
  return FileHandle{static_cast<int32_t>(files_.size() - 1)};
}

Status ChunkedEngine::CloseFile(FileHandle file) {
  if (!file.valid() || file.id >= static_cast<int32_t>(files_.size()) || files_[file.id].fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat("nvme: close of unknown file ", file.id));
  }
  OpenedFile& opened = files_[file.id];
  if (opened.outstanding > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "nvme: close ", opened.path, ": ", opened.outstanding, " extents still outstanding"));
  }
  int fd = opened.fd;
  opened.fd = -1;
  if (::close(fd) != 0) return ErrnoError(errno, absl::StrCat("nvme: close ", opened.path));
  return Status();
}

std::string ChunkedEngine::FileName(FileHandle file) const {
  if (!file.valid() || file.id >= static_cast<int32_t>(files_.size())) {
    return absl::StrCat("<unknown file ", file.id, ">");
  }
  return files_[file.id].path;
}

Status ChunkedEngine::RegisterBuffers(absl::Span<const BufferRegion> regions) {
  if (live_extents_ > 0) {
    return absl::FailedPreconditionError("nvme: RegisterBuffers needs no extents outstanding");
  }
  if (!options_.register_buffers) {
    info_.buffers_registered = false;
    info_.buffer_registration_note = "disabled by options (register_buffers=false)";
    return Status();
  }
  return backend_->RegisterBuffers(regions, &info_);
}

Status ChunkedEngine::UnregisterBuffers() {
  if (live_extents_ > 0) {
    return absl::FailedPreconditionError("nvme: UnregisterBuffers needs no extents outstanding");
  }
  info_.buffers_registered = false;
  return backend_->UnregisterBuffers();
}

Status ChunkedEngine::ValidateRequest(const IoRequest& request) const {
  if (!request.file.valid() || request.file.id >= static_cast<int32_t>(files_.size()) ||
      files_[request.file.id].fd < 0) {
    return absl::InvalidArgumentError(absl::StrFormat("nvme: %s of unknown or closed file %d",
                                                      IoOpName(request.op), request.file.id));
  }
  const OpenedFile& file = files_[request.file.id];
  auto invalid = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrFormat("nvme: %s of %s at offset %d, length %d: %s",
                                                      IoOpName(request.op), file.path,
                                                      request.offset, request.length, why));
  };
  if (request.length == 0) return invalid("length is zero");
  if (request.buffer == nullptr) return invalid("buffer is null");
  if (request.offset + request.length < request.offset) return invalid("extent overflows");
  if (file.direct) {
    const uint64_t address = reinterpret_cast<uintptr_t>(request.buffer);
    if (request.offset % kDirectIoAlignment != 0 || request.length % kDirectIoAlignment != 0 ||
        address % kDirectIoAlignment != 0) {
      return invalid(absl::StrFormat(
          "O_DIRECT needs offset, length and buffer address (0x%x) aligned to %d bytes", address,
          kDirectIoAlignment));
    }
  }
  return Status();
}

Status ChunkedEngine::Submit(absl::Span<const IoRequest> requests) {
  if (!broken_.ok()) return broken_;
  for (size_t i = 0; i < requests.size(); ++i) {
    Status valid = ValidateRequest(requests[i]);
    if (!valid.ok()) {
      return Annotate(valid, absl::StrFormat("nvme: request %d of a batch of %d (tag %d), batch "
                                             "rejected",
                                             i, requests.size(), requests[i].tag));
    }
  }
  for (const IoRequest& request : requests) {
    extents_.emplace_back();
    ExtentState& extent = extents_.back();
    extent.request = request;
    extent.self = std::prev(extents_.end());
    queued_.push_back(&extent);
    ++files_[request.file.id].outstanding;
    ++live_extents_;
  }
  Pump();
  return Status();
}

void ChunkedEngine::Pump() {
  std::vector<Transfer*> batch;
  while (in_backend_ + batch.size() < options_.queue_depth) {
    if (!retry_.empty()) {
      batch.push_back(retry_.front());
      retry_.pop_front();
      continue;
    }
    if (queued_.empty()) break;
    ExtentState* extent = queued_.front();
    const IoRequest& request = extent->request;
    const uint64_t piece =
        std::min(options_.max_request_bytes, request.length - extent->next_piece_offset);
    const OpenedFile& file = files_[request.file.id];
    Transfer* transfer = free_transfers_.back();
    free_transfers_.pop_back();
    const uint32_t slot = transfer->slot;
    *transfer = Transfer();
    transfer->slot = slot;
    transfer->extent = extent;
    transfer->op = request.op;
    transfer->file = request.file;
    transfer->fd = file.fd;
    transfer->offset = request.offset + extent->next_piece_offset;
    transfer->length = piece;
    transfer->buffer = static_cast<char*>(request.buffer) + extent->next_piece_offset;
    transfer->alignment = file.direct ? kDirectIoAlignment : 1;
    extent->next_piece_offset += piece;
    ++extent->pieces_in_flight;
    if (extent->next_piece_offset >= request.length) queued_.pop_front();
    batch.push_back(transfer);
  }
  if (batch.empty()) return;
  in_backend_ += batch.size();
  stats_.transfers_issued += batch.size();
  if (options_.trace != nullptr && options_.trace->recording()) {
    const auto now = std::chrono::steady_clock::now();
    for (Transfer* transfer : batch) transfer->started = now;
    options_.trace->Counter(options_.trace_name + " in flight", now, in_backend_);
  }
  backend_->Start(batch);
}

Status ChunkedEngine::ReapAndProcess(bool block, std::chrono::steady_clock::time_point deadline) {
  std::vector<RawResult> results;
  Status reaped = backend_->Reap(block && in_backend_ > 0, deadline, &results);
  for (const RawResult& raw : results) ProcessResult(raw.transfer, raw.result);
  if (!reaped.ok() && broken_.ok()) broken_ = reaped;
  return reaped;
}

std::string ChunkedEngine::Describe(const Transfer& transfer) const {
  const IoRequest& request = transfer.extent->request;
  std::string text = absl::StrFormat("nvme: %s of %s at offset %d, length %d", IoOpName(request.op),
                                     FileName(request.file), request.offset, request.length);
  if (transfer.offset != request.offset || transfer.length != request.length) {
    absl::StrAppendFormat(&text, " (transfer at offset %d, %d bytes)", transfer.offset,
                          transfer.length);
  }
  return text;
}

void ChunkedEngine::TraceAttempt(const Transfer& transfer) {
  Trace* trace = options_.trace;
  // An attempt started before the trace began recording has no start time.
  if (trace == nullptr || !trace->recording() ||
      transfer.started == std::chrono::steady_clock::time_point()) {
    return;
  }
  int& track = slot_tracks_[transfer.slot];
  if (track < 0) track = trace->Track(absl::StrCat(options_.trace_name, " slot ", transfer.slot));
  const auto now = std::chrono::steady_clock::now();
  trace->Span(track, IoOpName(transfer.op), "nvme", transfer.started, now,
              {{"bytes", std::to_string(transfer.length)},
               {"file", FileName(transfer.file)},
               {"offset", std::to_string(transfer.offset)}});
  trace->Counter(options_.trace_name + " in flight", now, in_backend_);
}

void ChunkedEngine::ProcessResult(Transfer* transfer, int64_t result) {
  --in_backend_;
  TraceAttempt(*transfer);
  if (options_.test_transfer_hook) {
    RawTransfer raw{transfer->op, transfer->file, transfer->offset, transfer->length,
                    transfer->attempt};
    result = options_.test_transfer_hook(raw, result);
  }
  ++transfer->attempt;
  ExtentState* extent = transfer->extent;
  if (!extent->status.ok()) {  // a sibling piece failed: stop here, no retries
    if (result > 0) transfer->moved += std::min<uint64_t>(result, transfer->length);
    FinishPiece(transfer);
    return;
  }
  // A retry without progress; fails the piece once it has happened too often in a row.
  auto retry_without_progress = [&](Status give_up) {
    if (++transfer->attempts_without_progress >= options_.max_attempts_without_progress) {
      FailPiece(transfer, std::move(give_up));
    } else {
      retry_.push_back(transfer);
    }
  };
  if (result < 0) {
    const int error_number = static_cast<int>(-result);
    if (error_number == EAGAIN || error_number == EINTR) {
      ++stats_.resubmitted_eagain;
      retry_without_progress(ErrnoError(
          error_number, absl::StrFormat("%s: no progress after %d attempts", Describe(*transfer),
                                        options_.max_attempts_without_progress)));
      return;
    }
    FailPiece(transfer, ErrnoError(error_number, Describe(*transfer)));
    return;
  }
  if (static_cast<uint64_t>(result) > transfer->length) {
    FailPiece(transfer,
              absl::InternalError(absl::StrFormat("%s: transfer reported %d bytes, more than asked",
                                                  Describe(*transfer), result)));
    return;
  }
  if (static_cast<uint64_t>(result) == transfer->length) {
    transfer->moved += result;
    FinishPiece(transfer);
    return;
  }
  // Short transfer. O_DIRECT can only resume at an aligned position; re-transferring the
  // bytes between that and `result` is harmless (same data, same place).
  const uint64_t advance =
      static_cast<uint64_t>(result) / transfer->alignment * transfer->alignment;
  if (advance == 0) {
    if (transfer->op == IoOp::kRead) {
      // Zero bytes, or a partial block under O_DIRECT: the file ends here.
      const uint64_t end = transfer->offset + result;
      FailPiece(
          transfer,
          absl::OutOfRangeError(absl::StrFormat(
              "%s: read past end of file (the file ends at offset %d; %d of %d bytes read)",
              Describe(*transfer), end, transfer->extent->bytes_done + transfer->moved + result,
              transfer->extent->request.length)));
      return;
    }
    ++stats_.resubmitted_short;
    retry_without_progress(absl::DataLossError(
        absl::StrFormat("%s: short write made no progress after %d attempts (%d bytes written)",
                        Describe(*transfer), options_.max_attempts_without_progress,
                        transfer->extent->bytes_done + transfer->moved)));
    return;
  }
  ++stats_.resubmitted_short;
  transfer->offset += advance;
  transfer->buffer += advance;
  transfer->length -= advance;
  transfer->moved += advance;
  transfer->attempts_without_progress = 0;
  retry_.push_back(transfer);
}

void ChunkedEngine::FailPiece(Transfer* transfer, Status status) {
  ExtentState* extent = transfer->extent;
  if (extent->status.ok()) {
    extent->status = std::move(status);
    // Pieces not yet cut will never be: the extent ends with the ones in flight.
    auto queued = std::find(queued_.begin(), queued_.end(), extent);
    if (queued != queued_.end()) queued_.erase(queued);
  }
  FinishPiece(transfer);
}

void ChunkedEngine::FinishPiece(Transfer* transfer) {
  ExtentState* extent = transfer->extent;
  extent->bytes_done += transfer->moved;
  --extent->pieces_in_flight;
  free_transfers_.push_back(transfer);
  const bool all_cut = extent->next_piece_offset >= extent->request.length;
  if (extent->pieces_in_flight > 0 || (extent->status.ok() && !all_cut)) return;

  const IoRequest& request = extent->request;
  IoCompletion completion;
  completion.tag = request.tag;
  completion.status = extent->status;
  completion.op = request.op;
  completion.file = request.file;
  completion.offset = request.offset;
  completion.length = request.length;
  completion.bytes_transferred = extent->bytes_done;
  if (completion.status.ok()) {
    ++stats_.extents_completed;
    (request.op == IoOp::kRead ? stats_.bytes_read : stats_.bytes_written) += request.length;
  } else {
    ++stats_.extents_failed;
  }
  --files_[request.file.id].outstanding;
  --live_extents_;
  extents_.erase(extent->self);
  ready_.push_back(std::move(completion));
}

size_t ChunkedEngine::MoveReady(std::vector<IoCompletion>* completions) {
  const size_t count = ready_.size();
  for (IoCompletion& completion : ready_) completions->push_back(std::move(completion));
  ready_.clear();
  return count;
}

size_t ChunkedEngine::Poll(std::vector<IoCompletion>* completions) {
  if (broken_.ok()) {
    Pump();
    ReapAndProcess(false, std::chrono::steady_clock::now()).IgnoreError();
    Pump();
  }
  return MoveReady(completions);
}

Status ChunkedEngine::Wait(size_t min_completions, std::chrono::milliseconds timeout,
                           std::vector<IoCompletion>* completions) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  if (!broken_.ok()) {
    MoveReady(completions);
    return broken_;
  }
  Pump();
  Status reaped = ReapAndProcess(false, deadline);
  const size_t target = std::min(min_completions, ready_.size() + live_extents_);
  while (reaped.ok() && ready_.size() < target) {
    Pump();
    if (in_backend_ == 0) {
      reaped = absl::InternalError("nvme: extents outstanding but none in flight (engine bug)");
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    reaped = ReapAndProcess(true, deadline);
  }
  Pump();
  const size_t available = ready_.size();
  MoveReady(completions);
  if (!reaped.ok()) return reaped;
  if (available < target) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "nvme: %s engine: waited %d ms for %d completions, got %d (%d extents still "
        "outstanding)",
        info_.engine, timeout.count(), min_completions, available, live_extents_));
  }
  return Status();
}

Status ChunkedEngine::Drain() {
  const auto forever = std::chrono::steady_clock::time_point::max();
  while (live_extents_ > 0 && broken_.ok()) {
    Pump();
    if (in_backend_ == 0) {
      return absl::InternalError("nvme: extents outstanding but none in flight (engine bug)");
    }
    RETURN_IF_ERROR(ReapAndProcess(true, forever));
  }
  return broken_;
}

EngineInfo ChunkedEngine::info() const { return info_; }

EngineStats ChunkedEngine::stats() const {
  EngineStats stats = stats_;
  stats.fixed_buffer_transfers = backend_->fixed_buffer_transfers();
  return stats;
}

}  // namespace strata::nvme
