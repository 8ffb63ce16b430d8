// Tests the io_uring and pread engines against the one contract of io_engine.h: bit-exact
// round trips with many extents in flight at several queue depths and split sizes, sizes
// that are multiples of 4 KiB but not of 1 MiB, errors that name file/offset/length (end of
// file, kernel errors), batch validation, EAGAIN and short-transfer resubmission through
// the test hook below the retry logic, bounded failure instead of spinning, draining on
// destruction, buffer registration and its fallback, and the io_uring probe/fallback.
#include "nvme/create_io_engine.h"
#include "nvme/io_engine.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <set>
#include <vector>

#include "core/testing/status_matchers.h"
#include "nvme/io_buffer.h"
#include "nvme/test_util.h"

namespace strata::nvme {
namespace {

using ::strata::nvme::testing::FillPattern;
using ::strata::nvme::testing::FirstMismatch;
using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr std::chrono::milliseconds kWait = std::chrono::seconds(20);
constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * 1024;

struct Extent {
  uint64_t offset;
  uint64_t length;
};

// Extents laid end to end: multiples of 4 KiB, mostly not of 1 MiB, some split.
std::vector<Extent> MixedExtents(uint64_t* total) {
  const uint64_t sizes[] = {4 * kKiB,   12 * kKiB, 260 * kKiB, kMiB + 8 * kKiB, 2 * kMiB - 4 * kKiB,
                            100 * kKiB, 4 * kKiB,  kMiB,       36 * kKiB,       516 * kKiB,
                            8 * kKiB,   128 * kKiB};
  std::vector<Extent> extents;
  uint64_t offset = 0;
  for (int round = 0; round < 2; ++round) {
    for (uint64_t size : sizes) {
      extents.push_back({offset, size});
      offset += size;
    }
  }
  *total = offset;
  return extents;
}

class EngineTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTestDir();
    STRATA_SKIP_IF_UNAVAILABLE(GetParam(), dir_);
  }

  std::unique_ptr<IoEngine> MakeEngine(IoEngineOptions options = {}) {
    options.engine = GetParam();
    StatusOr<std::unique_ptr<IoEngine>> engine = CreateIoEngine(options);
    EXPECT_OK(engine);
    if (!engine.ok()) return nullptr;
    EXPECT_EQ((*engine)->info().engine, OptionName(GetParam()));
    return std::move(engine).value();
  }

  FileHandle Open(IoEngine* engine, const std::string& name, FileOptions options = {}) {
    options.create = true;
    StatusOr<FileHandle> file = engine->OpenFile(dir_ + "/" + name, options);
    EXPECT_OK(file);
    return file.ok() ? *file : FileHandle{};
  }

  // Submits everything in one batch and waits for all completions (bounded).
  std::vector<IoCompletion> RunBatch(IoEngine* engine, const std::vector<IoRequest>& requests) {
    EXPECT_OK(engine->Submit(requests));
    std::vector<IoCompletion> completions;
    Status waited = engine->Wait(requests.size(), kWait, &completions);
    EXPECT_OK(waited);
    EXPECT_EQ(completions.size(), requests.size());
    return completions;
  }

  std::string dir_;
};

