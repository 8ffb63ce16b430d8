// See tiered_memory.h.
#include "device/tiered_memory.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/bytes.h"

namespace strata {

TieredMemory::TieredMemory(Options options)
    : device_pool_(Tier::kDevice, options.device.capacity_bytes, options.device.limit_key),
      host_pool_(Tier::kHost, options.host.capacity_bytes, options.host.limit_key),
      on_allocated_(std::move(options.on_allocated)),
      on_freed_(std::move(options.on_freed)) {
  for (Tier tier : {Tier::kDevice, Tier::kHost}) {
    TierDriver& driver = tier == Tier::kDevice ? options.device : options.host;
    BlockCache::Hooks hooks;
    hooks.allocate = std::move(driver.allocate);
    hooks.free = std::move(driver.free);
    hooks.fence = options.fence;
    caches_[static_cast<int>(tier)] = std::make_unique<BlockCache>(hooks, driver.max_cached_bytes);
  }
}

StatusOr<Buffer> TieredMemory::Allocate(Tier tier, StateKind kind, size_t bytes,
                                        const std::string& what) {
  MemoryPool& target = pool(tier);
  RETURN_IF_ERROR(target.Reserve(kind, bytes, what));
  BlockCache* cache = caches_[static_cast<int>(tier)].get();
  StatusOr<RawBlock> block = cache->Take(bytes);
  if (!block.ok()) {
    target.Release(kind, bytes);
    return Annotate(block.status(),
                    absl::StrCat("allocating ", FormatBytes(bytes), " (", bytes, " bytes) for ",
                                 what, " on the ", TierName(tier), " tier"));
  }
  const RawBlock raw = *block;
  if (on_allocated_) on_allocated_(raw.data, bytes, tier);
  return Buffer(raw.data, bytes, tier, kind, &target, [this, cache, raw](void*, size_t) {
    if (on_freed_) on_freed_(raw.data);
    cache->Give(raw);
  });
}

uint64_t TieredMemory::driver_calls() const {
  return caches_[0]->driver_calls() + caches_[1]->driver_calls();
}

void TieredMemory::SetTrace(Trace* trace) {
  device_pool_.SetTrace(trace);
  host_pool_.SetTrace(trace);
}

}  // namespace strata
