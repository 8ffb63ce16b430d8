// IoEngine: asynchronous reads and writes of file extents, the one door of strata to the
// disk (the NVMe tier, swap files, the disk benchmark). Implementations: io_uring
// (liburing), a pread/pwrite thread pool with the same semantics, and a fault-injecting
// wrapper for tests (fault_injection.h).
//
// Contract, the same for every implementation:
// - A request is an extent (file, offset, length, buffer) with an opaque user tag. An extent
//   longer than `max_request_bytes` is split into requests of that size; at most
//   `queue_depth` of them are in the kernel (or the thread pool) at once, the rest wait in
//   the engine in submission order. Submit never blocks on the disk.
// - Each submitted extent yields exactly one IoCompletion, carrying its tag, whether it
//   succeeded, and a Status whose message names the file, offset and length on error. OK
//   means every byte was transferred; there are no partial successes. Completions of
//   different extents may arrive in any order.
// - The buffer of an extent belongs to the engine from Submit until its completion has been
//   returned by Poll or Wait: do not read, write or free it before.
// - The engines resubmit -EAGAIN and advance and resubmit short transfers; a read that
//   meets end of file is an error (kOutOfRange); a transfer that makes no progress
//   `max_attempts_without_progress` times in a row fails (kUnavailable after EAGAIN,
//   kDataLoss after short transfers) instead of spinning.
// - Files opened with O_DIRECT (the default) need offset, length and buffer address to be
//   multiples of kDirectIoAlignment; Submit rejects a batch that breaks this (or names an
//   unknown file) as a whole with kInvalidArgument, before anything of it is queued.
// - Drain() returns once nothing is queued or in flight; destruction drains first, so no
//   transfer outlives the engine, its files or its ring. Buffers must outlive the engine or
//   the completion of their requests, whichever is first.
// Thread-safety: an engine is thread-compatible: one thread at a time drives it (Submit,
// Poll, Wait, Drain, OpenFile...). Use one engine per thread that issues I/O. Internal
// worker threads of the pread engine are the engine's own business.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "core/options.h"
#include "core/status.h"
#include "core/trace.h"

namespace strata::nvme {

// O_DIRECT alignment of offsets, lengths and buffer addresses (the logical block size of
// every disk strata targets; 4 KiB covers 512-byte and 4 KiB sector devices).
inline constexpr uint64_t kDirectIoAlignment = 4096;
// Largest single request the engines accept (io_uring's and pread's 32-bit lengths).
inline constexpr uint64_t kMaxRequestBytes = 1ull << 30;

enum class IoOp { kRead, kWrite };
const char* IoOpName(IoOp op);  // "read" / "write"

// An open file of one engine. Valid until CloseFile or the engine's destruction.
struct FileHandle {
  int32_t id = -1;
  bool valid() const { return id >= 0; }
  friend bool operator==(FileHandle a, FileHandle b) { return a.id == b.id; }
  friend bool operator!=(FileHandle a, FileHandle b) { return a.id != b.id; }
};

struct FileOptions {
  // O_DIRECT: bypasses the page cache; offsets, lengths and buffers must be aligned to
  // kDirectIoAlignment. Default true (the NVMe tier must not fill RAM with page cache).
  bool direct_io = true;
  // Opened read-write when true, read-only otherwise. Default true.
  bool writable = true;
  // O_CREAT (mode 0644) when true. Default false: a missing file is kNotFound.
  bool create = false;
  // O_TRUNC when true. Default false.
  bool truncate = false;
  // With create: O_EXCL | O_NOFOLLOW, so a file or symlink already at the path is an error
  // (kAlreadyExists naming it) instead of being truncated or followed. Default false.
  bool exclusive = false;
  // When > 0: fallocate(0, preallocate_bytes) after opening, so later writes cannot fail for
  // lack of space and the file has that size. Not enough space is kResourceExhausted naming
  // the file, the bytes asked and the bytes free. Default 0 (no preallocation).
  uint64_t preallocate_bytes = 0;
  // Called after each piece (1 GiB) of the preallocation with its bytes, for progress.
  std::function<void(uint64_t bytes)> on_preallocated;
};

struct IoRequest {
  IoOp op = IoOp::kRead;
  FileHandle file;
  uint64_t offset = 0;
  uint64_t length = 0;     // > 0
  void* buffer = nullptr;  // `length` bytes; read into or written from
  uint64_t tag = 0;        // opaque to the engine; returned in the completion
};

struct IoCompletion {
  uint64_t tag = 0;
  // OK only when all `length` bytes were transferred. Errors name op, file, offset, length.
  Status status;
  IoOp op = IoOp::kRead;
  FileHandle file;
  uint64_t offset = 0;
  uint64_t length = 0;
  // Bytes known to have been transferred (== length on success; a lower bound on error).
  uint64_t bytes_transferred = 0;
};

// One raw transfer as the engine saw it come back, shown to a test hook (below).
struct RawTransfer {
  IoOp op = IoOp::kRead;
  FileHandle file;
  uint64_t offset = 0;   // where this attempt started (advanced after short transfers)
  uint64_t length = 0;   // bytes this attempt asked for
  uint32_t attempt = 0;  // 0 for the first attempt of a piece, then 1, 2, ...
};
// Test-only: sees every raw result (bytes transferred, or -errno) before the engine's retry
// logic and returns the result the engine acts on. Returning -EAGAIN or fewer bytes than
// the kernel moved is safe (the engine re-transfers, which is idempotent); returning more
// is not allowed.
using TransferHook = std::function<int64_t(const RawTransfer& transfer, int64_t result)>;

struct IoEngineOptions {
  // Which engine (config key nvme.engine): kAuto probes io_uring and falls back to pread
  // where it is unavailable (logging why); kIoUring fails where it is unavailable; kPread
  // is the thread-pool engine. Default kAuto.
  IoEngineKind engine = IoEngineKind::kAuto;

