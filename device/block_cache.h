// A cache of raw memory blocks between a Device and its driver (cudaMalloc and pinned host
// memory on CUDA, aligned_alloc on the CPU device). A training step frees and allocates the
// same per-unit sizes every step (stage-3 gathers, stage-2 full gradients, staging), so
// with freed blocks kept by size class and handed out again, a steady-state step makes no
// driver allocation or free: on CUDA a cudaFree waits for the whole device, which would
// stop the streams from overlapping.
//
// Safety of reuse: a block given back is reusable only once a fence taken at that moment
// has passed (the device records an event on every live stream), so memory a stream may
// still read or write is never handed out again, whatever the caller did. Blocks beyond
// `max_cached_bytes` go back to the driver at once, as without a cache.
// Size classes: 4 KiB multiples up to 1 MiB, 2 MiB multiples above (a block is at least
// the bytes asked; the pools account the bytes asked, not the class).
// Thread-safety: thread-safe (one mutex); hooks are called with it released only for the
// fence, so they must not call back into the cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "core/status.h"

namespace strata {

struct RawBlock {
  void* base = nullptr;  // what the driver returned (freed as such)
  void* data = nullptr;  // the aligned start handed to the user
  size_t bytes = 0;      // the size class
};

class BlockCache {
 public:
  struct Hooks {
    // A driver allocation of `class_bytes` (data 4 KiB-aligned); errors as the driver's.
    std::function<StatusOr<RawBlock>(size_t class_bytes)> allocate;
    std::function<void(const RawBlock&)> free;
    // A predicate that turns true once every stream of the device has passed the moment
    // it was made (null: blocks are reusable at once).
    std::function<std::function<bool()>()> fence;
  };

  BlockCache(Hooks hooks, uint64_t max_cached_bytes);
  // Frees every cached block; the device's streams must be done with them.
  ~BlockCache();
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // A block of at least `bytes`: a cached one of its class whose fence passed, else a new
  // one from the driver (on failure the cache's free blocks go back and it is tried again).
  StatusOr<RawBlock> Take(size_t bytes);
  // The block back, reusable once its fence passes (or freed at once beyond the budget).
  void Give(const RawBlock& block);
  // Frees every cached block whose fence has passed.
  void Trim();

  // Driver calls so far (allocations and frees): 0 per step in a steady state.
  uint64_t driver_calls() const;
  uint64_t cached_bytes() const;

  static size_t ClassBytes(size_t bytes);

 private:
  struct Pending {
    RawBlock block;
    std::function<bool()> passed;
  };
  // Moves pending blocks whose fence passed to the free lists (mutex held).
  void Settle();
  void FreeLocked(const RawBlock& block);

  Hooks hooks_;
  const uint64_t max_cached_bytes_;
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<RawBlock>> free_;  // by class
  std::vector<Pending> pending_;
  uint64_t cached_bytes_ = 0;  // free + pending
  uint64_t driver_calls_ = 0;
};

}  // namespace strata
