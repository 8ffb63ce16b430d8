// Tests NvmeStore over both engines (io_uring, pread): bit-exact round trips of extents of
// odd sizes with many requests in flight; corruption behind the store's back and torn
// writes caught by the checksums; every fault of nvme::FaultInjectingEngine either handled
// (short transfers the engine completes, delays, reordering) or reported, never wrong data
// and never a hang; the free-space check before anything is created; the directory
// checks; removal or keeping of the files; rejection of undeclared extents, misaligned
// buffers and conflicting requests. Every byte written is a function of (extent, version),
// so a misplaced or stale byte is found.
#include "nvme/nvme_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "core/run_identity.h"
#include "core/testing/status_matchers.h"
#include "nvme/create_io_engine.h"
#include "nvme/fault_injection.h"
#include "nvme/io_buffer.h"
#include "nvme/test_util.h"

namespace strata {
namespace {

using ::strata::nvme::testing::FillPattern;
using ::strata::nvme::testing::FirstMismatch;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::StatusIs;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kAlignment = nvme::kDirectIoAlignment;

bool Exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* handle = ::opendir(dir.c_str());
  if (handle == nullptr) return names;
  while (dirent* entry = ::readdir(handle)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(handle);
  return names;
}

// Three units, every kind, sizes that are not multiples of 4 KiB (and one that is). Spec
// unit * 4 + kind for the params and optimizer kinds, then each unit's gradient sums.
std::vector<ExtentSpec> OddExtents() {
  const char* names[] = {"embedding", "block.0", "head"};
  const uint64_t sizes[3][kNumExtentKinds] = {{5000, 10001, 10001, 10001, 10001},
                                              {70001, 4096, 36000, 36000, 36000},
                                              {1, 12345, 40961, 40961, 40961}};
  std::vector<ExtentSpec> specs;
  for (int unit = 0; unit < 3; ++unit) {
    for (int kind = 0; kind < kNumExtentKinds; ++kind) {
      if (static_cast<ExtentKind>(kind) == ExtentKind::kGrads) continue;
      specs.push_back({unit, names[unit], static_cast<ExtentKind>(kind), sizes[unit][kind]});
    }
  }
  for (int unit = 0; unit < 3; ++unit) {
    specs.push_back({unit, names[unit], ExtentKind::kGrads,
                     sizes[unit][static_cast<int>(ExtentKind::kGrads)]});
  }
  return specs;
}

// One aligned buffer per extent, sliced from one IoBuffer.
class ExtentBuffers {
 public:
  ExtentBuffers(const NvmeStore& store, const std::vector<ExtentSpec>& specs) : specs_(specs) {
    uint64_t total = 0;
    for (const ExtentSpec& spec : specs) {
      offsets_.push_back(total);
      total += store.PaddedBytes(spec.unit, spec.kind);
    }
    nvme::IoBufferOptions options;
    options.huge_pages = false;
    StatusOr<nvme::IoBuffer> buffer = nvme::IoBuffer::Allocate(total, options);
    EXPECT_OK(buffer);
    if (buffer.ok()) buffer_ = std::move(buffer).value();
    std::memset(buffer_.data(), 0, buffer_.bytes());
  }
  char* at(size_t i) { return buffer_.data() + offsets_[i]; }
  // Extent i's bytes of `version`: distinct per extent and per version.
  uint64_t Seed(size_t i, uint64_t version) const { return 1000 * version + i + 1; }
  void Fill(size_t i, uint64_t version) {
    FillPattern(at(i), specs_[i].bytes, Seed(i, version), 0);
  }
  void FillAll(uint64_t version) {
    for (size_t i = 0; i < specs_.size(); ++i) Fill(i, version);
  }
  void Clear() { std::memset(buffer_.data(), 0xAB, buffer_.bytes()); }
  int64_t Mismatch(size_t i, uint64_t version) {
    return FirstMismatch(at(i), specs_[i].bytes, Seed(i, version), 0);
  }

 private:
  std::vector<ExtentSpec> specs_;
  std::vector<uint64_t> offsets_;
  nvme::IoBuffer buffer_;
};

class NvmeStoreTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  void SetUp() override {
    dir_ = nvme::testing::MakeTestDir();
    STRATA_SKIP_IF_UNAVAILABLE(GetParam(), dir_);
    specs_ = OddExtents();
  }

  NvmeStoreOptions Options() const {
    NvmeStoreOptions options;
    options.dir = dir_;
    options.rank = 3;
    options.engine.engine = GetParam();
    options.engine.queue_depth = 8;
    options.engine.max_request_bytes = 16 * kKiB;  // extents split into several requests
    options.wait_timeout = std::chrono::seconds(20);
    return options;
  }

  std::unique_ptr<NvmeStore> MakeStore(const NvmeStoreOptions& options) {
    StatusOr<std::unique_ptr<NvmeStore>> store = NvmeStore::Create(options, specs_);
    EXPECT_OK(store);
    return store.ok() ? std::move(store).value() : nullptr;
  }

  // A store whose engine is wrapped in a fault injector following `plan`.
  std::unique_ptr<NvmeStore> MakeFaultyStore(const nvme::FaultPlan& plan,
                                             NvmeStoreOptions options) {
    options.engine_factory = [this, plan](const nvme::IoEngineOptions& engine_options)
        -> StatusOr<std::unique_ptr<nvme::IoEngine>> {
      ASSIGN_OR_RETURN(std::unique_ptr<nvme::IoEngine> inner, nvme::CreateIoEngine(engine_options));
      auto injector = std::make_unique<nvme::FaultInjectingEngine>(std::move(inner), plan);
      injector_ = injector.get();
      return std::unique_ptr<nvme::IoEngine>(std::move(injector));
    };
    return MakeStore(options);
  }
  std::unique_ptr<NvmeStore> MakeFaultyStore(const nvme::FaultPlan& plan) {
    return MakeFaultyStore(plan, Options());
  }

