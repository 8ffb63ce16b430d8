// Tests the exception backstop: a body's Status passes through; std::bad_alloc becomes
// kResourceExhausted naming where; another exception becomes kInternal with its what().
#include "core/exceptions.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

TEST(StatusFromExceptions, PassesAStatusThrough) {
  EXPECT_OK(StatusFromExceptions([] { return absl::OkStatus(); }, "x"));
  EXPECT_THAT(StatusFromExceptions([] { return absl::NotFoundError("gone"); }, "x"),
              StatusIs(absl::StatusCode::kNotFound, "gone"));
}

TEST(StatusFromExceptions, TurnsExceptionsIntoErrors) {
  EXPECT_THAT(StatusFromExceptions(
                  []() -> Status {
                    std::vector<int> none;
                    return absl::InvalidArgumentError(std::to_string(none.at(3)));  // throws
                  },
                  "strata report"),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("strata report: unexpected exception:")));
  EXPECT_THAT(StatusFromExceptions([]() -> Status { throw std::bad_alloc(); }, "rank 1"),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("out of memory in rank 1")));
}

}  // namespace
}  // namespace strata
