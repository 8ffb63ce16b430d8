// The optimizer homes (optimizer_home.h) against the scalar AdamW reference
// (kernels/cpu/adamw.h) applied tensor by tensor, weight decay only where a tensor asks,
// as tiers/adam_over_range.h does: after one or two steps of every unit, the master, the
// moments and the updated params (compute dtype) equal the reference bit for bit, fp32 and
// bf16, for the device home, the host home (grads on the device or the host, params on
// the device or the host) and the NVMe home (grads on the device, the host or nvme, with
// and without the hand-over; params resident or on nvme). Also: WriteState/ReadState round
// trips (null moments store zeros), the NVMe home with 8-bit states (conversions, the
// moments' stored form, steps against the 8-bit reference), the host home's staged updates
// and sub-ranges, capabilities, and refusals of placements a home cannot serve.
#include "tiers/optimizer_home.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/adam8bit.h"
#include "kernels/cpu/adamw.h"
#include "tiers/home_test_rig.h"
#include "tiers/state_blocks.h"

namespace strata {
namespace {

using tiers_testing::BitsEqual;
using tiers_testing::ElementsEqual;
using tiers_testing::HomeRig;
using tiers_testing::StatePlacement;

constexpr int kMicroBatches = 2;
constexpr int kSlots = 2;  // nvme buffers of each home: fewer than a step's 6 chunks

// What one unit's state is, in host memory.
struct UnitValues {
  std::vector<float> master, exp_avg, exp_avg_sq;
  std::vector<uint8_t> params;  // compute dtype
};

// A step's hyper-parameters; the second step also scales the gradients.
AdamParams StepParams(int step) {
  AdamParams hp;
  hp.lr = 1e-2f;
  hp.weight_decay = 0.1f;
  hp.step = step + 1;
  hp.grad_scale = step == 0 ? 1.0f : 0.5f;
  return hp;
}

// The reference: AdamW of `values` over `ranges` of the unit, tensor by tensor.
void ReferenceStep(const UnitLayout& layout, DType dtype, const AdamParams& hp,
                   const std::vector<ShardRange>& ranges, const std::vector<float>& grads,
                   UnitValues& values) {
  for (const TensorSpec& tensor : layout.tensors()) {
    AdamParams tensor_hp = hp;
    if (!tensor.weight_decay) tensor_hp.weight_decay = 0.0f;
    for (const ShardRange& range : ranges) {
      const size_t lo = std::max(range.begin, tensor.offset);
      const size_t hi = std::min(range.end, tensor.offset + tensor.numel);
      if (lo >= hi) continue;
      float* master = values.master.data() + lo;
      float* m = values.exp_avg.data() + lo;
      float* v = values.exp_avg_sq.data() + lo;
      if (dtype == DType::kF32) {
        cpu::AdamWReference(reinterpret_cast<float*>(values.params.data()) + lo, master,
                            grads.data() + lo, m, v, hi - lo, tensor_hp);
      } else {
        cpu::AdamWReference(reinterpret_cast<bf16*>(values.params.data()) + lo, master,
                            grads.data() + lo, m, v, hi - lo, tensor_hp);
      }
    }
  }
}

// The unit's elements that belong to a tensor (the rest are alignment gaps and padding).
std::vector<bool> TensorElements(const UnitLayout& layout, size_t n) {
  std::vector<bool> in_tensor(n, false);
  for (const TensorSpec& tensor : layout.tensors()) {
    for (size_t i = tensor.offset; i < tensor.offset + tensor.numel; ++i) in_tensor[i] = true;
  }
  return in_tensor;
}

// Initial state and gradients of a run, in host memory.
struct Inputs {
  std::vector<UnitValues> initial;  // [unit]
  // [step][micro-batch][unit]: fp32, representable in the compute dtype.
  std::vector<std::vector<std::vector<std::vector<float>>>> grads;

  Inputs(const HomeRig& rig, int steps) {
    const DType dtype = rig.dtype();
    for (int u = 0; u < static_cast<int>(rig.layouts().size()); ++u) {
      const size_t n = rig.layouts()[u].PaddedElements(1);
      UnitValues values;
      values.master = tiers_testing::Values(n, 100 + u, -1.0f, 1.0f, DType::kF32);
      values.exp_avg = tiers_testing::Values(n, 200 + u, -0.1f, 0.1f, DType::kF32);
      values.exp_avg_sq = tiers_testing::Values(n, 300 + u, 1e-6f, 1e-2f, DType::kF32);
      // Params: the master rounded to the compute dtype, zero in the gaps (as a model's
      // initialisation leaves them).
      std::vector<float> params(n, 0.0f);
      const std::vector<bool> in_tensor = TensorElements(rig.layouts()[u], n);
      for (size_t i = 0; i < n; ++i) {
        if (in_tensor[i]) params[i] = values.master[i];
      }
      values.params = tiers_testing::Encode(params, dtype);
      initial.push_back(std::move(values));
    }
    grads.resize(steps);
    for (int s = 0; s < steps; ++s) {
      grads[s].resize(kMicroBatches);
      for (int m = 0; m < kMicroBatches; ++m) {
        for (size_t u = 0; u < initial.size(); ++u) {
          grads[s][m].push_back(tiers_testing::Values(
              initial[u].master.size(), 1000 + 100 * s + 10 * m + u, -1.0f, 1.0f, dtype));
        }
      }
    }
  }

  // 0 + g1 + g2 in fp32: the sums the grad homes hold.
  std::vector<float> Sum(int step, int unit) const {
    std::vector<float> sum(initial[unit].master.size(), 0.0f);
    for (const auto& micro_batch : grads[step]) {
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += micro_batch[unit][i];
    }
    return sum;
  }