  // Submits all extents' writes (or reads), tags = extent index, and waits for all, a few
  // at a time; checks each tag comes back exactly once and returns the statuses by tag.
  std::map<uint64_t, Status> RunAll(NvmeStore* store, ExtentBuffers* buffers, bool write) {
    for (size_t i = 0; i < specs_.size(); ++i) {
      const ExtentSpec& spec = specs_[i];
      Status submitted = write ? store->SubmitWrite(spec.unit, spec.kind, buffers->at(i), i)
                               : store->SubmitRead(spec.unit, spec.kind, buffers->at(i), i);
      EXPECT_OK(submitted);
    }
    EXPECT_EQ(store->in_flight(), specs_.size());
    std::map<uint64_t, Status> by_tag;
    while (by_tag.size() < specs_.size()) {
      StatusOr<std::vector<NvmeStore::Completion>> done = store->Wait(3);
      EXPECT_OK(done);
      if (!done.ok()) break;
      for (const NvmeStore::Completion& completion : *done) {
        EXPECT_EQ(by_tag.count(completion.tag), 0u) << "tag " << completion.tag << " twice";
        EXPECT_LT(completion.tag, specs_.size());
        if (completion.tag >= specs_.size()) continue;
        EXPECT_EQ(completion.unit, specs_[completion.tag].unit);
        EXPECT_EQ(completion.kind, specs_[completion.tag].kind);
        EXPECT_EQ(completion.write, write);
        by_tag[completion.tag] = completion.status;
      }
    }
    EXPECT_EQ(store->in_flight(), 0u);
    return by_tag;
  }

  // Overwrites one byte of a swap file behind the store's back (buffered pwrite + fsync;
  // O_DIRECT reads write back and bypass the page cache).
  void CorruptByte(const std::string& path, uint64_t offset) {
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
    uint8_t byte = 0;
    ASSERT_EQ(::pread(fd, &byte, 1, offset), 1);
    byte ^= 0x5A;
    ASSERT_EQ(::pwrite(fd, &byte, 1, offset), 1);
    ASSERT_EQ(::fsync(fd), 0);
    ::close(fd);
  }

  std::string dir_;
  std::vector<ExtentSpec> specs_;
  nvme::FaultInjectingEngine* injector_ = nullptr;  // owned by the store
};

TEST_P(NvmeStoreTest, RoundTripsOddSizesBitExactWithManyInFlight) {
  auto store = MakeStore(Options());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->engine_name(), OptionName(GetParam()));
  uint64_t padded_total = 0;
  for (const ExtentSpec& spec : specs_) {
    const uint64_t padded = store->PaddedBytes(spec.unit, spec.kind);
    EXPECT_EQ(padded % kAlignment, 0u);
    EXPECT_GE(padded, spec.bytes);
    EXPECT_LT(padded - spec.bytes, kAlignment);
    padded_total += padded;
  }
  EXPECT_EQ(store->file_bytes(), padded_total);

  ExtentBuffers buffers(*store, specs_);
  buffers.FillAll(1);
  for (const auto& [tag, status] : RunAll(store.get(), &buffers, /*write=*/true)) {
    EXPECT_OK(status) << "tag " << tag;
  }
  buffers.Clear();
  for (const auto& [tag, status] : RunAll(store.get(), &buffers, /*write=*/false)) {
    EXPECT_OK(status) << "tag " << tag;
  }
  for (size_t i = 0; i < specs_.size(); ++i) EXPECT_EQ(buffers.Mismatch(i, 1), -1) << i;

  // Overwrite half the extents with a new version (blocking calls), read all back.
  for (size_t i = 0; i < specs_.size(); i += 2) {
    buffers.Fill(i, 2);
    ASSERT_OK(store->Write(specs_[i].unit, specs_[i].kind, buffers.at(i)));
  }
  buffers.Clear();
  for (size_t i = 0; i < specs_.size(); ++i) {
    Status read = store->Read(specs_[i].unit, specs_[i].kind, buffers.at(i));
    ASSERT_OK(read);
    EXPECT_EQ(buffers.Mismatch(i, i % 2 == 0 ? 2 : 1), -1) << i;
  }
  EXPECT_TRUE(store->Poll().empty());
  EXPECT_EQ(store->in_flight(), 0u);
}

