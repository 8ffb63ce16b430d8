// config.json read strictly: a number that does not fit its field (too large for an int,
// a fraction, a boolean, beyond float's range) and a key written twice are refused naming
// the file, the key and the value as written, never converted (2^32 + 100 was read as 100,
// 32.9 as 32, true as 1, 2^31 reported as -2147483648, the last of two keys kept).
#include "models/hf/hf_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::StatusIs;

// A LLaMA config.json with `fields` (JSON members as written, e.g. "\"rope_theta\": 1e39")
// and the defaults whose keys `fields` does not name.
std::string WriteConfig(const std::string& name, const std::string& fields) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::filesystem::create_directories(dir);
  const std::pair<std::string, std::string> defaults[] = {
      {"model_type", "\"llama\""},   {"hidden_act", "\"silu\""},
      {"num_hidden_layers", "2"},     {"num_attention_heads", "4"},
      {"hidden_size", "32"},          {"intermediate_size", "48"},
      {"vocab_size", "100"},          {"max_position_embeddings", "16"}};
  std::string text = "{" + fields;
  for (const auto& [key, value] : defaults) {
    if (fields.find("\"" + key + "\"") != std::string::npos) continue;
    text += (text.size() > 1 ? ", \"" : "\"") + key + "\": " + value;
  }
  std::ofstream(dir + "/config.json") << text << "}";
  return dir;
}

TEST(ReadHfConfig, ReadsAWellFormedConfig) {
  const std::string dir = WriteConfig("good", R"("rope_theta": 500000, "rms_norm_eps": 1e-05)");
  ASSERT_OK_AND_ASSIGN(const ModelOptions model, ReadHfConfig(dir));
  EXPECT_EQ(model.layers, 2);
  EXPECT_EQ(model.vocab, 100);
  EXPECT_EQ(model.rope.theta, 500000.0f);
  EXPECT_EQ(model.norm_eps, 1e-5f);
}

TEST(ReadHfConfig, RefusesNumbersThatDoNotFitTheirField) {
  struct Case {
    std::string name, fields, message;
  };
  const std::string int_range = "expected an integer from -2147483648 to 2147483647";
  const Case cases[] = {
      {"wrapped", R"("vocab_size": 4294967396)", "field 'vocab_size' is 4294967396: " + int_range},
      {"two31", R"("intermediate_size": 2147483648)",
       "field 'intermediate_size' is 2147483648: " + int_range},
      {"fraction", R"("num_key_value_heads": 32.9)",
       "field 'num_key_value_heads' is 32.9: " + int_range},
      {"boolean", R"("max_position_embeddings": true)",
       "field 'max_position_embeddings' is true: " + int_range},
      {"float_range", R"("rope_theta": 1e39)",
       "field 'rope_theta' is 1e+39: expected a number within float's range"},
      {"bool_number", R"("tie_word_embeddings": 1)",
       "field 'tie_word_embeddings' is 1: expected true or false"},
      {"head_dim", R"("head_dim": 8.5)", "field 'head_dim' is 8.5: " + int_range},
      {"window", R"("sliding_window": 4294967304)", "field 'sliding_window' is 4294967304"},
      {"rope_factor", R"("rope_scaling": {"rope_type": "linear", "factor": true})",
       "field 'rope_scaling' (linear): 'factor' is true: expected a number"},
      {"rope_original",
       R"("rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1,
           "high_freq_factor": 4, "original_max_position_embeddings": 8192.5})",
       "'original_max_position_embeddings' is 8192.5: " + int_range},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = WriteConfig(c.name, c.fields);
    EXPECT_THAT(ReadHfConfig(dir),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr(dir + "/config.json"), HasSubstr(c.message))));
  }
}

TEST(ReadHfConfig, RefusesAKeyWrittenTwice) {
  const std::string dir =
      WriteConfig("duplicate", R"("num_hidden_layers": 12, "num_hidden_layers": 2)");
  EXPECT_THAT(ReadHfConfig(dir),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       dir + "/config.json key 'num_hidden_layers' appears twice"));
  const std::string nested = WriteConfig(
      "duplicate_nested", R"("rope_scaling": {"rope_type": "linear", "factor": 2, "factor": 8})");
  EXPECT_THAT(ReadHfConfig(nested),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("key 'factor' appears twice in the object of 'rope_scaling'")));
}

// A bitsandbytes 4-bit checkpoint (unsloth's *-bnb-4bit shape of config.json) is refused,
// naming what its quantization_config says.
TEST(ReadHfConfig, RefusesAPreQuantizedCheckpoint) {
  const std::string dir = WriteConfig(
      "bnb4", R"("quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": true,
                 "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": true})");
  EXPECT_THAT(ReadHfConfig(dir),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("pre-quantized checkpoint"),
                             HasSubstr("quant_method \"bitsandbytes\""),
                             HasSubstr("bnb_4bit_quant_type \"nf4\""),
                             HasSubstr("lora.base_dtype=nf4"))));
}

}  // namespace
}  // namespace strata
