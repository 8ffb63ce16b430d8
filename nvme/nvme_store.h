// NvmeStore: the ZeRO-Infinity swap files of one rank. Per model unit it holds extents of
// training state (param shard, fp32 master, exp_avg, exp_avg_sq, fp32 gradient sums) in
// preallocated files under zero.nvme_dir, written and read through nvme/'s IoEngine with
// O_DIRECT:
//   <dir>/strata-<run>-rank<r>-params.swap   param shards
//   <dir>/strata-<run>-rank<r>-master.swap   fp32 master weights (exporting reads only this)
//   <dir>/strata-<run>-rank<r>-moments.swap  exp_avg and exp_avg_sq
//   <dir>/strata-<run>-rank<r>-grads.swap    fp32 gradient sums (zero.grad_tier=nvme)
// <run> is core/run_identity.h's RunId(). A file holding no declared extent is not created.
// The directory is claimed first (nvme/swap_dir.h: tmpfs refused, a live run's directory
// refused, crashed runs' leftovers removed); files are created with O_EXCL (never
// truncating or following what is there) and registered with core/remove_on_signal.h.
//
// Contract:
// - The extents are declared once, at Create; each gets a fixed offset in its file, its
//   size rounded up to nvme::kDirectIoAlignment (PaddedBytes). Buffers passed in must be
//   PaddedBytes long and kDirectIoAlignment-aligned (nvme::IoBuffer gives both); the
//   padding bytes travel with the extent but are not part of its checksum.
// - Every extent is checksummed (XXH3_64 of its logical bytes): the hash of a write is
//   recorded when the write succeeds, and a read that comes back with other bytes (a
//   corrupted or torn extent) is kDataLoss naming the unit, the kind, the file and the
//   offset. Reading an extent never written completely (never written, or its last write
//   failed) is refused with kDataLoss saying which. Round trips are therefore bit-exact or
//   an error, never wrong data. Checksums live in memory only: swap files are scratch
//   space of one run, and a store over files kept from an earlier run starts empty.
// - Requests are asynchronous: Submit*, then Wait/Poll for their completions (each carries
//   the caller's tag). The buffer belongs to the store from Submit until its completion
//   has been returned. Engine errors pass through with their context (op, file, offset,
//   length) prefixed by the unit and kind. One request per extent may be in flight,
//   except that several reads of one extent may run together; a conflicting request is
//   kFailedPrecondition. Waits are bounded by NvmeStoreOptions::wait_timeout.
// - Destruction drains every request in flight (their completions are dropped), closes
//   the files and removes them unless keep_files. Buffers of requests in flight must
//   outlive the store.
// - Dry run (NvmeStoreOptions::dry_run, for `strata plan`): the same store without the
//   disk. Nothing under the directory is looked at, claimed, created or preallocated, and
//   the I/O engine is a null one that completes every request at once, successfully,
//   moving no byte; the store itself never reads or writes a buffer (no checksums: a dry
//   device's buffers are address ranges with no memory behind them). Everything else is
//   the real store's: the layout (offsets, padded sizes, file names, file_bytes), the
//   validation of requests (extents, alignment, conflicts) and the completions, so its
//   callers move exactly the bytes they would; an extent never written reads (a plan's
//   set-up stores no values).
// Thread-safety: thread-compatible, like the IoEngine it drives: one thread at a time
// calls a store (typically the rank's I/O or pipeline thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/remove_on_signal.h"
#include "core/status.h"
#include "nvme/fault_injection.h"
#include "nvme/io_engine.h"
#include "nvme/swap_dir.h"