TEST_P(NvmeStoreTest, MasterWeightsHaveAFileOfTheirOwn) {
  auto store = MakeStore(Options());
  ASSERT_NE(store, nullptr);
  const std::string prefix = dir_ + "/strata-" + RunId() + "-rank3-";
  EXPECT_EQ(store->files(),
            (std::vector<std::string>{prefix + "params.swap", prefix + "master.swap",
                                      prefix + "moments.swap", prefix + "grads.swap"}));
  std::map<std::string, uint64_t> file_bytes;
  for (const ExtentSpec& spec : specs_) {
    StatusOr<ExtentLocation> location = store->Locate(spec.unit, spec.kind);
    ASSERT_OK(location);
    const char* file = spec.kind == ExtentKind::kParams   ? "params.swap"
                       : spec.kind == ExtentKind::kMaster ? "master.swap"
                       : spec.kind == ExtentKind::kGrads  ? "grads.swap"
                                                          : "moments.swap";
    EXPECT_EQ(location->path, prefix + file);
    EXPECT_EQ(location->offset % kAlignment, 0u);
    EXPECT_EQ(location->logical_bytes, spec.bytes);
    file_bytes[location->path] =
        std::max(file_bytes[location->path], location->offset + location->padded_bytes);
  }
  uint64_t total = 0;
  for (const auto& [path, bytes] : file_bytes) {
    struct stat info {};
    ASSERT_EQ(::stat(path.c_str(), &info), 0) << path;
    EXPECT_EQ(static_cast<uint64_t>(info.st_size), bytes) << path << " is preallocated";
    total += bytes;
  }
  EXPECT_EQ(store->file_bytes(), total);

  // Only the param kind declared: only the params file exists.
  specs_ = {{0, "embedding", ExtentKind::kParams, 100}};
  NvmeStoreOptions options = Options();
  options.rank = 4;
  auto params_only = MakeStore(options);
  ASSERT_NE(params_only, nullptr);
  EXPECT_EQ(params_only->files(), (std::vector<std::string>{dir_ + "/strata-" + RunId() + "-rank4-params.swap"}));
  EXPECT_FALSE(Exists(dir_ + "/strata-" + RunId() + "-rank4-master.swap"));
}

TEST_P(NvmeStoreTest, CorruptedByteIsDetectedWithTheUnitName) {
  auto store = MakeStore(Options());
  ASSERT_NE(store, nullptr);
  ExtentBuffers buffers(*store, specs_);
  buffers.FillAll(1);
  const size_t victim = 6;  // block.0 exp_avg
  ASSERT_EQ(specs_[victim].kind, ExtentKind::kExpAvg);
  ASSERT_OK(store->Write(specs_[victim].unit, specs_[victim].kind, buffers.at(victim)));
  StatusOr<ExtentLocation> location = store->Locate(specs_[victim].unit, specs_[victim].kind);
  ASSERT_OK(location);
  CorruptByte(location->path, location->offset + 20000);

  buffers.Clear();
  Status read = store->Read(specs_[victim].unit, specs_[victim].kind, buffers.at(victim));
  EXPECT_THAT(
      read, StatusIs(absl::StatusCode::kDataLoss,
                     AllOf(HasSubstr("'block.0'"), HasSubstr("exp_avg"), HasSubstr(location->path),
                           HasSubstr(absl::StrCat("offset ", location->offset)),
                           HasSubstr("checksum mismatch"))));

  // The same through the asynchronous path.
  ASSERT_OK(store->SubmitRead(specs_[victim].unit, specs_[victim].kind, buffers.at(victim), 77));
  StatusOr<std::vector<NvmeStore::Completion>> done = store->Wait(1);
  ASSERT_OK(done);
  ASSERT_EQ(done->size(), 1u);
  EXPECT_EQ((*done)[0].tag, 77u);
  EXPECT_EQ((*done)[0].status.code(), absl::StatusCode::kDataLoss);

  // A byte in the padding is not state: no error. Rewriting repairs the extent.
  if (location->padded_bytes > location->logical_bytes) {
    CorruptByte(location->path, location->offset + location->padded_bytes - 1);
  }
  buffers.Fill(victim, 2);
  ASSERT_OK(store->Write(specs_[victim].unit, specs_[victim].kind, buffers.at(victim)));
  buffers.Clear();
  ASSERT_OK(store->Read(specs_[victim].unit, specs_[victim].kind, buffers.at(victim)));
  EXPECT_EQ(buffers.Mismatch(victim, 2), -1);
}

TEST_P(NvmeStoreTest, ReadingAnExtentNeverWrittenIsDataLoss) {
  auto store = MakeStore(Options());
  ASSERT_NE(store, nullptr);
  ExtentBuffers buffers(*store, specs_);
  Status read = store->Read(2, ExtentKind::kMaster, buffers.at(9));
  EXPECT_THAT(read, StatusIs(absl::StatusCode::kDataLoss,
                             AllOf(HasSubstr("'head'"), HasSubstr("never written"))));
  EXPECT_EQ(store->in_flight(), 0u);
}

TEST_P(NvmeStoreTest, EioOnWriteAndReadIsReportedWithTheUnitName) {
  nvme::FaultRule write_eio;
  write_eio.kind = nvme::FaultKind::kEio;
  write_eio.op = nvme::IoOp::kWrite;
  write_eio.skip = 1;  // the second write
  nvme::FaultRule read_eio;
  read_eio.kind = nvme::FaultKind::kEio;
  read_eio.op = nvme::IoOp::kRead;
  auto store = MakeFaultyStore({{write_eio, read_eio}});
  ASSERT_NE(store, nullptr);
  ExtentBuffers buffers(*store, specs_);
  buffers.FillAll(1);
  ASSERT_OK(store->Write(0, ExtentKind::kParams, buffers.at(0)));
  Status failed = store->Write(1, ExtentKind::kMaster, buffers.at(5));
  EXPECT_THAT(failed, StatusIs(absl::StatusCode::kInternal,
                               AllOf(HasSubstr("'block.0'"), HasSubstr("master"),
                                     HasSubstr(std::strerror(EIO)),
                                     HasSubstr(dir_ + "/strata-" + RunId() + "-rank3-master.swap"))));

  // The failed write left the extent unreadable, until a write succeeds.
  Status read = store->Read(1, ExtentKind::kMaster, buffers.at(5));
  EXPECT_THAT(read, StatusIs(absl::StatusCode::kDataLoss,
                             AllOf(HasSubstr("last write failed"), HasSubstr(std::strerror(EIO)))));

  buffers.Clear();
  read = store->Read(0, ExtentKind::kParams, buffers.at(0));  // the read EIO
  EXPECT_THAT(read, StatusIs(absl::StatusCode::kInternal,
                             AllOf(HasSubstr("'embedding'"), HasSubstr(std::strerror(EIO)))));
  ASSERT_OK(store->Read(0, ExtentKind::kParams, buffers.at(0))) << "the disk still has it";
  EXPECT_EQ(buffers.Mismatch(0, 1), -1);

  buffers.Fill(5, 2);
  ASSERT_OK(store->Write(1, ExtentKind::kMaster, buffers.at(5)));
  buffers.Clear();
  ASSERT_OK(store->Read(1, ExtentKind::kMaster, buffers.at(5)));
  EXPECT_EQ(buffers.Mismatch(5, 2), -1);
  EXPECT_EQ(injector_->fault_stats().eio, 2u);
}

