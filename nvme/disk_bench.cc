// The disk benchmark; see disk_bench.h.
#include "nvme/disk_bench.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/resource.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/str_join.h"
#include "core/files.h"
#include "core/logging.h"
#include "nvme/create_io_engine.h"
#include "nvme/io_buffer.h"

extern char** environ;

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

// Runs a program, stdout and stderr to `log_path`; returns its exit status or the spawn
// error (ENOENT when it is not installed).
StatusOr<int> RunProgram(const std::vector<std::string>& args, const std::string& log_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return ErrnoError(spawned, absl::StrCat("starting ", args[0]));
  int wait_status = 0;
  while (::waitpid(pid, &wait_status, 0) < 0) {
    if (errno != EINTR) return ErrnoError(errno, absl::StrCat("waiting for ", args[0]));
  }
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  return 128 + (WIFSIGNALED(wait_status) ? WTERMSIG(wait_status) : 0);
}

struct FioFigures {
  double mb_per_s = 0;
  std::string version;
};

// A number from /proc/meminfo ("HugePages_Free"), or -1.
int64_t MeminfoValue(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  int64_t value = -1;
  std::string rest;
  while (in >> name >> value) {
    std::getline(in, rest);
    if (name == key + ":") return value;
  }
  return -1;
}

int64_t ReadNumberFile(const std::string& path) {
  std::ifstream in(path);
  int64_t value = -1;
  in >> value;
  return in ? value : -1;
}

bool WriteNumberFile(const std::string& path, int64_t value) {
  std::ofstream out(path);
  out << value << "\n";
  out.flush();
  return static_cast<bool>(out);
}

// Huge pages for fio's buffers: enough free 2 MiB pages for `bytes`, reserved for the
// bench's lifetime where allowed (vm.nr_hugepages raised, restored at destruction), and the
// locked-memory limit raised to its hard maximum (fixed buffers are locked).
class HugePagesForFio {
 public:
  HugePagesForFio(uint64_t bytes, bool reserve) {
    const int64_t page_kib = MeminfoValue("Hugepagesize");
    if (page_kib != 2048) {
      note_ = absl::StrCat("huge pages of ", page_kib, " KiB, not 2 MiB: fio uses 4 KiB pages");
      return;
    }
    const int64_t needed = static_cast<int64_t>((bytes + (2u << 20) - 1) / (2u << 20)) + 4;
    const int64_t free_pages = MeminfoValue("HugePages_Free");
    std::string raised;
    if (free_pages < needed && reserve) {
      original_ = ReadNumberFile(kNrHugePages);
      if (original_ >= 0 && WriteNumberFile(kNrHugePages, original_ + needed - free_pages)) {
        raised = absl::StrCat("vm.nr_hugepages raised from ", original_, " to ",
                              ReadNumberFile(kNrHugePages), " for fio (restored afterwards)");
      } else {
        raised = absl::StrCat("vm.nr_hugepages could not be raised (", std::strerror(errno),
                              ")");
        original_ = -1;
      }
    }
    struct rlimit limit {};
    std::string memlock;
    if (reserve && ::getrlimit(RLIMIT_MEMLOCK, &limit) == 0 && limit.rlim_cur != limit.rlim_max) {
      const rlim_t before = limit.rlim_cur;
      limit.rlim_cur = limit.rlim_max;
      if (::setrlimit(RLIMIT_MEMLOCK, &limit) == 0) {
        memlock = absl::StrCat("; locked-memory limit raised from ", before >> 10, " KiB to ",
                               limit.rlim_max == RLIM_INFINITY
                                   ? std::string("unlimited")
                                   : absl::StrCat(limit.rlim_max >> 10, " KiB"));
      }
    }
    available_ = MeminfoValue("HugePages_Free") >= needed;
    note_ = available_ ? absl::StrCat(needed, " free 2 MiB huge pages for fio",
                                      raised.empty() ? "" : "; " + raised, memlock)
                       : absl::StrCat("only ", MeminfoValue("HugePages_Free"), " of ", needed,
                                      " huge pages free",
                                      raised.empty() ? std::string(" (not asked to reserve)")
                                                     : "; " + raised,
                                      memlock, ": fio uses 4 KiB-page buffers");
  }
  ~HugePagesForFio() {
    if (original_ >= 0) WriteNumberFile(kNrHugePages, original_);
  }
  HugePagesForFio(const HugePagesForFio&) = delete;
  HugePagesForFio& operator=(const HugePagesForFio&) = delete;

