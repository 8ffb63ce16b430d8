// NvmeTier: posted reads and writes come back bit-exact through the I/O thread; requests
// on one extent keep their posting order, also across a held write released later from
// another thread; a failed request fails its ticket and Drain reports it; destruction
// drops a held write never released (its bytes never reach the disk). A dry-run tier
// (no disk) runs the same requests to the same outcomes and byte counters, touching no
// buffer and creating nothing.
#include "nvme/nvme_tier.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>

#include "core/testing/status_matchers.h"
#include "nvme/test_util.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

struct Aligned {
  explicit Aligned(size_t bytes) : data(std::aligned_alloc(4096, bytes)), size(bytes) {
    std::memset(data, 0, bytes);
  }
  ~Aligned() { std::free(data); }
  void* data;
  size_t size;
};

// A params and a master extent of `bytes` for each of `units` units.
std::vector<ExtentSpec> Extents(int units, uint64_t bytes) {
  std::vector<ExtentSpec> extents;
  for (int u = 0; u < units; ++u) {
    for (ExtentKind kind : {ExtentKind::kParams, ExtentKind::kMaster}) {
      extents.push_back({u, "unit" + std::to_string(u), kind, bytes});
    }
  }
  return extents;
}

// A tier over Extents(units, bytes) in `options.dir` (a fresh test directory when empty).
std::unique_ptr<NvmeTier> MakeTier(IoEngineKind engine, int units, uint64_t bytes,
                                   NvmeStoreOptions options = {}) {
  if (options.dir.empty()) options.dir = nvme::testing::MakeTestDir();
  options.engine.engine = engine;
  auto tier = NvmeTier::Create(options, Extents(units, bytes));
  EXPECT_OK(tier);
  return tier.ok() ? std::move(*tier) : nullptr;
}

// The bytes at `offset` of `path`, read with plain I/O.
std::vector<uint8_t> ReadFileBytes(const std::string& path, uint64_t offset, uint64_t bytes) {
  std::vector<uint8_t> data(bytes);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
  if (fd < 0) return {};
  EXPECT_EQ(::pread(fd, data.data(), bytes, offset), static_cast<ssize_t>(bytes)) << path;
  ::close(fd);
  return data;
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
    ASSERT_OK(tier->Wait(reads[u]));
    EXPECT_TRUE(tier->Done(writes[u]));
    EXPECT_EQ(nvme::testing::FirstMismatch(in[u]->data, bytes, u + 1, 0), -1) << "unit " << u;
  }
  EXPECT_OK(tier->Drain());
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
  ASSERT_OK(tier->Wait(tier->Write(0, {{ExtentKind::kParams, first.data}})));
  // Reserve the next write, post a read, and only then fill and release the write.
  const NvmeTier::Ticket held = tier->Write(0, {{ExtentKind::kParams, second.data}}, true);
  const NvmeTier::Ticket read = tier->Read(0, {{ExtentKind::kParams, in.data}});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(tier->Done(read)) << "the read ran before the held write";
  std::thread releaser([&] {
    nvme::testing::FillPattern(second.data, bytes, 2, 0);
    tier->Release(held);
  });
  ASSERT_OK(tier->Wait(read));
  releaser.join();
  EXPECT_EQ(nvme::testing::FirstMismatch(in.data, bytes, 2, 0), -1);
}

TEST_P(NvmeTierTest, AFailedRequestFailsItsTicketAndDrainSaysSo) {
  STRATA_SKIP_IF_UNAVAILABLE(GetParam(), nvme::testing::MakeTestDir());
  auto tier = MakeTier(GetParam(), 2, 4096);
  ASSERT_NE(tier, nullptr);
  Aligned buffer(4096);
  const NvmeTier::Ticket read = tier->Read(1, {{ExtentKind::kMaster, buffer.data}});
  EXPECT_THAT(tier->Wait(read),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("unit1")));  // never written
  EXPECT_EQ(tier->Drain().code(), absl::StatusCode::kDataLoss);
  EXPECT_OK(tier->Drain()) << "the error is reported once";
  // Other requests still work.
  EXPECT_OK(tier->Wait(tier->Write(0, {{ExtentKind::kMaster, buffer.data}})));
}