namespace strata {

// The kinds of per-unit training state the store holds.
enum class ExtentKind { kParams = 0, kMaster, kExpAvg, kExpAvgSq, kGrads };
inline constexpr int kNumExtentKinds = 5;
// "params", "master", "exp_avg", "exp_avg_sq", "grads" (fp32 gradient sums).
const char* ExtentKindName(ExtentKind kind);

// One extent to reserve: `bytes` (> 0) of state `kind` of unit `unit` (>= 0), whose name
// (e.g. "block.3") appears in every error about it. Every extent of a unit must carry the
// same name.
struct ExtentSpec {
  int unit = 0;
  std::string unit_name;
  ExtentKind kind = ExtentKind::kParams;
  uint64_t bytes = 0;
};

// Creates the engine the store drives (tests wrap it in nvme::FaultInjectingEngine).
using IoEngineFactory =
    std::function<StatusOr<std::unique_ptr<nvme::IoEngine>>(const nvme::IoEngineOptions& options)>;

struct NvmeStoreOptions {
  // Directory of the swap files (config key zero.nvme_dir). Must exist, be a directory
  // and be writable, on a filesystem with O_DIRECT (not tmpfs). Required (a dry run
  // only names files in it: there it need not exist).
  std::string dir;
  // This process's rank; file names carry it, so ranks may share a directory. Default 0.
  int rank = 0;
  // Leave the swap files in place at destruction (for inspection). Default false: removed.
  // Kept files are not removed on a signal either, and a later run does not sweep them.
  bool keep_files = false;
  // zero.nvme_allow_memory_fs: accept a tmpfs/ramfs directory. Default false: refused.
  bool allow_memory_fs = false;
  // The engine and its knobs (engine choice, queue depth, request size). Default: nvme's.
  nvme::IoEngineOptions engine;
  // Longest Wait/Read/Write blocks before failing with kDeadlineExceeded. Default 5 min.
  std::chrono::milliseconds wait_timeout = std::chrono::minutes(5);
  // Test-only: when set, creates the engine instead of nvme::CreateIoEngine. Not used in
  // a dry run (an engine it creates would create the files).
  IoEngineFactory engine_factory;
  // Dry run (`strata plan`): touch no disk; see "Dry run" above. Default false.
  bool dry_run = false;
  // Fault tests of the whole program (STRATA_FAULT_NVME, read once at the top): the real
  // engine wrapped in an nvme::FaultInjectingEngine with this plan. Not used in a dry run.
  std::optional<nvme::FaultPlan> fault;
};

// Where an extent lives (for messages, tests and tools).
struct ExtentLocation {
  std::string path;
  uint64_t offset = 0;
  uint64_t logical_bytes = 0;
  uint64_t padded_bytes = 0;
};

class NvmeStore {
 public:
  // Validates options and specs (listing every problem at once), claims `dir` for this
  // rank (SwapDirClaim::Acquire checks the directory: it exists, is a writable directory
  // not in memory, and no live run holds it), checks with statvfs BEFORE creating anything
  // that its filesystem has room for every padded extent (else kResourceExhausted naming
  // the dir, the bytes needed and the bytes free), then creates and preallocates the
  // files. On failure nothing it created is left behind. A dry run validates options and
  // specs only, and creates nothing.
  static StatusOr<std::unique_ptr<NvmeStore>> Create(const NvmeStoreOptions& options,
                                                     const std::vector<ExtentSpec>& extents);

  NvmeStore(const NvmeStore&) = delete;
  NvmeStore& operator=(const NvmeStore&) = delete;
  ~NvmeStore();

  // Size of a buffer for the extent: its bytes rounded up to kDirectIoAlignment; 0 when
  // (unit, kind) was not declared.
  uint64_t PaddedBytes(int unit, ExtentKind kind) const;
  // File and offset of a declared extent; kInvalidArgument naming it otherwise.
  StatusOr<ExtentLocation> Locate(int unit, ExtentKind kind) const;

  // Queues a write of PaddedBytes(unit, kind) bytes from `buffer`, or a read into it.
  // kInvalidArgument for an undeclared extent or a misaligned/null buffer, kFailedPrecondition
  // for a conflicting request in flight, kDataLoss for a read of an extent that holds no
  // complete write; nothing is queued then. `tag` is returned in the completion.
  Status SubmitWrite(int unit, ExtentKind kind, const void* buffer, uint64_t tag);
  Status SubmitRead(int unit, ExtentKind kind, void* buffer, uint64_t tag);

  struct Completion {
    uint64_t tag = 0;
    int unit = 0;
    ExtentKind kind = ExtentKind::kParams;
    bool write = false;
    // OK: every byte transferred and, for a read, the checksum matched.
    Status status;
  };
  // Blocks until at least `min_completions` completions are available (all outstanding
  // ones if fewer) and returns every available one, in any order. A non-OK status means the
  // wait itself failed (kDeadlineExceeded after wait_timeout, or the engine broke); the
  // completions gathered so far are then kept for the next Wait/Poll.
  StatusOr<std::vector<Completion>> Wait(size_t min_completions);
  // Returns the completions available now, without blocking.
  std::vector<Completion> Poll();
  // Requests submitted whose completion has not been returned yet.
  size_t in_flight() const { return pending_.size() + ready_.size(); }

  // Blocking conveniences: one extent, waited for (other requests may stay in flight;
  // their completions are kept for Wait/Poll). After kDeadlineExceeded the request is still
  // in flight: keep the buffer alive until in_flight() is 0 or the store is destroyed.
  Status Write(int unit, ExtentKind kind, const void* buffer);
  Status Read(int unit, ExtentKind kind, void* buffer);

