// Internal to nvme/: the part of the io_uring and pread engines that is the same, so that
// both have exactly one implementation of the semantics in io_engine.h. ChunkedEngine owns
// the file table, validates and splits extents into transfers, keeps at most queue_depth
// transfers in the backend, and turns raw results (bytes or -errno) into retries and
// completions: -EAGAIN resubmits, a short transfer advances and resubmits, zero bytes on a
// read is end of file, anything negative is an error naming op, file, offset and length.
// A TransferBackend only starts raw transfers and hands back their raw results.
// Invariants: every Transfer handed to Start comes back exactly once from Reap; the engine
// is destroyed only after every started transfer came back (the destructor drains).
// Thread-safety: ChunkedEngine is thread-compatible (see io_engine.h); a backend is called
// from the thread driving the engine only, whatever threads it runs inside.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "nvme/io_engine.h"

namespace strata::nvme {

struct ExtentState;

// One raw transfer in the backend: a piece of at most max_request_bytes of an extent.
struct Transfer {
  ExtentState* extent = nullptr;
  IoOp op = IoOp::kRead;
  FileHandle file;
  int fd = -1;
  uint64_t offset = 0;     // current attempt (advanced after short transfers)
  uint64_t length = 0;     // bytes still to move
  char* buffer = nullptr;  // where the current attempt reads into / writes from
  uint32_t attempt = 0;    // attempts made so far for this piece
  uint32_t attempts_without_progress = 0;
  uint64_t moved = 0;      // bytes of this piece done
  uint64_t alignment = 1;  // kDirectIoAlignment for O_DIRECT files
  uint32_t slot = 0;       // its place in the engine's pool: the trace's track
  std::chrono::steady_clock::time_point started;  // the current attempt's start
};

struct RawResult {
  Transfer* transfer = nullptr;
  int64_t result = 0;  // bytes transferred, or -errno
};

class TransferBackend {
 public:
  virtual ~TransferBackend() = default;
  // Starts the transfers (one batch). A transfer the backend cannot start still comes back
  // from Reap, with a negative result.
  virtual void Start(const std::vector<Transfer*>& transfers) = 0;
  // Appends finished transfers to *results. With `block`, waits until at least one is
  // available or `deadline` passes. A non-OK status means the backend is broken.
  virtual Status Reap(bool block, std::chrono::steady_clock::time_point deadline,
                      std::vector<RawResult>* results) = 0;
  // Fixed-buffer registration (io_uring); see IoEngine::RegisterBuffers.
  virtual Status RegisterBuffers(absl::Span<const BufferRegion> regions, EngineInfo* info) {
    return Status();
  }
  virtual Status UnregisterBuffers() { return Status(); }
  virtual uint64_t fixed_buffer_transfers() const { return 0; }
};

// An extent as submitted, until its completion is handed out.
struct ExtentState {
  IoRequest request;
  uint64_t next_piece_offset = 0;  // bytes of the extent already cut into transfers
  uint32_t pieces_in_flight = 0;
  uint64_t bytes_done = 0;
  Status status;  // first error
  std::list<ExtentState>::iterator self;
};

class ChunkedEngine final : public IoEngine {
 public:
  // `engine_name` is "io_uring" or "pread"; options are validated by CreateIoEngine.
  ChunkedEngine(std::string engine_name, const IoEngineOptions& options,
                std::unique_ptr<TransferBackend> backend);
  ~ChunkedEngine() override;

  StatusOr<FileHandle> OpenFile(const std::string& path, const FileOptions& options) override;
  Status CloseFile(FileHandle file) override;
  std::string FileName(FileHandle file) const override;
  Status RegisterBuffers(absl::Span<const BufferRegion> regions) override;
  Status UnregisterBuffers() override;
  Status Submit(absl::Span<const IoRequest> requests) override;
  size_t Poll(std::vector<IoCompletion>* completions) override;
  Status Wait(size_t min_completions, std::chrono::milliseconds timeout,
              std::vector<IoCompletion>* completions) override;
  Status Drain() override;
  size_t Outstanding() const override { return live_extents_ + ready_.size(); }
  EngineInfo info() const override;
  EngineStats stats() const override;

  void set_fallback_reason(std::string reason) { info_.fallback_reason = std::move(reason); }

 private:
  struct OpenedFile {
    std::string path;
    int fd = -1;
    bool direct = false;
    uint32_t outstanding = 0;  // extents not yet completed
  };

  Status ValidateRequest(const IoRequest& request) const;
  // Starts queued pieces while fewer than queue_depth are in the backend.
  void Pump();
  // Reaps raw results (blocking until `deadline` if `block`) and processes them.
  Status ReapAndProcess(bool block, std::chrono::steady_clock::time_point deadline);
  void ProcessResult(Transfer* transfer, int64_t result);
  // Ends a piece; completes its extent when it was the last one.
  void FinishPiece(Transfer* transfer);
  // The trace (when recording): the attempt that just came back, and what is in flight.
  void TraceAttempt(const Transfer& transfer);
  void FailPiece(Transfer* transfer, Status status);
  std::string Describe(const Transfer& transfer) const;
  size_t MoveReady(std::vector<IoCompletion>* completions);

  const IoEngineOptions options_;
  std::unique_ptr<TransferBackend> backend_;
  EngineInfo info_;
  EngineStats stats_;
  Status broken_;  // the backend failed: every later call reports it

  std::vector<OpenedFile> files_;   // index = FileHandle::id; fd -1 once closed
  std::list<ExtentState> extents_;  // submitted and not yet completed
  size_t live_extents_ = 0;
  std::deque<ExtentState*> queued_;  // extents with pieces not yet cut
  std::deque<Transfer*> retry_;      // pieces to resubmit, before new ones
  std::vector<std::unique_ptr<Transfer>> transfer_pool_;
  std::vector<Transfer*> free_transfers_;
  uint32_t in_backend_ = 0;
  std::vector<int> slot_tracks_;  // the trace's track of each slot (-1: not yet made)
  std::deque<IoCompletion> ready_;
};

// Closes fds on scope exit unless released.
class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();
  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

// Opens (and preallocates) a file as FileOptions say; errors name the path and the step.
StatusOr<UniqueFd> OpenFileForIo(const std::string& path, const FileOptions& options);

}  // namespace strata::nvme
