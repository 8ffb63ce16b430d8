// Files to remove when a signal stops the process: the swap files, lock files, partial
// outputs and staging directories (flat: their files, then the directory) a run creates
// register here, and a signal handler removes every registered path with
// RemoveRegisteredPaths (async-signal-safe: unlink(2) over a fixed table, no allocation, no
// locks), before the process goes on to stop. Removing a file that is still open keeps its
// data readable and writable through the open descriptors (the space is freed at the last
// close), so a handler may remove files a graceful stop still uses, and a SIGKILL that
// follows (mpirun tears a job down with SIGTERM, then SIGKILL) leaves nothing behind.
//
// The table has kRemoveOnSignalSlots slots of paths up to kRemoveOnSignalPathBytes - 1
// bytes; a path that does not fit is not registered (RegisterRemoveOnSignal returns -1 and
// the owner still removes it normally).
// Thread-safety: every function may be called from any thread; RemoveRegisteredPaths also
// from a signal handler (on any thread, even one inside Register/Unregister).
#pragma once

#include <string>

namespace strata {

inline constexpr int kRemoveOnSignalSlots = 256;
inline constexpr int kRemoveOnSignalPathBytes = 4096;

// Registers `path`; returns its slot, or -1 when the table is full or the path too long.
int RegisterRemoveOnSignal(const std::string& path);
// Forgets a slot (before its owner removes the file itself). -1 is ignored.
void UnregisterRemoveOnSignal(int slot);
// Unlinks every registered path (errors ignored: a file already gone is fine); the slots
// stay registered. Returns the number of paths unlinked. Async-signal-safe.
int RemoveRegisteredPaths();
// The registered paths, for tests and messages (not async-signal-safe).
int RegisteredPathCount();

// RAII owner of one slot: registers at construction, unregisters at destruction. Move-only.
class RemoveOnSignal {
 public:
  RemoveOnSignal() = default;
  explicit RemoveOnSignal(const std::string& path) : slot_(RegisterRemoveOnSignal(path)) {}
  RemoveOnSignal(RemoveOnSignal&& other) noexcept : slot_(other.slot_) { other.slot_ = -1; }
  RemoveOnSignal& operator=(RemoveOnSignal&& other) noexcept {
    if (this != &other) {
      UnregisterRemoveOnSignal(slot_);
      slot_ = other.slot_;
      other.slot_ = -1;
    }
    return *this;
  }
  RemoveOnSignal(const RemoveOnSignal&) = delete;
  RemoveOnSignal& operator=(const RemoveOnSignal&) = delete;
  ~RemoveOnSignal() { UnregisterRemoveOnSignal(slot_); }
  bool registered() const { return slot_ >= 0; }

 private:
  int slot_ = -1;
};

}  // namespace strata
