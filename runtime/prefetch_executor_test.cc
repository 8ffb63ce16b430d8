// The stage-3 prefetch executor driven by a trace, without a model: each access's Acquire
// must return the unit's full params (the stored values, bit for bit, on the device
// tier), the gathers must be the plan's, the gathered bytes must stay within the plan's
// bound, an access off the trace must count as a deviation and still be served, an update
// pending on another stream must be seen, and with the shards on nvme the same holds
// through fewer read buffers than units.
#include "runtime/prefetch_executor.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/local_communicator.h"
#include "core/testing/status_matchers.h"
#include "device/cpu_device.h"
#include "kernels/cpu/cpu_ops.h"
#include "nvme/test_util.h"
#include "nvme/nvme_store.h"

namespace strata {
namespace {

// The trace of a tied GPT of 3 blocks: embedding 0, blocks 1-3, final norm 4; the LM head
// reuses unit 0. Forward then backward.
const std::vector<int> kTrace = {0, 1, 2, 3, 4, 0, 0, 4, 3, 2, 1, 0};

struct Rig {
  std::unique_ptr<Device> device;
  std::unique_ptr<Ops> ops, host_ops;
  std::unique_ptr<Stream> compute, comm, copy, host;
  std::vector<std::unique_ptr<Communicator>> group;
  std::vector<UnitLayout> layouts;
  std::vector<UnitState> units;
  ZeroContext ctx;
};

// Five units of different sizes (odd tensor sizes: padding and alignment), world 1, fp32.
std::unique_ptr<Rig> MakeRig(uint64_t prefetch_bytes) {
  auto rig = std::make_unique<Rig>();
  rig->device = CreateCpuDevice({});
  rig->ops = std::move(CreateCpuOps(DType::kF32, 1)).value();
  rig->host_ops = std::move(CreateCpuOps(DType::kF32, 1)).value();
  rig->compute = std::move(rig->device->CreateStream("compute")).value();
  rig->comm = std::move(rig->device->CreateStream("comm")).value();
  rig->copy = std::move(rig->device->CreateStream("copy")).value();
  rig->host = std::move(rig->device->CreateStream("host")).value();
  rig->group = std::move(CreateLocalGroup(1, LocalGroupOptions{})).value();
  const std::vector<int> sizes = {3001, 1500, 2222, 1500, 77};
  for (size_t u = 0; u < sizes.size(); ++u) {
    UnitLayout layout("unit" + std::to_string(u));
    layout.Add("w", {sizes[u]}, true, InitKind::kZeros);
    layout.Add("b", {13}, false, InitKind::kZeros);
    rig->layouts.push_back(layout);
    UnitState state;
    state.padded_elements = layout.PaddedElements(1);
    state.shard_elements = layout.ShardElements(1);
    rig->units.push_back(std::move(state));
  }
  ZeroContext& ctx = rig->ctx;
  ctx.device = rig->device.get();
  ctx.ops = rig->ops.get();
  ctx.host_ops = rig->host_ops.get();
  ctx.compute = rig->compute.get();
  ctx.comm = rig->comm.get();
  ctx.copy = rig->copy.get();
  ctx.host = rig->host.get();
  ctx.dtype = DType::kF32;
  ctx.layouts = &rig->layouts;
  ctx.units = &rig->units;
  ctx.communicator = rig->group[0].get();
  ctx.prefetch_bytes = prefetch_bytes;
  ctx.trace = kTrace;
  return rig;
}

// Unit u's stored values: a function of (u, element, version).
std::vector<float> Values(int unit, size_t n, int version) {
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = unit * 1000.0f + i * 0.5f + version * 0.25f;
  return values;
}

std::vector<size_t> Parts(const Rig& rig) {
  std::vector<size_t> parts;
  for (const UnitState& state : rig.units) parts.push_back(state.shard_elements);
  return parts;
}

Status StoreAll(ParamHome& home, const Rig& rig, int version) {
  for (size_t u = 0; u < rig.units.size(); ++u) {
    const std::vector<float> values = Values(u, rig.units[u].shard_elements, version);
    RETURN_IF_ERROR(home.Write(static_cast<int>(u), values.data()));
  }
  return absl::OkStatus();
}

// Walks the trace once: every Acquire's bytes (read once compute got there) are checked.
void WalkTrace(Rig& rig, ParamGatherer& gatherer, int version, const std::string& what) {
  for (size_t k = 0; k < kTrace.size(); ++k) {
    const int unit = kTrace[k];
    StatusOr<const void*> params = gatherer.Acquire(static_cast<int>(k), unit);
    ASSERT_OK(params) << what << " access " << k;
    ASSERT_OK(rig.compute->Synchronize());
    const std::vector<float> want = Values(unit, rig.units[unit].padded_elements, version);
    ASSERT_EQ(std::memcmp(*params, want.data(), want.size() * sizeof(float)), 0)
        << what << " access " << k << " unit " << unit;
    ASSERT_OK(gatherer.Release(static_cast<int>(k), unit)) << what;
  }
  ASSERT_OK(gatherer.EndMicroBatch()) << what;
}

StatusOr<PrefetchPlan> PlanOf(const Rig& rig) {
  PrefetchPlanInput input;
  input.trace = kTrace;
  for (const UnitState& state : rig.units) input.unit_bytes.push_back(state.padded_elements * 4);
  input.budget_bytes = rig.ctx.prefetch_bytes;
  return PlanPrefetch(input);
}

TEST(PrefetchExecutor, ServesEveryAccessWithThePlansGathersWithinItsBudget) {
  for (const Tier tier : {Tier::kDevice, Tier::kHost}) {
    for (const uint64_t budget : {uint64_t{0}, uint64_t{40000}, kUnlimitedPrefetchBytes}) {
      const std::string what = std::string(TierName(tier)) + " budget " + std::to_string(budget);
      auto rig = MakeRig(budget);
      StatusOr<std::unique_ptr<ParamHome>> home =
          ParamHome::CreateResident(rig->ctx, tier, Parts(*rig));
      ASSERT_OK(home);
      ASSERT_OK(StoreAll(**home, *rig, 0));
      auto fresh = std::make_shared<FreshParams>();
      fresh->pending.assign(rig->units.size(), nullptr);
      StatusOr<std::unique_ptr<ParamGatherer>> gatherer =
          CreatePrefetchExecutor(rig->ctx, home->get(), fresh);
      ASSERT_OK(gatherer);
      const uint64_t params_before =
          rig->device->pool(Tier::kDevice).Stats().current_by_kind[static_cast<int>(
              StateKind::kParams)];
      WalkTrace(*rig, **gatherer, 0, what);
      WalkTrace(*rig, **gatherer, 0, what + " (second micro-batch)");
      StatusOr<PrefetchPlan> plan = PlanOf(*rig);
      ASSERT_OK(plan);
      const GatherStats stats = (*gatherer)->stats();
      EXPECT_EQ(stats.gathers, 2u * plan->fetches) << what;
      EXPECT_EQ(stats.deviations, 0u) << what;
      // Gathered bytes on the device: the plan's resident peak, plus at most one unit whose
      // free is still deferred behind compute (frees are collected before allocations).
      const uint64_t peak = rig->device->pool(Tier::kDevice).Stats().peak_by_kind[static_cast<int>(
                                StateKind::kParams)] -
                            params_before;
      uint64_t largest = 0;
      for (const UnitState& state : rig->units) {
        largest = std::max<uint64_t>(largest, state.padded_elements * 4);
      }
      EXPECT_LE(peak, plan->peak_resident_bytes + largest) << what;
      EXPECT_GT(peak, 0u) << what;
    }
  }
}

TEST(PrefetchExecutor, AnAccessOffTheTraceIsACountedDeviationAndStillServed) {
  auto rig = MakeRig(40000);
  auto home = std::move(ParamHome::CreateResident(rig->ctx, Tier::kDevice, Parts(*rig))).value();
  ASSERT_OK(StoreAll(*home, *rig, 0));
  auto fresh = std::make_shared<FreshParams>();
  fresh->pending.assign(rig->units.size(), nullptr);
  auto gatherer = std::move(CreatePrefetchExecutor(rig->ctx, home.get(), fresh)).value();
  // Access 0 should be unit 0; ask for unit 3.
  StatusOr<const void*> params = gatherer->Acquire(0, 3);
  ASSERT_OK(params);
  ASSERT_OK(rig->compute->Synchronize());
  const std::vector<float> want = Values(3, rig->units[3].padded_elements, 0);
  EXPECT_EQ(std::memcmp(*params, want.data(), want.size() * sizeof(float)), 0);
  ASSERT_OK(gatherer->Release(0, 3));
  ASSERT_OK(gatherer->EndMicroBatch());
  EXPECT_EQ(gatherer->stats().deviations, 1u);
}

// An update of a host shard made on another stream (the CPU optimizer's) is waited for:
// the gather after it sees the new values, though the host thread enqueued it at once.
TEST(PrefetchExecutor, WaitsForAPendingUpdateOfTheShard) {
  auto rig = MakeRig(40000);
  auto home = std::move(ParamHome::CreateResident(rig->ctx, Tier::kHost, Parts(*rig))).value();
  ASSERT_OK(StoreAll(*home, *rig, 0));
  auto fresh = std::make_shared<FreshParams>();
  fresh->pending.assign(rig->units.size(), nullptr);
  auto gatherer = std::move(CreatePrefetchExecutor(rig->ctx, home.get(), fresh)).value();
  std::vector<std::unique_ptr<Event>> updated;
  std::vector<std::vector<float>> next;
  next.reserve(rig->units.size());  // the host work below holds pointers into it
  for (size_t u = 0; u < rig->units.size(); ++u) {
    next.push_back(Values(u, rig->units[u].shard_elements, 1));
    void* part = home->part(static_cast<int>(u));
    const std::vector<float>* values = &next.back();
    rig->host->EnqueueHost([part, values] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::memcpy(part, values->data(), values->size() * sizeof(float));
      return absl::OkStatus();
    });
    updated.push_back(std::move(rig->device->CreateEvent()).value());
    ASSERT_OK(rig->device->Record(*updated.back(), *rig->host));
    fresh->pending[u] = updated.back().get();
  }
  WalkTrace(*rig, *gatherer, 1, "after the update");
  ASSERT_OK(rig->host->Synchronize());
}

// Shards on nvme through 2 read buffers for 5 units: fetches the plan issues ahead wait for
// a buffer instead of blocking, in plan order, and every access is served.
TEST(PrefetchExecutor, ShardsOnNvmeThroughFewerReadBuffersThanUnits) {
  const std::string dir = nvme::testing::MakeTestDir();
  STRATA_SKIP_IF_UNAVAILABLE(IoEngineKind::kPread, dir);
  for (const uint64_t budget : {uint64_t{0}, kUnlimitedPrefetchBytes}) {
    auto rig = MakeRig(budget);
    std::vector<std::vector<NvmeChunk>> chunks = NvmeChunks(Parts(*rig), 2048);
    NvmeStoreOptions store;
    store.dir = dir;
    store.rank = static_cast<int>(budget % 7);  // a file of its own per case
    store.engine.engine = IoEngineKind::kPread;
    std::vector<ExtentSpec> extents;
    for (size_t u = 0; u < chunks.size(); ++u) {
      for (const NvmeChunk& chunk : chunks[u]) {
        extents.push_back({chunk.id, "unit" + std::to_string(u), ExtentKind::kParams,
                           (chunk.end - chunk.begin) * 4});
      }
    }
    StatusOr<std::unique_ptr<NvmeTier>> tier = NvmeTier::Create(store, extents);
    ASSERT_OK(tier);
    StatusOr<std::unique_ptr<ParamHome>> home =
        ParamHome::CreateNvme(rig->ctx, std::move(*tier), chunks, /*read_buffers=*/2);
    ASSERT_OK(home);
    ASSERT_OK(StoreAll(**home, *rig, 0));
    auto fresh = std::make_shared<FreshParams>();
    fresh->pending.assign(rig->units.size(), nullptr);
    auto gatherer = std::move(CreatePrefetchExecutor(rig->ctx, home->get(), fresh)).value();
    WalkTrace(*rig, *gatherer, 0, "nvme budget " + std::to_string(budget));
    StatusOr<PrefetchPlan> plan = PlanOf(*rig);
    ASSERT_OK(plan);
    EXPECT_EQ(gatherer->stats().gathers, static_cast<uint64_t>(plan->fetches));
    EXPECT_EQ(gatherer->stats().deviations, 0u);
  }
}

}  // namespace
}  // namespace strata
