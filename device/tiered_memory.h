// The memory of a device's two tiers, shared by the CPU and the CUDA device: each tier's
// byte accounting (MemoryPool: capacity, current and peak bytes by state kind) over a
// BlockCache of the driver's blocks (device/block_cache.h), so that a steady-state step
// makes no driver call on either device. A device gives the driver calls of each tier
// (aligned_alloc or mappings on the CPU; cudaMalloc and pinned host memory on CUDA) and the
// fence that says every stream passed a moment; the rest is here once.
// Thread-safety: thread-safe (the pools and caches lock; the hooks must be thread-safe).
// Every Buffer it hands out must be gone before it is destroyed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "core/trace.h"
#include "device/block_cache.h"
#include "device/memory.h"

namespace strata {

struct TierDriver {
  // A driver block of `class_bytes` (data 4 KiB-aligned) and its release; errors as the
  // driver's.
  std::function<StatusOr<RawBlock>(size_t class_bytes)> allocate;
  std::function<void(const RawBlock&)> free;
  uint64_t capacity_bytes = 0;  // the tier's pool
  const char* limit_key = "";   // the config key that sets it (named when it is full)
  uint64_t max_cached_bytes = 0;  // freed blocks kept for reuse, at most
};

class TieredMemory {
 public:
  // `fence` as BlockCache::Hooks::fence (null: blocks are reusable at once).
  // `on_allocated` / `on_freed` (may be null): told of every buffer handed out (its data,
  // bytes and tier) and given back (its data), e.g. to answer which tier a pointer is in.
  struct Options {
    TierDriver device, host;
    std::function<std::function<bool()>()> fence;
    std::function<void(void* data, size_t bytes, Tier tier)> on_allocated;
    std::function<void(void* data)> on_freed;
  };
  explicit TieredMemory(Options options);
  TieredMemory(const TieredMemory&) = delete;
  TieredMemory& operator=(const TieredMemory&) = delete;

  // `bytes` of `tier` for `kind`, accounted first (a full pool fails naming the tier, what
  // asked, the bytes and the key to raise), then a block; a driver failure is the driver's
  // status, said of what asked.
  StatusOr<Buffer> Allocate(Tier tier, StateKind kind, size_t bytes, const std::string& what);
  MemoryPool& pool(Tier tier) { return tier == Tier::kDevice ? device_pool_ : host_pool_; }
  const MemoryPool& pool(Tier tier) const {
    return tier == Tier::kDevice ? device_pool_ : host_pool_;
  }
  // Driver allocations and frees so far, both tiers.
  uint64_t driver_calls() const;
  void SetTrace(Trace* trace);

 private:
  MemoryPool device_pool_;
  MemoryPool host_pool_;
  std::function<void(void*, size_t, Tier)> on_allocated_;
  std::function<void(void*)> on_freed_;
  std::array<std::unique_ptr<BlockCache>, kNumTiers> caches_;  // by Tier
};

}  // namespace strata
