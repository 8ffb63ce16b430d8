// The key table is the one declaration of each option: every key with a range refuses a
// value just outside it, naming the key and the range's text (the check is derived, not
// written per key); rank-local keys come from the table; --help-config says each range.
#include "config/option_keys.h"

#include <cmath>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "config/options_parse.h"

namespace strata::option_keys {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

bool IsInteger(const KeySpec& spec) {
  return std::holds_alternative<int* (*)(Options&)>(spec.field) ||
         std::holds_alternative<uint64_t* (*)(Options&)>(spec.field);
}

// Problems of the defaults with `key` set to `text`.
std::vector<std::string> ProblemsWith(const KeySpec& spec, const std::string& text) {
  Options options;
  const std::string problem = SetFromText(spec, text, options);
  EXPECT_EQ(problem, "") << spec.name << "=" << text;
  std::vector<std::string> problems;
  CheckOptions(options, &problems);
  return problems;
}

std::string Outside(const KeySpec& spec, double bound, bool below, bool open) {
  const double step = IsInteger(spec) ? 1.0 : 0.5;
  const double value = open ? bound : (below ? bound - step : bound + step);
  return IsInteger(spec) ? absl::StrCat(static_cast<int64_t>(value)) : NumberText(value);
}

TEST(KeyTable, EveryRangeIsCheckedNamingKeyAndRange) {
  int checked = 0;
  for (const KeySpec& spec : Keys()) {
    const Range& range = spec.range;
    if (range.empty()) continue;
    const std::string expected = absl::StrCat(spec.name, ": got ");
    if (range.has_min && !(IsInteger(spec) && range.min == 0 &&
                           std::holds_alternative<uint64_t* (*)(Options&)>(spec.field))) {
      const std::string text = Outside(spec, range.min, /*below=*/true, range.min_open);
      EXPECT_THAT(ProblemsWith(spec, text),
                  Contains(AllOf(HasSubstr(expected), HasSubstr(ExpectedText(range)))))
          << spec.name << "=" << text;
      ++checked;
    }
    if (range.has_max) {
      const std::string text = Outside(spec, range.max, /*below=*/false, range.max_open);
      EXPECT_THAT(ProblemsWith(spec, text),
                  Contains(AllOf(HasSubstr(expected), HasSubstr(ExpectedText(range)))))
          << spec.name << "=" << text;
      ++checked;
    }
    if (range.multiple_of != 0) {
      const std::string text = absl::StrCat(range.multiple_of + 1);
      EXPECT_THAT(ProblemsWith(spec, text), Contains(HasSubstr(expected))) << spec.name;
      ++checked;
    }
  }
  EXPECT_GE(checked, 50);  // the table's ranges, not a handful
  // The defaults are inside every range.
  std::vector<std::string> problems;
  CheckOptions(Options{}, &problems);
  EXPECT_THAT(problems, ::testing::IsEmpty());
}

TEST(KeyTable, RankLocalKeysComeFromTheTable) {
  const std::vector<std::string> keys = RankLocalKeys();
  EXPECT_THAT(keys, Contains("zero.nvme_dir"));
  EXPECT_THAT(keys, Contains("device.memory_limit"));
  EXPECT_THAT(keys, ::testing::Not(Contains("train.steps")));
  for (const std::string& key : keys) {
    const KeySpec* spec = FindKey(key);
    ASSERT_NE(spec, nullptr) << key;
    EXPECT_TRUE(spec->rank_local) << key;
  }
}

TEST(KeyTable, HelpSaysEachRange) {
  const std::string help = DescribeKeys();
  EXPECT_THAT(help, HasSubstr("Allowed: in [1, 1024]."));             // model.layers
  EXPECT_THAT(help, HasSubstr("Allowed: a fraction in (0, 1)."));     // data.val_fraction
  EXPECT_THAT(help, HasSubstr("Allowed: > 0 seconds."));              // zero.comm_timeout_s
  EXPECT_THAT(help, HasSubstr("May differ between ranks."));
}

}  // namespace
}  // namespace strata::option_keys
