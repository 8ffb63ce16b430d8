// The swap directory claim; see swap_dir.h. Lock files are made under a temporary name,
// locked and filled, then renamed into place (renameat2 RENAME_NOREPLACE), so a run that
// scans the directory never sees an unlocked lock file of a live run.
#include "nvme/swap_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/logging.h"
#include "core/remove_on_signal.h"
#include "core/run_identity.h"

namespace strata {
namespace {

constexpr char kPrefix[] = "strata-";

// A parsed "strata-<id>-rank<n>" stem followed by `suffix` (".lock", or "-<role>.swap").
struct RunFile {
  std::string id;
  int rank = -1;
};

// Parses "strata-<id>-rank<n><rest>" and returns the rest, or false.
bool ParseRunFile(const std::string& name, RunFile* file, std::string* rest) {
  if (name.rfind(kPrefix, 0) != 0) return false;
  const size_t id_begin = sizeof(kPrefix) - 1;
  const size_t rank_at = name.find("-rank", id_begin);
  if (rank_at == std::string::npos || rank_at == id_begin) return false;
  file->id = name.substr(id_begin, rank_at - id_begin);
  for (char c : file->id) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z'))) return false;
  }
  size_t digits = rank_at + 5;
  size_t end = digits;
  while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
  if (end == digits || end - digits > 9) return false;
  file->rank = std::stoi(name.substr(digits, end - digits));
  *rest = name.substr(end);
  return true;
}

std::vector<std::string> ListDir(const std::string& dir, Status* status) {
  std::vector<std::string> names;
  DIR* handle = ::opendir(dir.c_str());
  if (handle == nullptr) {
    *status = ErrnoError(errno, absl::StrCat("zero.nvme_dir ", dir, ": cannot list it"));
    return names;
  }
  while (const dirent* entry = ::readdir(handle)) names.emplace_back(entry->d_name);
  ::closedir(handle);
  return names;
}

std::string ReadSmallFile(int fd) {
  char buffer[1024];
  const ssize_t got = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
  if (got <= 0) return "(no description)";
  std::string text(buffer, static_cast<size_t>(got));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text;
}

// Process-wide claims by (directory, rank), so a rank's stores share one lock.
std::mutex g_claims_mutex;
std::map<std::pair<std::string, int>, std::weak_ptr<SwapDirClaim>>& Claims() {
  static auto* claims = new std::map<std::pair<std::string, int>, std::weak_ptr<SwapDirClaim>>();
  return *claims;
}

}  // namespace

StatusOr<std::string> MemoryFilesystemOf(const std::string& dir) {
  struct statfs info {};
  if (::statfs(dir.c_str(), &info) != 0) {
    return ErrnoError(errno, absl::StrCat("zero.nvme_dir ", dir, ": statfs"));
  }
  if (info.f_type == TMPFS_MAGIC) return std::string("tmpfs");
  if (info.f_type == RAMFS_MAGIC) return std::string("ramfs");
  return std::string();
}

struct SwapDirClaim::Impl {
  // Removes the leftovers of the crashed run that owned `lock_name` (the caller holds its
  // flock meanwhile), then the lock file itself.
  static void Sweep(SwapDirClaim& claim, const std::vector<std::string>& names,
                    const std::string& lock_name, const RunFile& owner) {
    for (const std::string& name : names) {
      RunFile file;
      std::string rest;
      if (!ParseRunFile(name, &file, &rest) || file.id != owner.id || file.rank != owner.rank ||
          rest.size() < 6 || rest[0] != '-' || rest.substr(rest.size() - 5) != ".swap") {
        continue;
      }
      const std::string path = claim.dir_ + "/" + name;
      struct stat info {};
      if (::lstat(path.c_str(), &info) != 0) continue;
      if (::unlink(path.c_str()) == 0) {
        claim.swept_.push_back(path);
        claim.swept_bytes_ += S_ISREG(info.st_mode) ? uint64_t(info.st_blocks) * 512 : 0;
      }
    }
    const std::string lock_path = claim.dir_ + "/" + lock_name;
    if (::unlink(lock_path.c_str()) == 0) claim.swept_.push_back(lock_path);
  }
};

Status CheckSwapDir(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("zero.nvme_dir is empty");
  struct stat dir_stat {};
  if (::stat(dir.c_str(), &dir_stat) != 0) {
    return ErrnoError(errno, absl::StrCat("zero.nvme_dir ", dir));
  }
  if (!S_ISDIR(dir_stat.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("zero.nvme_dir ", dir, " is not a directory"));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return ErrnoError(errno, absl::StrCat("zero.nvme_dir ", dir, " is not writable"));
  }
  return absl::OkStatus();
}