  // The reference state after `steps` whole-shard steps.
  std::vector<UnitValues> Expected(const HomeRig& rig, int steps) const {
    std::vector<UnitValues> expected = initial;
    for (int s = 0; s < steps; ++s) {
      for (size_t u = 0; u < expected.size(); ++u) {
        ReferenceStep(rig.layouts()[u], rig.dtype(), StepParams(s),
                      {{0, expected[u].master.size()}}, Sum(s, u), expected[u]);
      }
    }
    return expected;
  }
};

// Which homes a run uses.
struct HomeSetup {
  std::string name;
  StatePlacement placement;  // grads, optimizer, params
  bool hand_over = false;    // nvme grads and optimizer linked
  std::vector<UnitLayout> layouts;  // empty: the rig's
  bool int8 = false;                // 8-bit Adam states (the nvme optimizer home alone)
};

// The homes of one placement with their rig and NVMe tier, torn down in order.
struct Homes {
  std::unique_ptr<HomeRig> rig;
  std::unique_ptr<NvmeTier> nvme;  // the optimizer's (and the sums')
  std::unique_ptr<ParamHome> params;
  std::unique_ptr<GradHome> grads;
  std::unique_ptr<OptimizerHome> optimizer;
  SumHandOver* hand_over = nullptr;

  ~Homes() {
    if (rig) rig->SyncAll().IgnoreError();
    optimizer.reset();
    grads.reset();
    params.reset();
    nvme.reset();
  }

  // The shard of `unit` as one range.
  ShardRange Whole(int unit) const { return {0, rig->shard(unit)}; }

  Status StoreInitial(const Inputs& inputs) {
    for (int u = 0; u < rig->num_units(); ++u) {
      const UnitValues& values = inputs.initial[u];
      RETURN_IF_ERROR(optimizer->WriteState(u, values.master.data(), values.exp_avg.data(),
                                            values.exp_avg_sq.data()));
      RETURN_IF_ERROR(params->Write(u, values.params.data()));
    }
    return absl::OkStatus();
  }

  // The step's gradients on the device: [micro-batch][unit].
  StatusOr<std::vector<std::vector<Buffer>>> DeviceGrads(const Inputs& inputs, int step) {
    std::vector<std::vector<Buffer>> device(kMicroBatches);
    for (int m = 0; m < kMicroBatches; ++m) {
      for (int u = 0; u < rig->num_units(); ++u) {
        ASSIGN_OR_RETURN(Buffer buffer, rig->DeviceCopyOf(tiers_testing::Encode(
                                            inputs.grads[step][m][u], rig->dtype())));
        device[m].push_back(std::move(buffer));
      }
    }
    return device;
  }

  // Zero and the micro-batches' Adds; with the hand-over, the last micro-batch keeps its
  // sums and each unit is stepped right after its Add (as the early step does).
  Status AddGrads(const std::vector<std::vector<Buffer>>& device, int step) {
    RETURN_IF_ERROR(grads->Zero());
    for (int m = 0; m < kMicroBatches; ++m) {
      const bool last = m + 1 == kMicroBatches;
      if (last && hand_over != nullptr) RETURN_IF_ERROR(hand_over->KeepFinalSums(true));
      for (int u = 0; u < rig->num_units(); ++u) {
        RETURN_IF_ERROR(grads->Add(u, device[m][u].data(), rig->comm()).status());
        if (last && hand_over != nullptr) {
          RETURN_IF_ERROR(optimizer->Step(u, StepParams(step), Whole(u), 0, params->part(u)));
        }
      }
    }
    return absl::OkStatus();
  }

  // One step of every unit over its whole shard, waited for (not flushed: the NVMe
  // home's reads ahead carry over to the next step).
  Status RunStep(const Inputs& inputs, int step) {
    ASSIGN_OR_RETURN(auto device, DeviceGrads(inputs, step));
    RETURN_IF_ERROR(AddGrads(device, step));
    if (hand_over == nullptr) {
      for (int u = 0; u < rig->num_units(); ++u) {
        RETURN_IF_ERROR(optimizer->Step(u, StepParams(step), Whole(u), 0, params->part(u)));
      }
    } else {
      RETURN_IF_ERROR(hand_over->KeepFinalSums(false));
    }
    RETURN_IF_ERROR(optimizer->WaitSteps());
    return rig->SyncAll();
  }

