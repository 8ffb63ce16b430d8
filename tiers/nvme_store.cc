// NvmeStore; see nvme_store.h.
#include "tiers/nvme_store.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
// The baseline (SSE2) XXH3 on purpose: libxxhash's run-time dispatched XXH3
// (xxh_x86dispatch.h, AVX-512 here) hashes faster (24 vs 19 GB/s from memory) but, A/B on
// 2 shared cores, raised `bench infinity`'s compute stall from 0.030-0.042 to 0.045-0.078.
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_join.h"
#include "core/logging.h"
#include "core/progress.h"
#include "core/run_identity.h"
#include "nvme/create_io_engine.h"
#include "nvme/fault_injection.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kAlignment = nvme::kDirectIoAlignment;

// Rounds up to kAlignment; false on overflow.
bool RoundUp(uint64_t bytes, uint64_t* rounded) {
  if (bytes > UINT64_MAX - (kAlignment - 1)) return false;
  *rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  return true;
}

bool ValidKind(ExtentKind kind) {
  const int value = static_cast<int>(kind);
  return value >= 0 && value < kNumExtentKinds;
}

std::chrono::milliseconds Remaining(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()));
}

// The path SwapDirClaim::SwapPath gives (a dry run takes no claim, yet names the files the
// real run would; the tests compare the two).
std::string DrySwapPath(const NvmeStoreOptions& options, const char* role) {
  return absl::StrFormat("%s/strata-%s-rank%d-%s.swap", options.dir, RunId(), options.rank, role);
}

// The engine of a dry run: every request completes at once and successfully, and no byte
// moves; the buffers are never read or written, because a dry device's buffers are
// address ranges with no memory behind them. Files are names only: OpenFile records one
// and touches nothing. Requests are validated as the real engines do (an open file, a
// length, a buffer, O_DIRECT alignment), so a dry run rejects what a real one would, and
// the stats count the bytes a real engine would move.
// Thread-safety: thread-compatible, like every IoEngine.
class NullIoEngine final : public nvme::IoEngine {
 public:
  explicit NullIoEngine(const nvme::IoEngineOptions& options) {
    info_.engine = "null";
    info_.queue_depth = options.queue_depth;
    info_.max_request_bytes = options.max_request_bytes;
  }

  StatusOr<nvme::FileHandle> OpenFile(const std::string& path,
                                      const nvme::FileOptions& options) override {
    files_.push_back({path, options.direct_io, /*open=*/true, /*outstanding=*/0});
    return nvme::FileHandle{static_cast<int32_t>(files_.size() - 1)};
  }

  Status CloseFile(nvme::FileHandle file) override {
    if (!IsOpen(file)) {
      return absl::InvalidArgumentError(absl::StrCat("nvme: close of unknown file ", file.id));
    }
    if (files_[file.id].outstanding > 0) {
      return absl::FailedPreconditionError(
          absl::StrFormat("nvme: close of %s with %d extents outstanding", files_[file.id].path,
                          files_[file.id].outstanding));
    }
    files_[file.id].open = false;
    return Status();
  }

  std::string FileName(nvme::FileHandle file) const override {
    if (!file.valid() || file.id >= static_cast<int32_t>(files_.size())) {
      return absl::StrCat("<unknown file ", file.id, ">");
    }
    return files_[file.id].path;
  }

  Status RegisterBuffers(absl::Span<const nvme::BufferRegion> regions) override { return Status(); }
  Status UnregisterBuffers() override { return Status(); }

  Status Submit(absl::Span<const nvme::IoRequest> requests) override {
    for (size_t i = 0; i < requests.size(); ++i) {
      Status valid = Validate(requests[i]);
      if (!valid.ok()) {
        return Annotate(valid, absl::StrFormat("nvme: request %d of a batch of %d (tag %d), "
                                               "batch rejected",
                                               i, requests.size(), requests[i].tag));
      }
    }
    for (const nvme::IoRequest& request : requests) {
      ++files_[request.file.id].outstanding;
      ready_.push_back(nvme::IoCompletion{request.tag, Status(), request.op, request.file,
                                          request.offset, request.length, request.length});
      ++stats_.extents_completed;
      stats_.transfers_issued +=
          info_.max_request_bytes == 0
              ? 1
              : (request.length + info_.max_request_bytes - 1) / info_.max_request_bytes;
      (request.op == nvme::IoOp::kRead ? stats_.bytes_read : stats_.bytes_written) +=
          request.length;
    }
    return Status();
  }