TEST_P(NvmeStoreTest, EnospcOnWriteIsReportedAndTheExtentIsNotTrusted) {
  nvme::FaultRule enospc;
  enospc.kind = nvme::FaultKind::kEnospc;
  enospc.skip = 1;
  auto store = MakeFaultyStore({{enospc}});
  ASSERT_NE(store, nullptr);
  ExtentBuffers buffers(*store, specs_);
  buffers.FillAll(1);
  ASSERT_OK(store->Write(2, ExtentKind::kExpAvgSq, buffers.at(11)));
  buffers.Fill(11, 2);
  Status failed = store->Write(2, ExtentKind::kExpAvgSq, buffers.at(11));
  EXPECT_THAT(failed, StatusIs(absl::StatusCode::kResourceExhausted,
                               AllOf(HasSubstr("'head'"), HasSubstr("exp_avg_sq"),
                                     HasSubstr(std::strerror(ENOSPC)))));
  // The old version may or may not be intact: the store does not hand it out as the new.
  Status read = store->Read(2, ExtentKind::kExpAvgSq, buffers.at(11));
  EXPECT_EQ(read.code(), absl::StatusCode::kDataLoss) << read;
  EXPECT_EQ(injector_->fault_stats().enospc, 1u);
}

TEST_P(NvmeStoreTest, ShortTransfersTheEngineCannotCompleteAreErrors) {
  nvme::FaultRule short_write;
  short_write.kind = nvme::FaultKind::kShortWrite;
  short_write.skip = 1;
  nvme::FaultRule short_read;
  short_read.kind = nvme::FaultKind::kShortRead;
  short_read.prefix_bytes = 4 * kKiB;
  auto store = MakeFaultyStore({{short_write, short_read}});
  ASSERT_NE(store, nullptr);
  ExtentBuffers buffers(*store, specs_);
  buffers.FillAll(1);
  ASSERT_OK(store->Write(1, ExtentKind::kParams, buffers.at(4)));
  Status failed = store->Write(1, ExtentKind::kExpAvg, buffers.at(6));
  EXPECT_THAT(failed, StatusIs(absl::StatusCode::kDataLoss,
                               AllOf(HasSubstr("'block.0'"), HasSubstr("short write"))));
  Status read = store->Read(1, ExtentKind::kExpAvg, buffers.at(6));
  EXPECT_THAT(read, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("torn")));

  buffers.Clear();
  read = store->Read(1, ExtentKind::kParams, buffers.at(4));
  EXPECT_THAT(read, StatusIs(absl::StatusCode::kDataLoss,
                             AllOf(HasSubstr("short read"), HasSubstr("'block.0'"))));
  ASSERT_OK(store->Read(1, ExtentKind::kParams, buffers.at(4)));
  EXPECT_EQ(buffers.Mismatch(4, 1), -1);
}

TEST_P(NvmeStoreTest, ShortTransfersAndEagainTheEngineCompletesAreTransparent) {
  std::atomic<uint64_t> shortened{0};  // the pread engine's workers call the hook
  NvmeStoreOptions options = Options();
  options.engine.test_transfer_hook = [&shortened](const nvme::RawTransfer& transfer,
                                                   int64_t result) -> int64_t {
    if (transfer.attempt == 0 && transfer.length > 8 * kKiB && result > 8 * kKiB) {
      ++shortened;
      // Unaligned on purpose: the engine resumes from an aligned position.
      return transfer.op == nvme::IoOp::kRead ? result / 2 - 100 : result / 2;
    }
    if (transfer.attempt == 1 && transfer.offset % (32 * kKiB) == 0) return -EAGAIN;
    return result;
  };
  auto store = MakeStore(options);
  ASSERT_NE(store, nullptr);
  ExtentBuffers buffers(*store, specs_);
  buffers.FillAll(1);
  for (const auto& [tag, status] : RunAll(store.get(), &buffers, /*write=*/true)) {
    EXPECT_OK(status) << "tag " << tag;
  }
  buffers.Clear();
  for (const auto& [tag, status] : RunAll(store.get(), &buffers, /*write=*/false)) {
    EXPECT_OK(status) << "tag " << tag;
  }
  for (size_t i = 0; i < specs_.size(); ++i) EXPECT_EQ(buffers.Mismatch(i, 1), -1) << i;
  EXPECT_GT(shortened, 0u);
}