  // Paths of the swap files, in the order params, master, moments, grads (those that
  // exist; in a dry run, those that would).
  std::vector<std::string> files() const;
  // Total bytes of the swap files: their preallocated sizes, the padded extents (in a dry
  // run, what the real store would preallocate).
  uint64_t file_bytes() const;
  // The engine in use: "io_uring" or "pread"; "null" in a dry run.
  std::string engine_name() const;
  bool dry_run() const { return options_.dry_run; }

 private:
  enum class FileRole { kParams = 0, kMaster, kMoments, kGrads };
  static constexpr int kNumFileRoles = 4;

  struct SwapFile {
    std::string path;
    nvme::FileHandle handle;
    uint64_t bytes = 0;
    bool created = false;  // by this store: removed at destruction
    RemoveOnSignal on_signal;
  };
  // What the disk holds for an extent, as far as the store knows.
  enum class ExtentState { kNeverWritten, kWriting, kWritten, kWriteFailed };
  struct Extent {
    int unit = 0;
    std::string unit_name;
    ExtentKind kind = ExtentKind::kParams;
    FileRole file = FileRole::kParams;
    uint64_t offset = 0;
    uint64_t logical_bytes = 0;
    uint64_t padded_bytes = 0;
    ExtentState state = ExtentState::kNeverWritten;
    uint64_t hash = 0;        // XXH3_64 of the last complete write
    Status last_write_error;  // why, when state == kWriteFailed
    uint32_t reads_in_flight = 0;
  };
  struct Pending {
    size_t extent = 0;
    bool write = false;
    void* buffer = nullptr;
    uint64_t tag = 0;
    uint64_t write_hash = 0;  // hash of the buffer at submit (writes)
    bool blocking = false;    // issued by Write/Read: its completion goes back to them
    bool abandoned = false;   // a blocking call gave up on it: drop its completion
  };

  NvmeStore(NvmeStoreOptions options, std::unique_ptr<nvme::IoEngine> engine);

  // Create's steps, in order. Every problem of the options and specs at once.
  static Status CheckSpecs(const NvmeStoreOptions& options,
                           const std::vector<ExtentSpec>& specs);
  // The files' paths (the claim's, or a dry run's names) and each extent at the end of its
  // file; returns the bytes of every padded extent.
  StatusOr<uint64_t> LayOut(const std::vector<ExtentSpec>& specs);
  // The free space of the directory's filesystem against `needed_bytes`.
  Status CheckRoom(uint64_t needed_bytes) const;
  // The engine: the null one of a dry run, the test factory's, or CreateIoEngine's
  // (wrapped in the fault plan's injector where one is set).
  Status MakeEngine();
  // Creates and preallocates the files (rank 0 shows progress).
  Status CreateFiles(uint64_t needed_bytes);

  static int64_t Key(int unit, ExtentKind kind) {
    return int64_t{unit} * kNumExtentKinds + static_cast<int>(kind);
  }
  StatusOr<size_t> FindExtent(int unit, ExtentKind kind, const char* op) const;
  std::string Describe(const Extent& extent) const;  // "unit 'x' (unit 3) master"
  // Validates and queues; returns the store's own id of the request.
  StatusOr<uint64_t> Submit(int unit, ExtentKind kind, bool write, void* buffer, uint64_t tag,
                            bool blocking);
  // Turns engine completions into store completions (checksums, extent states).
  void Process(std::vector<nvme::IoCompletion>* raw);
  Status WaitFor(uint64_t request_id);  // blocking Write/Read
  std::vector<Completion> TakeReady();

  NvmeStoreOptions options_;
  std::shared_ptr<SwapDirClaim> claim_;  // outlives the files (members go after ~NvmeStore)
  bool created_ = false;  // Create finished: keep_files applies
  std::unique_ptr<nvme::IoEngine> engine_;
  SwapFile files_[kNumFileRoles];
  std::vector<Extent> extents_;
  std::unordered_map<int64_t, size_t> extent_index_;  // Key(unit, kind) -> extents_
  uint64_t next_request_id_ = 0;
  std::unordered_map<uint64_t, Pending> pending_;      // by request id (the engine's tag)
  size_t abandoned_ = 0;                               // pending_ entries marked abandoned
  std::deque<std::pair<uint64_t, Completion>> ready_;  // (request id, completion)
};

}  // namespace strata
