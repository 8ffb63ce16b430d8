// Tests FaultInjectingEngine over both real engines: every fault (EIO, ENOSPC, short reads
// and writes, torn writes, delays, reordering) is surfaced with the documented status and
// data effect, rules hit exactly the extents they name, every extent completes exactly
// once, and nothing hangs (every wait is bounded; Drain and destruction return promptly
// even with long delays pending).
#include "nvme/fault_injection.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <vector>

#include "core/testing/status_matchers.h"
#include "nvme/create_io_engine.h"
#include "nvme/io_buffer.h"
#include "nvme/test_util.h"

namespace strata::nvme {
namespace {

using ::strata::nvme::testing::FillPattern;
using ::strata::nvme::testing::FirstMismatch;
using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kWait = std::chrono::seconds(20);
constexpr uint64_t kKiB = 1024;
constexpr uint8_t kSentinel = 0xAB;
constexpr uint64_t kOldSeed = 1;  // what the file holds before a test writes
constexpr uint64_t kNewSeed = 2;  // what a test writes

class FaultTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTestDir();
    STRATA_SKIP_IF_UNAVAILABLE(GetParam(), dir_);
    path_ = dir_ + "/faults.dat";
    testing::WritePatternFile(path_, 1024 * kKiB, kOldSeed);
    ASSERT_OK_AND_ASSIGN(buffer_, IoBuffer::Allocate(1024 * kKiB));
  }

  std::unique_ptr<FaultInjectingEngine> MakeEngine(FaultPlan plan, uint32_t queue_depth = 8) {
    IoEngineOptions options;
    options.engine = GetParam();
    options.queue_depth = queue_depth;
    options.max_request_bytes = 16 * kKiB;
    StatusOr<std::unique_ptr<IoEngine>> inner = CreateIoEngine(options);
    EXPECT_OK(inner);
    if (!inner.ok()) return nullptr;
    auto engine = std::make_unique<FaultInjectingEngine>(std::move(inner).value(), plan);
    StatusOr<FileHandle> file = engine->OpenFile(path_, FileOptions());
    EXPECT_OK(file);
    file_ = file.ok() ? *file : FileHandle{};
    return engine;
  }

  // Extent i: offset i * length, buffer slot i.
  IoRequest Request(IoOp op, uint64_t index, uint64_t length) {
    return {op, file_, index * length, length, buffer_.data() + index * length, index};
  }

  // Submits, waits for all (bounded), returns completions by tag.
  std::map<uint64_t, IoCompletion> Run(IoEngine* engine, const std::vector<IoRequest>& batch) {
    EXPECT_OK(engine->Submit(batch));
    std::vector<IoCompletion> completions;
    Status waited = engine->Wait(batch.size(), kWait, &completions);
    EXPECT_OK(waited);
    std::map<uint64_t, IoCompletion> by_tag;
    for (IoCompletion& completion : completions) {
      EXPECT_EQ(by_tag.count(completion.tag), 0u) << "tag " << completion.tag << " twice";
      by_tag[completion.tag] = std::move(completion);
    }
    EXPECT_EQ(by_tag.size(), batch.size());
    return by_tag;
  }

  std::vector<uint8_t> ReadFileRange(uint64_t offset, uint64_t length) {
    std::vector<uint8_t> data(length);
    int fd = ::open(path_.c_str(), O_RDONLY);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::pread(fd, data.data(), length, offset), static_cast<ssize_t>(length));
    ::close(fd);
    return data;
  }

  std::string dir_;
  std::string path_;
  IoBuffer buffer_;
  FileHandle file_;
};

