// Export: import -> train -> export -> import round-trips exactly. A tiny model imported
// from tools/hf_reference.py's fixtures trains two steps and writes a checkpoint; exported
// as fp32 safetensors (one file and shards) and imported again, every master weight is
// bit-identical to the checkpoint's; exported as bf16 it is the checkpoint rounded to bf16,
// and exporting that import again gives the same bytes. llm.c's format round-trips a GPT
// the same way; a LLaMA is refused for it. The written config.json reads back as the model,
// holds the source's values as it wrote them (floats in their shortest form, the special-
// token ids, an eos list kept a list) and generation_config.json comes along: the source's,
// carried by the checkpoint byte for byte, else one with the ids (the source's or the
// tokenizer's), else none.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "config/options_parse.h"
#include "core/testing/status_matchers.h"
#include "data/tokens.h"
#include "interop/export_weights.h"
#include "interop/import_weights.h"
#include "interop/llmc_model.h"
#include "tests/engine_rig.h"
#include "tests/hf_fixtures.h"
#include "tests/placement_runs.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::StatusIs;

// Token data every fixture's vocabulary (64 to 100) can read.
std::string TokenData() {
  const std::string path = TestDir("export-data") + "/tokens.bin";
  if (std::filesystem::exists(path)) return path;  // written once: later runs read it
  std::vector<uint32_t> tokens(4096);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = (i * 31 + i / 5) % 64;
  EXPECT_OK(WriteTokenFile(path, tokens, 64));
  return path;
}

Options FromOptions(const std::string& from, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets = {"model.from=" + from, "train.micro_batch=2",
                                   "train.seq_len=16",    "device.threads=1",
                                   "train.eval_every=0",  "data.path=" + TokenData()};
  sets.insert(sets.end(), extra.begin(), extra.end());
  StatusOr<Options> options = ParseOptions("", sets);
  EXPECT_OK(options);
  return options.ok() ? *options : Options{};
}

// Trains `from` for two steps and returns the checkpoint written after them.
std::string TrainedCheckpoint(const std::string& from, const std::string& name) {
  const std::string dir = TestDir("export-checkpoints-" + name);
  std::filesystem::remove_all(dir);
  const PlacementRun run = TrainAllRanks(FromOptions(
      from, {"train.steps=2", "train.checkpoint_every=2", "train.checkpoint_dir=" + dir}));
  EXPECT_OK(run.status);
  return dir + "/step-2";
}

// Every unit's master weights (used elements) after importing `from` into a fresh engine;
// with `checkpoint_dir`, that state is also written there as a checkpoint (step-0).
std::vector<std::vector<float>> ImportedMasters(const std::string& from,
                                                const std::string& checkpoint_dir = "") {
  Options options = FromOptions(from);
  options.train.checkpoint_dir = checkpoint_dir;
  StatusOr<std::unique_ptr<EngineRig>> rig = MakeEngineRig(options);
  EXPECT_OK(rig);
  if (!rig.ok()) return {};
  Status imported =
      from.rfind("hf:", 0) == 0
          ? ImportHfWeights(from.substr(3), options.model, *(*rig)->model, *(*rig)->engine, false)
          : ImportLlmcWeights(from.substr(5), options.model, *(*rig)->model, *(*rig)->engine,
                              false);
  EXPECT_OK(imported);
  std::vector<std::vector<float>> masters;
  for (size_t u = 0; u < (*rig)->model->units().size(); ++u) {
    StatusOr<std::vector<float>> master = (*rig)->engine->state().ReadMaster(static_cast<int>(u));
    EXPECT_OK(master);
    master->resize((*rig)->model->units()[u].used_elements());
    masters.push_back(*master);
  }
  if (!checkpoint_dir.empty()) {
    EXPECT_OK(SaveCheckpoint(*(*rig)->engine, *(*rig)->model, options, 0).status());
  }
  return masters;
}