TEST_P(NvmeStoreTest, TornWriteIsCaughtByTheChecksumOnRead) {
  nvme::FaultRule torn;
  torn.kind = nvme::FaultKind::kTornWrite;
  torn.skip = 1;  // the second write: a new version over an old one
  torn.prefix_bytes = 4 * kKiB;
  auto store = MakeFaultyStore({{torn}});
  ASSERT_NE(store, nullptr);
  ExtentBuffers buffers(*store, specs_);
  const size_t victim = 4;  // block.0 params, 70001 bytes: many requests
  buffers.Fill(victim, 1);
  ASSERT_OK(store->Write(1, ExtentKind::kParams, buffers.at(victim)));
  buffers.Fill(victim, 2);
  ASSERT_OK(store->Write(1, ExtentKind::kParams, buffers.at(victim)))
      << "a torn write is invisible to the I/O layer";
  ASSERT_EQ(injector_->fault_stats().torn_writes, 1u);

  buffers.Clear();
  Status read = store->Read(1, ExtentKind::kParams, buffers.at(victim));
  EXPECT_THAT(
      read, StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr("'block.0'"), HasSubstr("params"),
                                                        HasSubstr("checksum mismatch"))));
}

// The fault plan given in the options (how the fault suite's STRATA_FAULT_NVME reaches a
// store): the real engine wrapped, the first write let through and the second failed;
// none in a dry run.
TEST_P(NvmeStoreTest, FaultPlanInTheOptionsWrapsTheEngine) {
  StatusOr<std::optional<nvme::FaultPlan>> plan = nvme::ParseFaultPlan("eio_write@1");
  ASSERT_OK(plan);
  ASSERT_TRUE(plan->has_value());
  NvmeStoreOptions options = Options();
  options.fault = **plan;
  auto store = MakeStore(options);
  ASSERT_NE(store, nullptr);
  ExtentBuffers buffers(*store, specs_);
  buffers.FillAll(1);
  EXPECT_OK(store->Write(specs_[0].unit, specs_[0].kind, buffers.at(0)));
  EXPECT_THAT(store->Write(specs_[1].unit, specs_[1].kind, buffers.at(1)),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("Input/output error")));
  store.reset();

  options.dry_run = true;
  auto dry = MakeStore(options);
  ASSERT_NE(dry, nullptr);
  EXPECT_EQ(dry->engine_name(), "null");
}

TEST_P(NvmeStoreTest, DelayedAndReorderedCompletionsGiveCorrectData) {
  nvme::FaultPlan plan;
  plan.reorder_window = 3;
  nvme::FaultRule delay;
  delay.kind = nvme::FaultKind::kDelay;
  delay.skip = 2;
  delay.count = 10;
  delay.delay = std::chrono::milliseconds(20);
  plan.rules = {delay};
  auto store = MakeFaultyStore(plan);
  ASSERT_NE(store, nullptr);
  ExtentBuffers buffers(*store, specs_);
  buffers.FillAll(1);
  for (const auto& [tag, status] : RunAll(store.get(), &buffers, /*write=*/true)) {
    EXPECT_OK(status) << "tag " << tag;
  }
  buffers.Clear();
  for (const auto& [tag, status] : RunAll(store.get(), &buffers, /*write=*/false)) {
    EXPECT_OK(status) << "tag " << tag;
  }
  for (size_t i = 0; i < specs_.size(); ++i) EXPECT_EQ(buffers.Mismatch(i, 1), -1) << i;
  const nvme::FaultStats stats = injector_->fault_stats();
  EXPECT_EQ(stats.delayed, 10u);
  EXPECT_GT(stats.reordered_groups, 0u);
}

TEST_P(NvmeStoreTest, WaitsAreBoundedAndDestructionDoesNotHang) {
  nvme::FaultRule delay;
  delay.kind = nvme::FaultKind::kDelay;
  delay.count = nvme::kEveryMatch;
  delay.delay = std::chrono::minutes(10);
  NvmeStoreOptions options = Options();
  options.wait_timeout = std::chrono::milliseconds(100);
  const auto start = Clock::now();
  {
    auto store = MakeFaultyStore({{delay}}, options);
    ASSERT_NE(store, nullptr);
    ExtentBuffers buffers(*store, specs_);
    buffers.FillAll(1);
    ASSERT_OK(store->SubmitWrite(0, ExtentKind::kMaster, buffers.at(1), 5));
    StatusOr<std::vector<NvmeStore::Completion>> done = store->Wait(1);
    EXPECT_EQ(done.status().code(), absl::StatusCode::kDeadlineExceeded) << done.status();
    EXPECT_EQ(store->in_flight(), 1u);
    Status write = store->Write(2, ExtentKind::kMaster, buffers.at(9));
    EXPECT_THAT(write, StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("'head'")));
    EXPECT_EQ(store->in_flight(), 2u);
    // Destroyed with both in flight, before their buffers.
    store.reset();
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

TEST_P(NvmeStoreTest, NotEnoughSpaceFailsBeforeAnyFileExists) {
  specs_.push_back({3, "huge", ExtentKind::kMaster, 1ull << 50});  // 1 PiB
  uint64_t needed = 1ull << 50;
  for (const ExtentSpec& spec : OddExtents()) {
    needed += (spec.bytes + kAlignment - 1) / kAlignment * kAlignment;
  }
  EXPECT_THAT(NvmeStore::Create(Options(), specs_),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr(dir_), HasSubstr("bytes free"),
                             HasSubstr(absl::StrCat("need ", needed, " bytes")))));
  EXPECT_TRUE(ListDir(dir_).empty()) << "created " << ListDir(dir_)[0];
}

