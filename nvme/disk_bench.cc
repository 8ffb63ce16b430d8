// The disk benchmark; see disk_bench.h. RunDiskBench goes in named steps: the options and
// the free space checked, the engine's buffer and the test file made, then each depth's
// alternating passes (engine and fio, fio_runner.h), the engine against the plain loop, the
// 4 KiB-page buffers, and last the bests and the goals.
#include "nvme/disk_bench.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>

#include "absl/strings/str_join.h"
#include "core/logging.h"
#include "nvme/create_io_engine.h"
#include "nvme/fio_runner.h"
#include "nvme/io_buffer.h"

namespace strata::nvme {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kIoTimeout = std::chrono::minutes(2);

double MegabytesPerSecond(uint64_t bytes, Clock::duration elapsed) {
  const double seconds = std::chrono::duration<double>(elapsed).count();
  return seconds > 0 ? bytes / seconds / 1e6 : 0;
}

Status ValidateOptions(const DiskBenchOptions& options) {
  std::vector<std::string> problems;
  if (options.dir.empty()) problems.push_back("dir: required");
  if (options.request_bytes == 0 || options.request_bytes % kDirectIoAlignment != 0 ||
      options.request_bytes > kMaxRequestBytes) {
    problems.push_back(absl::StrFormat("request size %d: not a positive multiple of %d up to %d",
                                       options.request_bytes, kDirectIoAlignment,
                                       kMaxRequestBytes));
  } else if (options.file_bytes < options.request_bytes ||
             options.file_bytes % options.request_bytes != 0) {
    problems.push_back(
        absl::StrFormat("file size %d: not a positive multiple of the request "
                        "size %d",
                        options.file_bytes, options.request_bytes));
  }
  if (options.queue_depths.empty()) problems.push_back("queue depths: none given");
  for (uint32_t depth : options.queue_depths) {
    if (depth == 0 || depth > 1024) {
      problems.push_back(absl::StrFormat("queue depth %d: not in [1, 1024]", depth));
    }
  }
  if (options.passes == 0) problems.push_back("passes: at least 1");
  if (problems.empty()) return Status();
  return absl::InvalidArgumentError(
      absl::StrCat("nvme bench: bad options: ", absl::StrJoin(problems, "; ")));
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

// Fills with a cheap pseudo-random pattern (no zero pages for the host to special-case).
void FillPattern(char* data, uint64_t bytes) {
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto* words = reinterpret_cast<uint64_t*>(data);
  for (uint64_t i = 0; i < bytes / 8; ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    words[i] = state;
  }
}

// One sequential pass over the file through the engine: `depth` requests in flight, each
// into its own slot of `buffer`, a finished slot refilled at once.
StatusOr<double> EnginePass(IoEngine* engine, FileHandle file, IoOp op, uint64_t file_bytes,
                            uint64_t request_bytes, uint32_t depth, char* buffer) {
  const uint64_t total = file_bytes / request_bytes;
  uint64_t next = 0;
  uint64_t done = 0;
  std::vector<IoRequest> batch;
  auto request_for = [&](uint64_t slot) {
    IoRequest request;
    request.op = op;
    request.file = file;
    request.offset = next * request_bytes;
    request.length = request_bytes;
    request.buffer = buffer + slot * request_bytes;
    request.tag = slot;
    ++next;
    return request;
  };
  const auto start = Clock::now();
  for (uint32_t slot = 0; slot < depth && next < total; ++slot) batch.push_back(request_for(slot));
  RETURN_IF_ERROR(engine->Submit(batch));
  std::vector<IoCompletion> completions;
  while (done < total) {
    completions.clear();
    RETURN_IF_ERROR(engine->Wait(1, kIoTimeout, &completions));
    batch.clear();
    for (const IoCompletion& completion : completions) {
      RETURN_IF_ERROR(completion.status);
      ++done;
      if (next < total) batch.push_back(request_for(completion.tag));
    }
    if (!batch.empty()) RETURN_IF_ERROR(engine->Submit(batch));
  }
  return MegabytesPerSecond(file_bytes, Clock::now() - start);
}

struct EngineRun {
  std::unique_ptr<IoEngine> engine;
  FileHandle file;
};

StatusOr<EngineRun> OpenEngine(const DiskBenchOptions& options, const std::string& path,
                               uint32_t depth, const IoBuffer& buffer) {
  IoEngineOptions engine_options;
  engine_options.engine = options.engine;
  engine_options.queue_depth = depth;
  engine_options.max_request_bytes = options.request_bytes;
  EngineRun run;
  ASSIGN_OR_RETURN(run.engine, CreateIoEngine(engine_options));
  FileOptions file_options;
  ASSIGN_OR_RETURN(run.file, run.engine->OpenFile(path, file_options));
  const BufferRegion region = buffer.region();
  RETURN_IF_ERROR(run.engine->RegisterBuffers(absl::MakeConstSpan(&region, 1)));
  return run;
}

class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// The reference: one synchronous pread after another, over the same slots.
StatusOr<double> PlainLoopPass(const std::string& path, uint64_t file_bytes, uint64_t request_bytes,
                               uint32_t slots, char* buffer) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError(errno, absl::StrCat("nvme bench: open ", path));
  const auto start = Clock::now();
  for (uint64_t offset = 0, index = 0; offset < file_bytes; offset += request_bytes, ++index) {
    char* slot = buffer + (index % slots) * request_bytes;
    uint64_t done = 0;
    while (done < request_bytes) {
      ssize_t got = ::pread(fd.get(), slot + done, request_bytes - done, offset + done);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        return ErrnoError(errno, absl::StrFormat("nvme bench: pread of %s at offset %d, length %d",
                                                 path, offset + done, request_bytes - done));
      }
      if (got == 0) {
        return absl::OutOfRangeError(
            absl::StrFormat("nvme bench: pread of %s at offset %d: end of file", path, offset));
      }
      done += got;
    }
  }
  return MegabytesPerSecond(file_bytes, Clock::now() - start);
}

