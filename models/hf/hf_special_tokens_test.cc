// The special-token ids of a Hugging Face model: from a config's keys (an id, a list kept a
// list, null absent, anything else named), from config.json, and from a tokenizer's files
// (tokenizer_config.json's tokens through its added_tokens_decoder or tokenizer.json;
// GPT-2's vocab.json alone: <|endoftext|>).
#include "models/hf/hf_special_tokens.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::StatusIs;
using Json = nlohmann::json;
using Files = std::vector<std::pair<std::string, std::string>>;

std::string Dir(const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::filesystem::create_directories(dir);
  return dir;
}

std::string Write(const std::string& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir + "/" + name) << text;
  return dir + "/" + name;
}

TEST(HfSpecialTokensTest, KeysAsTheSourceWroteThem) {
  std::vector<std::string> problems;
  const HfSpecialTokens llama3 = SpecialTokensOf(
      Json::parse(R"({"bos_token_id": 128000, "eos_token_id": [128001, 128009],
                      "pad_token_id": null, "vocab_size": 128256})"),
      "config.json", &problems);
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(llama3.bos_token_id, Json(128000));
  EXPECT_EQ(llama3.eos_token_id, Json::parse("[128001, 128009]"));
  EXPECT_TRUE(llama3.pad_token_id.is_null());
  EXPECT_EQ(llama3.ToJson(), Json::parse(R"({"bos_token_id": 128000,
                                             "eos_token_id": [128001, 128009]})"));
  EXPECT_EQ(llama3.Describe(), "bos_token_id 128000, eos_token_id [128001, 128009]");
  // A list of one stays a list.
  const HfSpecialTokens one =
      SpecialTokensOf(Json::parse(R"({"eos_token_id": [2]})"), "config.json", &problems);
  EXPECT_EQ(one.eos_token_id, Json::parse("[2]"));
  EXPECT_TRUE(HfSpecialTokens{}.empty());
  EXPECT_EQ(HfSpecialTokens{}.Describe(), "none");
  // Anything else is named, and left out.
  const HfSpecialTokens bad = SpecialTokensOf(
      Json::parse(R"({"bos_token_id": "1", "eos_token_id": [], "pad_token_id": -1})"), "c.json",
      &problems);
  EXPECT_TRUE(bad.empty());
  EXPECT_THAT(problems, ElementsAre(HasSubstr("c.json: field 'bos_token_id' is \"1\""),
                                    HasSubstr("field 'eos_token_id' is []"),
                                    HasSubstr("field 'pad_token_id' is -1")));
  problems.clear();
  SpecialTokensOf(Json::parse(R"({"eos_token_id": [2, 2.5]})"), "c.json", &problems);
  EXPECT_THAT(problems, ElementsAre(HasSubstr("expected a token id or a list of them")));
  // Ids read strictly (core/strict_json.h): beyond any model's ids, 2.0, true are no ids.
  problems.clear();
  SpecialTokensOf(
      Json::parse(R"({"bos_token_id": 4294967396, "eos_token_id": 2.0, "pad_token_id": true})"),
      "c.json", &problems);
  EXPECT_THAT(problems, ElementsAre(HasSubstr("field 'bos_token_id' is 4294967396"),
                                    HasSubstr("field 'eos_token_id' is 2.0"),
                                    HasSubstr("field 'pad_token_id' is true")));
}

TEST(HfSpecialTokensTest, ReadFromConfigJson) {
  const std::string dir = Dir("config");
  Write(dir, "config.json", R"({"model_type": "llama", "bos_token_id": 1, "eos_token_id": 2})");
  ASSERT_OK_AND_ASSIGN(const HfSpecialTokens tokens, ReadHfSpecialTokens(dir));
  EXPECT_EQ(tokens.Describe(), "bos_token_id 1, eos_token_id 2");
  Write(dir, "config.json", R"({"eos_token_id": "</s>"})");
  EXPECT_THAT(ReadHfSpecialTokens(dir), StatusIs(absl::StatusCode::kInvalidArgument,
                                                 HasSubstr("field 'eos_token_id' is \"</s>\"")));
  Write(dir, "config.json", "{");
  EXPECT_THAT(ReadHfSpecialTokens(dir),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not valid UTF-8 JSON")));
  // A key twice: refused (the last one was kept).
  Write(dir, "config.json", R"({"eos_token_id": 2, "eos_token_id": 32000})");
  EXPECT_THAT(ReadHfSpecialTokens(dir),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("config.json key 'eos_token_id' appears twice")));
  EXPECT_THAT(ReadHfSpecialTokens(Dir("empty")), StatusIs(absl::StatusCode::kNotFound));
}