  StatusOr<UnitValues> Read(int unit) {
    RETURN_IF_ERROR(rig->SyncAll());
    const size_t n = rig->shard(unit);
    const float poison = std::numeric_limits<float>::quiet_NaN();
    UnitValues values{std::vector<float>(n, poison), std::vector<float>(n, poison),
                      std::vector<float>(n, poison),
                      std::vector<uint8_t>(n * rig->element_bytes(), 0xAB)};
    RETURN_IF_ERROR(optimizer->ReadState(unit, values.master.data(), values.exp_avg.data(),
                                         values.exp_avg_sq.data()));
    RETURN_IF_ERROR(params->Read(unit, values.params.data()));
    return values;
  }
};

// Each run's NVMe tiers get a directory of their own (two stores over one swap file
// would truncate and remove each other's).
StatusOr<std::unique_ptr<Homes>> MakeHomes(DType dtype, const HomeSetup& setup) {
  std::string skip;
  const std::string dir = tiers_testing::NvmeTestDir(&skip);
  auto homes = std::make_unique<Homes>();
  ASSIGN_OR_RETURN(homes->rig, HomeRig::Create(dtype, setup.layouts));
  HomeRig& rig = *homes->rig;
  if (setup.int8) rig.UseInt8States();
  const StatePlacement& placement = setup.placement;
  RETURN_IF_ERROR(rig.AllocateState(placement));
  const auto chunks = rig.Chunks();
  const bool nvme = placement.optimizer == StateTier::kNvme ||
                    placement.grads == StateTier::kNvme || placement.params == StateTier::kNvme;
  if (nvme && !skip.empty()) return absl::FailedPreconditionError(skip);
  if (placement.optimizer == StateTier::kNvme) {
    std::vector<ExtentKind> kinds = {ExtentKind::kMaster, ExtentKind::kExpAvg,
                                     ExtentKind::kExpAvgSq};
    if (placement.grads == StateTier::kNvme) kinds.push_back(ExtentKind::kGrads);
    ASSIGN_OR_RETURN(homes->nvme, tiers_testing::MakeNvmeTier(dir, rig, chunks, kinds));
  }
  if (placement.params == StateTier::kNvme) {
    ASSIGN_OR_RETURN(auto tier,
                     tiers_testing::MakeNvmeTier(dir, rig, chunks, {ExtentKind::kParams}));
    ASSIGN_OR_RETURN(homes->params,
                     ParamHome::CreateNvme(rig.ctx(), std::move(tier), chunks, kSlots));
  } else {
    ASSIGN_OR_RETURN(
        homes->params,
        ParamHome::CreateResident(
            rig.ctx(), placement.params == StateTier::kDevice ? Tier::kDevice : Tier::kHost,
            rig.shards()));
  }
  if (placement.grads == StateTier::kNvme) {
    ASSIGN_OR_RETURN(homes->grads,
                     GradHome::CreateNvme(rig.ctx(), homes->nvme.get(), chunks, kSlots));
  } else {
    ASSIGN_OR_RETURN(homes->grads, GradHome::Create(rig.ctx(), placement.grads == StateTier::kDevice
                                                                   ? Tier::kDevice
                                                                   : Tier::kHost));
  }
  if (placement.optimizer == StateTier::kNvme) {
    homes->hand_over = setup.hand_over ? homes->grads->hand_over() : nullptr;
    if (setup.hand_over && homes->hand_over == nullptr) {
      return absl::InternalError("the hand-over needs the nvme grad home");
    }
    ASSIGN_OR_RETURN(homes->optimizer, OptimizerHome::CreateNvme(
                                           rig.ctx(), homes->grads.get(), homes->nvme.get(), chunks,
                                           homes->params.get(), kSlots, homes->hand_over));
  } else {
    ASSIGN_OR_RETURN(
        homes->optimizer,
        OptimizerHome::Create(
            rig.ctx(), placement.optimizer == StateTier::kDevice ? Tier::kDevice : Tier::kHost,
            homes->grads.get(), homes->params.get()));
  }
  return homes;
}

// Checks one unit's state against the reference, bit for bit, params included: in every
// home the alignment gaps and padding of the params stay zero (the NVMe home zeroes them in
// its slot buffer, which goes out whole).
void ExpectState(const UnitValues& expected, const UnitValues& actual, DType dtype) {
  EXPECT_TRUE(BitsEqual(expected.master, actual.master)) << "master";
  EXPECT_TRUE(BitsEqual(expected.exp_avg, actual.exp_avg)) << "exp_avg";
  EXPECT_TRUE(BitsEqual(expected.exp_avg_sq, actual.exp_avg_sq)) << "exp_avg_sq";
  ASSERT_EQ(expected.params.size(), actual.params.size());
  EXPECT_TRUE(ElementsEqual(expected.params.data(), actual.params.data(),
                            expected.master.size(), dtype))
      << "params";
}

class OptimizerHomeTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { tiers_testing::NvmeTestDir(&nvme_skip_); }

  // Runs `steps` steps of `setup` from the inputs and checks every unit against the
  // reference; returns the homes for further checks.
  std::unique_ptr<Homes> RunAndCheck(const HomeSetup& setup, int steps) {
    SCOPED_TRACE(setup.name);
    auto homes = MakeHomes(GetParam(), setup);
    EXPECT_TRUE(homes.ok()) << homes.status();
    if (!homes.ok()) return nullptr;
    Homes& h = **homes;
    const Inputs inputs(*h.rig, steps);
    Status status = h.StoreInitial(inputs);
    for (int s = 0; s < steps && status.ok(); ++s) status = h.RunStep(inputs, s);
    EXPECT_TRUE(status.ok()) << status;
    if (!status.ok()) return nullptr;
    const std::vector<UnitValues> expected = inputs.Expected(*h.rig, steps);
    for (int u = 0; u < h.rig->num_units(); ++u) {
      SCOPED_TRACE(h.rig->layouts()[u].name());
      StatusOr<UnitValues> actual = h.Read(u);
      EXPECT_TRUE(actual.ok()) << actual.status();
      if (actual.ok()) ExpectState(expected[u], *actual, GetParam());
    }
    return std::move(*homes);
  }