TEST_P(NvmeStoreTest, MissingOrBadDirectoryIsAClearError) {
  NvmeStoreOptions options = Options();
  options.dir = dir_ + "/does-not-exist";
  StatusOr<std::unique_ptr<NvmeStore>> store = NvmeStore::Create(options, specs_);
  EXPECT_THAT(store,
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("zero.nvme_dir " + options.dir)));

  options.dir = dir_ + "/a-file";
  nvme::testing::WritePatternFile(options.dir, 10, 1);
  store = NvmeStore::Create(options, specs_);
  EXPECT_THAT(store, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not a directory")));

  options.dir = "";
  store = NvmeStore::Create(options, specs_);
  EXPECT_THAT(store, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("zero.nvme_dir")));
}

TEST_P(NvmeStoreTest, InvalidExtentsAreListedAllAtOnce) {
  specs_.push_back({0, "embedding", ExtentKind::kMaster, 10});    // twice
  specs_.push_back({5, "x", ExtentKind::kParams, 0});             // empty
  specs_.push_back({-1, "y", ExtentKind::kParams, 10});           // negative unit
  specs_.push_back({1, "not-block.0", ExtentKind::kExpAvg, 10});  // renamed, and twice
  StatusOr<std::unique_ptr<NvmeStore>> store = NvmeStore::Create(Options(), specs_);
  ASSERT_THAT(store,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("declared twice"), HasSubstr("0 bytes"),
                             HasSubstr("negative unit"), HasSubstr("also named 'block.0'"))));
  EXPECT_TRUE(ListDir(dir_).empty());
}

TEST_P(NvmeStoreTest, FilesAreRemovedAtDestructionUnlessKept) {
  std::vector<std::string> files;
  {
    auto store = MakeStore(Options());
    ASSERT_NE(store, nullptr);
    files = store->files();
    ASSERT_EQ(files.size(), 4u);
    for (const std::string& file : files) EXPECT_TRUE(Exists(file)) << file;
  }
  for (const std::string& file : files) EXPECT_FALSE(Exists(file)) << file;
  EXPECT_TRUE(ListDir(dir_).empty());

  NvmeStoreOptions options = Options();
  options.keep_files = true;
  {
    auto store = MakeStore(options);
    ASSERT_NE(store, nullptr);
    ExtentBuffers buffers(*store, specs_);
    buffers.Fill(1, 1);
    ASSERT_OK(store->Write(0, ExtentKind::kMaster, buffers.at(1)));
  }
  for (const std::string& file : files) EXPECT_TRUE(Exists(file)) << file;
  // Kept files are never reused or truncated: a store of the same run refuses their names
  // (O_EXCL) and leaves them as they are.
  struct stat before {};
  ASSERT_EQ(::stat(files[1].c_str(), &before), 0);
  EXPECT_THAT(NvmeStore::Create(Options(), specs_),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr(files[0])));
  struct stat after {};
  ASSERT_EQ(::stat(files[1].c_str(), &after), 0);
  EXPECT_EQ(after.st_size, before.st_size);
  for (const std::string& file : files) EXPECT_TRUE(Exists(file)) << file;
  for (const std::string& file : files) ::unlink(file.c_str());
  EXPECT_TRUE(ListDir(dir_).empty());
}

