// fio as the disk benchmark's reference; see fio_runner.h.
#include "nvme/fio_runner.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/files.h"

extern char** environ;

namespace strata::nvme {
namespace {

constexpr const char* kNrHugePages = "/proc/sys/vm/nr_hugepages";

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

}  // namespace

HugePagesForFio::HugePagesForFio(uint64_t bytes, bool reserve) {
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
      raised = absl::StrCat("vm.nr_hugepages could not be raised (", std::strerror(errno), ")");
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
  note_ = available_
              ? absl::StrCat(needed, " free 2 MiB huge pages for fio",
                             raised.empty() ? "" : "; " + raised, memlock)
              : absl::StrCat(
                    "only ", MeminfoValue("HugePages_Free"), " of ", needed, " huge pages free",
                    raised.empty() ? std::string(" (not asked to reserve)") : "; " + raised,
                    memlock, ": fio uses 4 KiB-page buffers");
}

HugePagesForFio::~HugePagesForFio() {
  if (original_ >= 0) WriteNumberFile(kNrHugePages, original_);
}

StatusOr<FioFigures> RunFio(const FioJob& spec) {
  const std::string json_path = spec.path + ".fio.json";
  const std::string log_path = spec.path + ".fio.log";
  std::vector<std::string> args = {
      spec.fio_path,
      "--name=strata-bench",
      "--filename=" + spec.path,
      std::string("--rw=") + (spec.op == IoOp::kRead ? "read" : "write"),
      absl::StrCat("--bs=", spec.request_bytes),
      absl::StrCat("--size=", spec.file_bytes),
      "--ioengine=io_uring",
      "--direct=1",
      "--fixedbufs=1",
      "--registerfiles=1",
      spec.huge_pages ? "--iomem=shmhuge" : "--iomem=malloc",
      "--hugepage-size=2M",
      absl::StrCat("--iodepth=", spec.depth),
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
  const char* direction = spec.op == IoOp::kRead ? "read" : "write";
  if (!job.contains(direction) || !job[direction].contains("bw_bytes")) {
    return absl::InternalError(absl::StrCat("fio's JSON output has no ", direction, ".bw_bytes"));
  }
  FioFigures figures;
  figures.mb_per_s = job[direction]["bw_bytes"].get<double>() / 1e6;
  figures.version = json.value("fio version", "");
  return figures;
}

}  // namespace strata::nvme
