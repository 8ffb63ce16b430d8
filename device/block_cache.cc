// See block_cache.h.
#include "device/block_cache.h"

#include <utility>

namespace strata {

BlockCache::BlockCache(Hooks hooks, uint64_t max_cached_bytes)
    : hooks_(std::move(hooks)), max_cached_bytes_(max_cached_bytes) {}

BlockCache::~BlockCache() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [size, blocks] : free_) {
    for (const RawBlock& block : blocks) hooks_.free(block);
  }
  for (const Pending& pending : pending_) hooks_.free(pending.block);
}

size_t BlockCache::ClassBytes(size_t bytes) {
  constexpr size_t kSmall = 4096, kLarge = 2u << 20, kSmallLimit = 1u << 20;
  if (bytes == 0) return kSmall;
  if (bytes <= kSmallLimit) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

void BlockCache::Settle() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->passed == nullptr || it->passed()) {
      free_[it->block.bytes].push_back(it->block);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

void BlockCache::FreeLocked(const RawBlock& block) {
  hooks_.free(block);
  ++driver_calls_;
}

StatusOr<RawBlock> BlockCache::Take(size_t bytes) {
  const size_t size = ClassBytes(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  Settle();
  auto it = free_.find(size);
  if (it != free_.end() && !it->second.empty()) {
    RawBlock block = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= block.bytes;
    return block;
  }
  ++driver_calls_;
  StatusOr<RawBlock> block = hooks_.allocate(size);
  if (block.ok() || cached_bytes_ == 0) return block;
  // Out of memory with blocks cached: give the free ones back and try once more.
  for (auto& [ignored, blocks] : free_) {
    for (const RawBlock& cached : blocks) {
      cached_bytes_ -= cached.bytes;
      FreeLocked(cached);
    }
    blocks.clear();
  }
  ++driver_calls_;
  return hooks_.allocate(size);
}

void BlockCache::Give(const RawBlock& block) {
  std::function<bool()> passed = hooks_.fence ? hooks_.fence() : nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  if (cached_bytes_ + block.bytes > max_cached_bytes_) {
    FreeLocked(block);
    return;
  }
  cached_bytes_ += block.bytes;
  pending_.push_back({block, std::move(passed)});
}

void BlockCache::Trim() {
  std::lock_guard<std::mutex> lock(mutex_);
  Settle();
  for (auto& [ignored, blocks] : free_) {
    for (const RawBlock& block : blocks) {
      cached_bytes_ -= block.bytes;
      FreeLocked(block);
    }
    blocks.clear();
  }
}

uint64_t BlockCache::driver_calls() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return driver_calls_;
}

uint64_t BlockCache::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_bytes_;
}

}  // namespace strata