TEST_P(EngineTest, RoundTripsBitExactWithManyExtentsInFlight) {
  uint64_t total = 0;
  const std::vector<Extent> extents = MixedExtents(&total);
  for (uint32_t depth : {1u, 4u, 32u}) {
    for (uint64_t max_request : {kMiB, 64 * kKiB}) {
      SCOPED_TRACE(absl::StrFormat("queue depth %d, max request %d", depth, max_request));
      IoEngineOptions options;
      options.queue_depth = depth;
      options.max_request_bytes = max_request;
      std::unique_ptr<IoEngine> engine = MakeEngine(options);
      ASSERT_NE(engine, nullptr);
      // Two files, extents alternating between them, so requests to both are in flight.
      FileOptions file_options;
      file_options.truncate = true;
      file_options.preallocate_bytes = total;
      const FileHandle files[2] = {Open(engine.get(), "a.dat", file_options),
                                   Open(engine.get(), "b.dat", file_options)};
      const uint64_t seed = depth * 1000 + max_request;
      StatusOr<IoBuffer> source = IoBuffer::Allocate(2 * total);
      StatusOr<IoBuffer> sink = IoBuffer::Allocate(2 * total);
      ASSERT_OK(source);
      ASSERT_OK(sink);
      std::vector<IoRequest> writes, reads;
      for (size_t i = 0; i < extents.size(); ++i) {
        for (int f = 0; f < 2; ++f) {
          const uint64_t offset_in_buffer = f * total + extents[i].offset;
          FillPattern(source->data() + offset_in_buffer, extents[i].length, seed + f,
                      extents[i].offset);
          IoRequest request{IoOp::kWrite,
                            files[f],
                            extents[i].offset,
                            extents[i].length,
                            source->data() + offset_in_buffer,
                            i * 2 + f};
          writes.push_back(request);
          request.op = IoOp::kRead;
          request.buffer = sink->data() + offset_in_buffer;
          reads.push_back(request);
        }
      }
      std::reverse(reads.begin(), reads.end());  // a different order than written
      for (const IoCompletion& completion : RunBatch(engine.get(), writes)) {
        EXPECT_OK(completion.status);
        EXPECT_EQ(completion.bytes_transferred, completion.length);
      }
      std::vector<IoCompletion> completions = RunBatch(engine.get(), reads);
      std::set<uint64_t> tags;
      for (const IoCompletion& completion : completions) {
        EXPECT_OK(completion.status);
        const Extent& extent = extents[completion.tag / 2];
        EXPECT_EQ(completion.offset, extent.offset);
        EXPECT_EQ(completion.length, extent.length);
        EXPECT_EQ(completion.op, IoOp::kRead);
        tags.insert(completion.tag);
      }
      EXPECT_EQ(tags.size(), reads.size());
      for (int f = 0; f < 2; ++f) {
        EXPECT_EQ(FirstMismatch(sink->data() + f * total, total, seed + f, 0), -1) << "file " << f;
      }
      EXPECT_EQ(engine->Outstanding(), 0u);
      const EngineStats stats = engine->stats();
      EXPECT_EQ(stats.extents_completed, writes.size() + reads.size());
      EXPECT_EQ(stats.bytes_read, 2 * total);
      EXPECT_EQ(stats.bytes_written, 2 * total);
      uint64_t pieces = 0;
      for (const Extent& extent : extents)
        pieces += (extent.length + max_request - 1) / max_request;
      EXPECT_EQ(stats.transfers_issued, 4 * pieces) << "each extent split into pieces";
    }
  }
}

TEST_P(EngineTest, BufferedFilesTakeAnySize) {
  std::unique_ptr<IoEngine> engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  FileOptions options;
  options.direct_io = false;
  const FileHandle file = Open(engine.get(), "buffered.dat", options);
  const uint64_t sizes[] = {1, 4095, 5000, kMiB + 3, 77};
  std::vector<uint8_t> source(3 * kMiB), sink(3 * kMiB + 1);
  std::vector<IoRequest> writes, reads;
  uint64_t offset = 3;
  for (uint64_t size : sizes) {
    FillPattern(source.data() + offset, size, 9, offset);
    writes.push_back({IoOp::kWrite, file, offset, size, source.data() + offset, offset});
    reads.push_back({IoOp::kRead, file, offset, size, sink.data() + offset + 1, offset});
    offset += size;
  }
  for (const IoCompletion& completion : RunBatch(engine.get(), writes)) {
    EXPECT_OK(completion.status);
  }
  for (const IoCompletion& completion : RunBatch(engine.get(), reads)) {
    EXPECT_OK(completion.status);
  }
  EXPECT_EQ(FirstMismatch(sink.data() + 4, offset - 3, 9, 3), -1);
}