StatusOr<std::shared_ptr<SwapDirClaim>> SwapDirClaim::Acquire(const SwapDirOptions& options) {
  if (options.rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("swap dir: rank ", options.rank, " is negative"));
  }
  RETURN_IF_ERROR(CheckSwapDir(options.dir));
  const std::string run = RunId();
  std::lock_guard<std::mutex> guard(g_claims_mutex);
  const auto key = std::make_pair(options.dir, options.rank);
  if (auto live = Claims()[key].lock()) return live;

  ASSIGN_OR_RETURN(const std::string memory_fs, MemoryFilesystemOf(options.dir));
  if (!memory_fs.empty() && !options.allow_memory_fs) {
    return absl::FailedPreconditionError(absl::StrCat(
        "zero.nvme_dir ", options.dir, " is on ", memory_fs,
        ", which keeps files in RAM: swap files there take the memory they are meant to free; "
        "use a directory on an SSD, or set zero.nvme_allow_memory_fs=true to allow it anyway"));
  }

  std::shared_ptr<SwapDirClaim> claim(new SwapDirClaim());
  claim->dir_ = options.dir;
  const std::string stem = absl::StrFormat("strata-%s-rank%d", run, options.rank);
  claim->prefix_ = absl::StrCat(options.dir, "/", stem, "-");
  const std::string lock_name = stem + ".lock";
  const std::string temporary = absl::StrCat(options.dir, "/.", stem, ".lock.tmp");

  // Our lock: created, locked and filled under a temporary name, then renamed into place.
  const int fd = ::open(temporary.c_str(),
                        O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    return ErrnoError(errno, absl::StrCat("zero.nvme_dir ", options.dir,
                                          ": cannot create the lock file ", temporary));
  }
  const std::string identity = absl::StrCat("strata run ", run, " rank ", options.rank, ": ",
                                            DescribeThisProcess(), "\n");
  Status made;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    made = ErrnoError(errno, absl::StrCat("zero.nvme_dir ", options.dir, ": flock ", temporary));
  } else if (::pwrite(fd, identity.data(), identity.size(), 0) !=
             static_cast<ssize_t>(identity.size())) {
    made = ErrnoError(errno, absl::StrCat("zero.nvme_dir ", options.dir, ": writing ", temporary));
  }
  const std::string lock_path = absl::StrCat(options.dir, "/", lock_name);
  if (made.ok() && ::renameat2(AT_FDCWD, temporary.c_str(), AT_FDCWD, lock_path.c_str(),
                               RENAME_NOREPLACE) != 0) {
    made = ErrnoError(errno, absl::StrCat("zero.nvme_dir ", options.dir, ": renaming the lock "
                                          "file to ", lock_path));
  }
  if (!made.ok()) {
    ::unlink(temporary.c_str());
    ::close(fd);
    return made;
  }
  claim->lock_fd_ = fd;
  claim->lock_path_ = lock_path;
  claim->removal_slot_ = RegisterRemoveOnSignal(lock_path);

  // Other runs' locks: live ones refuse the directory, unheld ones are swept.
  Status listed;
  const std::vector<std::string> names = ListDir(options.dir, &listed);
  RETURN_IF_ERROR(listed);  // the claim's destructor removes our lock
  for (const std::string& name : names) {
    RunFile owner;
    std::string rest;
    const bool temporary_lock = name.size() > 1 && name[0] == '.' &&
                                ParseRunFile(name.substr(1), &owner, &rest) &&
                                rest == ".lock.tmp";
    if (!temporary_lock && !(ParseRunFile(name, &owner, &rest) && rest == ".lock")) continue;
    if (owner.id == run) continue;  // ours, or a rank of this run
    const std::string path = absl::StrCat(options.dir, "/", name);
    const int other = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (other < 0) continue;  // gone meanwhile, or not a plain file: not ours to judge
    if (::flock(other, LOCK_EX | LOCK_NB) != 0) {
      const std::string holder = ReadSmallFile(other);
      ::close(other);
      if (temporary_lock) continue;  // a run starting now: its real lock decides
      return absl::FailedPreconditionError(absl::StrCat(
          "zero.nvme_dir ", options.dir, " is in use by another live run (", path, ": ",
          holder, "); give each run its own zero.nvme_dir, or wait for that run to end"));
    }
    if (temporary_lock) {
      ::unlink(path.c_str());
    } else {
      Impl::Sweep(*claim, names, name, owner);
    }
    ::close(other);
  }
  if (!claim->swept_.empty()) {
    spdlog::info("swap dir {}: removed {} leftover file(s) of crashed runs ({} bytes)",
                 options.dir, claim->swept_.size(), claim->swept_bytes_);
  }
  Claims()[key] = claim;
  return claim;
}

SwapDirClaim::~SwapDirClaim() {
  UnregisterRemoveOnSignal(removal_slot_);
  if (lock_fd_ >= 0) {
    // Removed while still locked: a run scanning now finds no file or a held one.
    ::unlink(lock_path_.c_str());
    ::close(lock_fd_);
  }
}

std::string SwapDirClaim::SwapPath(const std::string& role) const {
  return absl::StrCat(prefix_, role, ".swap");
}

}  // namespace strata
