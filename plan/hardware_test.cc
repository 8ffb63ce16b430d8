// The hardware file's parser on what a hand-edited file may hold: a field of the wrong type
// (found by //fuzz:hardware_fuzz: it threw out of ParseHardware and ended the process), a
// version or byte count that fits no integer, byte counts written as floats; and a file
// written by HardwareJson reading back to itself. The valid file's checks are in
// //tests:plan_test (HardwareFilesAreChecked).
#include "plan/hardware.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kMinimal[] =
    R"({"format": "strata-hardware", "version": 1, "device_memory_bytes": 1024,
        "host_memory_bytes": 2048)";

std::string With(const std::string& fields) { return std::string(kMinimal) + fields + "}"; }

TEST(Hardware, FieldsOfTheWrongTypeAreErrors) {
  EXPECT_THAT(ParseHardware(R"({"format": 473.5, "version": 1})", "h.json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("h.json")));
  EXPECT_THAT(ParseHardware(R"({"format": "strata-hardware", "version": "1"})", "h.json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("version \"1\"")));
  EXPECT_THAT(ParseHardware(R"({"format": "strata-hardware", "version": 1e300})", "h.json"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("version 1e+300")));
  EXPECT_THAT(
      ParseHardware(With(R"(, "backend": true)"), "h.json"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("h.json: a field of the wrong type")));
}

TEST(Hardware, ByteCountsMustFitUint64) {
  EXPECT_THAT(ParseHardware(With(R"(, "disk_free_bytes": 1e30)"), "h.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("disk_free_bytes: got 1e+30, expected a number of bytes below "
                                 "2^64")));
  ASSERT_OK_AND_ASSIGN(const Hardware hardware,
                       ParseHardware(With(R"(, "disk_free_bytes": 8e9)"), "h.json"));
  EXPECT_EQ(hardware.disk_free_bytes, 8000000000u);
}

TEST(Hardware, WrittenFilesReadBack) {
  ASSERT_OK_AND_ASSIGN(const Hardware hardware,
                       ParseHardware(With(R"(, "matmul_flops_fp32": 5.3690149473514244e10,
                                              "source": "a probe", "nodes": 2,
                                              "inter_node_network": 1.25e9)"),
                                     "h.json"));
  const std::string written = HardwareJson(hardware);
  ASSERT_OK_AND_ASSIGN(const Hardware again, ParseHardware(written, "again.json"));
  EXPECT_EQ(HardwareJson(again), written);
  EXPECT_EQ(again.source, "a probe");
  EXPECT_EQ(again.nodes, 2);
  EXPECT_EQ(again.inter_node_network, 1.25e9);
}

}  // namespace
}  // namespace strata