TEST_P(EngineTest, ReadPastEndOfFileIsAnErrorNamingFileAndOffset) {
  std::unique_ptr<IoEngine> engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  const std::string path = dir_ + "/short.dat";
  testing::WritePatternFile(path, 64 * kKiB, 1);
  StatusOr<FileHandle> file = engine->OpenFile(path, FileOptions());
  ASSERT_OK(file);
  StatusOr<IoBuffer> buffer = IoBuffer::Allocate(kMiB);
  ASSERT_OK(buffer);

  // Crossing the end: the first 4 KiB arrive, then end of file.
  std::vector<IoCompletion> completions = RunBatch(
      engine.get(), {{IoOp::kRead, *file, 60 * kKiB, 16 * kKiB, buffer->data(), 1},
                     {IoOp::kRead, *file, kMiB, 4 * kKiB, buffer->data() + 512 * kKiB, 2}});
  for (const IoCompletion& completion : completions) {
    EXPECT_THAT(completion.status, StatusIs(absl::StatusCode::kOutOfRange,
                                            AllOf(HasSubstr(path), HasSubstr("end of file"))));
    if (completion.tag == 1) {
      EXPECT_THAT(completion.status.message(), AllOf(HasSubstr("at offset 61440, length 16384"),
                                                     HasSubstr("ends at offset 65536")));
      EXPECT_EQ(completion.bytes_transferred, 4 * kKiB);
      EXPECT_EQ(FirstMismatch(buffer->data(), 4 * kKiB, 1, 60 * kKiB), -1);
    } else {
      EXPECT_THAT(completion.status.message(), HasSubstr("at offset 1048576, length 4096"));
    }
  }

  // A file whose size is not a multiple of 4 KiB, read with O_DIRECT past its end.
  const std::string odd_path = dir_ + "/odd.dat";
  testing::WritePatternFile(odd_path, 5000, 2);
  StatusOr<FileHandle> odd = engine->OpenFile(odd_path, FileOptions());
  ASSERT_OK(odd);
  completions = RunBatch(engine.get(), {{IoOp::kRead, *odd, 0, 8 * kKiB, buffer->data(), 3}});
  EXPECT_THAT(completions[0].status,
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("ends at offset 5000")));
  EXPECT_EQ(FirstMismatch(buffer->data(), 5000, 2, 0), -1);
}

TEST_P(EngineTest, RejectsAnInvalidBatchAsAWhole) {
  std::unique_ptr<IoEngine> engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  const FileHandle file = Open(engine.get(), "v.dat");
  StatusOr<IoBuffer> buffer = IoBuffer::Allocate(64 * kKiB);
  ASSERT_OK(buffer);
  Status submitted =
      engine->Submit({{IoOp::kWrite, file, 0, 4 * kKiB, buffer->data(), 1},
                      {IoOp::kWrite, file, 4 * kKiB, 4 * kKiB, buffer->data() + 512, 2}});
  EXPECT_THAT(submitted,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("O_DIRECT"), HasSubstr("request 1 of a batch of 2"))));
  submitted = engine->Submit({{IoOp::kRead, FileHandle{42}, 0, 4 * kKiB, buffer->data(), 3}});
  EXPECT_EQ(submitted.code(), absl::StatusCode::kInvalidArgument);
  submitted = engine->Submit({{IoOp::kRead, file, 0, 0, buffer->data(), 4}});
  EXPECT_EQ(submitted.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->Outstanding(), 0u);
  std::vector<IoCompletion> completions;
  EXPECT_EQ(engine->Poll(&completions), 0u);
  EXPECT_EQ(engine->stats().transfers_issued, 0u);
}