  size_t Poll(std::vector<nvme::IoCompletion>* completions) override {
    const size_t count = ready_.size();
    for (nvme::IoCompletion& completion : ready_) {
      --files_[completion.file.id].outstanding;
      completions->push_back(std::move(completion));
    }
    ready_.clear();
    return count;
  }

  // Everything outstanding is finished already: never waits.
  Status Wait(size_t min_completions, std::chrono::milliseconds timeout,
              std::vector<nvme::IoCompletion>* completions) override {
    Poll(completions);
    return Status();
  }

  Status Drain() override { return Status(); }
  size_t Outstanding() const override { return ready_.size(); }
  nvme::EngineInfo info() const override { return info_; }
  nvme::EngineStats stats() const override { return stats_; }

 private:
  struct File {
    std::string path;
    bool direct = false;
    bool open = false;
    uint32_t outstanding = 0;
  };

  bool IsOpen(nvme::FileHandle file) const {
    return file.valid() && file.id < static_cast<int32_t>(files_.size()) && files_[file.id].open;
  }

  Status Validate(const nvme::IoRequest& request) const {
    if (!IsOpen(request.file)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "nvme: %s of unknown or closed file %d", nvme::IoOpName(request.op), request.file.id));
    }
    const File& file = files_[request.file.id];
    auto invalid = [&](const std::string& why) {
      return absl::InvalidArgumentError(
          absl::StrFormat("nvme: %s of %s at offset %d, length %d: %s", nvme::IoOpName(request.op),
                          file.path, request.offset, request.length, why));
    };
    if (request.length == 0) return invalid("length is zero");
    if (request.buffer == nullptr) return invalid("buffer is null");
    if (request.offset + request.length < request.offset) return invalid("extent overflows");
    const uint64_t address = reinterpret_cast<uintptr_t>(request.buffer);
    if (file.direct && (request.offset % kAlignment != 0 || request.length % kAlignment != 0 ||
                        address % kAlignment != 0)) {
      return invalid(absl::StrFormat(
          "O_DIRECT needs offset, length and buffer address (0x%x) aligned to %d bytes", address,
          kAlignment));
    }
    return Status();
  }

  nvme::EngineInfo info_;
  nvme::EngineStats stats_;
  std::vector<File> files_;  // index = FileHandle::id
  std::deque<nvme::IoCompletion> ready_;
};

}  // namespace

const char* ExtentKindName(ExtentKind kind) {
  switch (kind) {
    case ExtentKind::kParams:
      return "params";
    case ExtentKind::kMaster:
      return "master";
    case ExtentKind::kExpAvg:
      return "exp_avg";
    case ExtentKind::kExpAvgSq:
      return "exp_avg_sq";
    case ExtentKind::kGrads:
      return "grads";
  }
  return "?";
}

NvmeStore::NvmeStore(NvmeStoreOptions options, std::unique_ptr<nvme::IoEngine> engine)
    : options_(std::move(options)), engine_(std::move(engine)) {}