TEST_P(FaultTest, EioFailsTheChosenExtentsAndTouchesNothing) {
  FaultPlan plan;
  FaultRule read_rule;
  read_rule.kind = FaultKind::kEio;
  read_rule.op = IoOp::kRead;
  read_rule.skip = 1;  // the second read
  FaultRule write_rule;
  write_rule.kind = FaultKind::kEio;
  write_rule.op = IoOp::kWrite;
  write_rule.tag = 2;
  plan.rules = {read_rule, write_rule};
  auto engine = MakeEngine(plan);
  ASSERT_NE(engine, nullptr);

  const uint64_t length = 32 * kKiB;
  FillPattern(buffer_.data(), 3 * length, kNewSeed, 0);
  auto writes =
      Run(engine.get(), {Request(IoOp::kWrite, 0, length), Request(IoOp::kWrite, 1, length),
                         Request(IoOp::kWrite, 2, length)});
  EXPECT_OK(writes[0].status);
  EXPECT_OK(writes[1].status);
  EXPECT_THAT(writes[2].status,
              StatusIs(absl::StatusCode::kInternal,
                       AllOf(HasSubstr("write of " + path_ + " at offset 65536, length 32768"),
                             HasSubstr(std::strerror(EIO)))));
  std::vector<uint8_t> on_disk = ReadFileRange(2 * length, length);
  EXPECT_EQ(FirstMismatch(on_disk.data(), length, kOldSeed, 2 * length), -1)
      << "a failed write wrote nothing";

  std::memset(buffer_.data(), kSentinel, 3 * length);
  auto reads = Run(engine.get(), {Request(IoOp::kRead, 0, length), Request(IoOp::kRead, 1, length),
                                  Request(IoOp::kRead, 2, length)});
  EXPECT_OK(reads[0].status);
  EXPECT_THAT(reads[1].status, StatusIs(absl::StatusCode::kInternal,
                                        HasSubstr("read of " + path_ + " at offset 32768")));
  EXPECT_OK(reads[2].status);
  EXPECT_EQ(FirstMismatch(buffer_.data(), length, kNewSeed, 0), -1);
  EXPECT_TRUE(std::all_of(buffer_.data() + length, buffer_.data() + 2 * length,
                          [](char c) { return static_cast<uint8_t>(c) == kSentinel; }));
  EXPECT_EQ(FirstMismatch(buffer_.data() + 2 * length, length, kOldSeed, 2 * length), -1);
  EXPECT_EQ(engine->fault_stats().eio, 2u);
}

TEST_P(FaultTest, EnospcFailsWritesOnly) {
  FaultRule rule;
  rule.kind = FaultKind::kEnospc;
  rule.count = kEveryMatch;
  auto engine = MakeEngine({{rule}});
  ASSERT_NE(engine, nullptr);
  const uint64_t length = 16 * kKiB;
  FillPattern(buffer_.data(), 2 * length, kNewSeed, 0);
  auto done =
      Run(engine.get(), {Request(IoOp::kWrite, 0, length), Request(IoOp::kRead, 1, length)});
  EXPECT_THAT(done[0].status, StatusIs(absl::StatusCode::kResourceExhausted,
                                       AllOf(HasSubstr(std::strerror(ENOSPC)), HasSubstr(path_))));
  EXPECT_OK(done[1].status);
  std::vector<uint8_t> on_disk = ReadFileRange(0, length);
  EXPECT_EQ(FirstMismatch(on_disk.data(), length, kOldSeed, 0), -1);
  EXPECT_EQ(engine->fault_stats().enospc, 1u);
}

TEST_P(FaultTest, ShortReadsAndWritesAreDataLossWithThePrefixTransferred) {
  FaultRule short_read;
  short_read.kind = FaultKind::kShortRead;
  short_read.prefix_bytes = 8 * kKiB;
  FaultRule short_write;
  short_write.kind = FaultKind::kShortWrite;  // default prefix: half
  auto engine = MakeEngine({{short_read, short_write}});
  ASSERT_NE(engine, nullptr);
  const uint64_t length = 32 * kKiB;

  FillPattern(buffer_.data(), length, kNewSeed, 0);
  auto writes = Run(engine.get(), {Request(IoOp::kWrite, 0, length)});
  EXPECT_THAT(writes[0].status, StatusIs(absl::StatusCode::kDataLoss,
                                         HasSubstr("short write: 16384 of 32768 bytes")));
  EXPECT_EQ(writes[0].bytes_transferred, 16 * kKiB);
  std::vector<uint8_t> on_disk = ReadFileRange(0, length);
  EXPECT_EQ(FirstMismatch(on_disk.data(), 16 * kKiB, kNewSeed, 0), -1);
  EXPECT_EQ(FirstMismatch(on_disk.data() + 16 * kKiB, 16 * kKiB, kOldSeed, 16 * kKiB), -1);

  std::memset(buffer_.data(), kSentinel, 2 * length);
  auto reads = Run(engine.get(), {Request(IoOp::kRead, 1, length)});
  EXPECT_THAT(reads[1].status, StatusIs(absl::StatusCode::kDataLoss,
                                        AllOf(HasSubstr("read of " + path_ + " at offset 32768"),
                                              HasSubstr("short read: 8192 of 32768 bytes"))));
  EXPECT_EQ(reads[1].bytes_transferred, 8 * kKiB);
  EXPECT_EQ(FirstMismatch(buffer_.data() + length, 8 * kKiB, kOldSeed, length), -1);
  EXPECT_EQ(static_cast<uint8_t>(buffer_.data()[length + 8 * kKiB]), kSentinel);
  const FaultStats stats = engine->fault_stats();
  EXPECT_EQ(stats.short_reads, 1u);
  EXPECT_EQ(stats.short_writes, 1u);
}