// The result's description of the run, before anything is measured.
DiskBenchResult DescribeRun(const DiskBenchOptions& options) {
  DiskBenchResult result;
  result.file = options.dir + "/strata-nvme-bench.dat";
  result.file_bytes = options.file_bytes;
  result.request_bytes = options.request_bytes;
  result.passes = options.passes;
  result.transparent_huge_pages = TransparentHugePageMode();
  return result;
}

// Room in `dir` for the test file and 256 MiB to spare.
Status CheckFreeSpace(const DiskBenchOptions& options) {
  struct statvfs fs {};
  if (::statvfs(options.dir.c_str(), &fs) != 0) {
    return ErrnoError(errno, absl::StrCat("nvme bench: directory ", options.dir));
  }
  const uint64_t free_bytes = uint64_t{fs.f_bavail} * fs.f_frsize;
  if (free_bytes < options.file_bytes + (256ull << 20)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "nvme bench: %s has %d bytes free; the test file needs %d (plus 256 MiB headroom); "
        "use --size or another --dir",
        options.dir, free_bytes, options.file_bytes));
  }
  return Status();
}

// The engine's buffer: `bytes`, on huge pages where asked, filled with the pattern; what it
// got goes into the result.
StatusOr<IoBuffer> AllocateEngineBuffer(const DiskBenchOptions& options, uint64_t bytes,
                                        DiskBenchResult* result) {
  IoBufferOptions buffer_options;
  buffer_options.huge_pages = options.huge_page_buffers;
  ASSIGN_OR_RETURN(IoBuffer buffer, IoBuffer::Allocate(bytes, buffer_options));
  FillPattern(buffer.data(), buffer.bytes());
  result->buffers_huge_pages_requested = options.huge_page_buffers;
  result->buffer_bytes = buffer.bytes();
  result->buffer_huge_page_bytes = buffer.huge_page_bytes();
  result->buffer_note = buffer.note();
  return buffer;
}

// Removes the test file when it goes out of scope, unless asked to keep it.
struct FileRemover {
  std::string path;
  bool keep;
  ~FileRemover() {
    if (!keep) ::unlink(path.c_str());
  }
};