StatusOr<std::unique_ptr<NvmeStore>> NvmeStore::Create(const NvmeStoreOptions& options,
                                                       const std::vector<ExtentSpec>& specs) {
  // Configuration: every problem at once.
  std::vector<std::string> problems;
  if (options.dir.empty()) problems.push_back("zero.nvme_dir is empty");
  if (options.rank < 0) problems.push_back(absl::StrCat("rank ", options.rank, " is negative"));
  if (options.wait_timeout.count() <= 0) problems.push_back("wait_timeout must be positive");
  if (specs.empty()) problems.push_back("no extents declared");
  std::unordered_map<int64_t, size_t> index;
  std::unordered_map<int, std::string> unit_names;
  for (size_t i = 0; i < specs.size(); ++i) {
    const ExtentSpec& spec = specs[i];
    const std::string what = absl::StrFormat("extent %d (unit %d '%s', %s)", i, spec.unit,
                                             spec.unit_name, ExtentKindName(spec.kind));
    uint64_t padded = 0;
    if (spec.unit < 0) problems.push_back(what + ": negative unit");
    if (!ValidKind(spec.kind)) {
      problems.push_back(absl::StrCat(what, ": unknown kind ", static_cast<int>(spec.kind)));
      continue;
    }
    if (spec.bytes == 0) problems.push_back(what + ": 0 bytes");
    if (!RoundUp(spec.bytes, &padded)) problems.push_back(what + ": size overflows");
    if (!index.emplace(Key(spec.unit, spec.kind), i).second) {
      problems.push_back(what + ": declared twice");
    }
    auto [name, inserted] = unit_names.emplace(spec.unit, spec.unit_name);
    if (!inserted && name->second != spec.unit_name) {
      problems.push_back(
          absl::StrFormat("%s: unit %d is also named '%s'", what, spec.unit, name->second));
    }
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("nvme store: ", absl::StrJoin(problems, "; ")));
  }

  // The directory. A dry run leaves it alone: `strata plan` may run where it does not
  // exist, and must not take the claim a live run on this machine may hold.
  if (!options.dry_run) {
    struct stat dir_stat {};
    if (::stat(options.dir.c_str(), &dir_stat) != 0) {
      return ErrnoError(errno, absl::StrCat("nvme store: zero.nvme_dir ", options.dir));
    }
    if (!S_ISDIR(dir_stat.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("nvme store: zero.nvme_dir ", options.dir, " is not a directory"));
    }
    if (::access(options.dir.c_str(), W_OK | X_OK) != 0) {
      return ErrnoError(
          errno, absl::StrCat("nvme store: zero.nvme_dir ", options.dir, " is not writable"));
    }
  }

  // The layout: extents in declaration order, each at the end of its file.
  auto store = std::unique_ptr<NvmeStore>(new NvmeStore(options, nullptr));
  static const char* const kFileNames[kNumFileRoles] = {"params", "master", "moments",
                                                                "grads"};
  if (options.dry_run) {
    for (int role = 0; role < kNumFileRoles; ++role) {
      store->files_[role].path = DrySwapPath(options, kFileNames[role]);
    }
  } else {
    ASSIGN_OR_RETURN(store->claim_,
                     SwapDirClaim::Acquire({options.dir, options.rank, options.allow_memory_fs}));
    for (int role = 0; role < kNumFileRoles; ++role) {
      store->files_[role].path = store->claim_->SwapPath(kFileNames[role]);
    }
  }
  uint64_t needed_bytes = 0;
  for (const ExtentSpec& spec : specs) {
    Extent extent;
    extent.unit = spec.unit;
    extent.unit_name = spec.unit_name;
    extent.kind = spec.kind;
    extent.file = spec.kind == ExtentKind::kParams   ? FileRole::kParams
                  : spec.kind == ExtentKind::kMaster ? FileRole::kMaster
                  : spec.kind == ExtentKind::kGrads  ? FileRole::kGrads
                                                     : FileRole::kMoments;
    extent.logical_bytes = spec.bytes;
    RoundUp(spec.bytes, &extent.padded_bytes);
    SwapFile& file = store->files_[static_cast<int>(extent.file)];
    extent.offset = file.bytes;
    if (file.bytes > UINT64_MAX - extent.padded_bytes ||
        needed_bytes > UINT64_MAX - extent.padded_bytes) {
      return absl::InvalidArgumentError("nvme store: the extents' total size overflows");
    }
    file.bytes += extent.padded_bytes;
    needed_bytes += extent.padded_bytes;
    store->extent_index_.emplace(Key(spec.unit, spec.kind), store->extents_.size());
    store->extents_.push_back(std::move(extent));
  }

  // Room for all of it, checked before anything is created (the claim has removed
  // crashed runs' leftovers by now). A dry run needs none.
  struct statvfs fs {};
  if (!options.dry_run && ::statvfs(options.dir.c_str(), &fs) != 0) {
    return ErrnoError(errno, absl::StrCat("nvme store: statvfs of zero.nvme_dir ", options.dir));
  }
  const uint64_t free_bytes = uint64_t{fs.f_bavail} * fs.f_frsize;
  if (!options.dry_run && needed_bytes > free_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "nvme store: zero.nvme_dir %s has %d bytes free, but the swap files of rank %d need "
        "%d bytes (%d extents, each rounded up to %d bytes); free space there, choose another "
        "directory, or place less state on nvme",
        options.dir, free_bytes, options.rank, needed_bytes, specs.size(), kAlignment));
  }

  // The engine, then the files. From here on a failure removes what was created: the
  // store's destructor does it (keep_files is for stores Create returned).
  if (options.dry_run) {
    store->engine_ = std::make_unique<NullIoEngine>(options.engine);
  } else if (options.engine_factory) {
    ASSIGN_OR_RETURN(store->engine_, options.engine_factory(options.engine));
  } else {
    StatusOr<std::unique_ptr<nvme::IoEngine>> engine = nvme::CreateIoEngine(options.engine);
    if (!engine.ok()) return Annotate(engine.status(), "nvme store: creating the I/O engine");
    store->engine_ = std::move(engine).value();
    // Fault tests of the whole program: STRATA_FAULT_NVME=KIND@N (nvme/fault_injection.h).
    const char* fault = std::getenv("STRATA_FAULT_NVME");
    StatusOr<std::optional<nvme::FaultPlan>> plan =
        nvme::ParseFaultPlan(fault == nullptr ? "" : fault);
    if (!plan.ok()) return Annotate(plan.status(), "STRATA_FAULT_NVME");
    if (plan->has_value()) {
      spdlog::warn("nvme store: STRATA_FAULT_NVME={}: injecting faults", fault);
      store->engine_ = std::make_unique<nvme::FaultInjectingEngine>(std::move(store->engine_),
                                                                    **plan);
    }
  }
  if (store->engine_ == nullptr) {
    return absl::InternalError("nvme store: the engine factory returned no engine");
  }
  // Preallocating tens of GiB can take a while on some filesystems: rank 0 shows progress.
  std::optional<Progress> progress;
  if (options.rank == 0 && !options.dry_run) {
    progress.emplace(absl::StrCat("creating swap files in ", options.dir), needed_bytes);
  }
  for (SwapFile& file : store->files_) {
    if (file.bytes == 0) continue;
    // Open may create it even when a later step fails; the null engine creates nothing.
    file.created = !options.dry_run;
    nvme::FileOptions file_options;
    if (progress) file_options.on_preallocated = [&](uint64_t bytes) { progress->Advance(bytes); };
    file_options.direct_io = true;
    file_options.writable = true;
    file_options.create = true;
    file_options.exclusive = true;
    file_options.preallocate_bytes = file.bytes;
    StatusOr<nvme::FileHandle> handle = store->engine_->OpenFile(file.path, file_options);
    if (!handle.ok()) {
      // Not ours: whatever stands at the path stays (the claim made the name unique).
      if (handle.status().code() == absl::StatusCode::kAlreadyExists) file.created = false;
      return Annotate(handle.status(),
                      absl::StrFormat("nvme store: creating swap file %s", file.path));
    }
    file.handle = *handle;
    if (file.created && !options.keep_files) file.on_signal = RemoveOnSignal(file.path);
  }
  store->created_ = true;
  if (options.dry_run) {
    spdlog::info(
        "nvme store: rank {}: dry run: {} extents, {} bytes of swap files in {} "
        "(none created)",
        options.rank, store->extents_.size(), needed_bytes, options.dir);
  } else {
    spdlog::info("nvme store: rank {}: {} extents, {} bytes in {} ({} engine)", options.rank,
                 store->extents_.size(), needed_bytes, options.dir, store->engine_name());
  }
  return store;
}

