// strict_json: every conversion nlohmann does silently is refused with the value as written
// (a too large integer is not wrapped, a fraction not cut, a boolean not a number, a number
// outside float's range not infinity), and a key twice in one object is an error naming it.
#include "core/strict_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::IsOkAndHolds;
using testing::StatusIs;
using Json = nlohmann::json;

Json Parsed(const std::string& text) {
  Json out;
  EXPECT_EQ(ParseJsonStrict(text, &out), "") << text;
  return out;
}

TEST(JsonInteger, TakesOnlyIntegersInRange) {
  EXPECT_THAT(JsonInteger<int>(Parsed("12")), IsOkAndHolds(12));
  EXPECT_THAT(JsonInteger<int>(Parsed("-7")), IsOkAndHolds(-7));
  EXPECT_THAT(JsonInteger<int>(Parsed("2147483647")), IsOkAndHolds(2147483647));
  EXPECT_THAT(JsonInteger<int>(Parsed("-2147483648")),
              IsOkAndHolds(std::numeric_limits<int>::min()));
  EXPECT_THAT(JsonInteger<uint32_t>(Parsed("4294967295")), IsOkAndHolds(4294967295u));
  EXPECT_THAT(JsonInteger<uint64_t>(Parsed("18446744073709551615")),
              IsOkAndHolds(std::numeric_limits<uint64_t>::max()));
  // What nlohmann's get<int>() makes of these: 100, -2147483648, 32, 1, 32, 4294967295.
  const std::string range = "expected an integer from -2147483648 to 2147483647";
  EXPECT_THAT(JsonInteger<int>(Parsed("4294967396")),
              StatusIs(absl::StatusCode::kInvalidArgument, "4294967396: " + range));
  EXPECT_THAT(JsonInteger<int>(Parsed("2147483648")),
              StatusIs(absl::StatusCode::kInvalidArgument, "2147483648: " + range));
  EXPECT_THAT(JsonInteger<int>(Parsed("32.9")),
              StatusIs(absl::StatusCode::kInvalidArgument, "32.9: " + range));
  EXPECT_THAT(JsonInteger<int>(Parsed("true")),
              StatusIs(absl::StatusCode::kInvalidArgument, "true: " + range));
  EXPECT_THAT(JsonInteger<int>(Parsed("32.0")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("32.0: expected an integer")));
  EXPECT_THAT(JsonInteger<uint32_t>(Parsed("-1")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "-1: expected an integer from 0 to 4294967295"));
  EXPECT_THAT(JsonInteger<uint32_t>(Parsed("4294967396")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("4294967396: expected")));
  EXPECT_THAT(JsonInteger<int>(Parsed("\"12\"")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"12\": expected")));
  EXPECT_THAT(JsonInteger<int>(Parsed("null")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("null: expected")));
}

TEST(JsonFloat, TakesFiniteNumbersInRange) {
  EXPECT_THAT(JsonFloat(Parsed("1e-5")), IsOkAndHolds(1e-5f));
  EXPECT_THAT(JsonFloat(Parsed("500000")), IsOkAndHolds(500000.0f));  // an integer is a number
  EXPECT_THAT(JsonDouble(Parsed("-2.5")), IsOkAndHolds(-2.5));
  EXPECT_THAT(JsonFloat(Parsed("1e39")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "1e+39: expected a number within float's range (+-3.4e38)"));
  EXPECT_THAT(JsonFloat(Parsed("true")),
              StatusIs(absl::StatusCode::kInvalidArgument, "true: expected a number"));
  EXPECT_THAT(JsonDouble(Parsed("\"1e-5\"")),
              StatusIs(absl::StatusCode::kInvalidArgument, "\"1e-5\": expected a number"));
}

TEST(JsonBoolAndString, TakeOnlyTheirKind) {
  EXPECT_THAT(JsonBool(Parsed("false")), IsOkAndHolds(false));
  EXPECT_THAT(JsonBool(Parsed("1")),
              StatusIs(absl::StatusCode::kInvalidArgument, "1: expected true or false"));
  EXPECT_THAT(JsonBool(Parsed("\"true\"")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected true or false")));
  EXPECT_THAT(JsonString(Parsed("\"silu\"")), IsOkAndHolds("silu"));
  EXPECT_THAT(JsonString(Parsed("3")),
              StatusIs(absl::StatusCode::kInvalidArgument, "3: expected a string"));
  EXPECT_THAT(JsonAs<int>(Parsed("3")), IsOkAndHolds(3));
  EXPECT_THAT(JsonAs<bool>(Parsed("0")), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ParseJsonStrict, RefusesDuplicateKeysSyntaxAndNul) {
  Json out;
  std::string top;
  EXPECT_EQ(ParseJsonStrict(R"({"n_layer": 2, "n_head": 4, "n_layer": 12})", &out, &top),
            "key 'n_layer' appears twice");
  EXPECT_EQ(top, "n_layer");
  top.clear();
  EXPECT_EQ(ParseJsonStrict(R"({"rope_scaling": {"factor": 2, "factor": 8}})", &out, &top),
            "key 'factor' appears twice in the object of 'rope_scaling'");
  EXPECT_EQ(top, "");
  // The same key in two objects is no duplicate.
  EXPECT_EQ(ParseJsonStrict(R"({"a": {"x": 1}, "b": {"x": 2}, "x": 3})", &out), "");
  EXPECT_EQ(out["b"]["x"], 2);
  EXPECT_THAT(ParseJsonStrict("{\"a\": 1,}", &out), HasSubstr("is not valid UTF-8 JSON"));
  EXPECT_EQ(ParseJsonStrict(std::string("{\"a\": 1}\0", 9), &out),
            "is not valid UTF-8 JSON: a NUL byte at offset 8");
}

TEST(JsonShown, CutsLongValues) {
  EXPECT_EQ(JsonShown(Json(std::string(200, 'a'))).size(), 80u);
  EXPECT_EQ(JsonShown(Json(32.9)), "32.9");
}

}  // namespace
}  // namespace strata