std::vector<std::vector<float>> CheckpointMasters(const std::string& path) {
  StatusOr<OpenedCheckpoint> checkpoint = OpenCheckpoint(path);
  EXPECT_OK(checkpoint);
  std::vector<std::vector<float>> masters;
  for (size_t u = 0; u < checkpoint->units.size(); ++u) {
    std::vector<float> values(checkpoint->units[u].elements);
    EXPECT_OK(ReadCheckpointMaster(*checkpoint, static_cast<int>(u), 0, values.size(),
                                   values.data()));
    masters.push_back(values);
  }
  return masters;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The value of top-level key `key` in JSON text written with indent 2 (as transformers
// and strata write config.json), as written: its text up to the end of its line, or of its
// object or list; "" where the key is absent.
std::string KeyText(const std::string& json, const std::string& key) {
  const std::string quoted = "\n  \"" + key + "\": ";
  size_t at = json.find(quoted);
  if (at == std::string::npos) return "";
  at += quoted.size();
  size_t end = json.find('\n', at);
  if (json[at] == '{' || json[at] == '[') {
    end = json.find(std::string("\n  ") + (json[at] == '{' ? '}' : ']'), at);
    if (end != std::string::npos) end += 4;
  }
  std::string value = json.substr(at, end == std::string::npos ? std::string::npos : end - at);
  if (!value.empty() && value.back() == ',') value.pop_back();
  return value;
}

class HfExport : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Fixtures, HfExport,
                         ::testing::Values("gpt2-tiny", "llama-tiny", "llama-tiny-tied",
                                           "qwen2-tiny", "mistral-tiny-hd", "qwen3-tiny"),
                         [](const auto& info) { return HfFixtureTestName(info.param); });

TEST_P(HfExport, ImportTrainExportImportIsExact) {
  const std::string checkpoint =
      TrainedCheckpoint("hf:" + HfFixture(GetParam()), GetParam());
  const std::vector<std::vector<float>> want = CheckpointMasters(checkpoint);
  ASSERT_FALSE(want.empty());
  // The imported fixture trained: its weights moved away from the fixture's.
  EXPECT_NE(ImportedMasters("hf:" + HfFixture(GetParam())), want);

  // fp32, one file and shards (a limit of 16 KiB: several shards and the index).
  for (const uint64_t shard : {uint64_t{5} << 30, uint64_t{16} << 10}) {
    const std::string out = TestDir(absl::StrCat("export-", GetParam(), "-", shard));
    std::filesystem::remove_all(out);
    ExportRequest request{checkpoint, "hf:" + out, DType::kF32, shard, false};
    ASSERT_OK_AND_ASSIGN(const std::string line, ExportWeights(request));
    EXPECT_THAT(line, HasSubstr(shard > (1u << 20) ? "1 safetensors file" : "shards"));
    EXPECT_EQ(std::filesystem::exists(out + "/model.safetensors.index.json"), shard < (1u << 20));
    EXPECT_EQ(ImportedMasters("hf:" + out), want) << "shard limit " << shard;
  }
  // config.json holds the source's values as the source wrote them: its floats in their
  // shortest form (rms_norm_eps 1e-05 and 1e-06, not 9.999999747378752e-06), the rope
  // scaling's factors.
  {
    const std::string source = ReadBytes(HfFixture(GetParam()) + "/config.json");
    const std::string exported =
        ReadBytes(TestDir(absl::StrCat("export-", GetParam(), "-", uint64_t{5} << 30)) +
                  "/config.json");
    int compared = 0;
    for (const char* key : {"rms_norm_eps", "rope_theta", "layer_norm_epsilon", "rope_scaling",
                            "hidden_size", "n_embd", "vocab_size", "bos_token_id",
                            "eos_token_id"}) {
      if (KeyText(source, key).empty() || KeyText(source, key) == "null") continue;
      EXPECT_EQ(KeyText(exported, key), KeyText(source, key)) << key;
      ++compared;
    }
    EXPECT_GE(compared, 5);
    // The fixtures have no generation_config.json: a minimal one with their ids.
    EXPECT_EQ(ReadBytes(TestDir(absl::StrCat("export-", GetParam(), "-", uint64_t{5} << 30)) +
                        "/generation_config.json"),
              absl::StrCat("{\n  \"bos_token_id\": ", KeyText(source, "bos_token_id"),
                           ",\n  \"eos_token_id\": ", KeyText(source, "eos_token_id"), "\n}\n"));
  }

  // bf16: the checkpoint rounded to nearest even; exported again, the same bytes.
  const std::string bf16_dir = TestDir("export-bf16-" + GetParam());
  const std::string again_dir = TestDir("export-bf16-again-" + GetParam());
  const std::string state_dir = TestDir("export-bf16-state-" + GetParam());
  for (const std::string& dir : {bf16_dir, again_dir, state_dir}) std::filesystem::remove_all(dir);
  ASSERT_OK(
      ExportWeights({checkpoint, "hf:" + bf16_dir, DType::kBF16, uint64_t{5} << 30, false}));
  const std::vector<std::vector<float>> rounded = ImportedMasters("hf:" + bf16_dir, state_dir);
  ASSERT_EQ(rounded.size(), want.size());
  for (size_t u = 0; u < want.size(); ++u) {
    for (size_t i = 0; i < want[u].size(); ++i) {
      bf16 b;
      Store(&b, want[u][i]);
      ASSERT_EQ(rounded[u][i], Load(&b)) << "unit " << u << " element " << i;
    }
  }
  // The bf16 import's state, checkpointed and exported as bf16 again: the same bytes.
  ASSERT_OK(ExportWeights(
      {state_dir + "/step-0", "hf:" + again_dir, DType::kBF16, uint64_t{5} << 30, false}));
  EXPECT_EQ(ReadBytes(again_dir + "/model.safetensors"), ReadBytes(bf16_dir + "/model.safetensors"));
  EXPECT_EQ(ReadBytes(again_dir + "/config.json"), ReadBytes(bf16_dir + "/config.json"));
  EXPECT_THAT(ReadBytes(bf16_dir + "/config.json"), HasSubstr("\"bfloat16\""));
}

// A Llama 3 instruct's source: eos_token_id [<|end_of_text|>, <|eot_id|>] and a
// generation_config.json with its sampling defaults, rms_norm_eps 1e-06. The checkpoint keeps
// them (checkpoint.json's "source", the copy in source/), so the export writes them though
// the source directory is gone by then: the eos list as a list, generation_config.json byte
// for byte, the eps as the source wrote it; and the export imports again. A copy that fails
// its hash is said on the line, and a minimal generation_config.json with the ids written.
TEST(HfExportGeneration, ALlama3InstructStopsAtItsEndOfTurn) {
  const std::string source = TestDir("export-llama3-source");
  std::filesystem::remove_all(source);
  std::filesystem::copy(HfFixture("llama-tiny"), source);
  std::string config = ReadBytes(source + "/config.json");
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"\"eos_token_id\": 2", "\"eos_token_id\": [\n    2,\n    3\n  ]"},
           {"\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": 1e-06"},
           {"\"rope_theta\": 10000.0", "\"rope_theta\": 500000.0"}}) {
    const size_t at = config.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    config.replace(at, from.size(), to);
  }
  std::ofstream(source + "/config.json") << config;
  const std::string generation =
      "{\n  \"bos_token_id\": 1,\n  \"do_sample\": true,\n  \"eos_token_id\": [\n    2,\n    "
      "3\n  ],\n  \"temperature\": 0.6,\n  \"top_p\": 0.9,\n  \"transformers_version\": "
      "\"4.40.0.dev0\"\n}\n";
  std::ofstream(source + "/generation_config.json") << generation;
  const std::string checkpoint = TrainedCheckpoint("hf:" + source, "llama3");
  ASSERT_OK_AND_ASSIGN(const OpenedCheckpoint opened, OpenCheckpoint(checkpoint));
  EXPECT_EQ(opened.source, "hf:" + std::filesystem::absolute(source).string());
  EXPECT_EQ(opened.source_tokens.Describe(), "bos_token_id 1, eos_token_id [2, 3]");
  ASSERT_EQ(opened.source_files.size(), 1u);
  std::filesystem::remove_all(source);  // the checkpoint alone carries them now

  const std::string out = TestDir("export-llama3");
  std::filesystem::remove_all(out);
  ASSERT_OK_AND_ASSIGN(const std::string line,
                       ExportWeights({checkpoint, "hf:" + out, DType::kF32, uint64_t{5} << 30,
                                      false}));
  EXPECT_THAT(line, HasSubstr("; bos_token_id 1, eos_token_id [2, 3] (from hf:"));
  EXPECT_THAT(line, HasSubstr("; generation_config.json (hf:"));
  const std::string exported = ReadBytes(out + "/config.json");
  EXPECT_EQ(KeyText(exported, "eos_token_id"), "[\n    2,\n    3\n  ]");
  EXPECT_EQ(KeyText(exported, "bos_token_id"), "1");
  EXPECT_EQ(KeyText(exported, "rms_norm_eps"), "1e-06");
  EXPECT_EQ(KeyText(exported, "rope_theta"), "500000.0");
  EXPECT_EQ(ReadBytes(out + "/generation_config.json"), generation);
  EXPECT_EQ(ImportedMasters("hf:" + out), CheckpointMasters(checkpoint));

  // The checkpoint's copy damaged: said, and the ids written as a minimal file.
  std::ofstream(checkpoint + "/source/generation_config.json") << "{}";
  const std::string again = TestDir("export-llama3-damaged");
  std::filesystem::remove_all(again);
  ASSERT_OK_AND_ASSIGN(const std::string damaged,
                       ExportWeights({checkpoint, "hf:" + again, DType::kF32, uint64_t{5} << 30,
                                      false}));
  EXPECT_THAT(damaged, HasSubstr("generation_config.json has XXH3"));
  EXPECT_THAT(damaged, HasSubstr("generation_config.json not carried"));
  EXPECT_EQ(ReadBytes(again + "/generation_config.json"),
            "{\n  \"bos_token_id\": 1,\n  \"eos_token_id\": [\n    2,\n    3\n  ]\n}\n");
}