NvmeStore::~NvmeStore() {
  if (engine_ != nullptr) {
    if (!pending_.empty()) {
      spdlog::warn("nvme store: destroyed with {} requests in flight; draining them",
                   pending_.size());
    }
    Status drained = engine_->Drain();
    if (!drained.ok()) {
      spdlog::error("nvme store: draining the engine: {}", std::string(drained.message()));
    }
    engine_.reset();  // closes the files
  }
  // A store that Create did not finish removes what it created, keep_files or not.
  if (created_ && options_.keep_files) return;
  for (SwapFile& file : files_) {
    if (!file.created) continue;
    file.on_signal = RemoveOnSignal();  // forgotten before the name can be reused
    if (::unlink(file.path.c_str()) != 0 && errno != ENOENT) {
      spdlog::error("nvme store: removing {}: {}", file.path, std::strerror(errno));
    }
  }
}

uint64_t NvmeStore::PaddedBytes(int unit, ExtentKind kind) const {
  auto found = extent_index_.find(Key(unit, kind));
  return found == extent_index_.end() ? 0 : extents_[found->second].padded_bytes;
}

StatusOr<size_t> NvmeStore::FindExtent(int unit, ExtentKind kind, const char* op) const {
  auto found = ValidKind(kind) ? extent_index_.find(Key(unit, kind)) : extent_index_.end();
  if (found == extent_index_.end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("nvme store: %s of unit %d %s: no such extent was declared", op, unit,
                        ValidKind(kind) ? ExtentKindName(kind) : "(unknown kind)"));
  }
  return found->second;
}

