// simgpu/executor_memory.cc: see executor_memory.h.
#include "simgpu/executor_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace simgpu::executor {
namespace {

size_t PageBytes() {
  static const size_t page_bytes = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page_bytes;
}

// Maps `bytes` (a multiple of the page size) readable and writable plus one inaccessible
// page, below the range (guard_below) or above it. Aborts on failure: the executor cannot
// run a block without it, and there is no caller to return to from a fiber's allocator.
unsigned char* MapWithGuard(size_t bytes, bool guard_below, const char* what) {
  const size_t page = PageBytes();
  void* mapping = mmap(nullptr, bytes + page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping == MAP_FAILED) {
    std::fprintf(stderr, "simgpu: mapping %zu bytes for %s failed: %s\n", bytes + page, what,
                 std::strerror(errno));
    std::abort();
  }
  unsigned char* base = static_cast<unsigned char*>(mapping);
  unsigned char* guard = guard_below ? base : base + bytes;
  if (mprotect(guard, page, PROT_NONE) != 0) {
    std::fprintf(stderr, "simgpu: protecting the guard page of %s failed: %s\n", what,
                 std::strerror(errno));
    std::abort();
  }
  return guard_below ? base + page : base;
}

std::mutex stack_mutex;
std::vector<Stack>* free_stacks = new std::vector<Stack>();  // never destroyed: fibers may
                                                             // release stacks at exit

}  // namespace

Stack AcquireStack() {
  {
    std::lock_guard<std::mutex> lock(stack_mutex);
    if (!free_stacks->empty()) {
      Stack stack = free_stacks->back();
      free_stacks->pop_back();
      return stack;
    }
  }
  return Stack{MapWithGuard(kStackBytes, /*guard_below=*/true, "a fiber stack"), kStackBytes};
}

void ReleaseStack(Stack stack) {
#if defined(__SANITIZE_ADDRESS__)
  // A fiber that ended by an exception may leave its frames' redzones poisoned; the next
  // fiber on this stack starts clean.
  ASAN_UNPOISON_MEMORY_REGION(stack.bottom, stack.bytes);
#endif
  std::lock_guard<std::mutex> lock(stack_mutex);
  free_stacks->push_back(stack);
}

void* PrepareDynamicShared(size_t bytes) {
  static unsigned char* const region_end = [] {
    const size_t page = PageBytes();
    const size_t region_bytes = (kMaxSharedBytesPerBlock + page - 1) / page * page;
    return MapWithGuard(region_bytes, /*guard_below=*/false, "dynamic shared memory") +
           region_bytes;
  }();
  if (bytes > kMaxSharedBytesPerBlock) {
    std::fprintf(stderr, "simgpu: %zu bytes of dynamic shared memory exceed the %zu of a block\n",
                 bytes, kMaxSharedBytesPerBlock);
    std::abort();
  }
  unsigned char* begin = region_end - bytes;
  std::memset(begin, 0xff, bytes);
  return begin;
}

}  // namespace simgpu::executor