// A checkpoint whose model did not come from a Hugging Face directory takes the ids from its
// tokenizer's special tokens (its copy of tokenizer_config.json); one with no tokenizer
// files (bytes, token files) writes neither the ids nor generation_config.json.
TEST(HfExportGeneration, IdsFromTheTokenizerElseNone) {
  const std::string tokenizer = TestDir("export-tokenizer");
  std::ofstream(tokenizer + "/tokenizer_config.json")
      << R"({"bos_token": "<s>", "eos_token": "</s>", "added_tokens_decoder": {
              "1": {"content": "<s>"}, "2": {"content": "</s>"}}})";
  for (const bool with_tokenizer : {true, false}) {
    SCOPED_TRACE(with_tokenizer);
    StatusOr<Options> options = ParseOptions(
        "", {"model.preset=tiny", "train.micro_batch=1", "train.seq_len=16", "device.threads=1"});
    ASSERT_OK(options);
    const std::string dir = TestDir(absl::StrCat("export-tokenizer-ck-", with_tokenizer));
    std::filesystem::remove_all(dir);
    options->train.checkpoint_dir = dir;
    ASSERT_OK_AND_ASSIGN(auto rig, MakeEngineRig(*options));
    CheckpointContext context;
    context.tokenizer = with_tokenizer ? "hf:" + tokenizer : "";
    ASSERT_OK(SaveCheckpoint(*rig->engine, *rig->model, *options, 0, context).status());
    const std::string out = TestDir(absl::StrCat("export-tokenizer-out-", with_tokenizer));
    std::filesystem::remove_all(out);
    ASSERT_OK_AND_ASSIGN(const std::string line,
                         ExportWeights({dir + "/step-0", "hf:" + out, DType::kF32,
                                        uint64_t{5} << 30, false}));
    const std::string exported = ReadBytes(out + "/config.json");
    if (with_tokenizer) {
      EXPECT_THAT(line, HasSubstr("; bos_token_id 1, eos_token_id 2 (from the tokenizer's special "
                                  "tokens); generation_config.json (written from the ids)"));
      EXPECT_EQ(KeyText(exported, "bos_token_id"), "1");
      EXPECT_EQ(KeyText(exported, "eos_token_id"), "2");
      EXPECT_EQ(ReadBytes(out + "/generation_config.json"),
                "{\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2\n}\n");
    } else {
      EXPECT_THAT(line, Not(HasSubstr("token_id")));
      EXPECT_EQ(KeyText(exported, "bos_token_id"), "");
      EXPECT_EQ(KeyText(exported, "eos_token_id"), "");
      EXPECT_FALSE(std::filesystem::exists(out + "/generation_config.json"));
    }
  }
}

