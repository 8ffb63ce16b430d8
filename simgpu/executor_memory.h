// simgpu/executor_memory.h: the memory the SIMT executor (executor.cc) runs blocks in: fiber
// stacks from a pool that is reused across blocks and launches, each with an inaccessible
// guard page below it (a stack overflow faults instead of corrupting a neighbour), and the
// dynamic shared memory of the running block, which ends exactly at an inaccessible page.
// Mappings are made on first use and kept for the life of the process.
// Thread-safety: every function is thread-safe; the shared memory belongs to the one block
// that runs at a time (the executor's process-wide block mutex).
#pragma once

#include <cstddef>

namespace simgpu::executor {

// A fiber's stack: [bottom, bottom + bytes), bottom page-aligned, a guard page below.
struct Stack {
  void* bottom = nullptr;
  size_t bytes = 0;
};

// The size of every fiber stack: room for the kernels' locals, more under AddressSanitizer
// (redzones). Pages are touched only as deep as a kernel goes.
#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kStackBytes = 512 * 1024;
#else
constexpr size_t kStackBytes = 256 * 1024;
#endif

// A stack from the pool (a new mapping when the pool is empty); aborts if none can be mapped.
Stack AcquireStack();
// Gives `stack` back to the pool.
void ReleaseStack(Stack stack);

// The largest dynamic shared memory of one block: an H200's opt-in maximum per block.
constexpr size_t kMaxSharedBytesPerBlock = 232448;

// `bytes` (at most kMaxSharedBytesPerBlock) of shared memory ending at an inaccessible
// page, every byte 0xff. The same region serves every block: the previous block's memory
// is gone when this returns.
void* PrepareDynamicShared(size_t bytes);

}  // namespace simgpu::executor