TEST_P(EngineTest, ResubmitsEagainAndShortTransfers) {
  struct Case {
    const char* name;
    TransferHook hook;
    bool direct;
  };
  const std::vector<Case> cases = {
      {"EAGAIN twice per piece",
       [](const RawTransfer& t, int64_t result) { return t.attempt < 2 ? -EAGAIN : result; }, true},
      {"aligned short transfers",
       [](const RawTransfer& t, int64_t result) {
         return t.attempt < 3 && result > 4096 ? (result / 2) / 4096 * 4096 : result;
       },
       true},
      {"unaligned short transfers on O_DIRECT (resumed from an aligned position)",
       [](const RawTransfer& t, int64_t result) {
         return t.attempt == 0 && result > 8192 ? result - 100 : result;
       },
       true},
      {"unaligned short transfers on a buffered file",
       [](const RawTransfer& t, int64_t result) {
         return t.attempt < 4 && result > 1 ? result / 3 : result;
       },
       false},
  };
  for (const Case& test_case : cases) {
    SCOPED_TRACE(test_case.name);
    IoEngineOptions options;
    options.queue_depth = 8;
    options.max_request_bytes = 256 * kKiB;
    options.test_transfer_hook = test_case.hook;
    std::unique_ptr<IoEngine> engine = MakeEngine(options);
    ASSERT_NE(engine, nullptr);
    FileOptions file_options;
    file_options.direct_io = test_case.direct;
    file_options.truncate = true;
    const FileHandle file = Open(engine.get(), "retry.dat", file_options);
    uint64_t total = 0;
    const std::vector<Extent> extents = MixedExtents(&total);
    StatusOr<IoBuffer> source = IoBuffer::Allocate(total);
    StatusOr<IoBuffer> sink = IoBuffer::Allocate(total);
    ASSERT_OK(source);
    ASSERT_OK(sink);
    FillPattern(source->data(), total, 5, 0);
    std::vector<IoRequest> writes, reads;
    for (size_t i = 0; i < extents.size(); ++i) {
      writes.push_back({IoOp::kWrite, file, extents[i].offset, extents[i].length,
                        source->data() + extents[i].offset, i});
      reads.push_back({IoOp::kRead, file, extents[i].offset, extents[i].length,
                       sink->data() + extents[i].offset, i});
    }
    for (const IoCompletion& completion : RunBatch(engine.get(), writes)) {
      EXPECT_OK(completion.status);
    }
    for (const IoCompletion& completion : RunBatch(engine.get(), reads)) {
      EXPECT_OK(completion.status);
    }
    EXPECT_EQ(FirstMismatch(sink->data(), total, 5, 0), -1);
    const EngineStats stats = engine->stats();
    if (test_case.hook(RawTransfer{}, 1 << 20) == -EAGAIN) {
      // Each piece is issued three times: two -EAGAIN, then done.
      EXPECT_EQ(stats.resubmitted_eagain * 3, stats.transfers_issued * 2);
      EXPECT_EQ(stats.resubmitted_short, 0u);
    } else {
      EXPECT_GT(stats.resubmitted_short, 0u);
      EXPECT_EQ(stats.resubmitted_eagain, 0u);
    }
  }
}

TEST_P(EngineTest, EndlessEagainOrZeroByteWritesFailInsteadOfSpinning) {
  for (int zero_writes = 0; zero_writes < 2; ++zero_writes) {
    IoEngineOptions options;
    options.max_attempts_without_progress = 8;
    options.test_transfer_hook = [zero_writes](const RawTransfer& t, int64_t result) {
      return zero_writes ? 0 : -EAGAIN;
    };
    std::unique_ptr<IoEngine> engine = MakeEngine(options);
    ASSERT_NE(engine, nullptr);
    const FileHandle file = Open(engine.get(), "spin.dat");
    StatusOr<IoBuffer> buffer = IoBuffer::Allocate(64 * kKiB);
    ASSERT_OK(buffer);
    const auto start = std::chrono::steady_clock::now();
    std::vector<IoCompletion> completions =
        RunBatch(engine.get(), {{IoOp::kWrite, file, 8 * kKiB, 64 * kKiB, buffer->data(), 7}});
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    EXPECT_THAT(
        completions[0].status,
        StatusIs(zero_writes ? absl::StatusCode::kDataLoss : absl::StatusCode::kUnavailable,
                 AllOf(HasSubstr(dir_ + "/spin.dat"), HasSubstr("offset 8192, length 65536"),
                       HasSubstr("no progress after 8 attempts"))));
  }
}

