// An exclusive lock on a directory that holds on network filesystems too: a lock file
// created with O_EXCL (atomic on NFSv3+ and on local filesystems, unlike flock(2) on some
// NFS servers), whose first line says who holds it:
//   strata-lock host=<hostname> pid=<pid> start=<process start, clock ticks> run=<run id>
// then a line for people (core/run_identity.h's DescribeThisProcess). A lock file found
// when acquiring is stale, and is replaced (said in the log), when its holder is on this
// host and that process is gone (no /proc/<pid>, or one started at another time: the pid
// was reused). A holder on another host cannot be checked from here: the error names the
// host, the pid and the file to remove once that process is known to be gone. The lock
// file is registered with core/remove_on_signal.h and removed when the lock is released.
// Thread-safety: Acquire may be called from any thread; a DirLock is owned by one.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"

namespace strata {

class DirLock {
 public:
  // Takes <dir>/<name> (dir must exist). `what` names the directory in errors
  // ("train.checkpoint_dir"). Errors: kFailedPrecondition naming the holder when another
  // live process (or one on another host) holds it; errno errors naming the file.
  static StatusOr<std::unique_ptr<DirLock>> Acquire(const std::string& dir,
                                                    const std::string& name,
                                                    const std::string& what);
  ~DirLock();  // removes the lock file
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  const std::string& path() const { return path_; }
  // The holder a stale lock file named, when Acquire replaced one; else "".
  const std::string& replaced_stale() const { return replaced_stale_; }

 private:
  DirLock() = default;
  std::string path_;
  std::string replaced_stale_;
  int remove_on_signal_slot_ = -1;
};

// The holder's fields of a lock file's first line (exposed for tests).
struct LockHolder {
  std::string host;
  long pid = 0;
  unsigned long long start = 0;
  std::string run;
};
// Parses the first line; false when it is not a strata lock line.
bool ParseLockHolder(const std::string& text, LockHolder* holder);
// This process as a holder (host, pid, start, run id).
LockHolder ThisProcessAsHolder();
// True when `holder` is on this host and its process is gone (see above).
bool HolderIsGone(const LockHolder& holder);

}  // namespace strata
