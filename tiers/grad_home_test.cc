// The gradient homes (grad_home.h) against sums the test computes itself: for the device,
// host and NVMe homes, in fp32 and bf16, two Adds of known gradients leave 0 + g1 + g2
// (each g converted to fp32, summed in fp32 in that order) bit for bit, Zero starts the
// sums over, and SquaredNorm agrees with a double-precision sum of squares. The host
// home's ranged adds equal one Add bit for bit; the NVMe home's hand-over keeps final
// sums in memory and refuses to read back sums it never stored. Capabilities are null
// where a home has none, and bad set-ups are refused with errors that say what is wrong.
#include "tiers/grad_home.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tiers/home_test_rig.h"

namespace strata {
namespace {

using tiers_testing::BitsEqual;
using tiers_testing::HomeRig;
using tiers_testing::StatePlacement;

// Norms: the kernels sum the squares in fp64 (in their own order) and round once to
// fp32 (the NVMe home rounds once per chunk, then once more): a few fp32 ulps at most,
// far inside this relative tolerance.
constexpr double kNormRelativeTolerance = 1e-6;
constexpr int kMicroBatches = 2;

// The gradients of one step: per micro-batch and unit, the values (fp32, representable
// in the compute dtype) and a device copy in the compute dtype.
struct StepGradients {
  std::vector<std::vector<std::vector<float>>> values;  // [micro-batch][unit]
  std::vector<std::vector<Buffer>> device;              // [micro-batch][unit]