// The test file: created with the engine and preallocated (written with O_DIRECT later).
Status CreateTestFile(const DiskBenchOptions& options, const std::string& path) {
  IoEngineOptions engine_options;
  engine_options.engine = options.engine;
  ASSIGN_OR_RETURN(auto engine, CreateIoEngine(engine_options));
  FileOptions create;
  create.create = true;
  create.truncate = true;
  create.preallocate_bytes = options.file_bytes;
  ASSIGN_OR_RETURN(FileHandle file, engine->OpenFile(path, create));
  return engine->CloseFile(file);
}

// fio's reference figures for one run: the huge pages for its buffers (held for the run),
// and a figure per call until fio first fails; from then on none, and the result's fio_note
// says why.
class FioReference {
 public:
  FioReference(const DiskBenchOptions& options, uint64_t buffer_bytes, DiskBenchResult* result)
      : options_(options), result_(result), usable_(options.run_fio) {
    if (!options.run_fio) {
      result->fio_note = "fio not run (disabled)";
      return;
    }
    pages_.emplace(buffer_bytes, options.reserve_huge_pages);
    result->huge_page_note = pages_->note();
    result->fio_buffers = pages_->available()
                              ? "fixed buffers on 2 MiB huge pages (shmhuge)"
                              : "fixed buffers on 4 KiB pages (no huge pages to be had)";
    spdlog::info("nvme bench: fio: {}", result->huge_page_note);
  }
  FioReference(const FioReference&) = delete;
  FioReference& operator=(const FioReference&) = delete;

  // fio's MB/s for one pass at `depth`; 0 where fio is not run or has failed.
  double Figure(IoOp op, uint32_t depth) {
    if (!usable_) return 0;
    FioJob job;
    job.fio_path = options_.fio_path;
    job.path = result_->file;
    job.op = op;
    job.request_bytes = options_.request_bytes;
    job.file_bytes = options_.file_bytes;
    job.depth = depth;
    job.huge_pages = pages_ && pages_->available();
    StatusOr<FioFigures> fio = RunFio(job);
    if (!fio.ok()) {
      usable_ = false;
      if (fio.status().code() == absl::StatusCode::kNotFound) {
        result_->fio_note = absl::StrCat("fio not found ('", options_.fio_path,
                                         "' is not in PATH; Debian package fio): no reference "
                                         "figures");
      } else {
        result_->fio_note = absl::StrCat("fio failed: ", fio.status().message());
      }
      spdlog::warn("nvme bench: {}", result_->fio_note);
      return 0;
    }
    result_->fio_available = true;
    result_->fio_version = fio->version;
    return fio->mb_per_s;
  }

  // After the last figure: a failure that left no note gets one.
  void NoteFailure() {
    if (!usable_ && result_->fio_note.empty()) result_->fio_note = "fio failed";
  }

 private:
  const DiskBenchOptions& options_;
  DiskBenchResult* result_;
  std::optional<HugePagesForFio> pages_;
  bool usable_;
};