TEST_P(EngineTest, KernelErrorsNameFileOffsetAndLength) {
  std::unique_ptr<IoEngine> engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  const std::string path = dir_ + "/ro.dat";
  testing::WritePatternFile(path, 64 * kKiB, 1);
  FileOptions read_only;
  read_only.writable = false;
  StatusOr<FileHandle> file = engine->OpenFile(path, read_only);
  ASSERT_OK(file);
  StatusOr<IoBuffer> buffer = IoBuffer::Allocate(64 * kKiB);
  ASSERT_OK(buffer);
  std::vector<IoCompletion> completions =
      RunBatch(engine.get(), {{IoOp::kWrite, *file, 8 * kKiB, 4 * kKiB, buffer->data(), 1}});
  EXPECT_THAT(completions[0].status,
              StatusIs(absl::StatusCode::kInternal,
                       AllOf(HasSubstr("write of " + path + " at offset 8192, length 4096"),
                             HasSubstr(std::strerror(EBADF)))));

  // An error in one piece of a split extent fails that extent only, naming the piece.
  IoEngineOptions options;
  options.max_request_bytes = 16 * kKiB;
  options.test_transfer_hook = [](const RawTransfer& t, int64_t result) {
    return t.offset == 32 * kKiB ? -EIO : result;
  };
  engine = MakeEngine(options);
  ASSERT_NE(engine, nullptr);
  file = engine->OpenFile(path, FileOptions());
  ASSERT_OK(file);
  completions = RunBatch(engine.get(), {{IoOp::kRead, *file, 0, 64 * kKiB, buffer->data(), 1}});
  EXPECT_THAT(completions[0].status,
              StatusIs(absl::StatusCode::kInternal,
                       AllOf(HasSubstr("read of " + path +
                                       " at offset 0, length 65536 (transfer at offset 32768, "
                                       "16384 bytes)"),
                             HasSubstr(std::strerror(EIO)))));
  EXPECT_EQ(engine->stats().extents_failed, 1u);
}

TEST_P(EngineTest, DestructionDrainsRequestsInFlight) {
  const uint64_t total = 4 * kMiB;
  StatusOr<IoBuffer> source = IoBuffer::Allocate(total);
  ASSERT_OK(source);
  FillPattern(source->data(), total, 11, 0);
  {
    IoEngineOptions options;
    options.queue_depth = 4;
    options.max_request_bytes = 64 * kKiB;
    std::unique_ptr<IoEngine> engine = MakeEngine(options);
    ASSERT_NE(engine, nullptr);
    const FileHandle file = Open(engine.get(), "drain.dat");
    std::vector<IoRequest> writes;
    for (uint64_t offset = 0; offset < total; offset += 64 * kKiB) {
      writes.push_back({IoOp::kWrite, file, offset, 64 * kKiB, source->data() + offset, offset});
    }
    ASSERT_OK(engine->Submit(writes));
    EXPECT_GT(engine->Outstanding(), 0u);
    // Destroyed with nearly everything queued or in flight.
  }
  // Every write landed before the destructor returned.
  std::vector<uint8_t> check(total);
  int fd = ::open((dir_ + "/drain.dat").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pread(fd, check.data(), total, 0), static_cast<ssize_t>(total));
  ::close(fd);
  EXPECT_EQ(FirstMismatch(check.data(), total, 11, 0), -1);

  // Reads in flight at destruction have filled their buffer when it returns; the buffer
  // is unmapped right after, so a straggling transfer would fault or corrupt.
  StatusOr<IoBuffer> sink = IoBuffer::Allocate(total);
  ASSERT_OK(sink);
  {
    IoEngineOptions options;
    options.queue_depth = 2;
    options.max_request_bytes = 32 * kKiB;
    std::unique_ptr<IoEngine> engine = MakeEngine(options);
    ASSERT_NE(engine, nullptr);
    const FileHandle file = Open(engine.get(), "drain.dat");
    ASSERT_OK(engine->Submit({{IoOp::kRead, file, 0, total, sink->data(), 1}}));
  }
  EXPECT_EQ(FirstMismatch(sink->data(), total, 11, 0), -1);
  *sink = IoBuffer();
}