StatusOr<ExtentLocation> NvmeStore::Locate(int unit, ExtentKind kind) const {
  ASSIGN_OR_RETURN(size_t index, FindExtent(unit, kind, "lookup"));
  const Extent& extent = extents_[index];
  return ExtentLocation{files_[static_cast<int>(extent.file)].path, extent.offset,
                        extent.logical_bytes, extent.padded_bytes};
}

std::string NvmeStore::Describe(const Extent& extent) const {
  if (extent.unit_name.empty()) {
    return absl::StrFormat("unit %d %s", extent.unit, ExtentKindName(extent.kind));
  }
  return absl::StrFormat("unit '%s' (unit %d) %s", extent.unit_name, extent.unit,
                         ExtentKindName(extent.kind));
}

StatusOr<uint64_t> NvmeStore::Submit(int unit, ExtentKind kind, bool write, void* buffer,
                                     uint64_t tag, bool blocking) {
  const char* op = write ? "write" : "read";
  ASSIGN_OR_RETURN(size_t index, FindExtent(unit, kind, op));
  Extent& extent = extents_[index];
  const SwapFile& file = files_[static_cast<int>(extent.file)];
  const std::string what = absl::StrFormat("nvme store: %s of %s (%s at offset %d)", op,
                                           Describe(extent), file.path, extent.offset);
  if (buffer == nullptr || reinterpret_cast<uintptr_t>(buffer) % kAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: buffer %p is not aligned to %d bytes (use nvme::IoBuffer, %d bytes long)", what,
        buffer, kAlignment, extent.padded_bytes));
  }
  if (extent.state == ExtentState::kWriting) {
    return absl::FailedPreconditionError(what + ": a write of this extent is in flight");
  }
  if (write && extent.reads_in_flight > 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: %d reads of this extent are in flight", what, extent.reads_in_flight));
  }
  // A dry run's set-up stores nothing (a plan's state has no values): its extents read as
  // if written.
  if (!write && extent.state == ExtentState::kNeverWritten && !options_.dry_run) {
    return absl::DataLossError(what + ": the extent was never written");
  }
  if (!write && extent.state == ExtentState::kWriteFailed) {
    return absl::DataLossError(absl::StrCat(
        what, ": the extent was never written completely (torn): its last write failed (",
        extent.last_write_error.message(), ")"));
  }

  const uint64_t request_id = next_request_id_;
  Pending pending;
  pending.extent = index;
  pending.write = write;
  pending.buffer = buffer;
  pending.tag = tag;
  pending.blocking = blocking;
  // The buffer is the engine's until completion, so its hash now is the hash of what is
  // written (a caller that changes it meanwhile gets a checksum error on read, not silence).
  // A dry run's buffer may have no memory behind it: not read, and no checksum.
  if (write && !options_.dry_run) pending.write_hash = XXH3_64bits(buffer, extent.logical_bytes);
  const nvme::IoRequest request{write ? nvme::IoOp::kWrite : nvme::IoOp::kRead,
                                file.handle,
                                extent.offset,
                                extent.padded_bytes,
                                buffer,
                                request_id};
  Status submitted = engine_->Submit(absl::MakeConstSpan(&request, 1));
  if (!submitted.ok()) return Annotate(submitted, what);
  ++next_request_id_;
  if (write) {
    extent.state = ExtentState::kWriting;
  } else {
    ++extent.reads_in_flight;
  }
  pending_.emplace(request_id, pending);
  return request_id;
}

