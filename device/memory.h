// Memory tiers, state kinds and the byte accounting every allocation goes through.
// A MemoryPool is the capacity and the current/peak bytes of one tier on one rank, with a
// breakdown by state kind (params, grads, optimizer, activations, workspace). Asking for
// more than is free fails with a message that names the tier, the bytes asked and free.
// Thread-safety: MemoryPool is thread-safe (one mutex); Buffer is move-only and not.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "core/bytes.h"
#include "core/status.h"
#include "core/trace.h"

namespace strata {

enum class Tier { kDevice = 0, kHost = 1 };
inline constexpr int kNumTiers = 2;
const char* TierName(Tier tier);

enum class StateKind { kParams = 0, kGrads, kOptimizer, kActivations, kWorkspace };
inline constexpr int kNumStateKinds = 5;
const char* StateKindName(StateKind kind);


struct PoolStats {
  uint64_t capacity_bytes = 0;
  uint64_t current_bytes = 0;
  uint64_t peak_bytes = 0;
  std::array<uint64_t, kNumStateKinds> current_by_kind{};
  std::array<uint64_t, kNumStateKinds> peak_by_kind{};
};

class MemoryPool {
 public:
  // `limit_key` is the config key that sets the capacity, quoted in errors.
  MemoryPool(Tier tier, uint64_t capacity_bytes, std::string limit_key);

  // Reserves bytes or fails (kResourceExhausted) naming tier, kind, asked and free bytes.
  Status Reserve(StateKind kind, uint64_t bytes, const std::string& what);
  void Release(StateKind kind, uint64_t bytes);

  PoolStats Stats() const;
  // Forgets peaks (sets them to the current values), e.g. after set-up.
  void ResetPeaks();
  Tier tier() const { return tier_; }
  // While `trace` records, every change of the bytes in use is a counter "<tier> tier
  // bytes" on it (null: none). `trace` must outlive the pool or be reset first.
  void SetTrace(Trace* trace) { trace_.store(trace); }

 private:
  void TraceBytes();  // under mutex_
  const Tier tier_;
  std::atomic<Trace*> trace_{nullptr};
  const uint64_t capacity_bytes_;
  const std::string limit_key_;
  mutable std::mutex mutex_;
  PoolStats stats_;
};

// A move-only owner of bytes in one tier, returned to its allocator on destruction.
class Buffer {
 public:
  using Deleter = std::function<void(void*, size_t)>;
  Buffer() = default;
  Buffer(void* data, size_t bytes, Tier tier, StateKind kind, MemoryPool* pool, Deleter deleter);
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  void* data() const { return data_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  size_t bytes() const { return bytes_; }
  Tier tier() const { return tier_; }
  StateKind kind() const { return kind_; }
  bool empty() const { return data_ == nullptr; }
  void Reset();

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Tier tier_ = Tier::kDevice;
  StateKind kind_ = StateKind::kWorkspace;
  MemoryPool* pool_ = nullptr;
  Deleter deleter_;
};

}  // namespace strata
