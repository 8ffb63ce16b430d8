// Tests byte sizes: parsed with their units, overflow an error, garbage named; formatted.
#include "core/bytes.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::IsOkAndHolds;
using testing::StatusIs;

TEST(ParseBytes, AcceptsUnits) {
  EXPECT_THAT(ParseBytes("4096"), IsOkAndHolds(4096u));
  EXPECT_THAT(ParseBytes("2GiB"), IsOkAndHolds(2ull << 30));
  EXPECT_THAT(ParseBytes("512MiB"), IsOkAndHolds(512ull << 20));
  EXPECT_THAT(ParseBytes("1.5GB"), IsOkAndHolds(1500000000ull));
  EXPECT_THAT(ParseBytes("3 KiB"), IsOkAndHolds(3072u));
}

TEST(ParseBytes, OverflowIsAnErrorNeverASaturatedValue) {
  EXPECT_THAT(ParseBytes("18446744073709551615"), IsOkAndHolds(UINT64_MAX));
  EXPECT_THAT(ParseBytes("9007199254740993"), IsOkAndHolds(9007199254740993ull));  // 2^53 + 1
  for (const char* text : {"18446744073709551616", "99999999999999999999999", "16777216TiB",
                           "20000000000TB", "17179869184.5GiB"}) {
    EXPECT_THAT(ParseBytes(text),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("too large a size")))
        << text;
  }
  EXPECT_THAT(ParseBytes("16777215TiB"), IsOkAndHolds(16777215ull << 40));
}

TEST(ParseBytes, RejectsGarbageNamingIt) {
  EXPECT_THAT(ParseBytes("lots"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'lots'")));
  EXPECT_THAT(ParseBytes("2XB"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown unit 'XB'")));
}

TEST(FormatBytes, PicksTheUnit) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.50 KiB");
  EXPECT_EQ(FormatBytes(3ull << 30), "3.00 GiB");
}

}  // namespace
}  // namespace strata
