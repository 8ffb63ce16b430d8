// SwapDirClaim: one rank's hold on zero.nvme_dir for this run, taken before any swap file
// is created. It checks the directory (CheckSwapDir: the one place) and makes a shared swap
// directory safe:
// - Refuses a directory on tmpfs or ramfs (the swap files would sit in the RAM they are
//   meant to relieve), naming the filesystem, unless allow_memory_fs.
// - Holds a lock file <dir>/strata-<run>-rank<r>.lock (flock(2), exclusive) that says who
//   holds it (core/run_identity.h: pid, host, start time, command), for as long as the
//   claim lives. The kernel drops the lock when the process dies however it dies, so a
//   lock file nobody holds is a crashed run's.
// - Refuses a directory that a live run with another run id holds (its lock is held),
//   naming that run; ranks of one run share the id, so they share a directory freely.
// - Removes the leftovers of crashed runs before anything is created: every
//   strata-<id>-rank<n>-*.swap whose strata-<id>-rank<n>.lock nobody holds, then that lock.
//   Files of a live run are never touched.
// - Names this rank's files: SwapPath("params") = <dir>/strata-<run>-rank<r>-params.swap;
//   create them with O_EXCL (a file or symlink already there is an error, never followed).
// The lock file is registered with core/remove_on_signal.h and removed when the claim ends.
// Claims are shared within a process: Acquire for the same directory and rank returns the
// live claim (a rank's param and optimizer stores use one lock).
// Locks are flock(2): reliable on local filesystems; on NFS they depend on the server.
// Thread-safety: Acquire may be called from any thread; a claim is immutable.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace strata {

struct SwapDirOptions {
  std::string dir;               // must exist, be a directory and be writable
  int rank = 0;                  // >= 0
  bool allow_memory_fs = false;  // zero.nvme_allow_memory_fs: accept tmpfs/ramfs
};

class SwapDirClaim {
 public:
  // Errors: kFailedPrecondition for tmpfs/ramfs (naming it and the override key) and for a
  // directory held by a live run (naming its lock file and what it says); errno errors for
  // a directory that cannot be read or written. On failure nothing is left behind.
  static StatusOr<std::shared_ptr<SwapDirClaim>> Acquire(const SwapDirOptions& options);

  SwapDirClaim(const SwapDirClaim&) = delete;
  SwapDirClaim& operator=(const SwapDirClaim&) = delete;
  ~SwapDirClaim();  // unlocks and removes the lock file

  // <dir>/strata-<run>-rank<r>-<role>.swap
  std::string SwapPath(const std::string& role) const;
  const std::string& lock_path() const { return lock_path_; }
  // Leftovers of crashed runs this claim removed (paths), and their bytes.
  const std::vector<std::string>& swept() const { return swept_; }
  uint64_t swept_bytes() const { return swept_bytes_; }

 private:
  struct Impl;
  SwapDirClaim() = default;

  std::string dir_;
  std::string prefix_;  // <dir>/strata-<run>-rank<r>-
  std::string lock_path_;
  int lock_fd_ = -1;
  int removal_slot_ = -1;
  std::vector<std::string> swept_;
  uint64_t swept_bytes_ = 0;
};

// zero.nvme_dir's own checks, the one place they are made (Acquire makes them first): set,
// an existing directory, writable. kInvalidArgument, an errno error or kFailedPrecondition,
// naming the key and the directory.
Status CheckSwapDir(const std::string& dir);

// The filesystem type of `dir` when it keeps files in memory ("tmpfs", "ramfs"), else "".
StatusOr<std::string> MemoryFilesystemOf(const std::string& dir);

}  // namespace strata