TEST(HfSpecialTokensTest, FromTheTokenizersFiles) {
  // Llama 3 instruct's tokenizer_config.json: the tokens by text, their ids in
  // added_tokens_decoder; pad as an object with its content.
  const std::string llama = Dir("llama3");
  const Files llama_files = {
      {Write(llama, "tokenizer_config.json",
             R"({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                 "pad_token": {"content": "<|finetune_right_pad_id|>"},
                 "added_tokens_decoder": {
                   "128000": {"content": "<|begin_of_text|>", "special": true},
                   "128004": {"content": "<|finetune_right_pad_id|>", "special": true},
                   "128009": {"content": "<|eot_id|>", "special": true}}})"),
       "tokenizer_config.json"}};
  ASSERT_OK_AND_ASSIGN(const HfSpecialTokens llama_tokens, TokenizerSpecialTokens(llama_files));
  EXPECT_EQ(llama_tokens.Describe(), "bos_token_id 128000, eos_token_id 128009, pad_token_id 128004");
  // The ids from tokenizer.json where tokenizer_config.json has no added_tokens_decoder (an
  // older transformers); a token no file maps is left out.
  const std::string older = Dir("older");
  const Files older_files = {
      {Write(older, "tokenizer.json",
             R"({"added_tokens": [{"id": 1, "content": "<s>"}, {"id": 2, "content": "</s>"}],
                 "model": {"type": "BPE", "vocab": {"a": 3, "<unk>": 0}}})"),
       "tokenizer.json"},
      {Write(older, "tokenizer_config.json",
             R"({"bos_token": "<s>", "eos_token": {"content": "</s>"}, "pad_token": "<pad>"})"),
       "tokenizer_config.json"}};
  ASSERT_OK_AND_ASSIGN(const HfSpecialTokens older_tokens, TokenizerSpecialTokens(older_files));
  EXPECT_EQ(older_tokens.Describe(), "bos_token_id 1, eos_token_id 2");
  // GPT-2's files alone (strata's "gpt2" tokenizer): <|endoftext|>, as GPT2Tokenizer has it.
  const std::string gpt2 = Dir("gpt2");
  const Files gpt2_files = {
      {Write(gpt2, "vocab.json", R"({"!": 0, "<|endoftext|>": 50256})"), "vocab.json"},
      {Write(gpt2, "merges.txt", "#version: 0.2\n"), "merges.txt"}};
  ASSERT_OK_AND_ASSIGN(const HfSpecialTokens gpt2_tokens, TokenizerSpecialTokens(gpt2_files));
  EXPECT_EQ(gpt2_tokens.Describe(), "bos_token_id 50256, eos_token_id 50256");
  // A SentencePiece model alone, and no files (bytes): none.
  ASSERT_OK_AND_ASSIGN(const HfSpecialTokens none,
                       TokenizerSpecialTokens({{gpt2 + "/tokenizer.model", "tokenizer.model"}}));
  EXPECT_TRUE(none.empty());
  ASSERT_OK_AND_ASSIGN(const HfSpecialTokens nothing, TokenizerSpecialTokens({}));
  EXPECT_TRUE(nothing.empty());
  // A malformed file is named.
  const std::string broken = Dir("broken");
  EXPECT_THAT(TokenizerSpecialTokens(
                  {{Write(broken, "tokenizer_config.json", "{\"bos"), "tokenizer_config.json"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tokenizer_config.json")));
}

}  // namespace
}  // namespace strata
