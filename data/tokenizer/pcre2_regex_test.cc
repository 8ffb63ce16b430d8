// PCRE2 splitting (Hugging Face's Isolated behavior) and the UTF-8 check.
#include "data/tokenizer/pcre2_regex.h"

#include <string>
#include <vector>

#include "core/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kGpt2[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::vector<std::string> Pieces(const Pcre2Regex& regex, std::string_view text) {
  std::vector<std::string> pieces;
  EXPECT_OK(regex.Split(text, [&](std::string_view piece) { pieces.emplace_back(piece); }));
  return pieces;
}

TEST(Utf8Test, FindsTheFirstInvalidByte) {
  EXPECT_EQ(FindInvalidUtf8(""), -1);
  EXPECT_EQ(FindInvalidUtf8("plain ASCII text, long enough for the 8-byte path"), -1);
  EXPECT_EQ(FindInvalidUtf8("naïve 東京 🙂 \xF4\x8F\xBF\xBF"), -1);  // U+10FFFF is valid
  EXPECT_EQ(FindInvalidUtf8("abcdefghij\x80"), 10);                       // a lone continuation
  EXPECT_EQ(FindInvalidUtf8("ab\xC0\xAF"), 2);                            // overlong '/'
  EXPECT_EQ(FindInvalidUtf8("ab\xE0\x80\xAF"), 2);                        // overlong, 3 bytes
  EXPECT_EQ(FindInvalidUtf8("ab\xED\xA0\x80"), 2);                        // surrogate U+D800
  EXPECT_EQ(FindInvalidUtf8("ab\xF4\x90\x80\x80"), 2);                    // above U+10FFFF
  EXPECT_EQ(FindInvalidUtf8("ab\xE6\x9D"), 2);                            // cut short
  EXPECT_EQ(FindInvalidUtf8("ab\xF5\x80\x80\x80"), 2);
}

TEST(Pcre2RegexTest, Gpt2Pattern) {
  ASSERT_OK_AND_ASSIGN(const Pcre2Regex regex, Pcre2Regex::Compile(kGpt2, false, "test"));
  EXPECT_THAT(Pieces(regex, "Hello world's  end!!\n\n 123"),
              ElementsAre("Hello", " world", "'s", " ", " end", "!!", "\n\n", " 123"));
  // \s+(?!\S) leaves the last space of a run to the word after it.
  EXPECT_THAT(Pieces(regex, "a   b"), ElementsAre("a", "  ", " b"));
  EXPECT_THAT(Pieces(regex, "naïve 東京\u3000x"), ElementsAre("naïve", " 東京", "\u3000", "x"));
}

TEST(Pcre2RegexTest, WhitespaceIsUnicodeWhiteSpace) {
  // U+180E is no whitespace to Python's `regex` or Oniguruma (PCRE2's own \s says it is);
  // U+0085 and U+00A0 are. Inside a class too, and \Q...\E stays literal.
  ASSERT_OK_AND_ASSIGN(const Pcre2Regex spaces, Pcre2Regex::Compile(R"(\s+)", false, "s"));
  EXPECT_THAT(Pieces(spaces, "a\u180e\u0085\u00a0b"), ElementsAre("a\u180e", "\u0085\u00a0", "b"));
  ASSERT_OK_AND_ASSIGN(const Pcre2Regex others,
                       Pcre2Regex::Compile(R"([^\s\p{L}]+|\S)", false, "c"));
  EXPECT_THAT(Pieces(others, "\u180e1 a"), ElementsAre("\u180e1", " ", "a"));
  ASSERT_OK_AND_ASSIGN(const Pcre2Regex quoted, Pcre2Regex::Compile(R"(\Q\s\E)", false, "q"));
  EXPECT_THAT(Pieces(quoted, "x\\sy"), ElementsAre("x", "\\s", "y"));
}

TEST(Pcre2RegexTest, StretchesBetweenMatchesArePieces) {
  ASSERT_OK_AND_ASSIGN(const Pcre2Regex digits, Pcre2Regex::Compile(R"(\p{N}{1,3})", false, "d"));
  EXPECT_THAT(Pieces(digits, "ab12345c6"), ElementsAre("ab", "123", "45", "c", "6"));
  // An empty match consumes nothing; the character joins the stretch.
  ASSERT_OK_AND_ASSIGN(const Pcre2Regex maybe, Pcre2Regex::Compile("x*", false, "e"));
  EXPECT_THAT(Pieces(maybe, "abxxcé"), ElementsAre("ab", "xx", "cé"));
  ASSERT_OK_AND_ASSIGN(const Pcre2Regex literal, Pcre2Regex::Compile("a.b", true, "l"));
  EXPECT_THAT(Pieces(literal, "xa.bya_b"), ElementsAre("x", "a.b", "ya_b"));
}

TEST(Pcre2RegexTest, LongWhitespaceRunsFitTheJitStack) {
  ASSERT_OK_AND_ASSIGN(const Pcre2Regex regex, Pcre2Regex::Compile(kGpt2, false, "test"));
  const std::string text = std::string(1 << 20, ' ') + "x";
  const std::vector<std::string> pieces = Pieces(regex, text);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].size(), (1u << 20) - 1);
  EXPECT_EQ(pieces[1], " x");
}

TEST(Pcre2RegexTest, CompileErrorsNameThePattern) {
  EXPECT_THAT(Pcre2Regex::Compile("(open", false, "model.pattern"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("model.pattern"), HasSubstr("'(open'"),
                             HasSubstr("pattern offset"))));
}

}  // namespace
}  // namespace strata