Status NvmeStore::SubmitWrite(int unit, ExtentKind kind, const void* buffer, uint64_t tag) {
  return Submit(unit, kind, /*write=*/true, const_cast<void*>(buffer), tag, /*blocking=*/false)
      .status();
}

Status NvmeStore::SubmitRead(int unit, ExtentKind kind, void* buffer, uint64_t tag) {
  return Submit(unit, kind, /*write=*/false, buffer, tag, /*blocking=*/false).status();
}

void NvmeStore::Process(std::vector<nvme::IoCompletion>* raw) {
  for (nvme::IoCompletion& done : *raw) {
    auto found = pending_.find(done.tag);
    if (found == pending_.end()) {
      spdlog::error("nvme store: completion with unknown request id {} ignored", done.tag);
      continue;
    }
    const Pending pending = found->second;
    pending_.erase(found);
    Extent& extent = extents_[pending.extent];
    const SwapFile& file = files_[static_cast<int>(extent.file)];
    const std::string what =
        absl::StrFormat("nvme store: %s of %s", pending.write ? "write" : "read", Describe(extent));
    Status status;
    if (pending.write) {
      if (done.status.ok()) {
        extent.state = ExtentState::kWritten;
        extent.hash = pending.write_hash;
        extent.last_write_error = Status();
      } else {
        // Part of it may have reached the disk: the extent holds nothing trustworthy.
        status = Annotate(done.status, what);
        extent.state = ExtentState::kWriteFailed;
        extent.last_write_error = status;
      }
    } else {
      --extent.reads_in_flight;
      if (!done.status.ok()) {
        status = Annotate(done.status, what);
      } else if (!options_.dry_run) {  // a dry read brings no bytes to check
        const uint64_t read_hash = XXH3_64bits(pending.buffer, extent.logical_bytes);
        if (read_hash != extent.hash) {
          status = absl::DataLossError(absl::StrFormat(
              "%s from %s at offset %d (%d bytes): checksum mismatch (XXH3_64 %016x written, "
              "%016x read): the extent on disk is corrupted or torn",
              what, file.path, extent.offset, extent.logical_bytes, extent.hash, read_hash));
        }
      }
    }
    if (pending.abandoned) {
      --abandoned_;
      if (!status.ok()) {
        spdlog::warn("nvme store: a request given up on finished: {}",
                     std::string(status.message()));
      }
      continue;
    }
    ready_.emplace_back(done.tag, Completion{pending.tag, extent.unit, extent.kind, pending.write,
                                             std::move(status)});
  }
  raw->clear();
}

std::vector<NvmeStore::Completion> NvmeStore::TakeReady() {
  std::vector<Completion> completions;
  completions.reserve(ready_.size());
  for (auto& [request_id, completion] : ready_) completions.push_back(std::move(completion));
  ready_.clear();
  return completions;
}