  std::string nvme_skip_;  // why NVMe cannot be tested here, or empty
};

TEST_P(OptimizerHomeTest, DeviceHomeStepsAsTheReference) {
  for (int steps : {1, 2}) {
    SCOPED_TRACE(absl::StrCat(steps, " steps"));
    auto homes = RunAndCheck(
        {"device", {StateTier::kDevice, StateTier::kDevice, StateTier::kDevice}}, steps);
    ASSERT_NE(homes, nullptr);
    EXPECT_EQ(homes->optimizer->tier(), Tier::kDevice);
    EXPECT_EQ(homes->optimizer->staged(), nullptr);
  }
}

TEST_P(OptimizerHomeTest, HostHomeStepsAsTheReference) {
  const HomeSetup setups[] = {
      {"host grads, device params", {StateTier::kHost, StateTier::kHost, StateTier::kDevice}},
      {"device grads, device params", {StateTier::kDevice, StateTier::kHost, StateTier::kDevice}},
      {"host grads, host params", {StateTier::kHost, StateTier::kHost, StateTier::kHost}},
      {"device grads, host params", {StateTier::kDevice, StateTier::kHost, StateTier::kHost}},
  };
  for (const HomeSetup& setup : setups) {
    for (int steps : {1, 2}) {
      SCOPED_TRACE(absl::StrCat(steps, " steps"));
      auto homes = RunAndCheck(setup, steps);
      ASSERT_NE(homes, nullptr) << setup.name;
      EXPECT_EQ(homes->optimizer->tier(), Tier::kHost);
      // Staged updates need the staging buffers of device params.
      EXPECT_EQ(homes->optimizer->staged() != nullptr,
                setup.placement.params == StateTier::kDevice);
    }
  }
}

TEST_P(OptimizerHomeTest, NvmeHomeStepsAsTheReference) {
  if (!nvme_skip_.empty()) GTEST_SKIP() << nvme_skip_;
  // The sums reach a sub-step in four ways (copied from the device, read in place on the
  // host, read from the tier, handed over) and the params leave it in three (copied to
  // the device, written in place on the host, written back to nvme): every way of each,
  // in eight runs rather than the twelve of every pair.
  constexpr StateTier kDevice = StateTier::kDevice, kHost = StateTier::kHost,
                      kNvme = StateTier::kNvme;
  const HomeSetup setups[] = {
      {"device grads, device params", {kDevice, kNvme, kDevice}},
      {"device grads, host params", {kDevice, kNvme, kHost}},
      {"host grads, host params", {kHost, kNvme, kHost}},
      {"host grads, nvme params", {kHost, kNvme, kNvme}},
      {"nvme grads, device params", {kNvme, kNvme, kDevice}},
      {"nvme grads, nvme params", {kNvme, kNvme, kNvme}},
      {"nvme grads handed over, device params", {kNvme, kNvme, kDevice}, true},
      {"nvme grads handed over, nvme params", {kNvme, kNvme, kNvme}, true},
  };
  for (const HomeSetup& setup : setups) {
    auto homes = RunAndCheck(setup, 2);
    ASSERT_NE(homes, nullptr) << setup.name;
    EXPECT_EQ(homes->optimizer->tier(), Tier::kHost);
    EXPECT_EQ(homes->optimizer->staged(), nullptr);
  }
}

// The hand-over gives what reading the sums from the tier gives, and the handed-over sums
// never reach the disk: per step, the last kSlots chunks of each unit (the slots the next
// unit's Add has not taken yet when the optimizer steps it).
TEST_P(OptimizerHomeTest, NvmeHandOverGivesTheStateOfTheTier) {
  if (!nvme_skip_.empty()) GTEST_SKIP() << nvme_skip_;
  const int steps = 2;
  const StatePlacement placement = {StateTier::kNvme, StateTier::kNvme, StateTier::kDevice};
  auto from_tier = RunAndCheck({"sums from the tier", placement, false}, steps);
  ASSERT_NE(from_tier, nullptr);
  auto handed = RunAndCheck({"sums handed over", placement, true}, steps);
  ASSERT_NE(handed, nullptr);
  uint64_t kept_bytes = 0;
  const auto chunks = handed->rig->Chunks();
  for (const auto& unit_chunks : chunks) {
    for (size_t k = unit_chunks.size() - kSlots; k < unit_chunks.size(); ++k) {
      kept_bytes += handed->nvme->PaddedBytes(unit_chunks[k].id, ExtentKind::kGrads);
    }
  }
  ASSERT_OK(from_tier->nvme->Drain());
  ASSERT_OK(handed->nvme->Drain());
  EXPECT_EQ(from_tier->nvme->bytes_written() - handed->nvme->bytes_written(), steps * kept_bytes);
  for (int u = 0; u < handed->rig->num_units(); ++u) {
    ASSERT_OK_AND_ASSIGN(UnitValues a, from_tier->Read(u));
    ASSERT_OK_AND_ASSIGN(UnitValues b, handed->Read(u));
    ExpectState(a, b, GetParam());
  }
}

TEST_P(OptimizerHomeTest, StoreAndLoadStateRoundTrip) {
  std::vector<HomeSetup> setups = {
      {"device", {StateTier::kDevice, StateTier::kDevice, StateTier::kDevice}},
      {"host", {StateTier::kHost, StateTier::kHost, StateTier::kDevice}},
  };
  if (nvme_skip_.empty()) {
    setups.push_back({"nvme", {StateTier::kDevice, StateTier::kNvme, StateTier::kDevice}});
  }
  for (const HomeSetup& setup : setups) {
    SCOPED_TRACE(setup.name);
    ASSERT_OK_AND_ASSIGN(auto homes, MakeHomes(GetParam(), setup));
    const Inputs inputs(*homes->rig, 0);
    ASSERT_OK(homes->StoreInitial(inputs));
    for (int u = 0; u < homes->rig->num_units(); ++u) {
      ASSERT_OK_AND_ASSIGN(UnitValues loaded, homes->Read(u));
      ExpectState(inputs.initial[u], loaded, GetParam());
    }
    // Null moments store zeros; a null output is skipped.
    const int u = 1;
    ASSERT_OK(
        homes->optimizer->WriteState(u, inputs.initial[0].master.data(), nullptr, nullptr));
    ASSERT_OK_AND_ASSIGN(UnitValues loaded, homes->Read(u));
    const size_t n = homes->rig->shard(u);
    EXPECT_TRUE(BitsEqual(inputs.initial[0].master.data(), loaded.master.data(), n));
    const std::vector<float> zeros(n, 0.0f);
    EXPECT_TRUE(BitsEqual(zeros, loaded.exp_avg));
    EXPECT_TRUE(BitsEqual(zeros, loaded.exp_avg_sq));
    std::vector<float> master(n, -1.0f);
    ASSERT_OK(homes->optimizer->ReadState(u, master.data(), nullptr, nullptr));
    EXPECT_TRUE(BitsEqual(inputs.initial[0].master.data(), master.data(), n));
    // Zeroed moments stay zero through another store without them; a step makes them
    // nonzero, and the next store without moments zeroes them again (a memory home skips
    // the zeroing only while no step has run since).
    ASSERT_OK(homes->optimizer->WriteState(u, inputs.initial[1].master.data(), nullptr, nullptr));
    ASSERT_OK_AND_ASSIGN(loaded, homes->Read(u));
    EXPECT_TRUE(BitsEqual(zeros, loaded.exp_avg));
    EXPECT_TRUE(BitsEqual(zeros, loaded.exp_avg_sq));
    const Inputs stepped(*homes->rig, 1);
    ASSERT_OK(homes->RunStep(stepped, 0));
    ASSERT_OK_AND_ASSIGN(loaded, homes->Read(u));
    EXPECT_FALSE(BitsEqual(zeros, loaded.exp_avg));
    EXPECT_FALSE(BitsEqual(zeros, loaded.exp_avg_sq));
    ASSERT_OK(homes->optimizer->WriteState(u, inputs.initial[0].master.data(), nullptr, nullptr));
    ASSERT_OK_AND_ASSIGN(loaded, homes->Read(u));
    EXPECT_TRUE(BitsEqual(inputs.initial[0].master.data(), loaded.master.data(), n));
    EXPECT_TRUE(BitsEqual(zeros, loaded.exp_avg));
    EXPECT_TRUE(BitsEqual(zeros, loaded.exp_avg_sq));
  }
}

// A unit with runs of both kinds for 8-bit states: blocks [0, 6144) 8-bit with decay, the
// block of a small tensor in fp32, [8192, 12288) 8-bit without decay (padding at its end).
UnitLayout Int8Unit() {
  UnitLayout unit("int8 unit");
  unit.Add("w", {64, 100}, /*weight_decay=*/true, InitKind::kNormal, 0.02f);  // [0, 6400)
  unit.Add("b", {50}, false, InitKind::kZeros);                              // [6400, 6450)
  unit.Add("w2", {40, 128}, false, InitKind::kNormal, 0.02f);               // [6464, 11584)
  return unit;
}

// The reference 8-bit step of a unit over its stored moments (`m`, `v`: the unit's forms):
// quantized runs by the scalar 8-bit Adam, fp32 runs tensor by tensor by the fp32 reference.
void ReferenceStep8bit(const UnitLayout& layout, const std::vector<StateRun>& runs, DType dtype,
                       const AdamParams& hp, const std::vector<float>& grads, UnitValues& values,
                       std::vector<uint8_t>& m, std::vector<uint8_t>& v) {
  const MomentSections sections = SectionsOf(runs);
  float* m_fp32 = reinterpret_cast<float*>(m.data());
  float* v_fp32 = reinterpret_cast<float*>(v.data());
  float* m_absmax = reinterpret_cast<float*>(m.data() + sections.absmax_offset());
  float* v_absmax = reinterpret_cast<float*>(v.data() + sections.absmax_offset());
  for (const StateRun& run : runs) {
    const size_t n = run.end - run.begin;
    if (run.quantized) {
      AdamParams run_hp = hp;
      if (!run.weight_decay) run_hp.weight_decay = 0.0f;
      uint8_t* m_codes = m.data() + sections.codes_offset() + run.slot;
      uint8_t* v_codes = v.data() + sections.codes_offset() + run.slot;
      const size_t block = run.slot / kAdamStateBlock;
      float* master = values.master.data() + run.begin;
      const float* grad = grads.data() + run.begin;
      if (dtype == DType::kF32) {
        cpu::Adam8bitReference(reinterpret_cast<float*>(values.params.data()) + run.begin, master,
                               grad, m_codes, m_absmax + block, v_codes, v_absmax + block, n,
                               run_hp);
      } else {
        cpu::Adam8bitReference(reinterpret_cast<bf16*>(values.params.data()) + run.begin, master,
                               grad, m_codes, m_absmax + block, v_codes, v_absmax + block, n,
                               run_hp);
      }
      continue;
    }
    for (const TensorSpec& tensor : layout.tensors()) {
      const size_t lo = std::max(run.begin, tensor.offset);
      const size_t hi = std::min(run.end, tensor.offset + tensor.numel);
      if (lo >= hi) continue;
      AdamParams tensor_hp = hp;
      if (!tensor.weight_decay) tensor_hp.weight_decay = 0.0f;
      const size_t at = run.slot + (lo - run.begin);
      if (dtype == DType::kF32) {
        cpu::AdamWReference(reinterpret_cast<float*>(values.params.data()) + lo,
                            values.master.data() + lo, grads.data() + lo, m_fp32 + at,
                            v_fp32 + at, hi - lo, tensor_hp);
      } else {
        cpu::AdamWReference(reinterpret_cast<bf16*>(values.params.data()) + lo,
                            values.master.data() + lo, grads.data() + lo, m_fp32 + at,
                            v_fp32 + at, hi - lo, tensor_hp);
      }
    }
  }
}

// The NVMe home with 8-bit states (chunks of one block, the moment extents in the chunks'
// stored forms): WriteState quantizes and ReadState dequantizes (MomentFromFp32 /
// MomentToFp32 over the unit's runs), null moments store the form of zeros, WriteMoment and
// ReadMoment move the unit's form exactly, and two steps (grads on the device, the host and
// nvme) equal the reference 8-bit step bit for bit: master, params and both moments' bytes.
TEST_P(OptimizerHomeTest, NvmeHomeWithInt8States) {
  if (!nvme_skip_.empty()) GTEST_SKIP() << nvme_skip_;
  const DType dtype = GetParam();
  const StateTier kDevice = StateTier::kDevice, kHost = StateTier::kHost,
                  kNvme = StateTier::kNvme;
  const std::vector<HomeSetup> setups = {
      {"device grads", {kDevice, kNvme, kDevice}, false, {Int8Unit()}, true},
      {"host grads, host params", {kHost, kNvme, kHost}, false, {Int8Unit()}, true},
      {"nvme grads handed over, nvme params", {kNvme, kNvme, kNvme}, true, {Int8Unit()}, true},
  };
  for (const HomeSetup& setup : setups) {
    SCOPED_TRACE(setup.name);
    ASSERT_OK_AND_ASSIGN(auto homes, MakeHomes(dtype, setup));
    HomeRig& rig = *homes->rig;
    const std::vector<StateRun>& runs = rig.units()[0].state_runs;
    ASSERT_EQ(runs.size(), 3u);
    const MomentSections sections = SectionsOf(runs);
    const size_t n = rig.shard(0);
    const int steps = 2;
    // As a model's state: zero in the gaps and padding, where gradients are zero too (an
    // 8-bit step covers whole blocks, padding included, and leaves zeros there).
    Inputs inputs(rig, steps);
    const std::vector<bool> in_tensor = TensorElements(rig.layouts()[0], n);
    for (size_t i = 0; i < n; ++i) {
      if (in_tensor[i]) continue;
      UnitValues& values = inputs.initial[0];
      values.master[i] = values.exp_avg[i] = values.exp_avg_sq[i] = 0.0f;
      for (auto& micro_batches : inputs.grads) {
        for (auto& units : micro_batches) units[0][i] = 0.0f;
      }
    }
    const UnitValues& initial = inputs.initial[0];
    // The stored forms of the initial moments, and what they read back as.
    std::vector<uint8_t> m(sections.bytes()), v(sections.bytes());
    MomentFromFp32(runs, true, initial.exp_avg.data(), m.data());
    MomentFromFp32(runs, false, initial.exp_avg_sq.data(), v.data());
    ASSERT_OK(homes->StoreInitial(inputs));
    ASSERT_OK_AND_ASSIGN(UnitValues loaded, homes->Read(0));
    std::vector<float> m_values(n), v_values(n);
    MomentToFp32(runs, true, m.data(), m_values.data());
    MomentToFp32(runs, false, v.data(), v_values.data());
    EXPECT_TRUE(BitsEqual(initial.master, loaded.master));
    EXPECT_TRUE(BitsEqual(m_values, loaded.exp_avg));
    EXPECT_TRUE(BitsEqual(v_values, loaded.exp_avg_sq));
    EXPECT_FALSE(BitsEqual(initial.exp_avg, loaded.exp_avg)) << "the moments were not quantized";
    std::vector<uint8_t> stored(sections.bytes(), 0xAB);
    ASSERT_OK(homes->optimizer->ReadMoment(0, 0, stored.data()));
    EXPECT_EQ(stored, m);
    ASSERT_OK(homes->optimizer->ReadMoment(0, 1, stored.data()));
    EXPECT_EQ(stored, v);
    // Null moments: the form of zeros.
    ASSERT_OK(homes->optimizer->WriteState(0, initial.master.data(), nullptr, nullptr));
    std::vector<uint8_t> zero(sections.bytes());
    for (int moment : {0, 1}) {
      ZeroMoment(runs, moment == 0, zero.data());
      ASSERT_OK(homes->optimizer->ReadMoment(0, moment, stored.data()));
      EXPECT_EQ(stored, zero) << moment;
    }
    // WriteMoment then ReadMoment: the same bytes (m's form given as v's too: no conversion).
    ASSERT_OK(homes->optimizer->WriteMoment(0, 0, m.data()));
    ASSERT_OK(homes->optimizer->WriteMoment(0, 1, v.data()));
    ASSERT_OK(homes->optimizer->ReadMoment(0, 0, stored.data()));
    EXPECT_EQ(stored, m);
    ASSERT_OK(homes->optimizer->ReadMoment(0, 1, stored.data()));
    EXPECT_EQ(stored, v);
    // Two steps against the reference from the stored initial state.
    UnitValues expected = initial;
    for (int s = 0; s < steps; ++s) {
      ASSERT_OK(homes->RunStep(inputs, s));
      ReferenceStep8bit(rig.layouts()[0], runs, dtype, StepParams(s), inputs.Sum(s, 0), expected,
                        m, v);
    }
    ASSERT_OK_AND_ASSIGN(loaded, homes->Read(0));
    EXPECT_TRUE(BitsEqual(expected.master, loaded.master)) << "master";
    EXPECT_TRUE(ElementsEqual(expected.params.data(), loaded.params.data(), n, dtype))
        << "params";
    ASSERT_OK(homes->optimizer->ReadMoment(0, 0, stored.data()));
    EXPECT_EQ(stored, m) << "exp_avg";
    ASSERT_OK(homes->optimizer->ReadMoment(0, 1, stored.data()));
    EXPECT_EQ(stored, v) << "exp_avg_sq";
  }
}

TEST_P(OptimizerHomeTest, NvmeHomeRefusesToStoreWithoutAMaster) {
  if (!nvme_skip_.empty()) GTEST_SKIP() << nvme_skip_;
  ASSERT_OK_AND_ASSIGN(
      auto homes,
      MakeHomes(GetParam(), {"nvme", {StateTier::kDevice, StateTier::kNvme, StateTier::kDevice}}));
  const Status status = homes->optimizer->WriteState(0, nullptr, nullptr, nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("needs a master"), std::string::npos) << status;
}

// The host home with host grads and device params (the delayed update's placement).
class StagedOptimizerHomeTest : public OptimizerHomeTest {
 protected:
  void SetUp() override {
    OptimizerHomeTest::SetUp();
    auto homes =
        MakeHomes(GetParam(), {"host", {StateTier::kHost, StateTier::kHost, StateTier::kDevice}});
    ASSERT_TRUE(homes.ok()) << homes.status();
    homes_ = std::move(*homes);
    inputs_ = std::make_unique<Inputs>(*homes_->rig, 1);
    ASSERT_OK(homes_->StoreInitial(*inputs_));
    ASSERT_OK_AND_ASSIGN(auto device, homes_->DeviceGrads(*inputs_, 0));
    ASSERT_OK(homes_->AddGrads(device, 0));
    ASSERT_OK(homes_->rig->SyncAll());
    staged_ = homes_->optimizer->staged();
    ASSERT_NE(staged_, nullptr);
  }
  void TearDown() override { homes_.reset(); }