TEST(LlmcExport, GptRoundTripsAndLlamaIsRefused) {
  const std::string checkpoint = TrainedCheckpoint("hf:" + HfFixture("gpt2-tiny"), "llmc");
  const std::string file = TestDir("export-llmc") + "/gpt2.bin";
  ASSERT_OK_AND_ASSIGN(const std::string line,
                       ExportWeights({checkpoint, "llmc:" + file, DType::kF32, 0, false}));
  EXPECT_THAT(line, HasSubstr("llm.c version 3"));
  ASSERT_OK_AND_ASSIGN(const ModelOptions header, ReadLlmcHeader(file));
  EXPECT_EQ(header.vocab, 96);
  EXPECT_EQ(header.padded_vocab, 128);
  EXPECT_EQ(header.layers, 2);
  EXPECT_EQ(ImportedMasters("llmc:" + file), CheckpointMasters(checkpoint));
  // The bytes: 256 int32 of header, then wte's first value.
  const std::string bytes = ReadBytes(file);
  int32_t magic = 0, version = 0;
  std::memcpy(&magic, bytes.data(), 4);
  std::memcpy(&version, bytes.data() + 4, 4);
  EXPECT_EQ(magic, 20240326);
  EXPECT_EQ(version, 3);

  const std::string llama = TrainedCheckpoint("hf:" + HfFixture("llama-tiny"), "llmc-llama");
  EXPECT_THAT(ExportWeights({llama, "llmc:" + file + ".llama", DType::kF32, 0, false}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("GPT-2 only")));
  EXPECT_FALSE(std::filesystem::exists(file + ".llama"));
  EXPECT_THAT(ExportWeights({llama, "safetensors:/x", DType::kF32, 0, false}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected hf:DIR")));
  // A damaged llm.c file is named before anything is loaded.
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 8);
  EXPECT_THAT(ParseOptions("", {"model.from=llmc:" + file}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("fp32 parameters")));
}

}  // namespace
}  // namespace strata
