// The param homes (param_home.h) with parts of odd sizes, fp32 and bf16: what is stored
// is loaded back and copied up to the device byte for byte, for the resident homes
// (device, host) and for the NVMe home (several chunks per shard, more CopyUps in a row
// than read buffers, each checked). On NVMe, the optimizer's write-back of a chunk,
// posted after an event, lands once the event has passed and is seen by the next Load;
// the traffic counters grow by the extents moved. Bad set-ups are refused clearly.
#include "tiers/param_home.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include "tiers/home_test_rig.h"

namespace strata {
namespace {

using tiers_testing::ElementsEqual;
using tiers_testing::HomeRig;

// Part sizes that are not a whole number of chunks, pages or vector widths.
const std::vector<size_t> kPartElements = {5001, 1237};

class ParamHomeTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    auto rig = HomeRig::Create(GetParam());
    ASSERT_TRUE(rig.ok()) << rig.status();
    rig_ = std::move(*rig);
    for (size_t u = 0; u < kPartElements.size(); ++u) {
      values_.push_back(tiers_testing::Encode(
          tiers_testing::Values(kPartElements[u], 10 + u, -1.0f, 1.0f, GetParam()), GetParam()));
    }
  }
  size_t Bytes(int unit) const { return kPartElements[unit] * rig_->element_bytes(); }

  // Store every unit's values, then Load each back and CopyUp each to the device.
  void CheckRoundTrips(ParamHome& home) {
    for (int u = 0; u < rig_->num_units(); ++u) {
      ASSERT_EQ(home.part_elements(u), kPartElements[u]);
      ASSERT_OK(home.Write(u, values_[u].data()));
    }
    for (int u = 0; u < rig_->num_units(); ++u) {
      std::vector<uint8_t> loaded(Bytes(u), 0xAB);
      ASSERT_OK(home.Read(u, loaded.data()));
      EXPECT_TRUE(ElementsEqual(values_[u].data(), loaded.data(), kPartElements[u], GetParam()))
          << "Load of unit " << u;
    }
  }

  // CopyUps of `units` in a row into buffers of their own, then each checked.
  void CheckCopyUps(ParamHome& home, const std::vector<int>& units) {
    std::vector<Buffer> dests;
    for (int u : units) {
      ASSERT_OK_AND_ASSIGN(Buffer dest, rig_->DeviceBuffer(Bytes(u)));
      ASSERT_OK(home.CopyUp(u, dest.data(), rig_->copy()));
      dests.push_back(std::move(dest));
    }
    ASSERT_OK(rig_->SyncAll());
    for (size_t i = 0; i < units.size(); ++i) {
      const int u = units[i];
      std::vector<uint8_t> up(Bytes(u), 0xCD);
      ASSERT_OK(rig_->CopyAndWait(up.data(), dests[i].data(), Bytes(u)));
      EXPECT_TRUE(ElementsEqual(values_[u].data(), up.data(), kPartElements[u], GetParam()))
          << "CopyUp " << i << " (unit " << u << ")";
    }
  }

  std::unique_ptr<HomeRig> rig_;
  std::vector<std::vector<uint8_t>> values_;  // per unit, in the compute dtype
};

TEST_P(ParamHomeTest, ResidentHomesRoundTripAndCopyUp) {
  for (Tier tier : {Tier::kDevice, Tier::kHost}) {
    SCOPED_TRACE(TierName(tier));
    ASSERT_OK_AND_ASSIGN(auto home,
                                ParamHome::CreateResident(rig_->ctx(), tier, kPartElements));
    EXPECT_EQ(home->tier(), tier == Tier::kDevice ? StateTier::kDevice : StateTier::kHost);
    // Created zeroed.
    std::vector<uint8_t> zeros(Bytes(0), 0), loaded(Bytes(0), 0xAB);
    ASSERT_OK(home->Read(0, loaded.data()));
    EXPECT_TRUE(ElementsEqual(zeros.data(), loaded.data(), kPartElements[0], GetParam()));

    ASSERT_NO_FATAL_FAILURE(CheckRoundTrips(*home));
    for (int u = 0; u < rig_->num_units(); ++u) {
      ASSERT_NE(home->part(u), nullptr);
      std::vector<uint8_t> in_place(Bytes(u));
      ASSERT_OK(rig_->CopyAndWait(in_place.data(), home->part(u), Bytes(u)));
      EXPECT_TRUE(ElementsEqual(values_[u].data(), in_place.data(), kPartElements[u], GetParam()))
          << "part(" << u << ")";
    }
    ASSERT_NO_FATAL_FAILURE(CheckCopyUps(*home, {0, 1, 1, 0}));
    EXPECT_EQ(home->write_back(), nullptr);
    EXPECT_EQ(home->read_buffers(), 0);
    EXPECT_EQ(home->bytes_read(), 0u);
    EXPECT_EQ(home->bytes_written(), 0u);
  }
}

