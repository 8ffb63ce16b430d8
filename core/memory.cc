// Byte accounting for tiers; see memory.h.
#include "core/memory.h"

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

std::string FormatBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, " B");
  return absl::StrFormat("%.2f %s", value, kUnits[unit]);
}

StatusOr<uint64_t> ParseBytes(const std::string& text) {
  size_t pos = 0;
  while (pos < text.size() && (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.')) ++pos;
  std::string number = text.substr(0, pos);
  std::string suffix = text.substr(pos);
  while (!suffix.empty() && suffix.front() == ' ') suffix.erase(0, 1);
  char* end = nullptr;
  double value = number.empty() ? -1 : std::strtod(number.c_str(), &end);
  if (number.empty() || end != number.c_str() + number.size() || value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a size (expected e.g. 4096, 512MiB, 2GiB, 1.5GB)"));
  }
  double scale;
  if (suffix.empty() || suffix == "B") scale = 1;
  else if (suffix == "KiB" || suffix == "K") scale = 1024.0;
  else if (suffix == "MiB" || suffix == "M") scale = 1024.0 * 1024;
  else if (suffix == "GiB" || suffix == "G") scale = 1024.0 * 1024 * 1024;
  else if (suffix == "TiB" || suffix == "T") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (suffix == "KB") scale = 1e3;
  else if (suffix == "MB") scale = 1e6;
  else if (suffix == "GB") scale = 1e9;
  else if (suffix == "TB") scale = 1e12;
  else {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' has unknown unit '", suffix, "' (expected B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"));
  }
  const std::string too_large = absl::StrCat(
      "'", text, "' is too large a size (more than 2^64 - 1 bytes, 16 EiB)");
  if (number.find('.') == std::string::npos) {
    // Whole numbers exactly, with overflow checked (a double would round above 2^53).
    uint64_t whole = 0;
    auto [ptr, error] = std::from_chars(number.data(), number.data() + number.size(), whole);
    if (error != std::errc() || ptr != number.data() + number.size()) {
      return absl::InvalidArgumentError(too_large);
    }
    const uint64_t multiplier = static_cast<uint64_t>(scale);
    if (multiplier != 0 && whole > UINT64_MAX / multiplier) {
      return absl::InvalidArgumentError(too_large);
    }
    return whole * multiplier;
  }
  const double bytes = value * scale;
  if (!(bytes < 18446744073709551616.0)) return absl::InvalidArgumentError(too_large);
  return static_cast<uint64_t>(std::round(bytes));
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
