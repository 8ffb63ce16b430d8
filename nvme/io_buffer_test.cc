// Tests IoBuffer: alignment and size rounding, huge pages obtained (and measured from
// smaps) where THP allows and a stated reason where not all are, 4 KiB pages when asked,
// move-only ownership, guard page.
#include "nvme/io_buffer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <cstring>
#include <utility>

#include "core/testing/status_matchers.h"

namespace strata::nvme {
namespace {

using ::strata::testing::IsOkAndHolds;
using ::strata::testing::StatusIs;
using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1024 * 1024;

// Whatever THP gives, the buffer is 2 MiB-aligned and usable, and what it reports about its
// backing is true: whole huge pages of its own mapping, the figure smaps shows, and a stated
// reason whenever the backing is not all huge pages.
TEST(IoBuffer, HugePageBuffersAre2MiBAlignedAndReportTheirBackingTruly) {
  ASSERT_OK_AND_ASSIGN(IoBuffer buffer, IoBuffer::Allocate(5 * kMiB));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % kHugePageBytes, 0u);
  EXPECT_EQ(buffer.bytes(), 5 * kMiB);
  EXPECT_TRUE(buffer.huge_pages_requested());
  std::memset(buffer.data(), 0x5a, buffer.bytes());  // the whole size is usable

  constexpr uint64_t kMapped = 6 * kMiB;  // 5 MiB rounded up to whole 2 MiB pages
  const uint64_t huge = buffer.huge_page_bytes();
  EXPECT_LE(huge, kMapped);
  EXPECT_EQ(huge % kHugePageBytes, 0u) << "THP backs whole 2 MiB pages: " << huge;
  // The figure is a measurement: smaps says the same now (khugepaged, which could collapse
  // more pages, wakes every 10 s by default, not within the test).
  EXPECT_THAT(buffer.MeasureHugePageBytes(), IsOkAndHolds(huge));
  EXPECT_EQ(buffer.fully_huge_page_backed(), huge == kMapped);

  const std::string mode = TransparentHugePageMode();
  if (buffer.fully_huge_page_backed()) {
    EXPECT_EQ(buffer.note(), "") << "fully huge-page backed needs no reason";
  } else {
    // Less than all huge pages always comes with the reason: madvise refused, the figure
    // not measurable, or the exact shortfall with the THP mode.
    EXPECT_THAT(
        buffer.note(),
        AnyOf(HasSubstr(absl::StrCat("only ", huge, " of ", kMapped,
                                     " bytes on huge pages (transparent huge pages mode: ", mode)),
              HasSubstr("madvise(MADV_HUGEPAGE)"), HasSubstr("huge pages not measurable")));
  }
  if (mode == "madvise" || mode == "always") {
    // THP is on for this mapping; fragmentation could deny some pages, not all of them
    // (a madvised fault compacts memory when the defrag setting allows it).
    EXPECT_GT(huge, 0u) << buffer.note();
  } else {
    // "never" or no THP: the kernel gives no huge pages, and the note says so.
    EXPECT_EQ(huge, 0u);
    EXPECT_FALSE(buffer.fully_huge_page_backed());
    EXPECT_NE(buffer.note(), "");
  }
}

TEST(IoBuffer, SmallPageBuffersAre4KiBAlignedWithoutHugePages) {
  ASSERT_OK_AND_ASSIGN(IoBuffer buffer, IoBuffer::Allocate(4 * kMiB + 100, {/*huge_pages=*/false}));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % kDirectIoAlignment, 0u);
  EXPECT_EQ(buffer.bytes(), 4 * kMiB + 4096);
  EXPECT_FALSE(buffer.huge_pages_requested());
  EXPECT_EQ(buffer.huge_page_bytes(), 0u);
  EXPECT_EQ(buffer.note(), "") << "no huge pages asked, none missing";
  EXPECT_THAT(AnonHugePageBytes(buffer.data(), buffer.bytes()), IsOkAndHolds(0u))
      << "MADV_NOHUGEPAGE keeps 4 KiB pages";
}

TEST(IoBuffer, IsMoveOnlyAndRejectsZeroBytes) {
  static_assert(!std::is_copy_constructible_v<IoBuffer>);
  static_assert(std::is_nothrow_move_constructible_v<IoBuffer>);
  EXPECT_THAT(IoBuffer::Allocate(0), StatusIs(absl::StatusCode::kInvalidArgument));
  StatusOr<IoBuffer> first = IoBuffer::Allocate(kMiB);
  ASSERT_OK(first);
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
  ASSERT_OK(buffer);
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