// One depth's figures: `passes` alternating passes of the engine (a write, then a read, on a
// fresh engine) and fio (a read, then a write), and the medians of each.
StatusOr<DepthFigures> MeasureDepth(const DiskBenchOptions& options, uint32_t depth,
                                    const IoBuffer& buffer, FioReference* fio,
                                    DiskBenchResult* result) {
  DepthFigures figures;
  figures.queue_depth = depth;
  std::vector<double> engine_writes, engine_reads, fio_reads, fio_writes;
  for (uint32_t pass = 0; pass < options.passes; ++pass) {
    {
      ASSIGN_OR_RETURN(EngineRun run, OpenEngine(options, result->file, depth, buffer));
      result->engine = run.engine->info();
      ASSIGN_OR_RETURN(double write_mb_per_s,
                       EnginePass(run.engine.get(), run.file, IoOp::kWrite, options.file_bytes,
                                  options.request_bytes, depth, buffer.data()));
      ASSIGN_OR_RETURN(double read_mb_per_s,
                       EnginePass(run.engine.get(), run.file, IoOp::kRead, options.file_bytes,
                                  options.request_bytes, depth, buffer.data()));
      engine_writes.push_back(write_mb_per_s);
      engine_reads.push_back(read_mb_per_s);
    }
    const double fio_read = fio->Figure(IoOp::kRead, depth);
    const double fio_write = fio->Figure(IoOp::kWrite, depth);
    if (fio_read > 0) fio_reads.push_back(fio_read);
    if (fio_write > 0) fio_writes.push_back(fio_write);
  }
  figures.engine_write_mb_per_s = Median(engine_writes);
  figures.engine_read_mb_per_s = Median(engine_reads);
  figures.fio_read_mb_per_s = Median(fio_reads);
  figures.fio_write_mb_per_s = Median(fio_writes);
  if (figures.fio_read_mb_per_s > 0) {
    figures.read_vs_fio = figures.engine_read_mb_per_s / figures.fio_read_mb_per_s;
  }
  if (figures.fio_write_mb_per_s > 0) {
    figures.write_vs_fio = figures.engine_write_mb_per_s / figures.fio_write_mb_per_s;
  }
  spdlog::info(
      "nvme bench: depth {}: engine write {:.0f} read {:.0f} MB/s, fio write {:.0f} "
      "read {:.0f} MB/s",
      depth, figures.engine_write_mb_per_s, figures.engine_read_mb_per_s,
      figures.fio_write_mb_per_s, figures.fio_read_mb_per_s);
  return figures;
}

// Like-for-like against a plain loop: the shallowest depth, alternating passes over the
// same buffer (`slots` requests of it).
Status MeasureAgainstPlainLoop(const DiskBenchOptions& options, uint32_t slots,
                               const IoBuffer& buffer, DiskBenchResult* result) {
  result->compared_depth =
      *std::min_element(options.queue_depths.begin(), options.queue_depths.end());
  ASSIGN_OR_RETURN(EngineRun run,
                   OpenEngine(options, result->file, result->compared_depth, buffer));
  std::vector<double> plain_reads, engine_reads;
  for (uint32_t pass = 0; pass < options.passes; ++pass) {
    ASSIGN_OR_RETURN(double plain, PlainLoopPass(result->file, options.file_bytes,
                                                 options.request_bytes, slots, buffer.data()));
    ASSIGN_OR_RETURN(double engine,
                     EnginePass(run.engine.get(), run.file, IoOp::kRead, options.file_bytes,
                                options.request_bytes, result->compared_depth, buffer.data()));
    plain_reads.push_back(plain);
    engine_reads.push_back(engine);
  }
  result->plain_loop_read_mb_per_s = Median(plain_reads);
  result->engine_read_compared_mb_per_s = Median(engine_reads);
  return Status();
}

// The engine's reads at `depth` into a buffer on 4 KiB pages.
StatusOr<double> MeasureSmallPageBuffers(const DiskBenchOptions& options, uint32_t depth,
                                         const std::string& path) {
  IoBufferOptions small;
  small.huge_pages = false;
  ASSIGN_OR_RETURN(IoBuffer small_buffer,
                   IoBuffer::Allocate(uint64_t{depth} * options.request_bytes, small));
  ASSIGN_OR_RETURN(EngineRun run, OpenEngine(options, path, depth, small_buffer));
  return EnginePass(run.engine.get(), run.file, IoOp::kRead, options.file_bytes,
                    options.request_bytes, depth, small_buffer.data());
}

// The best depth of each: the highest median of the engine and of fio, reads and writes.
void FindBests(DiskBenchResult* result) {
  for (const DepthFigures& figures : result->depths) {
    result->best_engine_read_mb_per_s =
        std::max(result->best_engine_read_mb_per_s, figures.engine_read_mb_per_s);
    result->best_fio_read_mb_per_s =
        std::max(result->best_fio_read_mb_per_s, figures.fio_read_mb_per_s);
    result->best_engine_write_mb_per_s =
        std::max(result->best_engine_write_mb_per_s, figures.engine_write_mb_per_s);
    result->best_fio_write_mb_per_s =
        std::max(result->best_fio_write_mb_per_s, figures.fio_write_mb_per_s);
  }
}