  // 0 + g1 + g2 + ... in fp32, in micro-batch order: what the homes must hold.
  std::vector<float> Sum(int unit) const {
    std::vector<float> sum(values[0][unit].size(), 0.0f);
    for (const auto& micro_batch : values) {
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += micro_batch[unit][i];
    }
    return sum;
  }
};

StatusOr<StepGradients> MakeGradients(HomeRig& rig, int micro_batches, uint64_t seed) {
  StepGradients gradients;
  gradients.values.resize(micro_batches);
  gradients.device.resize(micro_batches);
  for (int m = 0; m < micro_batches; ++m) {
    for (int u = 0; u < rig.num_units(); ++u) {
      gradients.values[m].push_back(
          tiers_testing::Values(rig.shard(u), seed * 100 + m * 10 + u, -2.0f, 2.0f, rig.dtype()));
      ASSIGN_OR_RETURN(Buffer buffer, rig.DeviceCopyOf(tiers_testing::Encode(
                                          gradients.values[m].back(), rig.dtype())));
      gradients.device[m].push_back(std::move(buffer));
    }
  }
  return gradients;
}

double SquaredNormOf(const std::vector<float>& values, size_t first, size_t n) {
  double sum = 0.0;
  for (size_t i = first; i < first + n; ++i) sum += double{values[i]} * values[i];
  return sum;
}

// The home's SquaredNorm of [first, first + n) of `unit`, read back.
StatusOr<float> NormOf(HomeRig& rig, GradHome& home, int unit, size_t first, size_t n) {
  ASSIGN_OR_RETURN(Buffer out, rig.DeviceBuffer(sizeof(float)));
  RETURN_IF_ERROR(home.SquaredNorm(unit, first, n, out.as<float>()));
  RETURN_IF_ERROR(rig.SyncAll());
  float value = 0.0f;
  RETURN_IF_ERROR(rig.CopyAndWait(&value, out.data(), sizeof(float)));
  return value;
}

void ExpectNear(double expected, float actual, const std::string& what) {
  EXPECT_LE(std::fabs(actual - expected), kNormRelativeTolerance * expected)
      << what << ": expected " << expected << ", got " << actual;
}

// Zero, then the step's Adds (micro-batch by micro-batch, unit by unit, produced on comm).
Status AddStep(HomeRig& rig, GradHome& home, const StepGradients& gradients) {
  RETURN_IF_ERROR(home.Zero());
  for (const auto& micro_batch : gradients.device) {
    for (int u = 0; u < rig.num_units(); ++u) {
      RETURN_IF_ERROR(home.Add(u, micro_batch[u].data(), rig.comm()).status());
    }
  }
  return rig.SyncAll();
}

// Two steps (two Adds, then one with other gradients): after each, the sums are exactly
// the test's, and the norm (of the whole shard; with `sub_ranges` also of an odd range
// inside it) is within the tolerance.
void CheckSumsOverTwoSteps(HomeRig& rig, GradHome& home, bool sub_ranges) {
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    ASSERT_OK_AND_ASSIGN(StepGradients gradients,
                                MakeGradients(rig, step == 0 ? kMicroBatches : 1, step + 1));
    ASSERT_OK(AddStep(rig, home, gradients));
    for (int u = 0; u < rig.num_units(); ++u) {
      SCOPED_TRACE(rig.layouts()[u].name());
      const std::vector<float> expected = gradients.Sum(u);
      std::vector<float> sums(rig.shard(u), -1.0f);
      ASSERT_OK(home.ReadSums(u, sums.data()));
      EXPECT_TRUE(BitsEqual(expected, sums));
      ASSERT_OK_AND_ASSIGN(float norm, NormOf(rig, home, u, 0, rig.shard(u)));
      ExpectNear(SquaredNormOf(expected, 0, rig.shard(u)), norm, "whole shard");
      if (sub_ranges) {
        const size_t first = 37, n = rig.shard(u) - 1000;
        ASSERT_OK_AND_ASSIGN(float part, NormOf(rig, home, u, first, n));
        ExpectNear(SquaredNormOf(expected, first, n), part, "[37, shard - 963)");
      }
    }
  }
}

class GradHomeTest : public ::testing::TestWithParam<DType> {
 protected:
  // A rig with the state of `placement` allocated.
  std::unique_ptr<HomeRig> MakeRig(StatePlacement placement) {
    auto rig = HomeRig::Create(GetParam());
    EXPECT_TRUE(rig.ok()) << rig.status();
    if (!rig.ok()) return nullptr;
    Status status = (*rig)->AllocateState(placement);
    EXPECT_TRUE(status.ok()) << status;
    return status.ok() ? std::move(*rig) : nullptr;
  }
};

TEST_P(GradHomeTest, DeviceHomeSumsAndNorms) {
  auto rig = MakeRig({StateTier::kDevice, StateTier::kDevice, StateTier::kDevice});
  ASSERT_NE(rig, nullptr);
  ASSERT_OK_AND_ASSIGN(auto home, GradHome::Create(rig->ctx(), Tier::kDevice));
  EXPECT_EQ(home->tier(), StateTier::kDevice);
  CheckSumsOverTwoSteps(*rig, *home, /*sub_ranges=*/true);
}

TEST_P(GradHomeTest, HostHomeSumsAndNorms) {
  auto rig = MakeRig({StateTier::kHost, StateTier::kHost, StateTier::kDevice});
  ASSERT_NE(rig, nullptr);
  ASSERT_OK_AND_ASSIGN(auto home, GradHome::Create(rig->ctx(), Tier::kHost));
  EXPECT_EQ(home->tier(), StateTier::kHost);
  CheckSumsOverTwoSteps(*rig, *home, /*sub_ranges=*/true);
}

// The element ranges of a unit not in `ranges` (sorted, disjoint), in order.
std::vector<ShardRange> Complement(const std::vector<ShardRange>& ranges, size_t n) {
  std::vector<ShardRange> rest;
  size_t at = 0;
  for (const ShardRange& range : ranges) {
    if (range.begin > at) rest.push_back({at, range.begin});
    at = range.end;
  }
  if (at < n) rest.push_back({at, n});
  return rest;
}

// Two disjoint ranges with odd ends, the early part of a unit's split.
std::vector<ShardRange> EarlyRanges(size_t n) { return {{0, 333}, {n / 2 + 17, 3 * n / 4 + 5}}; }

TEST_P(GradHomeTest, HostHomeAddsInTwoPartsAsOneAdd) {
  auto rig = MakeRig({StateTier::kHost, StateTier::kHost, StateTier::kDevice});
  ASSERT_NE(rig, nullptr);
  ASSERT_OK_AND_ASSIGN(auto home, GradHome::Create(rig->ctx(), Tier::kHost));
  RangedGradHome* ranged = home->ranged();
  ASSERT_NE(ranged, nullptr);
  ASSERT_OK_AND_ASSIGN(StepGradients gradients, MakeGradients(*rig, kMicroBatches, 7));

  // One Add per micro-batch.
  ASSERT_OK(AddStep(*rig, *home, gradients));
  std::vector<std::vector<float>> whole(rig->num_units());
  for (int u = 0; u < rig->num_units(); ++u) {
    whole[u].assign(rig->shard(u), -1.0f);
    ASSERT_OK(home->ReadSums(u, whole[u].data()));
  }

  // The same gradients in two parts per micro-batch (early ranges, then the rest).
  ASSERT_OK(home->Zero());
  for (const auto& micro_batch : gradients.device) {
    for (int u = 0; u < rig->num_units(); ++u) {
      const std::vector<ShardRange> early = EarlyRanges(rig->shard(u));
      ASSERT_OK(ranged->AddRanges(u, micro_batch[u].data(), early, rig->comm(),
                                         /*last_part=*/false));
      ASSERT_OK(ranged->AddRanges(u, micro_batch[u].data(), Complement(early, rig->shard(u)),
                                         rig->comm(),
                                         /*last_part=*/true));
    }
  }
  ASSERT_OK(rig->SyncAll());
  for (int u = 0; u < rig->num_units(); ++u) {
    SCOPED_TRACE(rig->layouts()[u].name());
    std::vector<float> parts(rig->shard(u), -1.0f);
    ASSERT_OK(home->ReadSums(u, parts.data()));
    const std::vector<float> expected = gradients.Sum(u);
    EXPECT_TRUE(BitsEqual(expected, whole[u])) << "one Add per micro-batch";
    EXPECT_TRUE(BitsEqual(expected, parts)) << "AddRanges in two parts";

    // The norm over the early ranges: their parts summed in range order.
    ASSERT_OK_AND_ASSIGN(Buffer out, rig->DeviceBuffer(sizeof(float)));
    const std::vector<ShardRange> early = EarlyRanges(rig->shard(u));
    ASSERT_OK(ranged->SquaredNormRanges(u, early, out.as<float>()));
    ASSERT_OK(rig->SyncAll());
    float norm = 0.0f;
    ASSERT_OK(rig->CopyAndWait(&norm, out.data(), sizeof(float)));
    double expected_norm = 0.0;
    for (const ShardRange& range : early) {
      expected_norm += SquaredNormOf(expected, range.begin, range.end - range.begin);
    }
    ExpectNear(expected_norm, norm, "early ranges");
  }
}

class NvmeGradHomeTest : public GradHomeTest {
 protected:
  void SetUp() override {
    std::string skip;
    dir_ = tiers_testing::NvmeTestDir(&skip);
    if (!skip.empty()) GTEST_SKIP() << skip;
    rig_ = MakeRig({StateTier::kNvme, StateTier::kNvme, StateTier::kDevice});
    ASSERT_NE(rig_, nullptr);
    chunks_ = rig_->Chunks();
    auto tier = tiers_testing::MakeNvmeTier(dir_, *rig_, chunks_, {ExtentKind::kGrads});
    ASSERT_TRUE(tier.ok()) << tier.status();
    tier_ = std::move(*tier);
  }
  void TearDown() override {
    home_.reset();  // before the tier it writes through
    tier_.reset();
  }
  // The NVMe home with `slots` slots (fewer than the chunks of a step: 6).
  void CreateHome(int slots) {
    auto home = GradHome::CreateNvme(rig_->ctx(), tier_.get(), chunks_, slots);
    ASSERT_TRUE(home.ok()) << home.status();
    home_ = std::move(*home);
  }