std::vector<NvmeStore::Completion> NvmeStore::Poll() {
  std::vector<nvme::IoCompletion> raw;
  engine_->Poll(&raw);
  Process(&raw);
  return TakeReady();
}

StatusOr<std::vector<NvmeStore::Completion>> NvmeStore::Wait(size_t min_completions) {
  const auto deadline = Clock::now() + options_.wait_timeout;
  std::vector<nvme::IoCompletion> raw;
  engine_->Poll(&raw);
  Process(&raw);
  // Requests given up on by Write/Read complete without a completion to return.
  const size_t target = std::min(min_completions, ready_.size() + pending_.size() - abandoned_);
  while (ready_.size() < target) {
    const std::chrono::milliseconds remaining = Remaining(deadline);
    if (remaining.count() == 0) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "nvme store: waited %d ms for %d completions, %d arrived; %d requests still in "
          "flight (their completions stay available)",
          options_.wait_timeout.count(), target, ready_.size(), pending_.size()));
    }
    Status waited = engine_->Wait(target - ready_.size(), remaining, &raw);
    Process(&raw);
    if (!waited.ok() && waited.code() != absl::StatusCode::kDeadlineExceeded) {
      return Annotate(waited, "nvme store: waiting for completions");
    }
  }
  return TakeReady();
}

Status NvmeStore::WaitFor(uint64_t request_id) {
  const auto deadline = Clock::now() + options_.wait_timeout;
  const Pending request = pending_.at(request_id);
  std::vector<nvme::IoCompletion> raw;
  Status failure;
  while (true) {
    for (auto it = ready_.begin(); it != ready_.end(); ++it) {
      if (it->first == request_id) {
        Status status = std::move(it->second.status);
        ready_.erase(it);
        return status;
      }
    }
    auto pending = pending_.find(request_id);
    if (pending == pending_.end()) {
      return absl::InternalError(
          absl::StrCat("nvme store: request ", request_id, " vanished without a completion"));
    }
    if (!failure.ok()) {
      // Still in flight: its completion is dropped when it comes.
      pending->second.abandoned = true;
      ++abandoned_;
      return Annotate(failure, absl::StrFormat("nvme store: %s of %s (the request stays in "
                                               "flight; keep its buffer alive)",
                                               request.write ? "write" : "read",
                                               Describe(extents_[request.extent])));
    }
    const std::chrono::milliseconds remaining = Remaining(deadline);
    if (remaining.count() == 0) {
      failure = absl::DeadlineExceededError(
          absl::StrFormat("no completion within %d ms", options_.wait_timeout.count()));
      continue;
    }
    Status waited = engine_->Wait(1, remaining, &raw);
    Process(&raw);
    if (!waited.ok() && waited.code() != absl::StatusCode::kDeadlineExceeded) failure = waited;
  }
}

Status NvmeStore::Write(int unit, ExtentKind kind, const void* buffer) {
  ASSIGN_OR_RETURN(uint64_t request_id, Submit(unit, kind, /*write=*/true,
                                               const_cast<void*>(buffer), 0, /*blocking=*/true));
  return WaitFor(request_id);
}

Status NvmeStore::Read(int unit, ExtentKind kind, void* buffer) {
  ASSIGN_OR_RETURN(uint64_t request_id,
                   Submit(unit, kind, /*write=*/false, buffer, 0, /*blocking=*/true));
  return WaitFor(request_id);
}

std::vector<std::string> NvmeStore::files() const {
  std::vector<std::string> paths;
  for (const SwapFile& file : files_) {
    if (file.bytes > 0) paths.push_back(file.path);
  }
  return paths;
}

uint64_t NvmeStore::file_bytes() const {
  uint64_t bytes = 0;
  for (const SwapFile& file : files_) bytes += file.bytes;
  return bytes;
}

std::string NvmeStore::engine_name() const { return engine_->info().engine; }

}  // namespace strata
