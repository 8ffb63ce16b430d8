// TextStream: ids streamed one at a time give, concatenated, exactly the text of the whole
// sequence after its context, never a byte twice and never part of a character, where
//  - SentencePiece's byte fallback decodes an unfinished character as U+FFFD (3 bytes per
//    byte) and the finished one shorter ("é" from <0xC3><0xA9>: 3 bytes, then 2): printing
//    "the new bytes" by subtracting sizes wrapped and wrote kilobytes of memory;
//  - byte-level BPE decodes to raw bytes, a character's first bytes alone invalid UTF-8;
//  - SentencePiece drops the leading space of a decode's first piece: the continuation of
//    a prompt keeps its space only when decoded after the prompt's ids.
// Over the mixed-script fixture (emoji, combining marks, CJK through byte fallback) the
// window restarts many times and the text is still exact.
#include "data/tokenizer/text_stream.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/testing/status_matchers.h"
#include "data/tokenizer/tokenizer.h"
#include "data/tokenizer/tokenizer_testing.h"

namespace strata {
namespace {

constexpr char kModel[] = "data/tokenizer/testdata/persuasion_bpe512.model";
constexpr char kReplacement[] = "\xEF\xBF\xBD";

bool ValidUtf8(const std::string& text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const size_t length = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC2 ? 2 : 0;
    if (length == 0 || i + length > text.size()) return false;
    for (size_t k = 1; k < length; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return false;
    }
    i += length;
  }
  return true;
}

// Streams `ids` after `context`; returns each Add's bytes, then Finish's.
std::vector<std::string> Stream(const Tokenizer& tokenizer, const std::vector<uint32_t>& context,
                                const std::vector<uint32_t>& ids) {
  TextStream stream(tokenizer, context);
  std::vector<std::string> pieces;
  for (const uint32_t id : ids) {
    StatusOr<std::string> piece = stream.Add(id);
    EXPECT_OK(piece);
    pieces.push_back(piece.ok() ? *piece : "");
  }
  pieces.push_back(stream.Finish());
  return pieces;
}

std::string Joined(const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& piece : pieces) out += piece;
  return out;
}

TEST(FinalTextLength, HoldsBackWhatLaterBytesMayChange) {
  EXPECT_EQ(FinalTextLength("abc"), 3u);
  EXPECT_EQ(FinalTextLength("ab\xC3"), 2u);              // é's first byte
  EXPECT_EQ(FinalTextLength("ab\xC3\xA9"), 4u);          // é
  EXPECT_EQ(FinalTextLength("a\xF0\x9F\x98"), 1u);       // three bytes of a 4-byte emoji
  EXPECT_EQ(FinalTextLength("a\xF0\x9F\x98\x80"), 5u);   // the emoji
  EXPECT_EQ(FinalTextLength("a\xEF\xBF\xBD\xEF\xBF\xBD"), 1u);  // trailing U+FFFD
  EXPECT_EQ(FinalTextLength("\xEF\xBF\xBDx"), 4u);       // U+FFFD inside stays
  EXPECT_EQ(FinalTextLength("a\x80\x80\x80\x80"), 5u);   // stray continuations: no lead
  EXPECT_EQ(FinalTextLength(""), 0u);
}

TEST(TextStream, ByteFallbackCharactersThatShrinkComeOutOnceWhole) {
  ASSERT_OK_AND_ASSIGN(auto tokenizer, OpenSentencePieceTokenizer(kModel));
  ASSERT_OK_AND_ASSIGN(const std::vector<uint32_t> context, tokenizer->Encode("She said"));
  const std::string continuation = " caf\xC3\xA9 \xE2\x82\xAC 5 \xF0\x9F\x98\x80!";  // café € 5 😀!
  ASSERT_OK_AND_ASSIGN(std::vector<uint32_t> all, tokenizer->Encode("She said" + continuation));
  ASSERT_TRUE(std::equal(context.begin(), context.end(), all.begin()));
  const std::vector<uint32_t> ids(all.begin() + context.size(), all.end());
  // The case that wrapped: a prefix whose decoding is longer than the next one's.
  bool shrinks = false;
  for (size_t k = 1; k < ids.size(); ++k) {
    ASSERT_OK_AND_ASSIGN(const std::string shorter, tokenizer->Decode({ids.data(), k}));
    ASSERT_OK_AND_ASSIGN(const std::string longer, tokenizer->Decode({ids.data(), k + 1}));
    shrinks = shrinks || longer.size() < shorter.size();
  }
  ASSERT_TRUE(shrinks) << "no byte-fallback character in the text";
  const std::vector<std::string> pieces = Stream(*tokenizer, context, ids);
  EXPECT_EQ(Joined(pieces), continuation);  // its leading space kept
  for (const std::string& piece : pieces) {
    EXPECT_TRUE(ValidUtf8(piece)) << piece;
    EXPECT_EQ(piece.find(kReplacement), std::string::npos) << piece;
  }
  EXPECT_EQ(pieces.back(), "");  // nothing left at the end
}