// A unit whose part is shared memory (an fp32 engine's master) allocates nothing of its
// own: part() is that memory, a Store of it is nothing to do, a Store of other values
// lands there, and Load and CopyUp read it; the other unit keeps a part of its own.
TEST_P(ParamHomeTest, SharedPartsAreThatMemory) {
  ASSERT_OK_AND_ASSIGN(Buffer master, rig_->DeviceBuffer(Bytes(0)));
  auto params_bytes = [&] {
    return rig_->device()
        .pool(Tier::kDevice)
        .Stats()
        .current_by_kind[static_cast<int>(StateKind::kParams)];
  };
  const uint64_t before = params_bytes();
  ASSERT_OK_AND_ASSIGN(auto home,
                       ParamHome::CreateResident(rig_->ctx(), Tier::kDevice, kPartElements,
                                                 {master.data(), nullptr}));
  EXPECT_EQ(home->part(0), master.data());
  EXPECT_NE(home->part(1), nullptr);
  EXPECT_NE(home->part(1), master.data());
  // Unit 1's part alone (5001 elements of unit 0 would be more than its 1237, rounded).
  EXPECT_GE(params_bytes() - before, Bytes(1));
  EXPECT_LT(params_bytes() - before, Bytes(0));
  ASSERT_NO_FATAL_FAILURE(CheckRoundTrips(*home));
  std::vector<uint8_t> in_master(Bytes(0));
  ASSERT_OK(rig_->CopyAndWait(in_master.data(), master.data(), Bytes(0)));
  EXPECT_TRUE(ElementsEqual(values_[0].data(), in_master.data(), kPartElements[0], GetParam()));
  ASSERT_OK(home->Write(0, master.data()));  // itself: unchanged
  ASSERT_NO_FATAL_FAILURE(CheckCopyUps(*home, {0, 1}));
}

