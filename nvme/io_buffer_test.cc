// Tests IoBuffer: alignment and size rounding, huge pages obtained (and measured from
// smaps) where THP allows, 4 KiB pages when asked, move-only ownership, guard page.
#include "nvme/io_buffer.h"

#include <gtest/gtest.h>

#include <csignal>
#include <cstring>
#include <utility>

namespace strata::nvme {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

TEST(IoBuffer, HugePageBuffersAre2MiBAlignedAndBackedByHugePagesWhereThpAllows) {
  StatusOr<IoBuffer> buffer = IoBuffer::Allocate(5 * kMiB);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->data()) % kHugePageBytes, 0u);
  EXPECT_EQ(buffer->bytes(), 5 * kMiB);
  EXPECT_TRUE(buffer->huge_pages_requested());
  std::memset(buffer->data(), 0x5a, buffer->bytes());  // the whole size is usable
  const std::string mode = TransparentHugePageMode();
  if (mode == "madvise" || mode == "always") {
    // 6 MiB mapped (rounded up to 2 MiB pages); memory fragmentation could deny some.
    EXPECT_GT(buffer->huge_page_bytes(), 0u) << buffer->note();
    EXPECT_LE(buffer->huge_page_bytes(), 6 * kMiB);
    if (buffer->fully_huge_page_backed()) {
      EXPECT_TRUE(buffer->note().empty()) << buffer->note();
    }
    StatusOr<uint64_t> again = buffer->MeasureHugePageBytes();
    ASSERT_TRUE(again.ok());
    EXPECT_GT(*again, 0u);
  } else {
    EXPECT_EQ(buffer->huge_page_bytes(), 0u);
    EXPECT_FALSE(buffer->note().empty());
  }
}

TEST(IoBuffer, SmallPageBuffersAre4KiBAlignedWithoutHugePages) {
  StatusOr<IoBuffer> buffer = IoBuffer::Allocate(4 * kMiB + 100, {/*huge_pages=*/false});
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->data()) % kDirectIoAlignment, 0u);
  EXPECT_EQ(buffer->bytes(), 4 * kMiB + 4096);
  EXPECT_FALSE(buffer->huge_pages_requested());
  StatusOr<uint64_t> huge = AnonHugePageBytes(buffer->data(), buffer->bytes());
  ASSERT_TRUE(huge.ok());
  EXPECT_EQ(*huge, 0u) << "MADV_NOHUGEPAGE keeps 4 KiB pages";
}

TEST(IoBuffer, IsMoveOnlyAndRejectsZeroBytes) {
  static_assert(!std::is_copy_constructible_v<IoBuffer>);
  static_assert(std::is_nothrow_move_constructible_v<IoBuffer>);
  EXPECT_EQ(IoBuffer::Allocate(0).status().code(), absl::StatusCode::kInvalidArgument);
  StatusOr<IoBuffer> first = IoBuffer::Allocate(kMiB);
  ASSERT_TRUE(first.ok());
  char* data = first->data();
  IoBuffer moved = std::move(first).value();
  EXPECT_EQ(moved.data(), data);
  IoBuffer other;
  EXPECT_TRUE(other.empty());
  other = std::move(moved);
  EXPECT_EQ(other.data(), data);
  EXPECT_TRUE(moved.empty());  // NOLINT(bugprone-use-after-move): checks the moved-from state
  EXPECT_EQ(other.region().data, data);
  EXPECT_EQ(other.region().bytes, kMiB);
}

TEST(IoBufferDeathTest, AnOverrunHitsTheGuardPage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  StatusOr<IoBuffer> buffer = IoBuffer::Allocate(2 * kMiB);
  ASSERT_TRUE(buffer.ok());
  EXPECT_DEATH(
      {
        volatile char* past = buffer->data() + 2 * kMiB;
        *past = 1;
      },
      "");
}

TEST(TransparentHugePageMode, ReadsTheBracketedMode) {
  const std::string mode = TransparentHugePageMode();
  EXPECT_TRUE(mode == "always" || mode == "madvise" || mode == "never" || mode == "unavailable")
      << mode;
}

}  // namespace
}  // namespace strata::nvme
