// See lock_file.h.
#include "core/lock_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/files.h"
#include "core/logging.h"
#include "core/remove_on_signal.h"
#include "core/run_identity.h"

namespace strata {
namespace {

constexpr const char* kTag = "strata-lock";


// Field 22 of /proc/<pid>/stat (the process's start time in clock ticks since boot), or 0
// when there is no such process. The command name (field 2) may hold spaces and
// parentheses: fields are counted after its last ')'.
unsigned long long ProcessStart(long pid) {
  StatusOr<std::string> stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat.ok()) return 0;
  const size_t close = stat->rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat->substr(close + 1));
  std::string field;
  for (int index = 3; index < 22 && (fields >> field); ++index) {
  }
  unsigned long long start = 0;
  fields >> start;
  return start;
}

std::string HolderLine(const LockHolder& holder) {
  return absl::StrCat(kTag, " host=", holder.host, " pid=", holder.pid,
                      " start=", holder.start, " run=", holder.run);
}

// Creates the lock file with O_EXCL; EEXIST is returned as is for the caller to judge.
Status CreateLockFile(const std::string& path, int* errno_of_create) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    *errno_of_create = errno;
    return ErrnoError(errno, "cannot create the lock file " + path);
  }
  const std::string text =
      absl::StrCat(HolderLine(ThisProcessAsHolder()), "\n", DescribeThisProcess(), "\n");
  Status written = WriteAllBytes(fd, text.data(), text.size(), path);
  if (written.ok() && ::fsync(fd) != 0) written = ErrnoError(errno, "syncing " + path);
  ::close(fd);
  if (!written.ok()) ::unlink(path.c_str());
  return written;
}

}  // namespace

bool ParseLockHolder(const std::string& text, LockHolder* holder) {
  std::istringstream line(text.substr(0, text.find('\n')));
  std::string word;
  if (!(line >> word) || word != kTag) return false;
  bool host = false, pid = false;
  while (line >> word) {
    const size_t equals = word.find('=');
    if (equals == std::string::npos) return false;
    const std::string key = word.substr(0, equals), value = word.substr(equals + 1);
    try {
      if (key == "host") host = !(holder->host = value).empty();
      if (key == "pid") pid = (holder->pid = std::stol(value)) > 0;
      if (key == "start") holder->start = std::stoull(value);
      if (key == "run") holder->run = value;
    } catch (const std::exception&) {
      return false;
    }
  }
  return host && pid;
}

LockHolder ThisProcessAsHolder() {
  LockHolder holder;
  holder.host = HostName();
  holder.pid = static_cast<long>(::getpid());
  holder.start = ProcessStart(holder.pid);
  holder.run = RunId();
  return holder;
}

bool HolderIsGone(const LockHolder& holder) {
  if (holder.host != HostName()) return false;  // cannot be checked from here
  const unsigned long long start = ProcessStart(holder.pid);
  return start == 0 || (holder.start != 0 && start != holder.start);
}

StatusOr<std::unique_ptr<DirLock>> DirLock::Acquire(const std::string& dir,
                                                    const std::string& name,
                                                    const std::string& what) {
  // path_ is set only once the file is ours: the destructor removes it.
  const std::string path = dir + "/" + name;
  std::string replaced_stale;
  for (int attempt = 0; attempt < 2; ++attempt) {
    int errno_of_create = 0;
    Status created = CreateLockFile(path, &errno_of_create);
    if (created.ok()) {
      std::unique_ptr<DirLock> lock(new DirLock);
      lock->path_ = path;
      lock->replaced_stale_ = replaced_stale;
      lock->remove_on_signal_slot_ = RegisterRemoveOnSignal(path);
      return lock;
    }
    if (errno_of_create != EEXIST) return Annotate(created, what);
    const std::string text = ReadFile(path).value_or("");
    LockHolder holder;
    if (!ParseLockHolder(text, &holder)) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, " ", dir, " is locked by ", path, ", which is not a strata lock file ",
          "(or is empty: a writer died while creating it); remove it if no run uses ", dir));
    }
    if (!HolderIsGone(holder)) {
      const bool here = holder.host == HostName();
      return absl::FailedPreconditionError(absl::StrCat(
          what, " ", dir, " is in use by another strata run (pid ", holder.pid, " on host ",
          holder.host, ", run ", holder.run, ": ", path, "). Two runs on one directory ",
          "would replace each other's files: give this run its own directory",
          here ? "" : absl::StrCat(", or, if that process is gone (it runs on another host, ",
                                   "so strata cannot check), remove ", path)));
    }
    // Stale: its holder is gone. Removed, then created again (once: a race with another
    // run that also found it stale ends in that run's lock being seen).
    replaced_stale = absl::StrCat("pid ", holder.pid, " on host ", holder.host);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return ErrnoError(errno, "removing the stale lock file " + path);
    }
    spdlog::warn("{}: removed the stale lock {} of {} (that process is gone)", what, path,
                 replaced_stale);
  }
  return absl::FailedPreconditionError(
      absl::StrCat(what, " ", dir, ": another run took the lock ", path, " meanwhile"));
}

DirLock::~DirLock() {
  UnregisterRemoveOnSignal(remove_on_signal_slot_);
  if (!path_.empty()) ::unlink(path_.c_str());
}

}  // namespace strata