TEST_P(FaultTest, TornWriteReportsSuccessButLeavesStaleBytesForChecksumsToCatch) {
  FaultRule torn;
  torn.kind = FaultKind::kTornWrite;
  torn.prefix_bytes = 4 * kKiB;
  torn.tag = 1;
  auto engine = MakeEngine({{torn}});
  ASSERT_NE(engine, nullptr);
  const uint64_t length = 64 * kKiB;
  FillPattern(buffer_.data(), 2 * length, kNewSeed, 0);
  auto writes =
      Run(engine.get(), {Request(IoOp::kWrite, 0, length), Request(IoOp::kWrite, 1, length)});
  EXPECT_OK(writes[0].status);
  EXPECT_OK(writes[1].status) << "a torn write is invisible to the I/O layer";
  EXPECT_EQ(writes[1].bytes_transferred, length);
  const FaultStats stats = engine->fault_stats();
  ASSERT_EQ(stats.torn.size(), 1u);
  EXPECT_EQ(stats.torn_writes, 1u);
  EXPECT_EQ(stats.torn[0].offset, length);
  EXPECT_EQ(stats.torn[0].length, length);
  EXPECT_EQ(stats.torn[0].bytes_written, 4 * kKiB);

  // Reading it back "succeeds" with a prefix of new and a tail of old bytes: only a
  // checksum of the extent (the NVMe store's job) can tell.
  std::memset(buffer_.data(), 0, 2 * length);
  auto reads =
      Run(engine.get(), {Request(IoOp::kRead, 0, length), Request(IoOp::kRead, 1, length)});
  EXPECT_OK(reads[0].status);
  EXPECT_OK(reads[1].status);
  EXPECT_EQ(FirstMismatch(buffer_.data(), length, kNewSeed, 0), -1);
  char* torn_data = buffer_.data() + length;
  EXPECT_EQ(FirstMismatch(torn_data, length, kNewSeed, length), int64_t{4 * kKiB});
  EXPECT_EQ(FirstMismatch(torn_data + 4 * kKiB, length - 4 * kKiB, kOldSeed, length + 4 * kKiB),
            -1);
}

TEST_P(FaultTest, DelayedCompletionsArriveLateAndWaitsStayBounded) {
  FaultRule delay;
  delay.kind = FaultKind::kDelay;
  delay.tag = 1;
  delay.delay = std::chrono::milliseconds(150);
  auto engine = MakeEngine({{delay}});
  ASSERT_NE(engine, nullptr);
  const uint64_t length = 16 * kKiB;
  const auto start = Clock::now();
  ASSERT_OK(engine->Submit({Request(IoOp::kRead, 0, length), Request(IoOp::kRead, 1, length),
                            Request(IoOp::kRead, 2, length)}));
  std::vector<IoCompletion> completions;
  Status waited = engine->Wait(3, std::chrono::milliseconds(40), &completions);
  EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded) << waited;
  ASSERT_EQ(completions.size(), 2u) << "the two undelayed reads";
  for (const IoCompletion& completion : completions) EXPECT_NE(completion.tag, 1u);
  EXPECT_EQ(engine->Outstanding(), 1u);
  completions.clear();
  ASSERT_OK(engine->Wait(1, kWait, &completions));
  ASSERT_EQ(completions.size(), 1u);
  EXPECT_EQ(completions[0].tag, 1u);
  EXPECT_OK(completions[0].status);
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(150));
  EXPECT_EQ(engine->fault_stats().delayed, 1u);
}