TEST_P(NvmeStoreTest, RejectsUndeclaredExtentsMisalignedBuffersAndConflicts) {
  specs_ = {{0, "embedding", ExtentKind::kParams, 5000},
            {0, "embedding", ExtentKind::kMaster, 5000}};
  auto store = MakeStore(Options());
  ASSERT_NE(store, nullptr);
  ExtentBuffers buffers(*store, specs_);
  buffers.FillAll(1);

  Status undeclared = store->SubmitWrite(7, ExtentKind::kMaster, buffers.at(0), 0);
  EXPECT_THAT(undeclared, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unit 7 master")));
  undeclared = store->Read(0, ExtentKind::kExpAvg, buffers.at(0));
  EXPECT_THAT(undeclared,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unit 0 exp_avg")));
  EXPECT_EQ(store->PaddedBytes(0, ExtentKind::kExpAvg), 0u);
  EXPECT_EQ(store->PaddedBytes(0, ExtentKind::kMaster), 8 * kKiB);
  EXPECT_FALSE(store->Locate(1, ExtentKind::kParams).ok());

  Status misaligned = store->SubmitWrite(0, ExtentKind::kMaster, buffers.at(1) + 512, 0);
  EXPECT_THAT(misaligned, StatusIs(absl::StatusCode::kInvalidArgument,
                                   AllOf(HasSubstr("not aligned"), HasSubstr("'embedding'"))));
  misaligned = store->Read(0, ExtentKind::kMaster, nullptr);
  EXPECT_EQ(misaligned.code(), absl::StatusCode::kInvalidArgument) << misaligned;
  EXPECT_EQ(store->in_flight(), 0u);

  // One write per extent in flight; no read of it meanwhile.
  ASSERT_OK(store->SubmitWrite(0, ExtentKind::kMaster, buffers.at(1), 1));
  EXPECT_EQ(store->SubmitWrite(0, ExtentKind::kMaster, buffers.at(1), 2).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->SubmitRead(0, ExtentKind::kMaster, buffers.at(1), 3).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_OK(store->SubmitWrite(0, ExtentKind::kParams, buffers.at(0), 4));
  StatusOr<std::vector<NvmeStore::Completion>> done = store->Wait(2);
  ASSERT_OK(done);
  std::set<uint64_t> tags;
  for (const NvmeStore::Completion& completion : *done) {
    EXPECT_OK(completion.status);
    tags.insert(completion.tag);
  }
  EXPECT_EQ(tags, (std::set<uint64_t>{1, 4}));
  // Reads of one extent may overlap each other, but not a write.
  ASSERT_OK(store->SubmitRead(0, ExtentKind::kMaster, buffers.at(1), 5));
  ASSERT_OK(store->SubmitRead(0, ExtentKind::kMaster, buffers.at(1), 6));
  EXPECT_EQ(store->SubmitWrite(0, ExtentKind::kMaster, buffers.at(1), 7).code(),
            absl::StatusCode::kFailedPrecondition);
  done = store->Wait(2);
  ASSERT_OK(done);
  EXPECT_EQ(done->size(), 2u);
  EXPECT_EQ(buffers.Mismatch(1, 1), -1);
}

INSTANTIATE_TEST_SUITE_P(Engines, NvmeStoreTest, ::testing::ValuesIn(nvme::testing::kTestedEngines),
                         nvme::testing::EngineParamName);

// ---------------------------------------------------------------------------------------
// Dry run: no disk touched, no buffer touched, the real store's layout and validation.

// An address range with no memory behind it (PROT_NONE), like a dry device's buffers: any
// read or write of it crashes the test.
class Untouchable {
 public:
  explicit Untouchable(uint64_t bytes) : bytes_(bytes) {
    void* data =
        ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    EXPECT_NE(data, MAP_FAILED) << std::strerror(errno);
    data_ = data == MAP_FAILED ? nullptr : static_cast<char*>(data);
  }
  ~Untouchable() {
    if (data_ != nullptr) ::munmap(data_, bytes_);
  }
  char* data() { return data_; }

 private:
  char* data_ = nullptr;
  uint64_t bytes_;
};

class NvmeStoreDryRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = nvme::testing::MakeTestDir();
    specs_ = OddExtents();
  }

  NvmeStoreOptions Options(const std::string& dir, bool dry_run) const {
    NvmeStoreOptions options;
    options.dir = dir;
    options.rank = 3;
    options.dry_run = dry_run;
    options.engine.engine = IoEngineKind::kPread;  // the real twins'
    options.engine.max_request_bytes = 16 * kKiB;
    options.wait_timeout = std::chrono::seconds(20);
    return options;
  }

  std::string dir_;
  std::vector<ExtentSpec> specs_;
};

TEST_F(NvmeStoreDryRunTest, CreatesNothingAndNeedsNoDirectory) {
  const std::string missing = dir_ + "/does-not-exist";
  std::vector<std::string> files;
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<NvmeStore> store,
                         NvmeStore::Create(Options(missing, /*dry_run=*/true), specs_));
    EXPECT_TRUE(store->dry_run());
    EXPECT_EQ(store->engine_name(), "null");
    files = store->files();
    const std::string prefix = missing + "/strata-" + RunId() + "-rank3-";
    EXPECT_EQ(files, (std::vector<std::string>{prefix + "params.swap", prefix + "master.swap",
                                               prefix + "moments.swap", prefix + "grads.swap"}));
    ExtentBuffers buffers(*store, specs_);
    for (size_t i = 0; i < specs_.size(); ++i) {
      ASSERT_OK(store->Write(specs_[i].unit, specs_[i].kind, buffers.at(i)));
      ASSERT_OK(store->Read(specs_[i].unit, specs_[i].kind, buffers.at(i)));
    }
    EXPECT_FALSE(Exists(missing));
    EXPECT_TRUE(ListDir(dir_).empty()) << "created " << ListDir(dir_)[0];
  }
  EXPECT_FALSE(Exists(missing));
  EXPECT_TRUE(ListDir(dir_).empty()) << "created " << ListDir(dir_)[0];

  // Over an existing directory, even with files kept: no lock file, no swap file.
  NvmeStoreOptions options = Options(dir_, /*dry_run=*/true);
  options.keep_files = true;
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<NvmeStore> store, NvmeStore::Create(options, specs_));
    ExtentBuffers buffers(*store, specs_);
    ASSERT_OK(store->Write(specs_[0].unit, specs_[0].kind, buffers.at(0)));
    EXPECT_TRUE(ListDir(dir_).empty()) << "created " << ListDir(dir_)[0];
  }
  EXPECT_TRUE(ListDir(dir_).empty()) << "created " << ListDir(dir_)[0];

  // Not even free space is asked for: a petabyte of state is planned, not refused.
  specs_.push_back({3, "huge", ExtentKind::kMaster, 1ull << 50});
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<NvmeStore> huge,
                       NvmeStore::Create(Options(missing, /*dry_run=*/true), specs_));
  EXPECT_GT(huge->file_bytes(), 1ull << 50);
  EXPECT_FALSE(Exists(missing));

  // Configuration errors are still errors.
  EXPECT_THAT(NvmeStore::Create(Options("", /*dry_run=*/true), specs_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("zero.nvme_dir")));
}