// Each ratio to fio at the depths from 4 to 32 against kGoalVsFioPerDepth.
void JudgeDepths(DiskBenchResult* result) {
  bool any_depth = false;
  result->worst_depth_ratio = 1e9;
  for (const DepthFigures& figures : result->depths) {
    if (figures.queue_depth < 4 || figures.queue_depth > 32) continue;
    any_depth = true;
    for (const auto& [what, ratio] : {std::pair<const char*, double>{"read", figures.read_vs_fio},
                                      {"write", figures.write_vs_fio}}) {
      result->worst_depth_ratio = std::min(result->worst_depth_ratio, ratio);
      if (ratio < kGoalVsFioPerDepth) {
        result->depths_below_goal.push_back(
            absl::StrFormat("%s at depth %d: %.2f", what, figures.queue_depth, ratio));
      }
    }
  }
  if (!any_depth) result->worst_depth_ratio = 0;
  result->goal_vs_fio_depths_met = any_depth && result->depths_below_goal.empty();
}

// The goals: against fio (where it gave figures) at the bests and at each depth, and
// against the plain loop.
void JudgeGoals(DiskBenchResult* result) {
  if (result->best_fio_read_mb_per_s > 0 && result->best_fio_write_mb_per_s > 0) {
    result->best_read_vs_fio = result->best_engine_read_mb_per_s / result->best_fio_read_mb_per_s;
    result->best_write_vs_fio =
        result->best_engine_write_mb_per_s / result->best_fio_write_mb_per_s;
    result->goal_vs_fio_best_met =
        result->best_read_vs_fio >= kGoalVsFioBest && result->best_write_vs_fio >= kGoalVsFioBest;
    JudgeDepths(result);
  }
  if (result->plain_loop_read_mb_per_s > 0) {
    result->read_vs_plain_loop =
        result->engine_read_compared_mb_per_s / result->plain_loop_read_mb_per_s;
    result->goal_vs_plain_loop_met = result->read_vs_plain_loop >= kGoalReadVsPlainLoop;
  }
}

}  // namespace

StatusOr<DiskBenchResult> RunDiskBench(const DiskBenchOptions& options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  DiskBenchResult result = DescribeRun(options);
  RETURN_IF_ERROR(CheckFreeSpace(options));
  const uint32_t max_depth =
      *std::max_element(options.queue_depths.begin(), options.queue_depths.end());
  const uint64_t buffer_bytes = uint64_t{max_depth} * options.request_bytes;
  ASSIGN_OR_RETURN(IoBuffer buffer, AllocateEngineBuffer(options, buffer_bytes, &result));
  const FileRemover remover{result.file, options.keep_file};
  RETURN_IF_ERROR(CreateTestFile(options, result.file));

  FioReference fio(options, buffer_bytes, &result);
  for (uint32_t depth : options.queue_depths) {
    ASSIGN_OR_RETURN(DepthFigures figures, MeasureDepth(options, depth, buffer, &fio, &result));
    result.depths.push_back(figures);
  }
  fio.NoteFailure();
  RETURN_IF_ERROR(MeasureAgainstPlainLoop(options, max_depth, buffer, &result));
  if (options.measure_small_page_buffers) {
    ASSIGN_OR_RETURN(result.engine_read_small_pages_mb_per_s,
                     MeasureSmallPageBuffers(options, max_depth, result.file));
  }
  FindBests(&result);
  JudgeGoals(&result);
  return result;
}

