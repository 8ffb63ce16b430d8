// Tests the Status/StatusOr helpers of status_matchers.h: each passes on what it promises and
// fails (fatally or not, as its name says) otherwise, with the status in the failure message.
#include "core/testing/status_matchers.h"

#include <gtest/gtest-spi.h>

#include <memory>
#include <string>

namespace strata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::IsOkAndHolds;
using ::testing::Not;
using testing::StatusIs;

absl::StatusOr<int> Seven() { return 7; }
absl::StatusOr<int> BadStage() { return absl::InvalidArgumentError("zero.stage must be 0-3"); }

TEST(ExpectOk, PassesOnOkStatusAndStatusOr) {
  EXPECT_OK(absl::OkStatus());
  EXPECT_OK(Seven());
  ASSERT_OK(absl::OkStatus());
  ASSERT_OK(Seven()) << "extra context streams";
}

TEST(ExpectOk, FailsNonFatallyPrintingTheStatus) {
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(absl::NotFoundError("no checkpoint at /x")),
                          "no checkpoint at /x");
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(BadStage()), "INVALID_ARGUMENT: zero.stage must be 0-3");
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(BadStage()), "BadStage() is not OK");
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(BadStage()) << "step 3", "step 3");
}

TEST(AssertOk, FailsFatally) {
  EXPECT_FATAL_FAILURE(ASSERT_OK(absl::InternalError("disk on fire")), "disk on fire");
  EXPECT_FATAL_FAILURE(ASSERT_OK(BadStage()), "zero.stage must be 0-3");
}

// EXPECT_FATAL_FAILURE's statement cannot name the test's locals, so the helpers below record
// in a global whether they ran past their assertion.
bool g_reached = false;

// A fatal failure returns from the function holding it: the mark after it is skipped.
void AssertOkThenMark(const absl::Status& status) {
  ASSERT_OK(status);
  g_reached = true;
}

TEST(AssertOk, ReturnsFromTheFunctionOnFailure) {
  g_reached = false;
  EXPECT_FATAL_FAILURE(AssertOkThenMark(absl::AbortedError("stream 'io' aborted")),
                       "stream 'io' aborted");
  EXPECT_FALSE(g_reached);
  AssertOkThenMark(absl::OkStatus());
  EXPECT_TRUE(g_reached);
}

TEST(AssertOkAndAssign, DeclaresOrAssignsTheValue) {
  ASSERT_OK_AND_ASSIGN(int seven, Seven());
  EXPECT_EQ(seven, 7);
  int existing = 0;
  ASSERT_OK_AND_ASSIGN(existing, Seven());
  EXPECT_EQ(existing, 7);
  ASSERT_OK_AND_ASSIGN(auto owned, absl::StatusOr<std::unique_ptr<int>>(std::make_unique<int>(3)));
  ASSERT_NE(owned, nullptr);
  EXPECT_EQ(*owned, 3);
}

void AssignBadStage() {
  ASSERT_OK_AND_ASSIGN(int value, BadStage());
  (void)value;
  g_reached = true;
}

TEST(AssertOkAndAssign, FailsFatallyNamingTheExpressionAndStatus) {
  g_reached = false;
  EXPECT_FATAL_FAILURE(AssignBadStage(), "BadStage() is not OK");
  EXPECT_FATAL_FAILURE(AssignBadStage(), "zero.stage must be 0-3");
  EXPECT_FALSE(g_reached);
}

TEST(StatusIs, MatchesCodeAndMessageOfStatusAndStatusOr) {
  const absl::Status status = absl::InvalidArgumentError("zero.stage must be 0-3");
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("zero.stage")));
  EXPECT_THAT(BadStage(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("zero.stage")));
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, "zero.stage must be 0-3"));
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
                               AllOf(HasSubstr("zero.stage"), HasSubstr("0-3"))));
  EXPECT_THAT(status, StatusIs(::testing::_, HasSubstr("must be")));
  EXPECT_THAT(absl::OkStatus(), StatusIs(absl::StatusCode::kOk));
  EXPECT_THAT(Seven(), StatusIs(absl::StatusCode::kOk, ""));
}

TEST(StatusIs, FailsOnAnotherCodeOrMessage) {
  const absl::Status status = absl::InvalidArgumentError("zero.stage must be 0-3");
  EXPECT_NONFATAL_FAILURE(
      EXPECT_THAT(status, StatusIs(absl::StatusCode::kNotFound, HasSubstr("zero.stage"))),
      "the code does not match");
  EXPECT_NONFATAL_FAILURE(
      EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("zero.grad"))),
      "the message does not match");
  EXPECT_NONFATAL_FAILURE(
      EXPECT_THAT(BadStage(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("vocab"))),
      "INVALID_ARGUMENT: zero.stage must be 0-3");
  EXPECT_NONFATAL_FAILURE(EXPECT_THAT(Seven(), StatusIs(absl::StatusCode::kInvalidArgument)),
                          "whose status is OK");
  EXPECT_FATAL_FAILURE(ASSERT_THAT(absl::InvalidArgumentError("zero.stage must be 0-3"),
                                   StatusIs(absl::StatusCode::kInvalidArgument, "zero.stage")),
                       "the message does not match");
}

TEST(StatusIs, DescribesWhatItExpects) {
  ::testing::Matcher<const absl::Status&> matcher =
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("zero.stage"));
  EXPECT_EQ(::testing::DescribeMatcher<const absl::Status&>(matcher),
            "has a status code that is equal to INVALID_ARGUMENT, and a message that has "
            "substring \"zero.stage\"");
}

TEST(IsOk, MatchesOkAndNegates) {
  EXPECT_THAT(absl::OkStatus(), IsOk());
  EXPECT_THAT(Seven(), IsOk());
  EXPECT_THAT(BadStage(), Not(IsOk()));
  EXPECT_NONFATAL_FAILURE(EXPECT_THAT(BadStage(), IsOk()), "zero.stage must be 0-3");
  EXPECT_NONFATAL_FAILURE(EXPECT_THAT(absl::OkStatus(), Not(IsOk())), "is not OK");
}

TEST(IsOkAndHolds, MatchesTheValueOfAnOkStatusOr) {
  EXPECT_THAT(Seven(), IsOkAndHolds(7));
  EXPECT_THAT(Seven(), IsOkAndHolds(::testing::Gt(6)));
  EXPECT_THAT(absl::StatusOr<std::string>("zero.stage"), IsOkAndHolds(HasSubstr("stage")));
  EXPECT_THAT(absl::StatusOr<uint64_t>(4096), IsOkAndHolds(4096u));
}

TEST(IsOkAndHolds, FailsOnAnErrorOrAnotherValue) {
  EXPECT_NONFATAL_FAILURE(EXPECT_THAT(Seven(), IsOkAndHolds(8)), "whose value 7 does not match");
  EXPECT_NONFATAL_FAILURE(EXPECT_THAT(BadStage(), IsOkAndHolds(7)),
                          "whose status is INVALID_ARGUMENT: zero.stage must be 0-3");
  EXPECT_NONFATAL_FAILURE(EXPECT_THAT(Seven(), Not(IsOkAndHolds(7))), "is not OK, or has a value");
}

}  // namespace
}  // namespace strata