  // The reference after one step over `ranges` of every unit.
  std::vector<UnitValues> Expected(const std::vector<std::vector<ShardRange>>& ranges) const {
    std::vector<UnitValues> expected = inputs_->initial;
    for (size_t u = 0; u < expected.size(); ++u) {
      ReferenceStep(homes_->rig->layouts()[u], GetParam(), StepParams(0), ranges[u],
                    inputs_->Sum(0, u), expected[u]);
    }
    return expected;
  }

  std::unique_ptr<Homes> homes_;
  std::unique_ptr<Inputs> inputs_;
  StagedOptimizerHome* staged_ = nullptr;
};

TEST_P(StagedOptimizerHomeTest, StagedParamsAppearOnlyWhenPublished) {
  Homes& h = *homes_;
  std::vector<std::vector<ShardRange>> whole;
  for (int u = 0; u < h.rig->num_units(); ++u) {
    ASSERT_OK(staged_->StepStaged(u, StepParams(0), h.Whole(u), 0));
    whole.push_back({h.Whole(u)});
  }
  ASSERT_OK(h.optimizer->WaitSteps());
  const std::vector<UnitValues> expected = Expected(whole);
  for (int u = 0; u < h.rig->num_units(); ++u) {
    SCOPED_TRACE(h.rig->layouts()[u].name());
    ASSERT_OK_AND_ASSIGN(UnitValues stepped, h.Read(u));
    // The state is stepped; the params are still the old ones.
    UnitValues before_publish = expected[u];
    before_publish.params = inputs_->initial[u].params;
    ExpectState(before_publish, stepped, GetParam());
  }
  for (int u = 0; u < h.rig->num_units(); ++u) {
    ASSERT_OK(staged_->PublishStaged(u, h.Whole(u), h.params->part(u), h.rig->compute()));
  }
  for (int u = 0; u < h.rig->num_units(); ++u) {
    SCOPED_TRACE(h.rig->layouts()[u].name());
    ASSERT_OK_AND_ASSIGN(UnitValues published, h.Read(u));
    ExpectState(expected[u], published, GetParam());
  }
}

// Two disjoint ranges with odd ends (they cut tensors), the early part of a tied split.
std::vector<ShardRange> EarlyRanges(size_t n) { return {{0, 333}, {n / 2 + 17, 3 * n / 4 + 5}}; }
std::vector<ShardRange> LateRanges(size_t n) { return {{333, n / 2 + 17}, {3 * n / 4 + 5, n}}; }

TEST_P(StagedOptimizerHomeTest, StepRangesStepsOnlyItsRanges) {
  Homes& h = *homes_;
  std::vector<std::vector<ShardRange>> early;
  for (int u = 0; u < h.rig->num_units(); ++u) {
    early.push_back(EarlyRanges(h.rig->shard(u)));
    ASSERT_OK(staged_->StepRanges(u, StepParams(0), early[u], 0, h.params->part(u)));
  }
  const std::vector<UnitValues> expected = Expected(early);
  for (int u = 0; u < h.rig->num_units(); ++u) {
    SCOPED_TRACE(h.rig->layouts()[u].name());
    ASSERT_OK_AND_ASSIGN(UnitValues actual, h.Read(u));
    ExpectState(expected[u], actual, GetParam());
  }
}

TEST_P(StagedOptimizerHomeTest, StepRangesInTwoPartsEqualsOneStep) {
  Homes& h = *homes_;
  for (int u = 0; u < h.rig->num_units(); ++u) {
    const size_t n = h.rig->shard(u);
    ASSERT_OK(staged_->StepRanges(u, StepParams(0), EarlyRanges(n), 0, h.params->part(u)));
    ASSERT_OK(staged_->StepRanges(u, StepParams(0), LateRanges(n), 0, h.params->part(u)));
  }
  std::vector<UnitValues> two_parts;
  for (int u = 0; u < h.rig->num_units(); ++u) {
    ASSERT_OK_AND_ASSIGN(UnitValues values, h.Read(u));
    two_parts.push_back(std::move(values));
  }
  // The same step as one Step, from the same start.
  ASSERT_OK(h.StoreInitial(*inputs_));
  for (int u = 0; u < h.rig->num_units(); ++u) {
    ASSERT_OK(h.optimizer->Step(u, StepParams(0), h.Whole(u), 0, h.params->part(u)));
  }
  std::vector<std::vector<ShardRange>> whole;
  for (int u = 0; u < h.rig->num_units(); ++u) whole.push_back({h.Whole(u)});
  const std::vector<UnitValues> expected = Expected(whole);
  for (int u = 0; u < h.rig->num_units(); ++u) {
    SCOPED_TRACE(h.rig->layouts()[u].name());
    ASSERT_OK_AND_ASSIGN(UnitValues one_step, h.Read(u));
    ExpectState(expected[u], one_step, GetParam());
    ExpectState(one_step, two_parts[u], GetParam());
  }
}

TEST_P(OptimizerHomeTest, DeviceHomeRefusesStateOffTheDevice) {
  // Host sums, device params.
  {
    ASSERT_OK_AND_ASSIGN(auto rig, HomeRig::Create(GetParam()));
    ASSERT_OK(
        rig->AllocateState({StateTier::kHost, StateTier::kDevice, StateTier::kDevice}));
    ASSERT_OK_AND_ASSIGN(auto grads, GradHome::Create(rig->ctx(), Tier::kHost));
    ASSERT_OK_AND_ASSIGN(
        auto params, ParamHome::CreateResident(rig->ctx(), Tier::kDevice, rig->shards()));
    auto home = OptimizerHome::Create(rig->ctx(), Tier::kDevice, grads.get(), params.get());
    ASSERT_FALSE(home.ok());
    EXPECT_EQ(home.status().code(), absl::StatusCode::kInvalidArgument) << home.status();
    EXPECT_NE(home.status().message().find("zero.grad_tier"), std::string::npos) << home.status();
  }
  // Device sums, host params.
  {
    ASSERT_OK_AND_ASSIGN(auto rig, HomeRig::Create(GetParam()));
    ASSERT_OK(
        rig->AllocateState({StateTier::kDevice, StateTier::kDevice, StateTier::kHost}));
    ASSERT_OK_AND_ASSIGN(auto grads, GradHome::Create(rig->ctx(), Tier::kDevice));
    ASSERT_OK_AND_ASSIGN(auto params,
                                ParamHome::CreateResident(rig->ctx(), Tier::kHost, rig->shards()));
    auto home = OptimizerHome::Create(rig->ctx(), Tier::kDevice, grads.get(), params.get());
    ASSERT_FALSE(home.ok());
    EXPECT_EQ(home.status().code(), absl::StatusCode::kInvalidArgument) << home.status();
    EXPECT_NE(home.status().message().find("zero.param_tier"), std::string::npos) << home.status();
    auto no_grads = OptimizerHome::Create(rig->ctx(), Tier::kHost, nullptr, params.get());
    ASSERT_FALSE(no_grads.ok());
    EXPECT_EQ(no_grads.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST_P(OptimizerHomeTest, NvmeHomeRefusesBadSetUps) {
  if (!nvme_skip_.empty()) GTEST_SKIP() << nvme_skip_;
  ASSERT_OK_AND_ASSIGN(
      auto homes,
      MakeHomes(GetParam(), {"nvme", {StateTier::kDevice, StateTier::kNvme, StateTier::kDevice}}));
  Homes& h = *homes;
  const auto chunks = h.rig->Chunks();
  const struct {
    const char* what;
    std::vector<std::vector<NvmeChunk>> chunks;
    int slots;
    const char* message;
  } cases[] = {{"no slots", chunks, 0, "slots and every unit's chunks"},
               {"a unit's chunks missing", {chunks[0]}, kSlots, "nvme chunks for 1 units"},
               {"a unit without chunks", {chunks[0], {}}, kSlots, "cover 0 of"}};
  for (const auto& c : cases) {
    auto home = OptimizerHome::CreateNvme(h.rig->ctx(), h.grads.get(), h.nvme.get(), c.chunks,
                                          h.params.get(), c.slots, nullptr);
    EXPECT_THAT(home.status(), ::strata::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                                           ::testing::HasSubstr(c.message)))
        << c.what;
  }
  // A sub-step must cover the whole owned shard.
  const Status partial =
      h.optimizer->Step(0, StepParams(0), {0, h.rig->shard(0) / 2}, 0, h.params->part(0));
  EXPECT_EQ(partial.code(), absl::StatusCode::kInternal) << partial;
  EXPECT_NE(partial.message().find("one owned shard"), std::string::npos) << partial;
}

INSTANTIATE_TEST_SUITE_P(DTypes, OptimizerHomeTest, ::testing::Values(DType::kF32, DType::kBF16),
                         tiers_testing::DTypeParamName);
INSTANTIATE_TEST_SUITE_P(DTypes, StagedOptimizerHomeTest,
                         ::testing::Values(DType::kF32, DType::kBF16),
                         tiers_testing::DTypeParamName);

}  // namespace
}  // namespace strata
