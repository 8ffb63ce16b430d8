// The fixed table of paths behind remove_on_signal.h. Each slot's state is an atomic int:
// kFree -> (RegisterRemoveOnSignal claims it) kFilling -> kLive; a handler moves kLive ->
// kRemoving while it reads the path, then back to kLive; Unregister moves kLive -> kFree,
// waiting out a handler that is reading the path on another thread (a handler on the
// unregistering thread itself runs to the end before that thread resumes).
#include "core/remove_on_signal.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include <atomic>
#include <cstring>
#include <thread>

namespace strata {
namespace {

enum SlotState : int { kFree = 0, kFilling, kLive, kRemoving };

struct Slot {
  std::atomic<int> state{kFree};
  char path[kRemoveOnSignalPathBytes];
};
static_assert(std::atomic<int>::is_always_lock_free, "the handler needs lock-free atomics");

Slot g_slots[kRemoveOnSignalSlots];

// A registered directory (a staging directory of core/staged_directory.h): its entries
// unlinked, then the directory itself. Flat only: staging directories have no
// subdirectories. Only system calls on a stack buffer: async-signal-safe.
bool RemoveFlatDirectory(const char* path) {
  const int fd = ::open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  alignas(8) char buffer[4096];
  for (;;) {
    const long got = ::syscall(SYS_getdents64, fd, buffer, sizeof(buffer));
    if (got <= 0) break;
    for (long offset = 0; offset < got;) {
      const auto* entry = reinterpret_cast<const struct dirent64*>(buffer + offset);
      const char* name = entry->d_name;
      const bool dot = name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0));
      if (!dot) ::unlinkat(fd, name, 0);
      offset += entry->d_reclen;
    }
  }
  ::close(fd);
  return ::rmdir(path) == 0;
}

}  // namespace

int RegisterRemoveOnSignal(const std::string& path) {
  if (path.empty() || path.size() >= static_cast<size_t>(kRemoveOnSignalPathBytes)) return -1;
  for (int i = 0; i < kRemoveOnSignalSlots; ++i) {
    int expected = kFree;
    if (!g_slots[i].state.compare_exchange_strong(expected, kFilling)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(kLive, std::memory_order_release);
    return i;
  }
  return -1;
}

void UnregisterRemoveOnSignal(int slot) {
  if (slot < 0 || slot >= kRemoveOnSignalSlots) return;
  while (true) {
    int expected = kLive;
    if (g_slots[slot].state.compare_exchange_weak(expected, kFree)) return;
    if (expected == kFree) return;  // never registered (or already forgotten)
    std::this_thread::yield();      // a handler on another thread is reading the path
  }
}

int RemoveRegisteredPaths() {
  int removed = 0;
  for (Slot& slot : g_slots) {
    int expected = kLive;
    if (!slot.state.compare_exchange_strong(expected, kRemoving)) continue;
    if (::unlink(slot.path) == 0 || (errno == EISDIR && RemoveFlatDirectory(slot.path))) {
      ++removed;
    }
    slot.state.store(kLive, std::memory_order_release);
  }
  return removed;
}

int RegisteredPathCount() {
  int count = 0;
  for (const Slot& slot : g_slots) {
    const int state = slot.state.load(std::memory_order_acquire);
    if (state == kLive || state == kRemoving) ++count;
  }
  return count;
}

}  // namespace strata
