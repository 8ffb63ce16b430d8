// NvmeStore; see nvme_store.h.
#include "nvme/nvme_store.h"

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
#include "nvme/null_io_engine.h"

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
  RETURN_IF_ERROR(CheckSpecs(options, specs));
  auto store = std::unique_ptr<NvmeStore>(new NvmeStore(options, nullptr));
  // The directory: claimed (and checked) by the claim. A dry run leaves it alone: `strata
  // plan` may run where it does not exist, and must not take the claim a live run on this
  // machine may hold.
  if (!options.dry_run) {
    ASSIGN_OR_RETURN(store->claim_,
                     SwapDirClaim::Acquire({options.dir, options.rank, options.allow_memory_fs}));
  }
  ASSIGN_OR_RETURN(const uint64_t needed_bytes, store->LayOut(specs));
  // Room for all of it, checked before anything is created (the claim has removed crashed
  // runs' leftovers by now).
  RETURN_IF_ERROR(store->CheckRoom(needed_bytes));
  // The engine, then the files. From here on a failure removes what was created: the
  // store's destructor does it (keep_files is for stores Create returned).
  RETURN_IF_ERROR(store->MakeEngine());
  RETURN_IF_ERROR(store->CreateFiles(needed_bytes));
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

Status NvmeStore::CheckSpecs(const NvmeStoreOptions& options,
                             const std::vector<ExtentSpec>& specs) {
  std::vector<std::string> problems;
  // A real store's directory is checked where it is claimed (CheckSwapDir); a dry run's
  // only names its files, so it needs a name.
  if (options.dry_run && options.dir.empty()) problems.push_back("zero.nvme_dir is empty");
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
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("nvme store: ", absl::StrJoin(problems, "; ")));
}

StatusOr<uint64_t> NvmeStore::LayOut(const std::vector<ExtentSpec>& specs) {
  static const char* const kFileNames[kNumFileRoles] = {"params", "master", "moments",
                                                        "grads"};
  for (int role = 0; role < kNumFileRoles; ++role) {
    files_[role].path = claim_ != nullptr ? claim_->SwapPath(kFileNames[role])
                                          : DrySwapPath(options_, kFileNames[role]);
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
    SwapFile& file = files_[static_cast<int>(extent.file)];
    extent.offset = file.bytes;
    if (file.bytes > UINT64_MAX - extent.padded_bytes ||
        needed_bytes > UINT64_MAX - extent.padded_bytes) {
      return absl::InvalidArgumentError("nvme store: the extents' total size overflows");
    }
    file.bytes += extent.padded_bytes;
    needed_bytes += extent.padded_bytes;
    extent_index_.emplace(Key(spec.unit, spec.kind), extents_.size());
    extents_.push_back(std::move(extent));
  }
  return needed_bytes;
}

Status NvmeStore::CheckRoom(uint64_t needed_bytes) const {
  if (options_.dry_run) return absl::OkStatus();  // needs none
  struct statvfs fs {};
  if (::statvfs(options_.dir.c_str(), &fs) != 0) {
    return ErrnoError(errno, absl::StrCat("nvme store: statvfs of zero.nvme_dir ", options_.dir));
  }
  const uint64_t free_bytes = uint64_t{fs.f_bavail} * fs.f_frsize;
  if (needed_bytes <= free_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrFormat(
      "nvme store: zero.nvme_dir %s has %d bytes free, but the swap files of rank %d need "
      "%d bytes (%d extents, each rounded up to %d bytes); free space there, choose another "
      "directory, or place less state on nvme",
      options_.dir, free_bytes, options_.rank, needed_bytes, extents_.size(), kAlignment));
}

Status NvmeStore::MakeEngine() {
  if (options_.dry_run) {
    engine_ = std::make_unique<nvme::NullIoEngine>(options_.engine);
  } else if (options_.engine_factory) {
    ASSIGN_OR_RETURN(engine_, options_.engine_factory(options_.engine));
  } else {
    StatusOr<std::unique_ptr<nvme::IoEngine>> engine = nvme::CreateIoEngine(options_.engine);
    if (!engine.ok()) return Annotate(engine.status(), "nvme store: creating the I/O engine");
    engine_ = std::move(engine).value();
  }
  if (engine_ == nullptr) {
    return absl::InternalError("nvme store: the engine factory returned no engine");
  }
  if (options_.fault && !options_.dry_run) {
    spdlog::warn("nvme store: injecting faults ({})", options_.fault->source);
    engine_ = std::make_unique<nvme::FaultInjectingEngine>(std::move(engine_), *options_.fault);
  }
  return absl::OkStatus();
}

Status NvmeStore::CreateFiles(uint64_t needed_bytes) {
  // Preallocating tens of GiB can take a while on some filesystems: rank 0 shows progress.
  std::optional<Progress> progress;
  if (options_.rank == 0 && !options_.dry_run) {
    progress.emplace(absl::StrCat("creating swap files in ", options_.dir), needed_bytes);
  }
  for (SwapFile& file : files_) {
    if (file.bytes == 0) continue;
    // Open may create it even when a later step fails; the null engine creates nothing.
    file.created = !options_.dry_run;
    nvme::FileOptions file_options;
    if (progress) file_options.on_preallocated = [&](uint64_t bytes) { progress->Advance(bytes); };
    file_options.direct_io = true;
    file_options.writable = true;
    file_options.create = true;
    file_options.exclusive = true;
    file_options.preallocate_bytes = file.bytes;
    StatusOr<nvme::FileHandle> handle = engine_->OpenFile(file.path, file_options);
    if (!handle.ok()) {
      // Not ours: whatever stands at the path stays (the claim made the name unique).
      if (handle.status().code() == absl::StatusCode::kAlreadyExists) file.created = false;
      return Annotate(handle.status(),
                      absl::StrFormat("nvme store: creating swap file %s", file.path));
    }
    file.handle = *handle;
    if (file.created && !options_.keep_files) file.on_signal = RemoveOnSignal(file.path);
  }
  return absl::OkStatus();
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