  std::string dir_;
  std::unique_ptr<HomeRig> rig_;
  std::vector<std::vector<NvmeChunk>> chunks_;
  std::unique_ptr<NvmeTier> tier_;
  std::unique_ptr<GradHome> home_;
};

TEST_P(NvmeGradHomeTest, SumsAndNormsThroughTheTier) {
  ASSERT_EQ(chunks_[0].size(), 4u) << "the rig's first unit should have several chunks";
  ASSERT_NO_FATAL_FAILURE(CreateHome(2));
  EXPECT_EQ(home_->tier(), StateTier::kNvme);
  const uint64_t written_before = tier_->bytes_written();
  CheckSumsOverTwoSteps(*rig_, *home_, /*sub_ranges=*/false);
  // Every Add wrote every chunk's sum: 3 Adds over both units' padded extents.
  uint64_t extent_bytes = 0;
  for (const auto& unit_chunks : chunks_) {
    for (const NvmeChunk& chunk : unit_chunks) {
      extent_bytes += tier_->PaddedBytes(chunk.id, ExtentKind::kGrads);
    }
  }
  EXPECT_EQ(tier_->bytes_written() - written_before, 3 * extent_bytes);
}

TEST_P(NvmeGradHomeTest, HandOverKeepsFinalSumsInMemory) {
  const int slots = 2;
  ASSERT_NO_FATAL_FAILURE(CreateHome(slots));
  SumHandOver* hand_over = home_->hand_over();
  ASSERT_NE(hand_over, nullptr);
  ASSERT_OK_AND_ASSIGN(StepGradients gradients, MakeGradients(*rig_, kMicroBatches, 3));
  std::vector<std::vector<float>> expected;
  for (int u = 0; u < rig_->num_units(); ++u) expected.push_back(gradients.Sum(u));

  // Not kept: no sum is left in memory.
  ASSERT_OK(hand_over->KeepFinalSums(true));
  ASSERT_OK(AddStep(*rig_, *home_, gradients));  // Zero ends the keeping
  for (int u = 0; u < rig_->num_units(); ++u) {
    for (size_t k = 0; k < chunks_[u].size(); ++k) {
      EXPECT_EQ(hand_over->KeptSum(u, k), nullptr) << "unit " << u << " chunk " << k;
    }
  }

  // Kept for the last micro-batch: after each unit's Add, its last `slots` chunks (those
  // whose slot no later chunk of the Add took) hold their final sums.
  ASSERT_OK(home_->Zero());
  for (int u = 0; u < rig_->num_units(); ++u) {
    ASSERT_OK(home_->Add(u, gradients.device[0][u].data(), rig_->comm()).status());
  }
  ASSERT_OK(hand_over->KeepFinalSums(true));
  for (int u = 0; u < rig_->num_units(); ++u) {
    SCOPED_TRACE(rig_->layouts()[u].name());
    ASSERT_OK(home_->Add(u, gradients.device[1][u].data(), rig_->comm()).status());
    ASSERT_OK(rig_->SyncAll());
    const size_t chunks = chunks_[u].size();
    for (size_t k = 0; k < chunks; ++k) {
      const float* kept = hand_over->KeptSum(u, k);
      if (k + slots < chunks) {
        EXPECT_EQ(kept, nullptr) << "chunk " << k << ": its slot was taken again";
        continue;
      }
      ASSERT_NE(kept, nullptr) << "chunk " << k;
      const NvmeChunk& chunk = chunks_[u][k];
      EXPECT_TRUE(BitsEqual(expected[u].data() + chunk.begin, kept, chunk.end - chunk.begin))
          << "chunk " << k;
    }
  }
  // The second unit's Add took both slots: the first unit's kept sums went out.
  for (size_t k = 0; k < chunks_[0].size(); ++k) EXPECT_EQ(hand_over->KeptSum(0, k), nullptr);

  // The optimizer takes the second unit's sums: they are never stored.
  for (size_t k = 0; k < chunks_[1].size(); ++k) hand_over->ReleaseKeptSum(1, k, 0);
  for (size_t k = 0; k < chunks_[1].size(); ++k) EXPECT_EQ(hand_over->KeptSum(1, k), nullptr);
  std::vector<float> sums(rig_->shard(0), -1.0f);
  ASSERT_OK(home_->ReadSums(0, sums.data()));
  EXPECT_TRUE(BitsEqual(expected[0], sums)) << "kept sums written out when their slot was reused";
  sums.assign(rig_->shard(1), -1.0f);
  const Status refused = home_->ReadSums(1, sums.data());
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_NE(refused.message().find("never stored"), std::string::npos) << refused;
  EXPECT_NE(refused.message().find("head"), std::string::npos) << refused;

  // The next step stores them again.
  ASSERT_OK(AddStep(*rig_, *home_, gradients));
  ASSERT_OK(home_->ReadSums(1, sums.data()));
  EXPECT_TRUE(BitsEqual(expected[1], sums));
}

TEST_P(GradHomeTest, CapabilitiesAreNullWhereAHomeHasNone) {
  auto rig = MakeRig({StateTier::kHost, StateTier::kHost, StateTier::kDevice});
  ASSERT_NE(rig, nullptr);
  ASSERT_OK_AND_ASSIGN(auto host, GradHome::Create(rig->ctx(), Tier::kHost));
  EXPECT_NE(host->ranged(), nullptr);
  EXPECT_EQ(host->hand_over(), nullptr);

  auto device_rig = MakeRig({StateTier::kDevice, StateTier::kDevice, StateTier::kDevice});
  ASSERT_NE(device_rig, nullptr);
  ASSERT_OK_AND_ASSIGN(auto device, GradHome::Create(device_rig->ctx(), Tier::kDevice));
  EXPECT_EQ(device->ranged(), nullptr);
  EXPECT_EQ(device->hand_over(), nullptr);
}

TEST_P(NvmeGradHomeTest, CapabilitiesAreHandOverOnly) {
  ASSERT_NO_FATAL_FAILURE(CreateHome(1));
  EXPECT_EQ(home_->ranged(), nullptr);
  EXPECT_NE(home_->hand_over(), nullptr);
}

TEST_P(GradHomeTest, HostHomeWithoutHostBuffersIsRefused) {
  // Sums allocated for the device home: no host grad_accum, no landing buffer.
  auto rig = MakeRig({StateTier::kDevice, StateTier::kDevice, StateTier::kDevice});
  ASSERT_NE(rig, nullptr);
  auto home = GradHome::Create(rig->ctx(), Tier::kHost);
  ASSERT_FALSE(home.ok());
  EXPECT_EQ(home.status().code(), absl::StatusCode::kInternal) << home.status();
  EXPECT_NE(home.status().message().find("without host buffers"), std::string::npos)
      << home.status();
  EXPECT_NE(home.status().message().find("block.0"), std::string::npos) << home.status();
}

TEST_P(NvmeGradHomeTest, BadSetUpsAreRefused) {
  const struct {
    const char* what;
    NvmeTier* tier;
    std::vector<std::vector<NvmeChunk>> chunks;
    int slots;
    const char* message;
  } cases[] = {
      {"no slots", tier_.get(), chunks_, 0, "needs a tier, slots and every unit's chunks"},
      {"a unit's chunks missing", tier_.get(), {chunks_[0]}, 2, "nvme chunks for 1 units"},
      {"a unit without chunks", tier_.get(), {chunks_[0], {}}, 2, "cover 0 of"},
      {"no tier", nullptr, chunks_, 2, "needs a tier, slots and every unit's chunks"},
  };
  for (const auto& c : cases) {
    auto home = GradHome::CreateNvme(rig_->ctx(), c.tier, c.chunks, c.slots);
    EXPECT_THAT(home.status(),
                ::strata::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                            ::testing::HasSubstr(c.message)))
        << c.what;
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, GradHomeTest, ::testing::Values(DType::kF32, DType::kBF16),
                         tiers_testing::DTypeParamName);
INSTANTIATE_TEST_SUITE_P(DTypes, NvmeGradHomeTest, ::testing::Values(DType::kF32, DType::kBF16),
                         tiers_testing::DTypeParamName);

}  // namespace
}  // namespace strata
