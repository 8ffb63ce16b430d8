// did_you_mean: the distance on known pairs (a swap is one edit), and the threshold that
// keeps far-off names from being offered.
#include "core/did_you_mean.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(EditDistance, CountsEditsAndAdjacentSwaps) {
  EXPECT_EQ(EditDistance("", ""), 0u);
  EXPECT_EQ(EditDistance("steps", "steps"), 0u);
  EXPECT_EQ(EditDistance("stpes", "steps"), 1u);    // adjacent swap
  EXPECT_EQ(EditDistance("step", "steps"), 1u);     // insertion
  EXPECT_EQ(EditDistance("stepz", "steps"), 1u);    // substitution
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(EditDistance("abc", ""), 3u);
}

TEST(ClosestMatch, OffersOnlyPlausibleTypos) {
  const std::vector<std::string> commands = {"train", "sample", "plan", "bench"};
  EXPECT_EQ(ClosestMatch("trian", commands), "train");
  EXPECT_EQ(ClosestMatch("sampel", commands), "sample");
  EXPECT_EQ(ClosestMatch("train", commands), "train");
  EXPECT_EQ(ClosestMatch("export", commands), "");  // 5+ edits from everything
  // Length 12: up to 3 edits.
  EXPECT_EQ(ClosestMatch("train.stpess", {"train.steps", "train.lr"}), "train.steps");
  EXPECT_EQ(ClosestMatch("x", {"y", "xy"}), "y");  // 1 edit allowed; the first of equals
  EXPECT_EQ(ClosestMatch("abcd", {"wxyz"}), "");
}

}  // namespace
}  // namespace strata
