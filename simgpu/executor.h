// simgpu/executor.h: the SIMT executor, which runs a CUDA kernel compiled by g++ (simt.h) on
// the CPU. A grid's blocks run one at a time in the whole process, in a random order drawn
// from a seed (a kernel that depends on block order fails); a block's threads are cooperating
// fibers on the calling OS thread, each run until it waits at a barrier or warp operation or
// returns. Barriers and warp operations complete as on a GPU:
// - __syncthreads completes when every thread of the block that has not exited waits at a
//   barrier (exited threads count as arrived, as compute-sanitizer's synccheck counts them);
// - a warp operation completes when every lane named in its mask waits at the same operation
//   with the same mask (a warp is threads 32w..32w+31 in linear order x + y*bx + z*bx*by).
// What can never complete is an error, never a hang: the calling lane missing from its own
// mask, a mask naming an exited or nonexistent lane, a shuffle reading a lane outside its
// mask, or no thread able to go on (a barrier some live thread does not reach, lanes of one
// mask at different operations); the message names the kernel, the block and what each stuck
// thread waits at. The failing block's other threads are unwound (their destructors run) and
// the grid stops there. Each block's dynamic shared memory ends at an inaccessible page (an
// overrun faults) and starts filled with 0xff bytes (NaN floats: a read before a write shows).
// Thread-safety: RunGrid is thread-safe; grids of different threads interleave block by block.
#pragma once

#include <vector_types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace simgpu {

// Runs `thread_body` as every thread of a `grid` x `block` launch of the kernel `name` with
// `dynamic_shared_bytes` of dynamic shared memory, the blocks in the order drawn from `seed`
// (the same seed, the same order). Returns "" or the first error ("kernel NAME block
// (x,y,z): ..."); a launch outside the limits simt.h checks is an error too. `thread_body` is
// called concurrently by the block's fibers and must outlive the call.
std::string RunGrid(const char* name, dim3 grid, dim3 block, size_t dynamic_shared_bytes,
                    uint64_t seed, const std::function<void()>& thread_body);

}  // namespace simgpu