TEST_F(NvmeStoreDryRunTest, LayoutIsTheRealStores) {
  STRATA_SKIP_IF_UNAVAILABLE(IoEngineKind::kPread, dir_);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<NvmeStore> real,
                       NvmeStore::Create(Options(dir_, /*dry_run=*/false), specs_));
  const std::vector<std::string> listed = ListDir(dir_);  // the real files and lock
  // A dry store of the same directory and rank beside a live one: no claim, no conflict.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<NvmeStore> dry,
                       NvmeStore::Create(Options(dir_, /*dry_run=*/true), specs_));
  EXPECT_EQ(ListDir(dir_), listed);
  EXPECT_EQ(dry->files(), real->files());
  EXPECT_EQ(dry->file_bytes(), real->file_bytes());
  uint64_t on_disk = 0;
  for (const std::string& path : real->files()) {
    struct stat info {};
    ASSERT_EQ(::stat(path.c_str(), &info), 0) << path;
    on_disk += info.st_size;
  }
  EXPECT_EQ(dry->file_bytes(), on_disk);
  for (const ExtentSpec& spec : specs_) {
    ASSERT_OK_AND_ASSIGN(ExtentLocation real_location, real->Locate(spec.unit, spec.kind));
    ASSERT_OK_AND_ASSIGN(ExtentLocation dry_location, dry->Locate(spec.unit, spec.kind));
    EXPECT_EQ(dry_location.path, real_location.path);
    EXPECT_EQ(dry_location.offset, real_location.offset);
    EXPECT_EQ(dry_location.logical_bytes, real_location.logical_bytes);
    EXPECT_EQ(dry_location.padded_bytes, real_location.padded_bytes);
    EXPECT_EQ(dry->PaddedBytes(spec.unit, spec.kind), real->PaddedBytes(spec.unit, spec.kind));
  }
  dry.reset();
  EXPECT_EQ(ListDir(dir_), listed) << "the dry store removed nothing of the live one's";
}

TEST_F(NvmeStoreDryRunTest, ReadsAndWritesTouchNoBuffer) {
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<NvmeStore> store,
      NvmeStore::Create(Options(dir_ + "/does-not-exist", /*dry_run=*/true), specs_));
  // Written and read back in patterns: a dry read leaves what the buffer held, padding
  // included, and hands out no checksum error for it.
  ExtentBuffers written(*store, specs_), read(*store, specs_);
  written.FillAll(1);
  read.FillAll(2);
  for (size_t i = 0; i < specs_.size(); ++i) {
    ASSERT_OK(store->SubmitWrite(specs_[i].unit, specs_[i].kind, written.at(i), i));
  }
  EXPECT_EQ(store->in_flight(), specs_.size());
  ASSERT_OK_AND_ASSIGN(std::vector<NvmeStore::Completion> done, store->Wait(specs_.size()));
  ASSERT_EQ(done.size(), specs_.size());
  for (const NvmeStore::Completion& completion : done) {
    EXPECT_TRUE(completion.write);
    EXPECT_OK(completion.status) << "tag " << completion.tag;
  }
  EXPECT_EQ(store->in_flight(), 0u);
  for (size_t i = 0; i < specs_.size(); ++i) {
    ASSERT_OK(store->SubmitRead(specs_[i].unit, specs_[i].kind, read.at(i), 100 + i));
  }
  ASSERT_OK_AND_ASSIGN(done, store->Wait(specs_.size()));
  ASSERT_EQ(done.size(), specs_.size());
  for (const NvmeStore::Completion& completion : done) EXPECT_OK(completion.status);
  for (size_t i = 0; i < specs_.size(); ++i) {
    ASSERT_OK(store->Read(specs_[i].unit, specs_[i].kind, read.at(i)));
    EXPECT_EQ(read.Mismatch(i, 2), -1) << "extent " << i << " was written into";
    EXPECT_EQ(written.Mismatch(i, 1), -1) << "extent " << i;
  }

  // Buffers with no memory behind them: neither read (no checksum of a write) nor written.
  uint64_t total = 0;
  for (const ExtentSpec& spec : specs_) total += store->PaddedBytes(spec.unit, spec.kind);
  Untouchable nothing(total);
  ASSERT_NE(nothing.data(), nullptr);
  uint64_t offset = 0;
  for (const ExtentSpec& spec : specs_) {
    ASSERT_OK(store->Write(spec.unit, spec.kind, nothing.data() + offset));
    ASSERT_OK(store->SubmitRead(spec.unit, spec.kind, nothing.data() + offset, 0));
    ASSERT_OK(store->Read(spec.unit, spec.kind, nothing.data() + offset));
    offset += store->PaddedBytes(spec.unit, spec.kind);
  }
  ASSERT_OK_AND_ASSIGN(done, store->Wait(1));
  EXPECT_EQ(done.size(), specs_.size());
  EXPECT_TRUE(store->Poll().empty());
}

TEST_F(NvmeStoreDryRunTest, RejectsWhatTheRealStoreRejects) {
  specs_ = {{0, "embedding", ExtentKind::kParams, 5000},
            {0, "embedding", ExtentKind::kMaster, 5000}};
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<NvmeStore> store,
      NvmeStore::Create(Options(dir_ + "/does-not-exist", /*dry_run=*/true), specs_));
  ExtentBuffers buffers(*store, specs_);
  // Unlike a real store, an extent never written reads (a plan's set-up stores no values).
  EXPECT_OK(store->Read(0, ExtentKind::kMaster, buffers.at(1)));
  EXPECT_THAT(store->Write(0, ExtentKind::kExpAvg, buffers.at(0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unit 0 exp_avg")));
  EXPECT_THAT(store->Write(0, ExtentKind::kMaster, buffers.at(1) + 512),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not aligned")));
  ASSERT_OK(store->SubmitWrite(0, ExtentKind::kMaster, buffers.at(1), 1));
  EXPECT_EQ(store->SubmitRead(0, ExtentKind::kMaster, buffers.at(1), 2).code(),
            absl::StatusCode::kFailedPrecondition)
      << "a write in flight, though the null engine finished it at once";
  ASSERT_OK_AND_ASSIGN(std::vector<NvmeStore::Completion> done, store->Wait(1));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].tag, 1u);
  EXPECT_OK(done[0].status);
  EXPECT_OK(store->Read(0, ExtentKind::kMaster, buffers.at(1)));
  EXPECT_EQ(store->in_flight(), 0u);
}

}  // namespace
}  // namespace strata