TEST_P(ParamHomeTest, ResidentHomeNeedsEveryPartSize) {
  auto home = ParamHome::CreateResident(rig_->ctx(), Tier::kDevice, {kPartElements[0]});
  ASSERT_FALSE(home.ok());
  EXPECT_EQ(home.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(home.status().message().find("every unit's part size"), std::string::npos)
      << home.status();
}

class NvmeParamHomeTest : public ParamHomeTest {
 protected:
  void SetUp() override {
    ParamHomeTest::SetUp();
    std::string skip;
    dir_ = tiers_testing::NvmeTestDir(&skip);
    if (!skip.empty()) GTEST_SKIP() << skip;
    chunks_ = NvmeChunks(kPartElements, tiers_testing::kChunkElements);
    ASSERT_EQ(chunks_[0].size(), 3u) << "the first part should have several chunks";
  }
  StatusOr<std::unique_ptr<NvmeTier>> MakeTier() {
    return tiers_testing::MakeNvmeTier(dir_, *rig_, chunks_, {ExtentKind::kParams});
  }
  // The padded bytes of every extent of `unit`.
  uint64_t ExtentBytes(int unit) const {
    uint64_t bytes = 0;
    for (const NvmeChunk& chunk : chunks_[unit]) bytes += padded_.at(chunk.id);
    return bytes;
  }
  void CreateHome(int read_buffers) {
    ASSERT_OK_AND_ASSIGN(auto tier, MakeTier());
    for (const auto& unit_chunks : chunks_) {
      for (const NvmeChunk& chunk : unit_chunks) {
        padded_[chunk.id] = tier->PaddedBytes(chunk.id, ExtentKind::kParams);
      }
    }
    ASSERT_OK_AND_ASSIGN(
        home_, ParamHome::CreateNvme(rig_->ctx(), std::move(tier), chunks_, read_buffers));
  }
  void TearDown() override {
    if (rig_) rig_->SyncAll().IgnoreError();  // CopyUps still reading the home's buffers
    home_.reset();
  }

  std::string dir_;
  std::vector<std::vector<NvmeChunk>> chunks_;
  std::map<int, uint64_t> padded_;  // chunk id -> padded extent bytes
  std::unique_ptr<ParamHome> home_;
};

TEST_P(NvmeParamHomeTest, RoundTripsAndCopiesUpThroughFewerBuffers) {
  ASSERT_NO_FATAL_FAILURE(CreateHome(/*read_buffers=*/2));
  EXPECT_EQ(home_->tier(), StateTier::kNvme);
  EXPECT_EQ(home_->part(0), nullptr);
  EXPECT_EQ(home_->read_buffers(), 2);
  ASSERT_NO_FATAL_FAILURE(CheckRoundTrips(*home_));
  ASSERT_OK(home_->Drain());
  const uint64_t all_extents = ExtentBytes(0) + ExtentBytes(1);
  EXPECT_EQ(home_->bytes_written(), all_extents) << "Store wrote each extent once";
  EXPECT_EQ(home_->bytes_read(), all_extents) << "Load read each extent once";

  // Five CopyUps through two buffers; each buffer's shard changes between its uses
  // (buffer 0: units 0, 1, 0; buffer 1: units 1, 0).
  const std::vector<int> units = {0, 1, 1, 0, 0};
  ASSERT_NO_FATAL_FAILURE(CheckCopyUps(*home_, units));
  ASSERT_OK(home_->Drain());
  uint64_t copied = 0;
  for (int u : units) copied += ExtentBytes(u);
  EXPECT_EQ(home_->bytes_read(), all_extents + copied);
  EXPECT_EQ(home_->bytes_written(), all_extents);
}

TEST_P(NvmeParamHomeTest, WriteBackAfterAnEventIsSeenByTheNextLoad) {
  ASSERT_NO_FATAL_FAILURE(CreateHome(/*read_buffers=*/1));
  ASSERT_NO_FATAL_FAILURE(CheckRoundTrips(*home_));
  ParamWriteBack* write_back = home_->write_back();
  ASSERT_NE(write_back, nullptr);
  ASSERT_OK(home_->Drain());
  const uint64_t written_before = home_->bytes_written();

  // The middle chunk of unit 0 gets new values, filled by work on the host stream that
  // only runs after a delay: the write must wait for the event recorded after it.
  const NvmeChunk chunk = chunks_[0][1];
  const size_t n = chunk.end - chunk.begin;
  ASSERT_EQ(write_back->ChunkBytes(chunk.id), padded_.at(chunk.id));
  ASSERT_OK_AND_ASSIGN(Buffer source,
                              rig_->device().Allocate(Tier::kHost, StateKind::kParams,
                                                      write_back->ChunkBytes(chunk.id), "update"));
  std::memset(source.data(), 0, source.bytes());
  const std::vector<uint8_t> update =
      tiers_testing::Encode(tiers_testing::Values(n, 99, 3.0f, 4.0f, GetParam()), GetParam());
  void* data = source.data();
  rig_->host().EnqueueHost([data, update] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    std::memcpy(data, update.data(), update.size());
    return absl::OkStatus();
  });
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Event> filled, rig_->device().CreateEvent());
  ASSERT_OK(rig_->device().Record(*filled, rig_->host()));
  write_back->WriteAfter(chunk.id, source.data(), filled.get());

  // Posted after the write: the Load sees it (the streams' own work is not Load's).
  std::vector<uint8_t> loaded(Bytes(0), 0xAB);
  ASSERT_OK(home_->Read(0, loaded.data()));
  std::vector<uint8_t> expected = values_[0];
  std::memcpy(expected.data() + chunk.begin * rig_->element_bytes(), update.data(), update.size());
  EXPECT_TRUE(ElementsEqual(expected.data(), loaded.data(), kPartElements[0], GetParam()));
  ASSERT_OK(rig_->SyncAll());
  ASSERT_OK(home_->Drain());
  EXPECT_EQ(home_->bytes_written() - written_before, write_back->ChunkBytes(chunk.id));
}

