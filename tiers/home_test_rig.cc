// See home_test_rig.h.
#include "tiers/home_test_rig.h"

#include <cstring>
#include <random>

#include "device/cpu_device.h"
#include "kernels/cpu/cpu_ops.h"
#include "nvme/test_util.h"
#include "tiers/state_blocks.h"
#include "tiers/stream_helpers.h"

namespace strata::tiers_testing {

StatusOr<std::unique_ptr<HomeRig>> HomeRig::Create(DType dtype,
                                                   std::vector<UnitLayout> layouts) {
  std::unique_ptr<HomeRig> rig(new HomeRig());
  CpuDeviceOptions options;
  options.device_memory_bytes = 64ull << 20;
  options.host_memory_bytes = 64ull << 20;
  rig->device_ = CreateCpuDevice(options);
  ASSIGN_OR_RETURN(rig->ops_, CreateCpuOps(dtype, 1));
  ASSIGN_OR_RETURN(rig->host_ops_, CreateCpuOps(dtype, 1));
  ASSIGN_OR_RETURN(rig->compute_, rig->device_->CreateStream("compute"));
  ASSIGN_OR_RETURN(rig->comm_, rig->device_->CreateStream("comm"));
  ASSIGN_OR_RETURN(rig->copy_, rig->device_->CreateStream("copy"));
  ASSIGN_OR_RETURN(rig->host_, rig->device_->CreateStream("host"));

  // Tensors of odd sizes that straddle the 2048-element NVMe chunks; matrices decay,
  // biases and norms do not.
  UnitLayout block("block.0");
  block.Add("attn.w", {37, 53}, /*weight_decay=*/true, InitKind::kNormal, 0.02f);
  block.Add("attn.b", {53}, false, InitKind::kZeros);
  block.Add("ln.w", {101}, false, InitKind::kOnes);
  block.Add("mlp.w", {13, 311}, true, InitKind::kNormal, 0.02f);
  UnitLayout head("head");
  head.Add("proj.w", {29, 71}, true, InitKind::kNormal, 0.02f);
  head.Add("proj.b", {7}, false, InitKind::kZeros);
  rig->layouts_ = layouts.empty() ? std::vector<UnitLayout>{block, head} : std::move(layouts);
  rig->units_.resize(rig->layouts_.size());
  for (size_t u = 0; u < rig->layouts_.size(); ++u) {
    rig->units_[u].padded_elements = rig->layouts_[u].PaddedElements(1);
    rig->units_[u].shard_elements = rig->layouts_[u].ShardElements(1);
  }

  HomeContext& ctx = rig->ctx_;
  ctx.device = rig->device_.get();
  ctx.ops = rig->ops_.get();
  ctx.host_ops = rig->host_ops_.get();
  ctx.compute = rig->compute_.get();
  ctx.comm = rig->comm_.get();
  ctx.copy = rig->copy_.get();
  ctx.host = rig->host_.get();
  ctx.dtype = dtype;
  ctx.layouts = &rig->layouts_;
  ctx.units = &rig->units_;
  return rig;
}

void HomeRig::UseInt8States() {
  for (size_t u = 0; u < units_.size(); ++u) {
    units_[u].state_runs = StateRuns(layouts_[u], {0, units_[u].shard_elements});
  }
}

HomeRig::~HomeRig() {
  if (compute_) SyncAll().IgnoreError();
}

Status HomeRig::AllocateState(const StatePlacement& placement) {
  const size_t element_bytes = this->element_bytes();
  const Tier grads = placement.grads == StateTier::kDevice ? Tier::kDevice : Tier::kHost;
  const Tier optimizer = placement.optimizer == StateTier::kDevice ? Tier::kDevice : Tier::kHost;
  for (size_t u = 0; u < units_.size(); ++u) {
    UnitState& state = units_[u];
    const size_t n = state.shard_elements;
    const std::string& name = layouts_[u].name();
    if (placement.grads != StateTier::kNvme) {
      ASSIGN_OR_RETURN(state.grad_accum, AllocateZeroedIn(ctx_, grads, StateKind::kGrads, n * 4,
                                                          name + " fp32 grad accumulator"));
    }
    if (placement.optimizer != StateTier::kNvme) {
      for (Buffer* buffer : {&state.master, &state.exp_avg, &state.exp_avg_sq}) {
        ASSIGN_OR_RETURN(*buffer, AllocateZeroedIn(ctx_, optimizer, StateKind::kOptimizer, n * 4,
                                                   name + " optimizer state"));
      }
    }
    if (placement.grads == StateTier::kHost) {
      ASSIGN_OR_RETURN(state.grad_landing,
                       AllocateZeroedIn(ctx_, Tier::kHost, StateKind::kGrads, n * element_bytes,
                                        name + " grad landing"));
    }
    if (placement.optimizer == StateTier::kHost) {
      if (placement.grads == StateTier::kDevice) {
        ASSIGN_OR_RETURN(state.grad_staging, AllocateZeroedIn(ctx_, Tier::kHost, StateKind::kGrads,
                                                              n * 4, name + " fp32 grad staging"));
      }
      if (placement.params == StateTier::kDevice) {
        ASSIGN_OR_RETURN(state.param_staging,
                         AllocateZeroedIn(ctx_, Tier::kHost, StateKind::kParams, n * element_bytes,
                                          name + " param staging"));
      }
    }
  }
  return compute_->Synchronize();
}

Status HomeRig::SyncAll() {
  Status status;
  for (Stream* stream : {compute_.get(), comm_.get(), copy_.get(), host_.get()}) {
    status.Update(stream->Synchronize());
  }
  return status;
}

std::vector<size_t> HomeRig::shards() const {
  std::vector<size_t> shards;
  for (const UnitState& state : units_) shards.push_back(state.shard_elements);
  return shards;
}

StatusOr<Buffer> HomeRig::DeviceBuffer(size_t bytes) {
  return device_->Allocate(Tier::kDevice, StateKind::kWorkspace, bytes, "test buffer");
}

StatusOr<Buffer> HomeRig::DeviceCopyOf(const std::vector<uint8_t>& bytes) {
  ASSIGN_OR_RETURN(Buffer buffer, DeviceBuffer(bytes.size()));
  RETURN_IF_ERROR(CopyAndWait(buffer.data(), bytes.data(), bytes.size()));
  return buffer;
}

Status HomeRig::CopyAndWait(void* dst, const void* src, size_t bytes) {
  RETURN_IF_ERROR(device_->CopyAsync(dst, src, bytes, *compute_));
  return compute_->Synchronize();
}

std::string NvmeTestDir(std::string* skip_reason) {
  const std::string dir = nvme::testing::MakeTestDir();
  *skip_reason = nvme::testing::SkipReason(IoEngineKind::kPread, dir);
  return skip_reason->empty() ? dir : "";
}

StatusOr<std::unique_ptr<NvmeTier>> MakeNvmeTier(const std::string& dir, const HomeRig& rig,
                                                 const std::vector<std::vector<NvmeChunk>>& chunks,
                                                 const std::vector<ExtentKind>& kinds) {
  NvmeStoreOptions options;
  options.dir = dir;
  options.engine.engine = IoEngineKind::kPread;
  std::vector<ExtentSpec> extents;
  for (size_t u = 0; u < chunks.size(); ++u) {
    for (size_t k = 0; k < chunks[u].size(); ++k) {
      const NvmeChunk& chunk = chunks[u][k];
      const std::string name = absl::StrCat(rig.layouts()[u].name(), " chunk ", k);
      const uint64_t n = chunk.end - chunk.begin;
      for (ExtentKind kind : kinds) {
        const uint64_t element_bytes = kind == ExtentKind::kParams ? rig.element_bytes() : 4;
        uint64_t bytes = n * element_bytes;
        const bool moment = kind == ExtentKind::kExpAvg || kind == ExtentKind::kExpAvgSq;
        if (moment && !rig.units()[u].state_runs.empty()) {
          bytes = SectionsOf(StateRuns(rig.layouts()[u], {chunk.begin, chunk.end})).bytes();
        }
        extents.push_back({chunk.id, name, kind, bytes});
      }
    }
  }
  return NvmeTier::Create(options, extents);
}

std::vector<float> Values(size_t n, uint64_t seed, float lo, float hi, DType dtype) {
  std::mt19937_64 generator(seed);
  std::uniform_real_distribution<float> uniform(lo, hi);
  std::vector<float> values(n);
  for (float& value : values) {
    do {
      value = uniform(generator);
      if (dtype == DType::kBF16) value = ToFloat(ToBf16(value));
    } while (value == 0.0f);
  }
  return values;
}

std::vector<uint8_t> Encode(const std::vector<float>& values, DType dtype) {
  std::vector<uint8_t> bytes(values.size() * DTypeBytes(dtype));
  if (dtype == DType::kF32) {
    std::memcpy(bytes.data(), values.data(), bytes.size());
  } else {
    auto* out = reinterpret_cast<bf16*>(bytes.data());
    for (size_t i = 0; i < values.size(); ++i) out[i] = ToBf16(values[i]);
  }
  return bytes;
}

std::vector<float> Decode(const void* data, size_t n, DType dtype) {
  std::vector<float> values(n);
  if (dtype == DType::kF32) {
    std::memcpy(values.data(), data, n * sizeof(float));
  } else {
    const auto* in = static_cast<const bf16*>(data);
    for (size_t i = 0; i < n; ++i) values[i] = ToFloat(in[i]);
  }
  return values;
}

namespace {

// The common part of BitsEqual and ElementsEqual: elements i differ when `differs(i)`.
template <typename Differs, typename Show>
::testing::AssertionResult Compare(size_t n, Differs differs, Show show) {
  size_t count = 0;
  std::string first;
  for (size_t i = 0; i < n; ++i) {
    if (!differs(i)) continue;
    if (++count <= 5) first += absl::StrCat("\n  [", i, "] expected ", show(i));
  }
  if (count == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << count << " of " << n << " elements differ" << first;
}

}  // namespace

::testing::AssertionResult BitsEqual(const float* expected, const float* actual, size_t n) {
  return Compare(
      n, [&](size_t i) { return std::memcmp(&expected[i], &actual[i], sizeof(float)) != 0; },
      [&](size_t i) { return absl::StrFormat("%.9g, got %.9g", expected[i], actual[i]); });
}

::testing::AssertionResult ElementsEqual(const void* expected, const void* actual, size_t n,
                                         DType dtype) {
  const size_t bytes = DTypeBytes(dtype);
  const auto* a = static_cast<const uint8_t*>(expected);
  const auto* b = static_cast<const uint8_t*>(actual);
  return Compare(
      n, [&](size_t i) { return std::memcmp(a + i * bytes, b + i * bytes, bytes) != 0; },
      [&](size_t i) {
        return absl::StrFormat("%.9g, got %.9g", Decode(a + i * bytes, 1, dtype)[0],
                               Decode(b + i * bytes, 1, dtype)[0]);
      });
}

}  // namespace strata::tiers_testing
