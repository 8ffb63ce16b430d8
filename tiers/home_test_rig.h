// Test rig of the state-home tests (grad_home_test, optimizer_home_test, param_home_test):
// what the ZeRO component factory (runtime/zero_components.cc: AllocateState,
// CreateNvmeTier) builds around the homes, rebuilt small here because tiers/ may not
// depend on runtime/. The CPU device with its kernels and the four streams, two units
// with tensors of odd sizes (some with weight decay, some without), their UnitState in
// the tiers a placement names, NvmeTiers over a test directory, deterministic inputs in
// the compute dtype, and bitwise comparisons that name the first elements that differ.
// One rank (world 1): a unit's shard is the whole padded unit and its state offset is 0.
// Thread-safety: used by one test thread.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "device/device.h"
#include "core/options.h"
#include "core/testing/status_matchers.h"
#include "tiers/home_context.h"
#include "nvme/nvme_tier.h"

namespace strata::tiers_testing {

// NVMe chunk of the rig's units: 2048 elements (the smallest NvmeChunks allows), so the
// first unit (8192 elements) has four chunks and the second (4096) two.
inline constexpr size_t kChunkElements = 2048;

// Which tier each kind of state lives in (runtime's Placement, for the homes alone).
struct StatePlacement {
  StateTier grads = StateTier::kDevice;
  StateTier optimizer = StateTier::kDevice;
  StateTier params = StateTier::kDevice;
};

class HomeRig {
 public:
  // The CPU device (small pools), CPU kernels for `dtype` (one thread) as both kernel
  // sets, the four streams, and the two units sized for one rank (no buffers yet); or
  // `layouts` in their place.
  static StatusOr<std::unique_ptr<HomeRig>> Create(DType dtype,
                                                   std::vector<UnitLayout> layouts = {});
  // 8-bit Adam states (train.optimizer_states=int8): every unit's state runs over its shard,
  // as runtime's AllocateState sets them (before the homes and tiers are made; only the
  // NVMe optimizer home is rigged for them here).
  void UseInt8States();
  ~HomeRig();

  // Every unit's gradient sums, optimizer state and host staging in the placement's
  // tiers, zeroed, as runtime's AllocateState does for sharded state (stages 1-3): no
  // grad_accum for grads on nvme, no master/moments for the optimizer on nvme.
  Status AllocateState(const StatePlacement& placement);
  // Waits for all four streams; the first error.
  Status SyncAll();

  const HomeContext& ctx() const { return ctx_; }
  Device& device() { return *device_; }
  Stream& compute() { return *compute_; }
  Stream& comm() { return *comm_; }
  Stream& copy() { return *copy_; }
  Stream& host() { return *host_; }
  DType dtype() const { return ctx_.dtype; }
  size_t element_bytes() const { return DTypeBytes(ctx_.dtype); }
  const std::vector<UnitLayout>& layouts() const { return layouts_; }
  std::vector<UnitState>& units() { return units_; }
  const std::vector<UnitState>& units() const { return units_; }
  int num_units() const { return static_cast<int>(units_.size()); }
  size_t shard(int unit) const { return units_[unit].shard_elements; }
  std::vector<size_t> shards() const;
  // NvmeChunks of the shards, kChunkElements each.
  std::vector<std::vector<NvmeChunk>> Chunks() const {
    return NvmeChunks(shards(), kChunkElements);
  }

  // A device-tier buffer holding `bytes` (copied on the compute stream, waited for).
  StatusOr<Buffer> DeviceCopyOf(const std::vector<uint8_t>& bytes);
  // An empty device-tier buffer of `bytes`.
  StatusOr<Buffer> DeviceBuffer(size_t bytes);
  // Copies `bytes` from `src` (any tier) to `dst` (any tier) and waits.
  Status CopyAndWait(void* dst, const void* src, size_t bytes);

 private:
  HomeRig() = default;

  std::unique_ptr<Device> device_;
  std::unique_ptr<Ops> ops_;
  std::unique_ptr<Ops> host_ops_;
  std::vector<UnitLayout> layouts_;
  // Before the streams: the streams are destroyed (drained) before the buffers go.
  std::vector<UnitState> units_;
  std::unique_ptr<Stream> compute_, comm_, copy_, host_;
  HomeContext ctx_;
};

// A directory for the NVMe tiers under TEST_TMPDIR, or "" with `skip_reason` set where
// O_DIRECT does not work there. The homes' tests use the pread engine: io_uring is
// nvme/'s business (tested there) and may be missing in a sandbox.
std::string NvmeTestDir(std::string* skip_reason);

// An NvmeTier over `dir` with one extent of each of `kinds` per chunk, sized as the
// factory sizes them: kParams in the compute dtype, the moments of units with state runs in
// the chunk's stored form (tiers/state_blocks.h), the others fp32.
StatusOr<std::unique_ptr<NvmeTier>> MakeNvmeTier(const std::string& dir, const HomeRig& rig,
                                                 const std::vector<std::vector<NvmeChunk>>& chunks,
                                                 const std::vector<ExtentKind>& kinds);

// `n` deterministic values of `seed`, uniform in [lo, hi), never zero (so that 0 + x
// and a copy of x agree in sign), exactly representable in `dtype`.
std::vector<float> Values(size_t n, uint64_t seed, float lo, float hi, DType dtype);
// fp32 values in the compute dtype's storage (bf16: rounded to nearest even).
std::vector<uint8_t> Encode(const std::vector<float>& values, DType dtype);
// `n` elements of the compute dtype at `data`, each converted to fp32.
std::vector<float> Decode(const void* data, size_t n, DType dtype);

// Bit-for-bit equality of `n` fp32 values; on failure names the count and the first
// elements that differ.
::testing::AssertionResult BitsEqual(const float* expected, const float* actual, size_t n);
inline ::testing::AssertionResult BitsEqual(const std::vector<float>& expected,
                                            const std::vector<float>& actual) {
  if (expected.size() != actual.size()) {
    return ::testing::AssertionFailure()
           << "sizes differ: " << expected.size() << " vs " << actual.size();
  }
  return BitsEqual(expected.data(), actual.data(), expected.size());
}
// The same for `n` elements of `dtype` (bytes compared, values shown).
::testing::AssertionResult ElementsEqual(const void* expected, const void* actual, size_t n,
                                         DType dtype);

// gtest parameter names of the dtypes.
inline std::string DTypeParamName(const ::testing::TestParamInfo<DType>& info) {
  return DTypeName(info.param);
}

}  // namespace strata::tiers_testing

namespace strata {
// gtest prints a DType parameter by name ("fp32", "bf16").
inline void PrintTo(DType dtype, std::ostream* out) { *out << DTypeName(dtype); }
}  // namespace strata