// A frozen base apart from the trainable params: unit 0 trainable on the device, unit 1
// frozen on nvme (the other home of each left without that unit). Each unit round-trips
// and copies up through its own home; tier() is the trainable units', unit_tier(u) each
// unit's; the write-back is the trainable home's (none here), the traffic the nvme home's.
TEST_P(NvmeParamHomeTest, SplitHomeRoutesEachUnitToItsGroup) {
  ASSERT_OK_AND_ASSIGN(auto trainable, ParamHome::CreateResident(rig_->ctx(), Tier::kDevice,
                                                                 {kPartElements[0], 0}));
  EXPECT_EQ(trainable->part(1), nullptr);  // not kept there
  std::vector<std::vector<NvmeChunk>> frozen_chunks = {{}, chunks_[1]};
  ASSERT_OK_AND_ASSIGN(auto tier, MakeTier());
  for (const NvmeChunk& chunk : chunks_[1]) {
    padded_[chunk.id] = tier->PaddedBytes(chunk.id, ExtentKind::kParams);
  }
  ASSERT_OK_AND_ASSIGN(auto frozen,
                       ParamHome::CreateNvme(rig_->ctx(), std::move(tier), frozen_chunks, 2));
  EXPECT_EQ(frozen->part_elements(0), 0u);
  home_ = ParamHome::CreateSplit(std::move(trainable), std::move(frozen), {false, true});
  EXPECT_EQ(home_->tier(), StateTier::kDevice);
  EXPECT_EQ(home_->unit_tier(0), StateTier::kDevice);
  EXPECT_EQ(home_->unit_tier(1), StateTier::kNvme);
  EXPECT_NE(home_->part(0), nullptr);
  EXPECT_EQ(home_->part(1), nullptr);
  EXPECT_EQ(home_->write_back(), nullptr);
  EXPECT_EQ(home_->read_buffers(), 2);
  ASSERT_NO_FATAL_FAILURE(CheckRoundTrips(*home_));
  const uint64_t read_before = home_->bytes_read();
  ASSERT_NO_FATAL_FAILURE(CheckCopyUps(*home_, {1, 0, 1}));
  EXPECT_EQ(home_->bytes_read() - read_before, 2 * ExtentBytes(1));
  ASSERT_OK(home_->Drain());
}

TEST_P(NvmeParamHomeTest, BadSetUpsAreRefused) {
  const struct {
    const char* what;
    std::vector<std::vector<NvmeChunk>> chunks;
    int read_buffers;
    const char* message;
  } cases[] = {
      {"no read buffers", chunks_, 0, "needs a tier, read buffers and every unit's chunks"},
      {"a unit's chunks missing",
       {chunks_[0]},
       2,
       "needs a tier, read buffers and every unit's chunks"},
      {"no unit's chunks", {{}, {}}, 2, "without any unit's chunks"},
  };
  for (const auto& c : cases) {
    ASSERT_OK_AND_ASSIGN(auto tier, MakeTier());
    auto home = ParamHome::CreateNvme(rig_->ctx(), std::move(tier), c.chunks, c.read_buffers);
    ASSERT_FALSE(home.ok()) << c.what;
    EXPECT_EQ(home.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(home.status().message().find(c.message), std::string::npos)
        << c.what << ": " << home.status();
  }
  auto home = ParamHome::CreateNvme(rig_->ctx(), nullptr, chunks_, 2);
  ASSERT_FALSE(home.ok());
  EXPECT_EQ(home.status().code(), absl::StatusCode::kInvalidArgument) << home.status();
}

INSTANTIATE_TEST_SUITE_P(DTypes, ParamHomeTest, ::testing::Values(DType::kF32, DType::kBF16),
                         tiers_testing::DTypeParamName);
INSTANTIATE_TEST_SUITE_P(DTypes, NvmeParamHomeTest, ::testing::Values(DType::kF32, DType::kBF16),
                         tiers_testing::DTypeParamName);

}  // namespace
}  // namespace strata