TEST_P(FaultTest, ReorderedCompletionsComeBackReversedInGroups) {
  FaultPlan plan;
  plan.reorder_window = 4;
  auto engine = MakeEngine(plan, /*queue_depth=*/1);  // inner completions in order
  ASSERT_NE(engine, nullptr);
  const uint64_t length = 16 * kKiB;
  std::vector<IoRequest> batch;
  for (uint64_t i = 0; i < 8; ++i) batch.push_back(Request(IoOp::kRead, i, length));
  ASSERT_OK(engine->Submit(batch));
  std::vector<IoCompletion> completions;
  ASSERT_OK(engine->Wait(8, kWait, &completions));
  std::vector<uint64_t> tags;
  for (const IoCompletion& completion : completions) tags.push_back(completion.tag);
  EXPECT_EQ(tags, (std::vector<uint64_t>{3, 2, 1, 0, 7, 6, 5, 4}));

  // An incomplete group is released once nothing else is outstanding: no hang.
  ASSERT_OK(engine->Submit({batch[0], batch[1], batch[2]}));
  completions.clear();
  ASSERT_OK(engine->Wait(3, kWait, &completions));
  tags.clear();
  for (const IoCompletion& completion : completions) tags.push_back(completion.tag);
  EXPECT_EQ(tags, (std::vector<uint64_t>{2, 1, 0}));
  EXPECT_EQ(engine->fault_stats().reordered_groups, 3u);
}

TEST_P(FaultTest, RulesHitExactlyTheExtentsTheyName) {
  FaultRule rule;
  rule.kind = FaultKind::kEio;
  rule.op = IoOp::kWrite;
  rule.skip = 2;
  rule.count = 2;
  auto engine = MakeEngine({{rule}});
  ASSERT_NE(engine, nullptr);
  std::vector<IoRequest> batch;
  for (uint64_t i = 0; i < 10; ++i) batch.push_back(Request(IoOp::kWrite, i, 4 * kKiB));
  auto done = Run(engine.get(), batch);
  for (uint64_t i = 0; i < 10; ++i) {
    EXPECT_EQ(done[i].status.ok(), i != 2 && i != 3) << "tag " << i << ": " << done[i].status;
  }
}

TEST_P(FaultTest, EveryExtentCompletesOnceUnderMixedFaults) {
  FaultPlan plan;
  plan.reorder_window = 5;
  const FaultKind kinds[] = {FaultKind::kEio,        FaultKind::kEnospc,    FaultKind::kShortRead,
                             FaultKind::kShortWrite, FaultKind::kTornWrite, FaultKind::kDelay};
  uint64_t skip = 0;
  for (FaultKind kind : kinds) {
    FaultRule rule;
    rule.kind = kind;
    rule.skip = skip++;
    rule.count = 3;
    rule.delay = std::chrono::milliseconds(5);
    plan.rules.push_back(rule);
  }
  auto engine = MakeEngine(plan, /*queue_depth=*/4);
  ASSERT_NE(engine, nullptr);
  std::vector<IoRequest> batch;
  for (uint64_t i = 0; i < 60; ++i) {
    batch.push_back(Request(i % 2 ? IoOp::kRead : IoOp::kWrite, i, 16 * kKiB));
  }
  auto done = Run(engine.get(), batch);
  EXPECT_EQ(done.size(), 60u);
  EXPECT_EQ(engine->Outstanding(), 0u);
  const FaultStats stats = engine->fault_stats();
  EXPECT_EQ(stats.eio, 3u);
  EXPECT_EQ(stats.enospc, 3u);
  EXPECT_EQ(stats.short_reads, 3u);
  EXPECT_EQ(stats.short_writes, 3u);
  EXPECT_EQ(stats.torn_writes, 3u);
  EXPECT_EQ(stats.delayed, 3u);
}

TEST_P(FaultTest, DrainAndDestructionDoNotWaitOutLongDelays) {
  FaultPlan plan;
  plan.reorder_window = 16;
  FaultRule delay;
  delay.kind = FaultKind::kDelay;
  delay.count = kEveryMatch;
  delay.delay = std::chrono::minutes(10);
  plan.rules = {delay};
  const auto start = Clock::now();
  {
    auto engine = MakeEngine(plan);
    ASSERT_NE(engine, nullptr);
    std::vector<IoRequest> batch;
    for (uint64_t i = 0; i < 20; ++i) batch.push_back(Request(IoOp::kRead, i, 16 * kKiB));
    ASSERT_OK(engine->Submit(batch));
    ASSERT_OK(engine->Drain());
    std::vector<IoCompletion> completions;
    EXPECT_EQ(engine->Poll(&completions), 20u);
    ASSERT_OK(engine->Submit(batch));
    // Destroyed with 20 reads in flight or held.
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

INSTANTIATE_TEST_SUITE_P(Engines, FaultTest, ::testing::ValuesIn(testing::kTestedEngines),
                         testing::EngineParamName);

}  // namespace
}  // namespace strata::nvme