  bool available() const { return available_; }
  const std::string& note() const { return note_; }

 private:
  static constexpr const char* kNrHugePages = "/proc/sys/vm/nr_hugepages";
  int64_t original_ = -1;
  bool available_ = false;
  std::string note_;
};

// fio in its best configuration on `path`: io_uring, O_DIRECT, registered files, fixed
// buffers, on huge pages when `huge_pages`.
StatusOr<FioFigures> RunFio(const DiskBenchOptions& options, const std::string& path, IoOp op,
                            uint32_t depth, bool huge_pages) {
  const std::string json_path = path + ".fio.json";
  const std::string log_path = path + ".fio.log";
  std::vector<std::string> args = {
      options.fio_path,
      "--name=strata-bench",
      "--filename=" + path,
      std::string("--rw=") + (op == IoOp::kRead ? "read" : "write"),
      absl::StrCat("--bs=", options.request_bytes),
      absl::StrCat("--size=", options.file_bytes),
      "--ioengine=io_uring",
      "--direct=1",
      "--fixedbufs=1",
      "--registerfiles=1",
      huge_pages ? "--iomem=shmhuge" : "--iomem=malloc",
      "--hugepage-size=2M",
      absl::StrCat("--iodepth=", depth),
      "--numjobs=1",
      "--output-format=json",
      "--output=" + json_path,
  };
  StatusOr<int> exit_code = RunProgram(args, log_path);
  const std::string log = ReadFile(log_path).value_or("");
  const std::string json_text = ReadFile(json_path).value_or("");
  ::unlink(log_path.c_str());
  ::unlink(json_path.c_str());
  if (!exit_code.ok()) return exit_code.status();
  if (*exit_code != 0) {
    return absl::InternalError(
        absl::StrFormat("fio exited with status %d: %s", *exit_code, log.substr(0, 400)));
  }
  const size_t brace = json_text.find('{');
  if (brace == std::string::npos) {
    return absl::InternalError(absl::StrCat("fio wrote no JSON: ", log.substr(0, 400)));
  }
  nlohmann::json json = nlohmann::json::parse(json_text.substr(brace), nullptr, false);
  if (json.is_discarded() || !json.contains("jobs") || json["jobs"].empty()) {
    return absl::InternalError("fio's JSON output has no jobs");
  }
  const nlohmann::json& job = json["jobs"][0];
  if (job.value("error", 0) != 0) {
    return absl::InternalError(
        absl::StrCat("fio job error ", job.value("error", 0), ": ", log.substr(0, 400)));
  }
  const char* direction = op == IoOp::kRead ? "read" : "write";
  if (!job.contains(direction) || !job[direction].contains("bw_bytes")) {
    return absl::InternalError(absl::StrCat("fio's JSON output has no ", direction, ".bw_bytes"));
  }
  FioFigures figures;
  figures.mb_per_s = job[direction]["bw_bytes"].get<double>() / 1e6;
  figures.version = json.value("fio version", "");
  return figures;
}

}  // namespace