// A held write never released is dropped at destruction: the destructor returns, a read
// posted behind the held write (drained at destruction, like everything posted) sees the
// extent as it was before, and the held bytes are not in the file afterwards.
TEST_P(NvmeTierTest, DestructionDropsHeldWritesNeverReleased) {
  const std::string dir = nvme::testing::MakeTestDir();
  STRATA_SKIP_IF_UNAVAILABLE(GetParam(), dir);
  const uint64_t bytes = 5000;
  NvmeStoreOptions options;
  options.dir = dir;
  options.keep_files = true;  // to look at the file after the tier is gone
  // Declared before the tier: the read below fills `in` while the tier is destroyed.
  Aligned before(8192), held(8192), in(8192);
  auto tier = MakeTier(GetParam(), 1, bytes, options);
  ASSERT_NE(tier, nullptr);
  ASSERT_EQ(tier->PaddedBytes(0, ExtentKind::kMaster), 8192u);
  nvme::testing::FillPattern(before.data, bytes, 1, 0);
  ASSERT_OK(tier->Wait(tier->Write(0, {{ExtentKind::kMaster, before.data}})));
  // Ready to go, but never released.
  nvme::testing::FillPattern(held.data, bytes, 2, 0);
  tier->Write(0, {{ExtentKind::kMaster, held.data}}, /*held=*/true);
  const NvmeTier::Ticket read = tier->Read(0, {{ExtentKind::kMaster, in.data}});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(tier->Done(read)) << "the read waits behind the held write";
  tier.reset();  // must not hang
  EXPECT_EQ(nvme::testing::FirstMismatch(in.data, bytes, 1, 0), -1)
      << "the read drained at destruction saw the bytes from before the held write";

  // The file holds the first write, not the held one. Where the extent lives comes from a
  // store with the same extents in another directory (offsets follow from the extents).
  NvmeStoreOptions twin_options;
  twin_options.dir = nvme::testing::MakeTestDir();
  twin_options.engine.engine = GetParam();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<NvmeStore> twin,
                       NvmeStore::Create(twin_options, Extents(1, bytes)));
  ASSERT_OK_AND_ASSIGN(ExtentLocation location, twin->Locate(0, ExtentKind::kMaster));
  const std::string file_name = location.path.substr(location.path.rfind('/') + 1);
  const std::vector<uint8_t> on_disk = ReadFileBytes(dir + "/" + file_name, location.offset, bytes);
  ASSERT_EQ(on_disk.size(), bytes);
  EXPECT_EQ(nvme::testing::FirstMismatch(on_disk.data(), bytes, 1, 0), -1)
      << "the held write's bytes reached the disk";
  for (const std::string& path : twin->files()) {
    std::remove((dir + "/" + path.substr(path.rfind('/') + 1)).c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, NvmeTierTest, ::testing::ValuesIn(nvme::testing::kTestedEngines),
                         nvme::testing::EngineParamName);

// ---------------------------------------------------------------------------------------
// Dry run: the tier over a store that touches no disk and no buffer.

// An event the test completes by hand.
class ManualEvent : public Event {
 public:
  Status Synchronize() override {
    while (!done_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return Status();
  }
  bool Query() override { return done_; }
  void Complete() { done_ = true; }

 private:
  std::atomic<bool> done_{false};
};

// What a script of requests did: every ticket's status in posting order, and the tier's
// counters.
struct ScriptResult {
  std::vector<absl::StatusCode> statuses;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  uint64_t expected_read = 0;  // what the script's successful requests move
  uint64_t expected_written = 0;
};

// Writes, reads, a read after a write's ticket, a write held on an event, a write held
// for a Release, a read of an undeclared extent (fails), and Drain, over Extents(units,
// bytes); `buffer(u, kind)` gives each extent's buffer.
ScriptResult RunScript(NvmeTier* tier, int units,
                       const std::function<void*(int unit, ExtentKind kind)>& buffer) {
  ScriptResult result;
  std::vector<NvmeTier::Ticket> tickets;
  auto both = [&](int u) {
    return std::vector<NvmeTier::Part>{{ExtentKind::kParams, buffer(u, ExtentKind::kParams)},
                                       {ExtentKind::kMaster, buffer(u, ExtentKind::kMaster)}};
  };
  auto padded = [&](int u) {
    return tier->PaddedBytes(u, ExtentKind::kParams) + tier->PaddedBytes(u, ExtentKind::kMaster);
  };
  const int last = units - 1;  // never written until the end
  for (int u = 0; u < last; ++u) {
    tickets.push_back(tier->Write(u, both(u)));
    result.expected_written += padded(u);
  }
  for (int u = 0; u < last; ++u) {
    tickets.push_back(tier->Read(u, both(u)));
    result.expected_read += padded(u);
  }
  const NvmeTier::Ticket write =
      tier->Write(0, {{ExtentKind::kMaster, buffer(0, ExtentKind::kMaster)}});
  tickets.push_back(write);
  tickets.push_back(
      tier->ReadAfter(0, {{ExtentKind::kMaster, buffer(0, ExtentKind::kMaster)}}, write));
  result.expected_written += tier->PaddedBytes(0, ExtentKind::kMaster);
  result.expected_read += tier->PaddedBytes(0, ExtentKind::kMaster);

  ManualEvent event;
  const NvmeTier::Ticket on_event = tier->WriteAfter(1 % last, both(1 % last), &event);
  tickets.push_back(on_event);
  result.expected_written += padded(1 % last);
  const NvmeTier::Ticket held = tier->Write(last, both(last), /*held=*/true);
  tickets.push_back(held);
  const NvmeTier::Ticket behind = tier->Read(last, both(last));  // sees the held write
  tickets.push_back(behind);
  result.expected_written += padded(last);
  result.expected_read += padded(last);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(tier->Done(on_event)) << "a write held on an event ran before it";
  EXPECT_FALSE(tier->Done(held)) << "a held write ran before its Release";
  EXPECT_FALSE(tier->Done(behind)) << "a read ran before the held write ahead of it";
  event.Complete();
  EXPECT_OK(tier->Wait(on_event));
  tier->Release(held);
  EXPECT_OK(tier->Wait(behind));

  // Refused by the store (no such extent): moves nothing.
  Aligned spare(tier->PaddedBytes(0, ExtentKind::kParams));
  tickets.push_back(tier->Read(units, {{ExtentKind::kParams, spare.data}}));
  EXPECT_EQ(tier->Drain().code(), absl::StatusCode::kInvalidArgument);
  for (NvmeTier::Ticket ticket : tickets) {
    EXPECT_TRUE(tier->Done(ticket));
    result.statuses.push_back(tier->Wait(ticket).code());
  }
  result.bytes_read = tier->bytes_read();
  result.bytes_written = tier->bytes_written();
  EXPECT_GE(tier->busy_ms(), 0.0);
  return result;
}

TEST(NvmeTierDryRunTest, MovesTheRealTiersBytesAndTouchesNothing) {
  const int units = 4;
  const uint64_t bytes = 10001;  // not a multiple of 4 KiB: padded
  const std::string dir = nvme::testing::MakeTestDir();
  NvmeStoreOptions dry_options;
  dry_options.dir = dir + "/does-not-exist";
  dry_options.dry_run = true;
  auto dry = MakeTier(IoEngineKind::kPread, units, bytes, dry_options);
  ASSERT_NE(dry, nullptr);

  // Every buffer an address range with no memory behind it, as a dry device gives: the
  // tier, the store and the engine must neither read nor write them.
  const uint64_t padded = dry->PaddedBytes(0, ExtentKind::kParams);
  ASSERT_EQ(padded, 12288u);
  const uint64_t region_bytes = 2 * units * padded;
  void* region =
      ::mmap(nullptr, region_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(region, MAP_FAILED) << std::strerror(errno);
  const ScriptResult dry_result = RunScript(dry.get(), units, [&](int u, ExtentKind kind) -> void* {
    return static_cast<char*>(region) + (2 * u + (kind == ExtentKind::kMaster)) * padded;
  });
  EXPECT_EQ(dry_result.bytes_read, dry_result.expected_read);
  EXPECT_EQ(dry_result.bytes_written, dry_result.expected_written);
  EXPECT_GT(dry_result.bytes_written, 0u);
  const uint64_t dry_file_bytes = dry->file_bytes();
  EXPECT_EQ(dry_file_bytes, 2 * units * padded);
  dry.reset();
  ::munmap(region, region_bytes);
  EXPECT_FALSE(std::filesystem::exists(dry_options.dir));

  // The same script on a real tier: the same outcomes and counters.
  STRATA_SKIP_IF_UNAVAILABLE(IoEngineKind::kPread, dir);
  NvmeStoreOptions real_options;
  real_options.dir = dir;
  auto real = MakeTier(IoEngineKind::kPread, units, bytes, real_options);
  ASSERT_NE(real, nullptr);
  std::vector<std::unique_ptr<Aligned>> buffers;
  for (int i = 0; i < 2 * units; ++i) buffers.push_back(std::make_unique<Aligned>(padded));
  const ScriptResult real_result = RunScript(real.get(), units, [&](int u, ExtentKind kind) {
    return buffers[2 * u + (kind == ExtentKind::kMaster)]->data;
  });
  EXPECT_EQ(dry_result.statuses, real_result.statuses);
  EXPECT_EQ(dry_result.bytes_read, real_result.bytes_read);
  EXPECT_EQ(dry_result.bytes_written, real_result.bytes_written);
  EXPECT_EQ(dry_file_bytes, real->file_bytes());
}

// A dry read leaves its buffer as it was (a real one fills it with what was written).
TEST(NvmeTierDryRunTest, ReadsLeaveBuffersAsTheyWere) {
  const uint64_t bytes = 5000;
  NvmeStoreOptions options;
  options.dir = nvme::testing::MakeTestDir() + "/does-not-exist";
  options.dry_run = true;
  auto tier = MakeTier(IoEngineKind::kPread, 1, bytes, options);
  ASSERT_NE(tier, nullptr);
  const uint64_t padded = tier->PaddedBytes(0, ExtentKind::kParams);
  Aligned out(padded), in(padded);
  nvme::testing::FillPattern(out.data, padded, 1, 0);
  nvme::testing::FillPattern(in.data, padded, 2, 0);
  ASSERT_OK(tier->Wait(tier->Write(0, {{ExtentKind::kParams, out.data}})));
  ASSERT_OK(tier->Wait(tier->Read(0, {{ExtentKind::kParams, in.data}})));
  EXPECT_EQ(nvme::testing::FirstMismatch(in.data, padded, 2, 0), -1);
  EXPECT_EQ(nvme::testing::FirstMismatch(out.data, padded, 1, 0), -1);
  EXPECT_OK(tier->Drain());
  EXPECT_EQ(tier->bytes_read(), padded);
  EXPECT_EQ(tier->bytes_written(), padded);
}

}  // namespace
}  // namespace strata