std::string FormatDiskBench(const DiskBenchResult& result) {
  std::string text;
  absl::StrAppendFormat(&text, "nvme bench: %s, %.2f GiB, %d KiB requests, O_DIRECT\n", result.file,
                        result.file_bytes / double(1ull << 30), result.request_bytes / 1024);
  absl::StrAppendFormat(&text, "engine: %s (registered buffers: %s%s)%s\n", result.engine.engine,
                        result.engine.buffers_registered ? "yes" : "no",
                        result.engine.buffer_registration_note.empty()
                            ? ""
                            : "; " + result.engine.buffer_registration_note,
                        result.engine.fallback_reason.empty()
                            ? ""
                            : " [io_uring unavailable: " + result.engine.fallback_reason + "]");
  absl::StrAppendFormat(&text,
                        "buffers: %d MiB, huge pages %s: %d MiB on 2 MiB pages (THP "
                        "mode %s)%s\n",
                        result.buffer_bytes >> 20,
                        result.buffers_huge_pages_requested ? "requested" : "not requested",
                        result.buffer_huge_page_bytes >> 20, result.transparent_huge_pages,
                        result.buffer_note.empty() ? "" : "; " + result.buffer_note);
  absl::StrAppendFormat(&text, "fio: %s\n",
                        result.fio_available
                            ? result.fio_version + " (io_uring, direct=1, registered files, " +
                                  result.fio_buffers + ")"
                            : result.fio_note);
  if (!result.huge_page_note.empty()) {
    absl::StrAppendFormat(&text, "fio huge pages: %s\n", result.huge_page_note);
  }
  absl::StrAppendFormat(&text, "figures: medians of %d alternating passes; MB/s = 10^6 bytes/s\n",
                        result.passes);
  absl::StrAppendFormat(&text, "%6s %14s %14s %12s %12s %9s %10s\n", "depth", "engine write",
                        "engine read", "fio write", "fio read", "read/fio", "write/fio");
  for (const DepthFigures& figures : result.depths) {
    absl::StrAppendFormat(&text, "%6d %14.0f %14.0f %12.0f %12.0f %9.2f %10.2f\n",
                          figures.queue_depth, figures.engine_write_mb_per_s,
                          figures.engine_read_mb_per_s, figures.fio_write_mb_per_s,
                          figures.fio_read_mb_per_s, figures.read_vs_fio, figures.write_vs_fio);
  }
  absl::StrAppendFormat(&text,
                        "plain pread loop (same buffers, one request at a time): %.0f MB/s; "
                        "engine at depth %d: %.0f MB/s\n",
                        result.plain_loop_read_mb_per_s, result.compared_depth,
                        result.engine_read_compared_mb_per_s);
  if (result.engine_read_small_pages_mb_per_s > 0) {
    absl::StrAppendFormat(&text,
                          "engine reads into 4 KiB-page buffers (deepest depth): %.0f "
                          "MB/s\n",
                          result.engine_read_small_pages_mb_per_s);
  }
  if (result.best_fio_read_mb_per_s > 0) {
    absl::StrAppendFormat(
        &text,
        "goal: engine / fio at the best depth of each: read %.0f / %.0f = %.2f, write %.0f / "
        "%.0f = %.2f (>= %.2f): %s\n",
        result.best_engine_read_mb_per_s, result.best_fio_read_mb_per_s, result.best_read_vs_fio,
        result.best_engine_write_mb_per_s, result.best_fio_write_mb_per_s,
        result.best_write_vs_fio, kGoalVsFioBest, result.goal_vs_fio_best_met ? "met" : "NOT met");
    absl::StrAppendFormat(&text, "goal: engine / fio at each depth 4-32 >= %.2f (lowest %.2f): %s\n",
                          kGoalVsFioPerDepth, result.worst_depth_ratio,
                          result.goal_vs_fio_depths_met
                              ? std::string("met")
                              : "NOT met: " + absl::StrJoin(result.depths_below_goal, ", "));
  } else {
    absl::StrAppendFormat(&text, "goal: engine vs fio: not measured (%s)\n", result.fio_note);
  }
  absl::StrAppendFormat(&text, "goal: engine read (depth %d) / plain loop = %.2f (>= %.2f): %s\n",
                        result.compared_depth, result.read_vs_plain_loop, kGoalReadVsPlainLoop,
                        result.goal_vs_plain_loop_met ? "met" : "NOT met");
  return text;
}

}  // namespace strata::nvme
