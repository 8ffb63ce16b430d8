// JSON as Hugging Face's files are written: floats as Python's repr() (the shortest decimal
// that reads back), a float model value as its own shortest decimal, json.dumps' layout.
#include "models/hf/hf_json.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace strata {
namespace {

TEST(HfJsonTest, FloatsAsPythonReprWritesThem) {
  // Each as Python 3 prints repr(float(text)).
  for (const auto& [value, text] : std::vector<std::pair<double, std::string>>{
           {1e-06, "1e-06"},
           {1e-05, "1e-05"},
           {0.0001, "0.0001"},
           {0.00012, "0.00012"},
           {500000.0, "500000.0"},
           {10000.0, "10000.0"},
           {1e15, "1000000000000000.0"},
           {1e16, "1e+16"},
           {1.5e16, "1.5e+16"},
           {123.456, "123.456"},
           {8.0, "8.0"},
           {0.95, "0.95"},
           {-0.1, "-0.1"},
           {0.0, "0.0"},
           {-0.0, "-0.0"},
           {0.1 + 0.2, "0.30000000000000004"},
           {1e-100, "1e-100"},
           {1.7976931348623157e308, "1.7976931348623157e+308"},
           {5e-324, "5e-324"},
           {std::numeric_limits<double>::infinity(), "Infinity"},
           {std::numeric_limits<double>::quiet_NaN(), "NaN"},
       }) {
    EXPECT_EQ(PythonFloatText(value), text);
  }
}

TEST(HfJsonTest, FloatModelValuesAsTheirOwnDecimal) {
  // strata's float values, as Hugging Face's files hold them.
  EXPECT_EQ(PythonFloatText(JsonNumber(1e-6f)), "1e-06");
  EXPECT_EQ(PythonFloatText(JsonNumber(1e-5f)), "1e-05");
  EXPECT_EQ(PythonFloatText(JsonNumber(500000.0f)), "500000.0");
  EXPECT_EQ(PythonFloatText(JsonNumber(1000000.0f)), "1000000.0");
  EXPECT_EQ(PythonFloatText(JsonNumber(0.95f)), "0.95");
  EXPECT_EQ(PythonFloatText(JsonNumber(9.028231e+10f)), "90282310000.0");
  // What the plain widening gives (what strata wrote before).
  EXPECT_EQ(PythonFloatText(static_cast<double>(1e-6f)), "9.999999974752427e-07");
  EXPECT_EQ(nlohmann::json(static_cast<double>(1e-6f)).dump(), "9.999999974752427e-07");
  // Every finite float of a random sample: the text reads back as the same float, and
  // has no more significant digits than the float's shortest form (std::to_chars).
  std::mt19937 random(7);
  std::uniform_int_distribution<uint32_t> bits;
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    const uint32_t b = bits(random);
    float value;
    static_assert(sizeof(value) == sizeof(b));
    std::memcpy(&value, &b, sizeof(value));
    if (!std::isfinite(value)) continue;
    const std::string text = PythonFloatText(JsonNumber(value));
    ASSERT_EQ(std::strtof(text.c_str(), nullptr), value) << text;
    char shortest[64];
    const auto end = std::to_chars(shortest, shortest + sizeof(shortest), value,
                                   std::chars_format::scientific)
                         .ptr;
    const std::string digits(shortest, std::find(shortest, end, 'e'));
    auto significant = [](const std::string& t) {
      std::string d;
      for (char c : t) {
        if (c == 'e') break;
        if (c >= '0' && c <= '9') d += c;
      }
      d.erase(0, std::min(d.find_first_not_of('0'), d.size()));
      while (!d.empty() && d.back() == '0') d.pop_back();
      return d.size();
    };
    ASSERT_LE(significant(text), significant(digits)) << text << " vs " << digits;
    ++checked;
  }
  EXPECT_GT(checked, 190000);
}

TEST(HfJsonTest, LayoutIsJsonDumpsIndent2) {
  const nlohmann::json json = {{"b", {1, 2}},
                               {"a", 1e-6},
                               {"c", nlohmann::json::object()},
                               {"d", nlohmann::json::array()},
                               {"e", {{"x", nullptr}, {"y", true}, {"z", "s\"q"}}},
                               {"f", -3}};
  // json.dumps(json, indent=2, sort_keys=True) + "\n"
  EXPECT_EQ(HfJsonText(json),
            "{\n"
            "  \"a\": 1e-06,\n"
            "  \"b\": [\n"
            "    1,\n"
            "    2\n"
            "  ],\n"
            "  \"c\": {},\n"
            "  \"d\": [],\n"
            "  \"e\": {\n"
            "    \"x\": null,\n"
            "    \"y\": true,\n"
            "    \"z\": \"s\\\"q\"\n"
            "  },\n"
            "  \"f\": -3\n"
            "}\n");
  // Where no float is involved, nlohmann's dump(2) gives the same text.
  nlohmann::json ints = json;
  ints["a"] = 7;
  EXPECT_EQ(HfJsonText(ints), ints.dump(2) + "\n");
}

}  // namespace
}  // namespace strata
