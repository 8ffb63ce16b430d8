// NvmeTier: posted reads and writes come back bit-exact through the I/O thread; requests
// on one extent keep their posting order, also across a held write released later from
// another thread; a failed request fails its ticket and Drain reports it.
#include "tiers/nvme_tier.h"

#include <cstdlib>
#include <cstring>
#include <thread>

#include <gtest/gtest.h>

#include "nvme/test_util.h"

namespace strata {
namespace {

struct Aligned {
  explicit Aligned(size_t bytes) : data(std::aligned_alloc(4096, bytes)), size(bytes) {
    std::memset(data, 0, bytes);
  }
  ~Aligned() { std::free(data); }
  void* data;
  size_t size;
};

std::unique_ptr<NvmeTier> MakeTier(IoEngineKind engine, int units, uint64_t bytes) {
  NvmeStoreOptions options;
  options.dir = nvme::testing::MakeTestDir();
  options.engine.engine = engine;
  std::vector<ExtentSpec> extents;
  for (int u = 0; u < units; ++u) {
    for (ExtentKind kind : {ExtentKind::kParams, ExtentKind::kMaster}) {
      extents.push_back({u, "unit" + std::to_string(u), kind, bytes});
    }
  }
  auto tier = NvmeTier::Create(options, extents);
  EXPECT_TRUE(tier.ok()) << tier.status();
  return tier.ok() ? std::move(*tier) : nullptr;
}

class NvmeTierTest : public ::testing::TestWithParam<IoEngineKind> {};

TEST_P(NvmeTierTest, RoundTripsManyUnitsInFlight) {
  STRATA_SKIP_IF_UNAVAILABLE(GetParam(), nvme::testing::MakeTestDir());
  const int units = 6;
  const uint64_t bytes = 10000;
  auto tier = MakeTier(GetParam(), units, bytes);
  ASSERT_NE(tier, nullptr);
  std::vector<std::unique_ptr<Aligned>> out, in;
  std::vector<NvmeTier::Ticket> writes;
  for (int u = 0; u < units; ++u) {
    out.push_back(std::make_unique<Aligned>(tier->PaddedBytes(u, ExtentKind::kMaster)));
    nvme::testing::FillPattern(out.back()->data, bytes, u + 1, 0);
    writes.push_back(tier->Write(u, {{ExtentKind::kMaster, out.back()->data}}));
  }
  std::vector<NvmeTier::Ticket> reads;
  for (int u = 0; u < units; ++u) {
    in.push_back(std::make_unique<Aligned>(tier->PaddedBytes(u, ExtentKind::kMaster)));
    reads.push_back(tier->Read(u, {{ExtentKind::kMaster, in.back()->data}}));  // after its write
  }
  for (int u = 0; u < units; ++u) {
    ASSERT_TRUE(tier->Wait(reads[u]).ok());
    EXPECT_TRUE(tier->Done(writes[u]));
    EXPECT_EQ(nvme::testing::FirstMismatch(in[u]->data, bytes, u + 1, 0), -1) << "unit " << u;
  }
  EXPECT_TRUE(tier->Drain().ok());
  EXPECT_EQ(tier->bytes_written(), units * tier->PaddedBytes(0, ExtentKind::kMaster));
}

TEST_P(NvmeTierTest, ReadPostedAfterAHeldWriteSeesThatWrite) {
  STRATA_SKIP_IF_UNAVAILABLE(GetParam(), nvme::testing::MakeTestDir());
  const uint64_t bytes = 5000;
  auto tier = MakeTier(GetParam(), 1, bytes);
  ASSERT_NE(tier, nullptr);
  const uint64_t padded = tier->PaddedBytes(0, ExtentKind::kParams);
  Aligned first(padded), second(padded), in(padded);
  nvme::testing::FillPattern(first.data, bytes, 1, 0);
  ASSERT_TRUE(tier->Wait(tier->Write(0, {{ExtentKind::kParams, first.data}})).ok());
  // Reserve the next write, post a read, and only then fill and release the write.
  const NvmeTier::Ticket held = tier->Write(0, {{ExtentKind::kParams, second.data}}, true);
  const NvmeTier::Ticket read = tier->Read(0, {{ExtentKind::kParams, in.data}});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(tier->Done(read)) << "the read ran before the held write";
  std::thread releaser([&] {
    nvme::testing::FillPattern(second.data, bytes, 2, 0);
    tier->Release(held);
  });
  ASSERT_TRUE(tier->Wait(read).ok());
  releaser.join();
  EXPECT_EQ(nvme::testing::FirstMismatch(in.data, bytes, 2, 0), -1);
}

TEST_P(NvmeTierTest, AFailedRequestFailsItsTicketAndDrainSaysSo) {
  STRATA_SKIP_IF_UNAVAILABLE(GetParam(), nvme::testing::MakeTestDir());
  auto tier = MakeTier(GetParam(), 2, 4096);
  ASSERT_NE(tier, nullptr);
  Aligned buffer(4096);
  const NvmeTier::Ticket read = tier->Read(1, {{ExtentKind::kMaster, buffer.data}});
  Status status = tier->Wait(read);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;  // never written
  EXPECT_NE(status.message().find("unit1"), std::string::npos) << status;
  EXPECT_EQ(tier->Drain().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(tier->Drain().ok()) << "the error is reported once";
  // Other requests still work.
  EXPECT_TRUE(tier->Wait(tier->Write(0, {{ExtentKind::kMaster, buffer.data}})).ok());
}

TEST_P(NvmeTierTest, DestructionDropsHeldWritesNeverReleased) {
  STRATA_SKIP_IF_UNAVAILABLE(GetParam(), nvme::testing::MakeTestDir());
  auto tier = MakeTier(GetParam(), 1, 4096);
  ASSERT_NE(tier, nullptr);
  Aligned buffer(4096);
  tier->Write(0, {{ExtentKind::kMaster, buffer.data}}, true);
  tier.reset();  // must not hang
}

INSTANTIATE_TEST_SUITE_P(Engines, NvmeTierTest, ::testing::ValuesIn(nvme::testing::kTestedEngines),
                         nvme::testing::EngineParamName);

}  // namespace
}  // namespace strata