TEST(TextStream, AnUnfinishedCharacterComesOutAtTheEnd) {
  ASSERT_OK_AND_ASSIGN(auto tokenizer, OpenSentencePieceTokenizer(kModel));
  ASSERT_OK_AND_ASSIGN(const std::vector<uint32_t> context, tokenizer->Encode("x"));
  ASSERT_OK_AND_ASSIGN(const std::vector<uint32_t> euro, tokenizer->Encode("x\xE2\x82\xAC"));
  ASSERT_EQ(euro.size(), context.size() + 3) << "€ as three byte pieces";
  // Only € 's first two bytes: held back, then given as SentencePiece decodes them.
  const std::vector<uint32_t> ids(euro.begin() + context.size(), euro.end() - 1);
  const std::vector<std::string> pieces = Stream(*tokenizer, context, ids);
  EXPECT_EQ(pieces[0], "");
  EXPECT_EQ(pieces[1], "");
  const std::vector<uint32_t> unfinished(euro.begin(), euro.end() - 1);
  ASSERT_OK_AND_ASSIGN(const std::string all, tokenizer->Decode(unfinished));
  ASSERT_OK_AND_ASSIGN(const std::string before, tokenizer->Decode(context));
  EXPECT_EQ(pieces[2], all.substr(before.size()));
  EXPECT_NE(pieces[2].find(kReplacement), std::string::npos);
}

TEST(TextStream, ByteLevelBpeBytesOfACharacterWaitForItsEnd) {
  const std::string dir = testing_tokenizer::MakeTempDir("stream_bpe");
  testing_tokenizer::WriteTestFile(dir + "/tokenizer.json",
                                   testing_tokenizer::TinyTokenizerJson({{"h", "e"}}).dump());
  ASSERT_OK_AND_ASSIGN(auto tokenizer, OpenHfTokenizerJson(dir + "/tokenizer.json"));
  // Ids 0..255 are the bytes: "he" (id 256), then 😀's four bytes, then "!".
  const std::vector<uint32_t> ids = {256, 0xF0, 0x9F, 0x98, 0x80, '!'};
  const std::vector<std::string> pieces = Stream(*tokenizer, {'a'}, ids);
  EXPECT_EQ(pieces, (std::vector<std::string>{"he", "", "", "", "\xF0\x9F\x98\x80", "!", ""}));
}

TEST(TextStream, LongTextsStreamExactlyAcrossWindows) {
  ASSERT_OK_AND_ASSIGN(auto tokenizer, OpenSentencePieceTokenizer(kModel));
  const std::string mixed = testing_tokenizer::ReadTestFile("data/tokenizer/testdata/mixed.txt");
  ASSERT_OK_AND_ASSIGN(const std::vector<uint32_t> ids, tokenizer->Encode(mixed));
  ASSERT_GT(ids.size(), 20 * TextStream::kWindowIds);
  const std::vector<uint32_t> context(ids.begin(), ids.begin() + 3);
  const std::vector<uint32_t> rest(ids.begin() + 3, ids.end());
  ASSERT_OK_AND_ASSIGN(const std::string whole, tokenizer->Decode(ids));
  ASSERT_OK_AND_ASSIGN(const std::string before, tokenizer->Decode(context));
  const std::vector<std::string> pieces = Stream(*tokenizer, context, rest);
  EXPECT_TRUE(Joined(pieces) == whole.substr(before.size()));
  for (const std::string& piece : pieces) ASSERT_TRUE(ValidUtf8(piece)) << piece;
}

TEST(TextStream, AnIdWithoutATokenIsAnError) {
  ASSERT_OK_AND_ASSIGN(auto tokenizer, OpenSentencePieceTokenizer(kModel));
  TextStream stream(*tokenizer, {});
  EXPECT_THAT(stream.Add(600), testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                                 ::testing::HasSubstr("id 600")));
}

}  // namespace
}  // namespace strata