TEST_P(EngineTest, FilesOpenPreallocateAndClose) {
  std::unique_ptr<IoEngine> engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  EXPECT_THAT(engine->OpenFile(dir_ + "/missing.dat", FileOptions()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(dir_ + "/missing.dat")));

  FileOptions options;
  options.preallocate_bytes = 3 * kMiB;
  const FileHandle file = Open(engine.get(), "pre.dat", options);
  struct stat info {};
  ASSERT_EQ(::stat((dir_ + "/pre.dat").c_str(), &info), 0);
  EXPECT_EQ(static_cast<uint64_t>(info.st_size), 3 * kMiB);
  EXPECT_EQ(engine->FileName(file), dir_ + "/pre.dat");

  StatusOr<IoBuffer> buffer = IoBuffer::Allocate(kMiB);
  ASSERT_OK(buffer);
  ASSERT_OK(engine->Submit({{IoOp::kRead, file, 0, kMiB, buffer->data(), 1}}));
  EXPECT_EQ(engine->CloseFile(file).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(engine->RegisterBuffers({buffer->region()}).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_OK(engine->Drain());
  std::vector<IoCompletion> completions;
  EXPECT_EQ(engine->Poll(&completions), 1u);
  EXPECT_OK(completions[0].status);
  EXPECT_OK(engine->CloseFile(file));
  EXPECT_EQ(engine->Submit({{IoOp::kRead, file, 0, kMiB, buffer->data(), 1}}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(EngineTest, LargePreallocationsGoInGibPiecesReportingEach) {
  struct statvfs fs {};
  ASSERT_EQ(::statvfs(dir_.c_str(), &fs), 0);
  if (uint64_t{fs.f_bavail} * fs.f_frsize < (8ull << 30)) {
    GTEST_SKIP() << "SKIPPED: fewer than 8 GiB free in " << dir_;
  }
  std::unique_ptr<IoEngine> engine = MakeEngine();
  ASSERT_NE(engine, nullptr);
  FileOptions options;
  options.create = true;
  options.preallocate_bytes = (2ull << 30) + 3 * kMiB;  // two full pieces and a tail
  std::vector<uint64_t> pieces;
  options.on_preallocated = [&](uint64_t bytes) { pieces.push_back(bytes); };
  const FileHandle file = Open(engine.get(), "big.dat", options);
  EXPECT_EQ(pieces, (std::vector<uint64_t>{1ull << 30, 1ull << 30, 3 * kMiB}));
  struct stat info {};
  ASSERT_EQ(::stat((dir_ + "/big.dat").c_str(), &info), 0);
  EXPECT_EQ(static_cast<uint64_t>(info.st_size), options.preallocate_bytes);
  EXPECT_GE(static_cast<uint64_t>(info.st_blocks) * 512, options.preallocate_bytes);
  EXPECT_OK(engine->CloseFile(file));
  ::unlink((dir_ + "/big.dat").c_str());
}

TEST_P(EngineTest, RegisteredBuffersAndTheirFallback) {
  for (int refuse : {0, ENOMEM}) {
    SCOPED_TRACE(refuse ? "registration refused (ENOMEM)" : "registration allowed");
    IoEngineOptions options;
    options.max_request_bytes = 256 * kKiB;
    options.test_registration_errno = refuse;
    std::unique_ptr<IoEngine> engine = MakeEngine(options);
    ASSERT_NE(engine, nullptr);
    const FileHandle file = Open(engine.get(), "fixed.dat");
    StatusOr<IoBuffer> buffers = IoBuffer::Allocate(4 * kMiB);
    ASSERT_OK(buffers);
    ASSERT_OK(engine->RegisterBuffers({buffers->region()}));
    const EngineInfo info = engine->info();
    const uint64_t half = 2 * kMiB;
    FillPattern(buffers->data(), half, 21, 0);
    std::vector<IoCompletion> completions =
        RunBatch(engine.get(), {{IoOp::kWrite, file, 0, half, buffers->data(), 1}});
    EXPECT_OK(completions[0].status);
    completions = RunBatch(engine.get(), {{IoOp::kRead, file, 0, half, buffers->data() + half, 2}});
    EXPECT_OK(completions[0].status);
    EXPECT_EQ(FirstMismatch(buffers->data() + half, half, 21, 0), -1);
    if (GetParam() != IoEngineKind::kIoUring) {
      EXPECT_FALSE(info.buffers_registered);
      continue;
    }
    if (refuse) {
      EXPECT_FALSE(info.buffers_registered);
      EXPECT_THAT(info.buffer_registration_note, HasSubstr("RLIMIT_MEMLOCK"));
      EXPECT_EQ(engine->stats().fixed_buffer_transfers, 0u);
    } else if (info.buffers_registered) {
      EXPECT_EQ(engine->stats().fixed_buffer_transfers, 16u);
    } else {  // an unprivileged run with a small memlock limit
      EXPECT_FALSE(info.buffer_registration_note.empty());
    }
    EXPECT_OK(engine->UnregisterBuffers());
  }
  if (GetParam() == IoEngineKind::kIoUring) {
    IoEngineOptions options;
    options.test_registration_errno = EFAULT;
    std::unique_ptr<IoEngine> engine = MakeEngine(options);
    ASSERT_NE(engine, nullptr);
    StatusOr<IoBuffer> buffer = IoBuffer::Allocate(kMiB);
    ASSERT_OK(buffer);
    EXPECT_THAT(engine->RegisterBuffers({buffer->region()}),
                StatusIs(absl::StatusCode::kInternal, HasSubstr("io_uring_register_buffers")));
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineTest, ::testing::ValuesIn(testing::kTestedEngines),
                         testing::EngineParamName);

TEST(CreateIoEngine, RejectsBadOptionsListingEveryProblem) {
  IoEngineOptions options;
  options.queue_depth = 0;
  options.max_request_bytes = 1000;
  EXPECT_THAT(CreateIoEngine(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("queue_depth"), HasSubstr("max_request_bytes"))));
}

TEST(CreateIoEngine, FallsBackOrFailsWhereIoUringIsUnavailable) {
  for (int error_number : {EPERM, ENOSYS}) {
    IoEngineOptions options;
    options.test_uring_init_errno = error_number;
    options.engine = IoEngineKind::kIoUring;
    StatusOr<std::unique_ptr<IoEngine>> engine = CreateIoEngine(options);
    EXPECT_THAT(engine, StatusIs(absl::StatusCode::kUnavailable,
                                 AllOf(HasSubstr("nvme.engine=io_uring"),
                                       HasSubstr(std::strerror(error_number)))));

    options.engine = IoEngineKind::kAuto;
    engine = CreateIoEngine(options);
    ASSERT_OK(engine);
    EXPECT_EQ((*engine)->info().engine, "pread");
    EXPECT_THAT((*engine)->info().fallback_reason, HasSubstr(std::strerror(error_number)));
  }
  IoEngineOptions options;
  StatusOr<std::unique_ptr<IoEngine>> engine = CreateIoEngine(options);
  ASSERT_OK(engine);
  EXPECT_EQ((*engine)->info().engine, ProbeIoUring().ok() ? "io_uring" : "pread");
}

}  // namespace
}  // namespace strata::nvme
