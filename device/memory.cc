// Byte accounting for tiers; see memory.h.
#include "device/memory.h"

#include <charconv>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <utility>

namespace strata {

const char* TierName(Tier tier) { return tier == Tier::kDevice ? "device" : "host"; }

const char* StateKindName(StateKind kind) {
  switch (kind) {
    case StateKind::kParams: return "params";
    case StateKind::kGrads: return "grads";
    case StateKind::kOptimizer: return "optimizer";
    case StateKind::kActivations: return "activations";
    case StateKind::kWorkspace: return "workspace";
  }
  return "?";
}


MemoryPool::MemoryPool(Tier tier, uint64_t capacity_bytes, std::string limit_key)
    : tier_(tier), capacity_bytes_(capacity_bytes), limit_key_(std::move(limit_key)) {
  stats_.capacity_bytes = capacity_bytes;
}

Status MemoryPool::Reserve(StateKind kind, uint64_t bytes, const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t free_bytes = capacity_bytes_ - stats_.current_bytes;
  if (bytes > free_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s tier is full: %s asked %s (%s) for %s, but only %s of %s are free (%s); in use: "
        "params %s, grads %s, optimizer %s, activations %s, workspace %s. Raise %s or move "
        "state off the %s tier",
        TierName(tier_), what, FormatBytes(bytes), absl::StrCat(bytes, " bytes"),
        StateKindName(kind), FormatBytes(free_bytes), FormatBytes(capacity_bytes_), limit_key_,
        FormatBytes(stats_.current_by_kind[0]), FormatBytes(stats_.current_by_kind[1]),
        FormatBytes(stats_.current_by_kind[2]), FormatBytes(stats_.current_by_kind[3]),
        FormatBytes(stats_.current_by_kind[4]), limit_key_, TierName(tier_)));
  }
  int k = static_cast<int>(kind);
  stats_.current_bytes += bytes;
  stats_.current_by_kind[k] += bytes;
  if (stats_.current_bytes > stats_.peak_bytes) stats_.peak_bytes = stats_.current_bytes;
  if (stats_.current_by_kind[k] > stats_.peak_by_kind[k]) {
    stats_.peak_by_kind[k] = stats_.current_by_kind[k];
  }
  TraceBytes();
  return absl::OkStatus();
}

void MemoryPool::Release(StateKind kind, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.current_bytes -= bytes;
  stats_.current_by_kind[static_cast<int>(kind)] -= bytes;
  TraceBytes();
}

void MemoryPool::TraceBytes() {
  Trace* trace = trace_.load(std::memory_order_relaxed);
  if (trace == nullptr || !trace->recording()) return;
  trace->Counter(absl::StrCat(TierName(tier_), " tier bytes"), Trace::Clock::now(),
                 static_cast<double>(stats_.current_bytes));
}

PoolStats MemoryPool::Stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void MemoryPool::ResetPeaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_bytes = stats_.current_bytes;
  stats_.peak_by_kind = stats_.current_by_kind;
}

Buffer::Buffer(void* data, size_t bytes, Tier tier, StateKind kind, MemoryPool* pool,
               Deleter deleter)
    : data_(data), bytes_(bytes), tier_(tier), kind_(kind), pool_(pool),
      deleter_(std::move(deleter)) {}

Buffer::Buffer(Buffer&& other) noexcept { *this = std::move(other); }

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    tier_ = other.tier_;
    kind_ = other.kind_;
    pool_ = std::exchange(other.pool_, nullptr);
    deleter_ = std::move(other.deleter_);
  }
  return *this;
}

Buffer::~Buffer() { Reset(); }

void Buffer::Reset() {
  if (data_ != nullptr) {
    if (deleter_) deleter_(data_, bytes_);
    if (pool_ != nullptr) pool_->Release(kind_, bytes_);
  }
  data_ = nullptr;
  bytes_ = 0;
  pool_ = nullptr;
}

}  // namespace strata