StatusOr<DiskBenchResult> RunDiskBench(const DiskBenchOptions& options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  DiskBenchResult result;
  result.file = options.dir + "/strata-nvme-bench.dat";
  result.file_bytes = options.file_bytes;
  result.request_bytes = options.request_bytes;
  result.passes = options.passes;
  result.transparent_huge_pages = TransparentHugePageMode();

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

  const uint32_t max_depth =
      *std::max_element(options.queue_depths.begin(), options.queue_depths.end());
  IoBufferOptions buffer_options;
  buffer_options.huge_pages = options.huge_page_buffers;
  ASSIGN_OR_RETURN(IoBuffer buffer,
                   IoBuffer::Allocate(uint64_t{max_depth} * options.request_bytes, buffer_options));
  FillPattern(buffer.data(), buffer.bytes());
  result.buffers_huge_pages_requested = options.huge_page_buffers;
  result.buffer_bytes = buffer.bytes();
  result.buffer_huge_page_bytes = buffer.huge_page_bytes();
  result.buffer_note = buffer.note();

  // The file: created with the engine, preallocated, then written with O_DIRECT below.
  struct FileRemover {
    std::string path;
    bool keep;
    ~FileRemover() {
      if (!keep) ::unlink(path.c_str());
    }
  } remover{result.file, options.keep_file};
  {
    IoEngineOptions engine_options;
    engine_options.engine = options.engine;
    ASSIGN_OR_RETURN(auto engine, CreateIoEngine(engine_options));
    FileOptions create;
    create.create = true;
    create.truncate = true;
    create.preallocate_bytes = options.file_bytes;
    ASSIGN_OR_RETURN(FileHandle file, engine->OpenFile(result.file, create));
    RETURN_IF_ERROR(engine->CloseFile(file));
  }

  if (!options.run_fio) {
    result.fio_note = "fio not run (disabled)";
  }
  std::optional<HugePagesForFio> fio_pages;
  if (options.run_fio) {
    fio_pages.emplace(uint64_t{max_depth} * options.request_bytes, options.reserve_huge_pages);
    result.huge_page_note = fio_pages->note();
    result.fio_buffers = fio_pages->available()
                             ? "fixed buffers on 2 MiB huge pages (shmhuge)"
                             : "fixed buffers on 4 KiB pages (no huge pages to be had)";
    spdlog::info("nvme bench: fio: {}", result.huge_page_note);
  }
  bool fio_usable = options.run_fio;
  auto fio_figure = [&](IoOp op, uint32_t depth) -> double {
    if (!fio_usable) return 0;
    StatusOr<FioFigures> fio =
        RunFio(options, result.file, op, depth, fio_pages && fio_pages->available());
    if (!fio.ok()) {
      fio_usable = false;
      if (fio.status().code() == absl::StatusCode::kNotFound) {
        result.fio_note = absl::StrCat("fio not found ('", options.fio_path,
                                       "' is not in PATH; Debian package fio): no reference "
                                       "figures");
      } else {
        result.fio_note = absl::StrCat("fio failed: ", fio.status().message());
      }
      spdlog::warn("nvme bench: {}", result.fio_note);
      return 0;
    }
    result.fio_available = true;
    result.fio_version = fio->version;
    return fio->mb_per_s;
  };

  for (uint32_t depth : options.queue_depths) {
    DepthFigures figures;
    figures.queue_depth = depth;
    std::vector<double> engine_writes, engine_reads, fio_reads, fio_writes;
    for (uint32_t pass = 0; pass < options.passes; ++pass) {
      {
        ASSIGN_OR_RETURN(EngineRun run, OpenEngine(options, result.file, depth, buffer));
        result.engine = run.engine->info();
        ASSIGN_OR_RETURN(double write_mb_per_s,
                         EnginePass(run.engine.get(), run.file, IoOp::kWrite, options.file_bytes,
                                    options.request_bytes, depth, buffer.data()));
        ASSIGN_OR_RETURN(double read_mb_per_s,
                         EnginePass(run.engine.get(), run.file, IoOp::kRead, options.file_bytes,
                                    options.request_bytes, depth, buffer.data()));
        engine_writes.push_back(write_mb_per_s);
        engine_reads.push_back(read_mb_per_s);
      }
      const double fio_read = fio_figure(IoOp::kRead, depth);
      const double fio_write = fio_figure(IoOp::kWrite, depth);
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
    result.depths.push_back(figures);
  }
  if (!fio_usable && result.fio_note.empty()) result.fio_note = "fio failed";

  // Like-for-like against a plain loop: the shallowest depth, alternating passes.
  result.compared_depth =
      *std::min_element(options.queue_depths.begin(), options.queue_depths.end());
  {
    ASSIGN_OR_RETURN(EngineRun run,
                     OpenEngine(options, result.file, result.compared_depth, buffer));
    std::vector<double> plain_reads, engine_reads;
    for (uint32_t pass = 0; pass < options.passes; ++pass) {
      ASSIGN_OR_RETURN(double plain,
                       PlainLoopPass(result.file, options.file_bytes, options.request_bytes,
                                     max_depth, buffer.data()));
      ASSIGN_OR_RETURN(double engine,
                       EnginePass(run.engine.get(), run.file, IoOp::kRead, options.file_bytes,
                                  options.request_bytes, result.compared_depth, buffer.data()));
      plain_reads.push_back(plain);
      engine_reads.push_back(engine);
    }
    result.plain_loop_read_mb_per_s = Median(plain_reads);
    result.engine_read_compared_mb_per_s = Median(engine_reads);
  }

  if (options.measure_small_page_buffers) {
    IoBufferOptions small;
    small.huge_pages = false;
    ASSIGN_OR_RETURN(IoBuffer small_buffer,
                     IoBuffer::Allocate(uint64_t{max_depth} * options.request_bytes, small));
    ASSIGN_OR_RETURN(EngineRun run, OpenEngine(options, result.file, max_depth, small_buffer));
    ASSIGN_OR_RETURN(result.engine_read_small_pages_mb_per_s,
                     EnginePass(run.engine.get(), run.file, IoOp::kRead, options.file_bytes,
                                options.request_bytes, max_depth, small_buffer.data()));
  }

  for (const DepthFigures& figures : result.depths) {
    result.best_engine_read_mb_per_s =
        std::max(result.best_engine_read_mb_per_s, figures.engine_read_mb_per_s);
    result.best_fio_read_mb_per_s =
        std::max(result.best_fio_read_mb_per_s, figures.fio_read_mb_per_s);
    result.best_engine_write_mb_per_s =
        std::max(result.best_engine_write_mb_per_s, figures.engine_write_mb_per_s);
    result.best_fio_write_mb_per_s =
        std::max(result.best_fio_write_mb_per_s, figures.fio_write_mb_per_s);
  }
  if (result.best_fio_read_mb_per_s > 0 && result.best_fio_write_mb_per_s > 0) {
    result.best_read_vs_fio = result.best_engine_read_mb_per_s / result.best_fio_read_mb_per_s;
    result.best_write_vs_fio =
        result.best_engine_write_mb_per_s / result.best_fio_write_mb_per_s;
    result.goal_vs_fio_best_met = result.best_read_vs_fio >= kGoalVsFioBest &&
                                  result.best_write_vs_fio >= kGoalVsFioBest;
    bool any_depth = false;
    result.worst_depth_ratio = 1e9;
    for (const DepthFigures& figures : result.depths) {
      if (figures.queue_depth < 4 || figures.queue_depth > 32) continue;
      any_depth = true;
      for (const auto& [what, ratio] : {std::pair<const char*, double>{"read", figures.read_vs_fio},
                                        {"write", figures.write_vs_fio}}) {
        result.worst_depth_ratio = std::min(result.worst_depth_ratio, ratio);
        if (ratio < kGoalVsFioPerDepth) {
          result.depths_below_goal.push_back(
              absl::StrFormat("%s at depth %d: %.2f", what, figures.queue_depth, ratio));
        }
      }
    }
    if (!any_depth) result.worst_depth_ratio = 0;
    result.goal_vs_fio_depths_met = any_depth && result.depths_below_goal.empty();
  }
  if (result.plain_loop_read_mb_per_s > 0) {
    result.read_vs_plain_loop =
        result.engine_read_compared_mb_per_s / result.plain_loop_read_mb_per_s;
    result.goal_vs_plain_loop_met = result.read_vs_plain_loop >= kGoalReadVsPlainLoop;
  }
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