  // --- performance knobs ---
  // Requests in the kernel (io_uring) or in the worker pool (pread) at once. Default 32.
  uint32_t queue_depth = 32;
  // Extents longer than this are split into requests of this size. A multiple of
  // kDirectIoAlignment, at most kMaxRequestBytes. Default 1 MiB.
  uint64_t max_request_bytes = 1ull << 20;
  // pread engine: worker threads; 0 means queue_depth. Default 0.
  uint32_t pread_threads = 0;
  // io_uring: RegisterBuffers registers them as fixed buffers (pinned once instead of per
  // request). Where the kernel refuses (ENOMEM/EPERM: the memlock limit) the engine falls
  // back to unregistered buffers and records why in info(). Default true.
  bool register_buffers = true;

  // --- observability ---
  // A timeline trace (core/trace.h; must outlive the engine): each transfer's attempt as a
  // span on the track "<trace_name> slot <k>" of the request slot it holds (slots never
  // overlap), and the transfers in flight as the counter "<trace_name> in flight".
  // Default none.
  Trace* trace = nullptr;
  std::string trace_name = "nvme";

  // --- robustness ---
  // Consecutive attempts of one request that move no byte (-EAGAIN, short transfers too
  // short to advance) before it fails. Default 64.
  uint32_t max_attempts_without_progress = 64;

  // --- test-only ---
  TransferHook test_transfer_hook;
  // When non-zero, io_uring's set-up pretends to fail with this errno (tests the fallback).
  int test_uring_init_errno = 0;
  // When non-zero, buffer registration pretends to fail with this errno.
  int test_registration_errno = 0;
};

// What an engine turned out to be, for logs and benchmarks.
struct EngineInfo {
  std::string engine;  // "io_uring" or "pread" (a wrapper reports its inner engine's name)
  uint32_t queue_depth = 0;
  uint64_t max_request_bytes = 0;
  bool buffers_registered = false;       // fixed buffers in use for the registered regions
  std::string buffer_registration_note;  // why not, when RegisterBuffers fell back
  std::string fallback_reason;           // "auto" chose pread: why io_uring was not used
};

struct EngineStats {
  uint64_t extents_completed = 0;
  uint64_t extents_failed = 0;
  uint64_t transfers_issued = 0;        // raw requests handed to the kernel / pool
  uint64_t resubmitted_eagain = 0;      // -EAGAIN results resubmitted
  uint64_t resubmitted_short = 0;       // short transfers advanced and resubmitted
  uint64_t fixed_buffer_transfers = 0;  // io_uring transfers that used a registered buffer
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
};

// A memory region to register with the engine.
struct BufferRegion {
  void* data = nullptr;
  uint64_t bytes = 0;
};

class IoEngine {
 public:
  // Drains (see Drain) and closes every file.
  virtual ~IoEngine() = default;

  // Opens `path`; errors name the path and the failing step (open, O_DIRECT, fallocate).
  virtual StatusOr<FileHandle> OpenFile(const std::string& path, const FileOptions& options) = 0;
  // Closes a file with nothing outstanding on it (kFailedPrecondition otherwise).
  virtual Status CloseFile(FileHandle file) = 0;
  // The path `file` was opened with ("<unknown file N>" for an invalid handle).
  virtual std::string FileName(FileHandle file) const = 0;

  // Registers buffers for the engine's fast path (io_uring fixed buffers), replacing any
  // earlier registration; needs nothing outstanding. Requests whose buffer lies inside a
  // region use it; others still work. Engines without such a path accept and ignore it.
  // A refusal for lack of lockable memory is not an error (see IoEngineOptions); the
  // regions must stay mapped until UnregisterBuffers or the engine's destruction.
  virtual Status RegisterBuffers(absl::Span<const BufferRegion> regions) = 0;
  virtual Status UnregisterBuffers() = 0;

  // Queues the extents of `requests` (see the contract above). All or nothing: an invalid
  // request rejects the whole batch with kInvalidArgument naming it.
  virtual Status Submit(absl::Span<const IoRequest> requests) = 0;

  // Makes progress without blocking and appends every finished extent's completion to
  // *completions; returns how many it appended.
  virtual size_t Poll(std::vector<IoCompletion>* completions) = 0;

  // Blocks until at least `min_completions` completions are available (fewer if fewer
  // extents are outstanding: then all of them) or `timeout` passes, and appends every
  // available completion to *completions. kDeadlineExceeded when the timeout passed with
  // fewer than asked (what was finished is still appended). A non-OK status other than
  // that means the engine itself failed (e.g. its ring); per-extent errors are in the
  // completions.
  virtual Status Wait(size_t min_completions, std::chrono::milliseconds timeout,
                      std::vector<IoCompletion>* completions) = 0;

  // Blocks until nothing is queued or in flight. Completions stay available to Poll/Wait.
  virtual Status Drain() = 0;

  // Extents submitted whose completion has not yet been returned by Poll/Wait.
  virtual size_t Outstanding() const = 0;

  virtual EngineInfo info() const = 0;
  virtual EngineStats stats() const = 0;
};

// Convenience: submits `requests`, waits for all of their completions (at most `timeout`
// overall) and returns the first error (kDeadlineExceeded when time ran out; the engine
// still owns the unfinished ones until it drains). Needs no other extents outstanding.
Status ExecuteAll(IoEngine* engine, absl::Span<const IoRequest> requests,
                  std::chrono::milliseconds timeout = std::chrono::minutes(10));

}  // namespace strata::nvme
