// LoRA checkpoints out of strata (interop/export_weights.h, sample/sample.h), both families,
// on a random base and on a Hugging Face base (tools/hf_reference.py's fixtures): a tiny
// LoRA run on every target trains three steps and writes a checkpoint, then
//  - peft:DIR holds every adapter tensor under PEFT's name, bit for bit the checkpoint's
//    (bf16: rounded to nearest even), with PEFT's adapter_config.json;
//  - hf:DIR --merge-lora holds the base plus (alpha/rank) B A, computed here from the base's
//    own file (or the model's init) and the checkpoint's adapters, within 1e-6 relative,
//    for GPT-2's fused, transposed c_attn and LLaMA's k_proj and up_proj slices; every
//    other tensor is the base's, bit for bit; and the merged model, imported without LoRA,
//    has the LoRA model's loss within 1e-5 relative (and not its base's); its config.json
//    carries the base's special-token ids and generation_config.json comes along (a
//    checkpoint written before strata kept its source: the base directory's own);
//  - sampling the LoRA checkpoint (base + adapters, unmerged) gives the merged export's
//    logits within 1e-5 + 1e-4 |ref| and the same greedy tokens;
//  - the wrong destinations are errors naming the way out, and a base that changed since
//    training is refused naming both hashes (and accepted again once restored).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <xxhash.h>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "config/options_parse.h"
#include "core/dtype.h"
#include "core/run_inputs.h"
#include "core/testing/status_matchers.h"
#include "data/tokens.h"
#include "interop/export_weights.h"
#include "interop/import_weights.h"
#include "models/create_model.h"
#include "models/hf/safetensors.h"
#include "sample/sample.h"
#include "tests/engine_rig.h"
#include "tests/hf_fixtures.h"
#include "tests/placement_runs.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

// A LoRA run: the family, and its base (a fixture copied and imported, or "" = random).
struct Case {
  std::string name;
  bool llama = false;
  std::string fixture;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) { return info.param.name; }
void PrintTo(const Case& c, std::ostream* out) { *out << c.name; }

// Token data every vocabulary here (96, 100, 250) can read.
std::string TokenData() {
  const std::string path = TestDir("lora-export-data") + "/tokens.bin";
  if (std::filesystem::exists(path)) return path;
  std::vector<uint32_t> tokens(4096);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = (i * 31 + i / 5) % 96;
  EXPECT_OK(WriteTokenFile(path, tokens, 96));
  return path;
}

// A copy of fixture `fixture` at a fresh `dir` (tests that change a base change a copy).
std::string CopyFixture(const std::string& fixture, const std::string& name) {
  const std::string dir = TestDir(name);
  std::filesystem::remove_all(dir);
  std::filesystem::copy(HfFixture(fixture), dir);
  return dir;
}

// The LoRA run's options: rank 4 on every target, lr 1e-2 (the adapters move well away
// from zero in three steps), checkpoints in `checkpoint_dir`.
Options RunOptions(const Case& c, const std::string& base_dir, const std::string& checkpoint_dir,
                   const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets = {
      "lora.rank=4",          "lora.targets=all",         "train.lr=1e-2",
      "train.warmup_steps=0", "train.checkpoint_every=3", "train.checkpoint_dir=" + checkpoint_dir};
  sets.insert(sets.end(), extra.begin(), extra.end());
  if (c.fixture.empty()) {
    std::vector<std::string> all = sets;
    if (c.llama) all.insert(all.begin(), TinyLlamaSets().begin(), TinyLlamaSets().end());
    return PlacementRunOptions(1, 2, all, 3);
  }
  std::vector<std::string> all = {"model.from=hf:" + base_dir, "train.micro_batch=2",
                                  "train.seq_len=16",          "device.threads=1",
                                  "train.eval_every=0",        "train.steps=3",
                                  "data.path=" + TokenData()};
  all.insert(all.end(), sets.begin(), sets.end());
  StatusOr<Options> options = ParseOptions("", all);
  EXPECT_OK(options);
  return options.ok() ? *options : Options{};
}

struct Trained {
  Options options;         // the LoRA run's
  std::string base_dir;    // the Hugging Face base, or "" (random init)
  std::string checkpoint;  // its step-3
};

// Each case trained once for all the tests that read it.
const Trained& TrainedCase(const Case& c) {
  static auto* trained = new std::map<std::string, Trained>();
  auto found = trained->find(c.name);
  if (found != trained->end()) return found->second;
  Trained t;
  if (!c.fixture.empty()) t.base_dir = CopyFixture(c.fixture, "lora-export-base-" + c.name);
  const std::string dir = TestDir("lora-export-run-" + c.name);
  std::filesystem::remove_all(dir);
  t.options = RunOptions(c, t.base_dir, dir);
  const PlacementRun run = TrainAllRanks(t.options);
  EXPECT_OK(run.status);
  t.checkpoint = dir + "/step-3";
  return trained->emplace(c.name, t).first->second;
}

// Strata's target names and PEFT's module paths inside a layer (written out here, not
// taken from the model, so that a wrong name in the exporter shows).
std::vector<std::pair<std::string, std::string>> TargetModules(bool llama) {
  if (llama) {
    return {{"attn.q", "self_attn.q_proj"}, {"attn.k", "self_attn.k_proj"},
            {"attn.v", "self_attn.v_proj"}, {"attn.proj", "self_attn.o_proj"},
            {"mlp.gate", "mlp.gate_proj"},  {"mlp.up", "mlp.up_proj"},
            {"mlp.down", "mlp.down_proj"}};
  }
  return {{"attn.qkv", "attn.c_attn"},
          {"attn.proj", "attn.c_proj"},
          {"mlp.fc", "mlp.c_fc"},
          {"mlp.proj", "mlp.c_proj"}};
}

std::string LayerPrefix(bool llama, int layer) {
  return absl::StrCat(llama ? "model.layers." : "transformer.h.", layer, ".");
}

// Checkpoint unit `layer`'s tensor "<target>.lora_A" / ".lora_B" as [rows, cols].
struct Matrix {
  std::vector<float> values;
  int rows = 0, cols = 0;
  float at(int r, int c) const { return values[static_cast<size_t>(r) * cols + c]; }
};
Matrix AdapterTensor(const OpenedCheckpoint& checkpoint, const Model& lora_model, int layer,
                     const std::string& name) {
  const int first = static_cast<int>(lora_model.units().size()) - checkpoint.model.layers;
  for (const TensorSpec& tensor : lora_model.units()[first + layer].tensors()) {
    if (tensor.name != name) continue;
    Matrix m;
    m.rows = tensor.shape[0];
    m.cols = tensor.shape[1];
    m.values.resize(tensor.numel);
    EXPECT_OK(
        ReadCheckpointMaster(checkpoint, layer, tensor.offset, tensor.numel, m.values.data()));
    return m;
  }
  ADD_FAILURE() << "no adapter tensor " << name;
  return {};
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<float> ReadTensor(const SafetensorsSet& set, const std::string& name) {
  const StTensor* tensor = set.Find(name);
  if (tensor == nullptr && name.rfind("transformer.", 0) == 0) tensor = set.Find(name.substr(12));
  EXPECT_NE(tensor, nullptr) << name;
  if (tensor == nullptr) return {};
  std::vector<float> values(tensor->numel);
  EXPECT_OK(set.ReadFloats(*tensor, 0, tensor->numel, values.data()));
  return values;
}

std::unique_ptr<Model> LoraModel(const OpenedCheckpoint& checkpoint) {
  LoraOptions lora;
  lora.rank = checkpoint.lora.rank;
  lora.alpha = checkpoint.lora.alpha;
  lora.targets = checkpoint.lora.targets;
  StatusOr<std::unique_ptr<Model>> model =
      CreateModel(checkpoint.model, Recompute::kNone, DType::kF32, lora);
  EXPECT_OK(model);
  return model.ok() ? std::move(*model) : nullptr;
}

class LoraExport : public ::testing::TestWithParam<Case> {};
INSTANTIATE_TEST_SUITE_P(Runs, LoraExport,
                         ::testing::Values(Case{"Gpt", false, ""}, Case{"Llama", true, ""},
                                           Case{"Gpt2Hf", false, "gpt2-tiny"},
                                           Case{"LlamaHf", true, "llama-tiny"}),
                         CaseName);

TEST_P(LoraExport, PeftFilesHoldTheAdaptersExactly) {
  const Case& c = GetParam();
  const Trained& t = TrainedCase(c);
  ASSERT_OK_AND_ASSIGN(const OpenedCheckpoint checkpoint, OpenCheckpoint(t.checkpoint));
  ASSERT_EQ(checkpoint.lora.rank, 4);
  const std::unique_ptr<Model> lora_model = LoraModel(checkpoint);
  ASSERT_NE(lora_model, nullptr);
  const auto targets = TargetModules(c.llama);
  const int L = checkpoint.model.layers;
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    const std::string dir = TestDir(absl::StrCat("lora-export-peft-", c.name, DTypeName(dtype)));
    std::filesystem::remove_all(dir);
    ExportRequest request;
    request.from = t.checkpoint;
    request.to = "peft:" + dir;
    request.dtype = dtype;
    request.show_progress = false;
    ASSERT_OK_AND_ASSIGN(const std::string line, ExportWeights(request));
    EXPECT_THAT(line, HasSubstr("adapter_model.safetensors"));

    ASSERT_OK_AND_ASSIGN(const SafetensorsSet set,
                         SafetensorsSet::OpenFile(dir + "/adapter_model.safetensors"));
    EXPECT_EQ(set.metadata().at("format"), "pt");
    EXPECT_EQ(set.tensors().size(), static_cast<size_t>(L) * targets.size() * 2);
    float largest_b = 0.0f;
    for (int l = 0; l < L; ++l) {
      for (const auto& [target, module] : targets) {
        for (const std::string ab : {"A", "B"}) {
          const std::string name = absl::StrCat("base_model.model.", LayerPrefix(c.llama, l),
                                                module, ".lora_", ab, ".weight");
          const StTensor* tensor = set.Find(name);
          ASSERT_NE(tensor, nullptr) << name;
          const Matrix want = AdapterTensor(checkpoint, *lora_model, l, target + ".lora_" + ab);
          EXPECT_EQ(tensor->shape, (std::vector<int64_t>{want.rows, want.cols})) << name;
          EXPECT_EQ(tensor->dtype, dtype == DType::kF32 ? StDType::kF32 : StDType::kBF16);
          std::vector<float> got(tensor->numel);
          ASSERT_OK(set.ReadFloats(*tensor, 0, tensor->numel, got.data()));
          ASSERT_EQ(got.size(), want.values.size()) << name;
          for (size_t i = 0; i < got.size(); ++i) {
            const float expected =
                dtype == DType::kF32 ? want.values[i] : ToFloat(ToBf16(want.values[i]));
            ASSERT_EQ(std::memcmp(&got[i], &expected, sizeof(float)), 0)
                << name << "[" << i << "]: " << got[i] << " vs " << expected;
            if (ab == "B") largest_b = std::max(largest_b, std::fabs(got[i]));
          }
        }
      }
    }
    EXPECT_GT(largest_b, 1e-3f) << "the adapters did not train: B is still zero";

    std::ifstream in(dir + "/adapter_config.json");
    const nlohmann::json config = nlohmann::json::parse(in);
    EXPECT_EQ(config.at("peft_type"), "LORA");
    EXPECT_EQ(config.at("task_type"), "CAUSAL_LM");
    EXPECT_EQ(config.at("r"), 4);
    EXPECT_TRUE(config.at("lora_alpha").is_number_integer());
    EXPECT_EQ(config.at("lora_alpha"), 16);
    EXPECT_EQ(config.at("lora_dropout"), 0.0);
    std::vector<std::string> modules;
    for (const auto& [target, module] : targets) modules.push_back(module);
    EXPECT_EQ(config.at("target_modules").get<std::vector<std::string>>(), modules);
    EXPECT_EQ(config.at("bias"), "none");
    EXPECT_EQ(config.at("fan_in_fan_out"), !c.llama);  // GPT-2's Conv1D
    EXPECT_EQ(config.at("inference_mode"), true);
    EXPECT_EQ(config.at("base_model_name_or_path"), t.base_dir);
    EXPECT_TRUE(config.at("modules_to_save").is_null());
    EXPECT_EQ(config.at("init_lora_weights"), true);
    EXPECT_EQ(config.at("use_rslora"), false);
  }
}

// The base's weight of `module` in block `layer`, as the Hugging Face file lays it out:
// from the base directory, or (a random base) from the model's init in strata's layout,
// rows [row, row + n) of `strata_tensor`, transposed for GPT-2's Conv1D.
std::vector<float> BaseWeight(const Case& c, const Trained& t, const OpenedCheckpoint& checkpoint,
                              int layer, const std::string& module,
                              const std::string& strata_tensor, int row, int n) {
  if (!c.fixture.empty()) {
    StatusOr<SafetensorsSet> set = SafetensorsSet::OpenDirectory(t.base_dir);
    EXPECT_OK(set);
    return ReadTensor(*set, LayerPrefix(c.llama, layer) + module + ".weight");
  }
  StatusOr<std::unique_ptr<Model>> model =
      CreateModel(checkpoint.model, Recompute::kNone, DType::kF32);
  EXPECT_OK(model);
  const int unit = layer + 1;  // the embedding unit first, then the blocks
  std::vector<float> values((*model)->units()[unit].used_elements(), 0.0f);
  (*model)->InitUnit(unit, checkpoint.base.seed, values.data());
  for (const TensorSpec& tensor : (*model)->units()[unit].tensors()) {
    if (tensor.name != strata_tensor) continue;
    const int cols = tensor.shape[1];
    std::vector<float> out(static_cast<size_t>(n) * cols);
    for (int r = 0; r < n; ++r) {
      for (int k = 0; k < cols; ++k) {
        const float v = values[tensor.offset + static_cast<size_t>(row + r) * cols + k];
        if (c.llama) {
          out[static_cast<size_t>(r) * cols + k] = v;
        } else {
          out[static_cast<size_t>(k) * n + r] = v;  // Conv1D: [in, out]
        }
      }
    }
    return out;
  }
  ADD_FAILURE() << "no tensor " << strata_tensor;
  return {};
}

// A batch of tokens below every vocabulary here.
struct Batch {
  std::vector<int32_t> inputs, targets;
  MicroBatch micro() const { return {inputs.data(), targets.data()}; }
};
Batch TokenBatch(const Options& options) {
  Batch batch;
  std::mt19937 rng(3);
  for (int i = 0; i < options.train.micro_batch * options.train.seq_len; ++i) {
    batch.inputs.push_back(static_cast<int32_t>(rng() % 90));
    batch.targets.push_back(static_cast<int32_t>(rng() % 90));
  }
  return batch;
}

// Puts the checkpoint's adapters (its units, the model's last `layers`) into `rig`.
void LoadAdapters(const OpenedCheckpoint& checkpoint, EngineRig& rig) {
  const int layers = checkpoint.model.layers;
  const int first = static_cast<int>(rig.model->units().size()) - layers;
  for (int k = 0; k < layers; ++k) {
    std::vector<float> master(rig.engine->state().PaddedElements(first + k), 0.0f);
    ASSERT_OK(ReadCheckpointMaster(checkpoint, k, 0, checkpoint.units[k].elements, master.data()));
    ASSERT_OK(rig.engine->state().WriteMaster(first + k, master));
  }
}

// The loss of the Hugging Face directory `dir` (a merged export) imported without LoRA.
StatusOr<double> MergedLoss(const Options& lora_options, const std::string& dir,
                            const Batch& batch) {
  Options options = lora_options;
  options.lora = LoraOptions{};
  options.model.from = "hf:" + dir;
  ASSIGN_OR_RETURN(auto rig, MakeEngineRig(options));
  RETURN_IF_ERROR(ImportHfWeights(dir, options.model, *rig->model, *rig->engine, false));
  return rig->engine->EvalLoss(batch.micro());
}

TEST_P(LoraExport, MergedWeightsAreTheBasePlusTheScaledProduct) {
  const Case& c = GetParam();
  const Trained& t = TrainedCase(c);
  ASSERT_OK_AND_ASSIGN(const OpenedCheckpoint checkpoint, OpenCheckpoint(t.checkpoint));
  const std::unique_ptr<Model> lora_model = LoraModel(checkpoint);
  ASSERT_NE(lora_model, nullptr);
  const std::string dir = TestDir("lora-export-merged-" + c.name);
  std::filesystem::remove_all(dir);
  ExportRequest request;
  request.from = t.checkpoint;
  request.to = "hf:" + dir;
  request.show_progress = false;
  request.merge_lora = true;
  ASSERT_OK_AND_ASSIGN(const std::string line, ExportWeights(request));
  EXPECT_THAT(line, HasSubstr("merged"));
  ASSERT_OK_AND_ASSIGN(const SafetensorsSet merged, SafetensorsSet::OpenDirectory(dir));
  // config.json carries the base's special-token ids, and generation_config.json comes with
  // them; a random base (bytes, no source) has none to carry, and neither is written.
  {
    const nlohmann::json config = nlohmann::json::parse(ReadText(dir + "/config.json"));
    if (!c.fixture.empty()) {
      const nlohmann::json base = nlohmann::json::parse(ReadText(t.base_dir + "/config.json"));
      EXPECT_EQ(config.at("bos_token_id"), base.at("bos_token_id"));
      EXPECT_EQ(config.at("eos_token_id"), base.at("eos_token_id"));
      EXPECT_EQ(nlohmann::json::parse(ReadText(dir + "/generation_config.json")),
                nlohmann::json({{"bos_token_id", base.at("bos_token_id")},
                                {"eos_token_id", base.at("eos_token_id")}}));
    } else {
      EXPECT_FALSE(config.contains("bos_token_id"));
      EXPECT_FALSE(config.contains("eos_token_id"));
      EXPECT_FALSE(std::filesystem::exists(dir + "/generation_config.json"));
    }
  }

  // Which projections to recompute: GPT-2's fused c_attn (all of qkv, Conv1D) and c_proj
  // of the MLP (in = 4C); LLaMA's k_proj (a slice of qkv after q) and up_proj (of gate_up,
  // after gate).
  const ModelOptions& m = checkpoint.model;
  const int C = m.channels, Q = m.heads * m.head_dim, KV = m.kv_heads * m.head_dim;
  const int F = m.ffn_hidden;
  struct Check {
    std::string target, module, strata_tensor;
    int row, n;
  };
  std::vector<Check> checks;
  if (c.llama) {
    checks.push_back({"attn.k", "self_attn.k_proj", "attn.qkv.weight", Q, KV});
    checks.push_back({"mlp.up", "mlp.up_proj", "mlp.gate_up.weight", F, F});
  } else {
    checks.push_back({"attn.qkv", "attn.c_attn", "attn.qkv.weight", 0, 3 * C});
    checks.push_back({"mlp.proj", "mlp.c_proj", "mlp.proj.weight", 0, C});
  }
  const double scale = 16.0 / 4.0;  // lora.alpha (default) / lora.rank
  for (int l = 0; l < m.layers; ++l) {
    for (const Check& check : checks) {
      const std::string where = LayerPrefix(c.llama, l) + check.module;
      const Matrix a = AdapterTensor(checkpoint, *lora_model, l, check.target + ".lora_A");
      const Matrix b = AdapterTensor(checkpoint, *lora_model, l, check.target + ".lora_B");
      ASSERT_EQ(b.rows, check.n);
      const int in = a.cols;
      const std::vector<float> base =
          BaseWeight(c, t, checkpoint, l, check.module, check.strata_tensor, check.row, check.n);
      const std::vector<float> got = ReadTensor(merged, where + ".weight");
      ASSERT_EQ(base.size(), static_cast<size_t>(check.n) * in) << where;
      ASSERT_EQ(got.size(), base.size()) << where;
      double largest_delta = 0.0, largest_base = 0.0;
      for (int o = 0; o < check.n; ++o) {
        for (int i = 0; i < in; ++i) {
          double delta = 0.0;
          for (int k = 0; k < a.rows; ++k) delta += double(b.at(o, k)) * a.at(k, i);
          delta *= scale;
          // LLaMA's files are [out, in]; GPT-2's Conv1D [in, out].
          const size_t index =
              c.llama ? static_cast<size_t>(o) * in + i : static_cast<size_t>(i) * check.n + o;
          const double want = base[index] + delta;
          ASSERT_LE(std::fabs(got[index] - want), 1e-6 * std::fabs(want))
              << where << " [" << o << ", " << i << "]: " << got[index] << " vs " << want;
          largest_delta = std::max(largest_delta, std::fabs(delta));
          largest_base = std::max(largest_base, std::fabs(double(base[index])));
        }
      }
      // The merge is no rounding error: the adapters moved the weight.
      EXPECT_GT(largest_delta, 1e-3 * largest_base) << where;
    }
  }
  // A tensor no adapter touches is the base's, bit for bit.
  if (!c.fixture.empty()) {
    ASSERT_OK_AND_ASSIGN(const SafetensorsSet base, SafetensorsSet::OpenDirectory(t.base_dir));
    const std::string name = c.llama ? "model.embed_tokens.weight" : "transformer.wte.weight";
    EXPECT_EQ(ReadTensor(merged, name), ReadTensor(base, name)) << name;
  }

  // The merged model, imported without LoRA, computes the LoRA model's loss.
  Options lora_options = t.options;
  lora_options.train.steps = 100;
  ASSERT_OK_AND_ASSIGN(auto lora_rig, MakeEngineRig(lora_options));
  if (!c.fixture.empty()) {
    ASSERT_OK(ImportHfWeights(t.base_dir, lora_options.model, *lora_rig->model, *lora_rig->engine,
                              false));
  }
  const Batch batch = TokenBatch(lora_options);
  ASSERT_OK_AND_ASSIGN(const double base_loss, lora_rig->engine->EvalLoss(batch.micro()));
  LoadAdapters(checkpoint, *lora_rig);
  ASSERT_OK_AND_ASSIGN(const double lora_loss, lora_rig->engine->EvalLoss(batch.micro()));
  ASSERT_OK_AND_ASSIGN(const double merged_loss, MergedLoss(lora_options, dir, batch));
  EXPECT_NEAR(merged_loss, lora_loss, 1e-5 * std::fabs(lora_loss));
  // Ten times the tolerance at least: the adapters change the loss (2e-4 to 2e-2 of it
  // here), so a merge that left them out would fail the comparison above.
  EXPECT_GT(std::fabs(lora_loss - base_loss), 1e-4 * std::fabs(base_loss))
      << "base loss " << base_loss << ", with the adapters " << lora_loss;
}

Options SampleOptions() {
  StatusOr<Options> options =
      ParseOptions("", {"train.micro_batch=1", "train.seq_len=16", "device.threads=1"});
  EXPECT_OK(options);
  return options.ok() ? *options : Options{};
}

// Feeds `prompt`, then generates greedily to the end of the cache; returns every logit
// returned and the tokens generated.
struct Generated {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> tokens;
};
StatusOr<Generated> Greedy(Generator& generator, const std::vector<int32_t>& prompt) {
  Generated out;
  std::vector<float> logits;
  for (int32_t token : prompt) {
    ASSIGN_OR_RETURN(logits, generator.Feed(token));
    out.logits.push_back(logits);
  }
  std::mt19937_64 rng(1);
  while (generator.position() < generator.max_len()) {
    const int32_t next = DrawToken(logits, {0.0f, 0, 1}, rng);
    out.tokens.push_back(next);
    ASSIGN_OR_RETURN(logits, generator.Feed(next));
    out.logits.push_back(logits);
  }
  return out;
}

TEST_P(LoraExport, SamplingTheAdaptersUnmergedIsSamplingTheMergedModel) {
  const Case& c = GetParam();
  const Trained& t = TrainedCase(c);
  const std::string dir = TestDir("lora-export-sample-merged-" + c.name);
  std::filesystem::remove_all(dir);
  ExportRequest request;
  request.from = t.checkpoint;
  request.to = "hf:" + dir;
  request.show_progress = false;
  request.merge_lora = true;
  ASSERT_OK(ExportWeights(request));
  const std::vector<int32_t> prompt = {5, 17, 42, 8};
  ASSERT_OK_AND_ASSIGN(auto unmerged, Generator::Create(t.checkpoint, SampleOptions(), 16));
  EXPECT_THAT(unmerged->Describe(), HasSubstr("LoRA"));
  ASSERT_OK_AND_ASSIGN(auto merged, Generator::Create("hf:" + dir, SampleOptions(), 16));
  ASSERT_OK_AND_ASSIGN(const Generated got, Greedy(*unmerged, prompt));
  ASSERT_OK_AND_ASSIGN(const Generated want, Greedy(*merged, prompt));
  ASSERT_EQ(got.logits.size(), want.logits.size());
  for (size_t p = 0; p < got.logits.size(); ++p) {
    ASSERT_EQ(got.logits[p].size(), want.logits[p].size());
    for (size_t v = 0; v < got.logits[p].size(); ++v) {
      ASSERT_LE(std::fabs(got.logits[p][v] - want.logits[p][v]),
                1e-5 + 1e-4 * std::fabs(want.logits[p][v]))
          << "position " << p << " token " << v;
    }
  }
  EXPECT_EQ(got.tokens, want.tokens);
  // With a Hugging Face base, the base alone gives other logits: the adapters were used.
  if (!c.fixture.empty()) {
    ASSERT_OK_AND_ASSIGN(auto base, Generator::Create("hf:" + t.base_dir, SampleOptions(), 16));
    ASSERT_OK_AND_ASSIGN(const Generated plain, Greedy(*base, prompt));
    float largest = 0.0f;
    for (size_t v = 0; v < plain.logits[0].size(); ++v) {
      largest = std::max(largest, std::fabs(plain.logits[3][v] - want.logits[3][v]));
    }
    EXPECT_GT(largest, 1e-3f);
  }
}

TEST_P(LoraExport, WrongDestinationsNameTheWayOut) {
  const Trained& t = TrainedCase(GetParam());
  const std::string dir = TestDir("lora-export-refused-" + GetParam().name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ExportRequest request;
  request.from = t.checkpoint;
  request.show_progress = false;
  for (const std::string& to : {"hf:" + dir, "llmc:" + dir + "/model.bin"}) {
    request.to = to;
    EXPECT_THAT(ExportWeights(request),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::AllOf(HasSubstr("LoRA adapters"), HasSubstr("--to peft:DIR"),
                                          HasSubstr("--merge-lora"))))
        << to;
  }
  request.to = "peft:" + dir;
  request.merge_lora = true;
  EXPECT_THAT(ExportWeights(request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--merge-lora writes")));
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "a refused export wrote something";
}

// A checkpoint of full training has no adapters: peft: and --merge-lora are refused.
TEST(LoraExportRefused, FullTrainingCheckpoint) {
  const std::string dir = TestDir("lora-export-full-run");
  std::filesystem::remove_all(dir);
  const PlacementRun run = TrainAllRanks(
      PlacementRunOptions(1, 0, {"train.checkpoint_every=1", "train.checkpoint_dir=" + dir}, 1));
  ASSERT_OK(run.status);
  const std::string out = TestDir("lora-export-full-out");
  ExportRequest request;
  request.from = dir + "/step-1";
  request.to = "peft:" + out;
  request.show_progress = false;
  EXPECT_THAT(ExportWeights(request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("full training")));
  request.to = "hf:" + out;
  request.merge_lora = true;
  EXPECT_THAT(ExportWeights(request), StatusIs(absl::StatusCode::kInvalidArgument,
                                               HasSubstr("--merge-lora applies to LoRA")));
  request.merge_lora = false;
  EXPECT_OK(ExportWeights(request));  // the plain export still works
}

// The Hugging Face base is rewritten with one weight changed after training: merging and
// sampling are refused naming the checkpoint's hash and the base's new one; the adapters
// alone still export; with the base restored, merging works again.
TEST(LoraExportRefused, ChangedBaseNamesBothHashes) {
  const Case c{"Changed", false, "gpt2-tiny"};
  const std::string base_dir = CopyFixture(c.fixture, "lora-export-changed-base");
  const std::string run_dir = TestDir("lora-export-changed-run");
  std::filesystem::remove_all(run_dir);
  ASSERT_OK(TrainAllRanks(RunOptions(c, base_dir, run_dir)).status);
  const std::string checkpoint = run_dir + "/step-3";
  ASSERT_OK_AND_ASSIGN(const OpenedCheckpoint opened, OpenCheckpoint(checkpoint));

  // The same tensors, one element of ln_f moved by 1e-3.
  const std::string file = base_dir + "/model.safetensors";
  const std::string saved = base_dir + "/original.safetensors.bak";
  std::filesystem::copy_file(file, saved);
  {
    ASSERT_OK_AND_ASSIGN(const SafetensorsSet set, SafetensorsSet::OpenFile(saved));
    std::vector<StOutputTensor> tensors;
    for (const StTensor& tensor : set.tensors()) {
      auto values = std::make_shared<std::vector<float>>(tensor.numel);
      ASSERT_OK(set.ReadFloats(tensor, 0, tensor.numel, values->data()));
      if (tensor.name.find("ln_f.weight") != std::string::npos) (*values)[3] += 1e-3f;
      tensors.push_back(
          {tensor.name, tensor.shape, [values](uint64_t begin, uint64_t count, float* out) {
             std::copy(values->begin() + begin, values->begin() + begin + count, out);
             return absl::OkStatus();
           }});
    }
    ForgetRunInputs();  // the base, read by the run above, is changed for the next one
    ASSERT_OK(WriteSafetensors(file, tensors, StDType::kF32, {{"format", "pt"}}));
  }
  const std::string out = TestDir("lora-export-changed-out");
  std::filesystem::remove_all(out);
  ExportRequest request;
  request.from = checkpoint;
  request.to = "hf:" + out;
  request.show_progress = false;
  request.merge_lora = true;
  const Status refused = ExportWeights(request).status();
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kFailedPrecondition,
                                ::testing::AllOf(HasSubstr("has changed"),
                                                 HasSubstr("XXH3 " + opened.base.xxh3),
                                                 HasSubstr(base_dir))));
  const std::string now = "now hashes to ";
  const std::string message(refused.message());
  const size_t at = message.find(now);
  ASSERT_NE(at, std::string::npos) << message;
  const std::string new_hash = message.substr(at + now.size(), 16);
  EXPECT_EQ(new_hash.find_first_not_of("0123456789abcdef"), std::string::npos) << new_hash;
  EXPECT_NE(new_hash, opened.base.xxh3);
  EXPECT_FALSE(std::filesystem::exists(out + "/model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(out + "/config.json"));
  EXPECT_THAT(Generator::Create(checkpoint, SampleOptions(), 8).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::AllOf(HasSubstr(opened.base.xxh3), HasSubstr(new_hash))));
  request.to = "peft:" + out;
  request.merge_lora = false;
  EXPECT_OK(ExportWeights(request));

  std::filesystem::copy_file(saved, file, std::filesystem::copy_options::overwrite_existing);
  request.to = "hf:" + out;
  request.merge_lora = true;
  EXPECT_OK(ExportWeights(request));
}

// A LoRA checkpoint of a strata before checkpoints kept their model's source (no "source" in
// checkpoint.json): the merged export takes the ids and generation_config.json from the base
// directory itself, which it reads anyway.
TEST(LoraExportGeneration, ACheckpointWithoutItsSourceTakesTheBases) {
  const Case c{"Generation", true, "llama-tiny"};
  const std::string base_dir = CopyFixture(c.fixture, "lora-export-generation-base");
  const std::string run_dir = TestDir("lora-export-generation-run");
  std::filesystem::remove_all(run_dir);
  ASSERT_OK(TrainAllRanks(RunOptions(c, base_dir, run_dir)).status);
  const std::string checkpoint = run_dir + "/step-3";
  {
    nlohmann::json meta = nlohmann::json::parse(ReadText(checkpoint + "/checkpoint.json"));
    ASSERT_TRUE(meta.contains("source"));
    meta.erase("source");
    meta.erase("checksum");
    const std::string compact = meta.dump();  // what checkpoint.json's checksum covers
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx",
                  static_cast<unsigned long long>(XXH3_64bits(compact.data(), compact.size())));
    meta["checksum"] = hex;
    std::ofstream(checkpoint + "/checkpoint.json") << meta.dump(2) << "\n";
  }
  ASSERT_OK_AND_ASSIGN(const OpenedCheckpoint opened, OpenCheckpoint(checkpoint));
  EXPECT_TRUE(opened.source.empty());
  const std::string generation = "{\n  \"eos_token_id\": [\n    2,\n    7\n  ],\n  \"top_k\": 20\n}\n";
  std::ofstream(base_dir + "/generation_config.json") << generation;
  const std::string out = TestDir("lora-export-generation-out");
  std::filesystem::remove_all(out);
  ExportRequest request;
  request.from = checkpoint;
  request.to = "hf:" + out;
  request.show_progress = false;
  request.merge_lora = true;
  ASSERT_OK_AND_ASSIGN(const std::string line, ExportWeights(request));
  EXPECT_THAT(line, HasSubstr("bos_token_id 1, eos_token_id 2 (from hf:" + base_dir +
                              "'s config.json); generation_config.json (hf:" + base_dir +
                              "'s, unchanged)"));
  EXPECT_EQ(ReadText(out + "/generation_config.json"), generation);
  const nlohmann::json config = nlohmann::json::parse(ReadText(out + "/config.json"));
  EXPECT_EQ(config.at("eos_token_id"), 2);
}

// A bf16 run held its base in bf16: the hash is of the rounded base, and the merged model's
// untouched tensors are the base rounded to nearest even (what the adapters trained with).
TEST(LoraExportBf16, MergesOntoTheBaseAsTrained) {
  const Case c{"Bf16", true, "llama-tiny"};
  const std::string base_dir = CopyFixture(c.fixture, "lora-export-bf16-base");
  const std::string run_dir = TestDir("lora-export-bf16-run");
  std::filesystem::remove_all(run_dir);
  ASSERT_OK(TrainAllRanks(RunOptions(c, base_dir, run_dir, {"train.dtype=bf16"})).status);
  const std::string out = TestDir("lora-export-bf16-out");
  std::filesystem::remove_all(out);
  ExportRequest request;
  request.from = run_dir + "/step-3";
  request.to = "hf:" + out;
  request.show_progress = false;
  request.merge_lora = true;
  ASSERT_OK(ExportWeights(request));
  ASSERT_OK_AND_ASSIGN(const SafetensorsSet merged, SafetensorsSet::OpenDirectory(out));
  ASSERT_OK_AND_ASSIGN(const SafetensorsSet base, SafetensorsSet::OpenDirectory(base_dir));
  const std::vector<float> got = ReadTensor(merged, "model.embed_tokens.weight");
  const std::vector<float> original = ReadTensor(base, "model.embed_tokens.weight");
  ASSERT_EQ(got.size(), original.size());
  int rounded_away = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], ToFloat(ToBf16(original[i]))) << i;
    rounded_away += got[i] != original[i];
  }
  EXPECT_GT(rounded_away, static_cast<int>(got.size() / 2));
  ASSERT_OK(Generator::Create(run_dir + "/step-3", SampleOptions(), 8).status());
}

// Adapters trained on an NF4 base: --merge-lora merges them into the base dequantized as
// training computed with it (the line says so), and the merged model, imported without
// LoRA, computes the NF4-base LoRA model's loss; peft: says what they were trained on;
// sampling makes the same base again (its hash is of the quantized bytes).
TEST(LoraExportNf4, MergesOntoTheDequantizedBase) {
  const Case c{"Nf4", true, "llama-tiny"};
  const std::string base_dir = CopyFixture(c.fixture, "lora-export-nf4-base");
  const std::string run_dir = TestDir("lora-export-nf4-run");
  std::filesystem::remove_all(run_dir);
  const Options options = RunOptions(c, base_dir, run_dir, {"lora.base_dtype=nf4"});
  ASSERT_OK(TrainAllRanks(options).status);
  const std::string out = TestDir("lora-export-nf4-out");
  std::filesystem::remove_all(out);
  ExportRequest request;
  request.from = run_dir + "/step-3";
  request.to = "hf:" + out;
  request.show_progress = false;
  request.merge_lora = true;
  ASSERT_OK_AND_ASSIGN(const std::string line, ExportWeights(request));
  EXPECT_THAT(line, HasSubstr("dequantized from nf4"));
  request.to = "peft:" + TestDir("lora-export-nf4-peft");
  request.merge_lora = false;
  std::filesystem::remove_all(request.to.substr(5));
  ASSERT_OK_AND_ASSIGN(const std::string peft_line, ExportWeights(request));
  EXPECT_THAT(peft_line, HasSubstr("trained on the base stored as nf4"));

  ASSERT_OK_AND_ASSIGN(const OpenedCheckpoint checkpoint, OpenCheckpoint(run_dir + "/step-3"));
  Options lora_options = options;
  lora_options.train.steps = 100;
  ASSERT_OK_AND_ASSIGN(auto lora_rig, MakeEngineRig(lora_options));
  ASSERT_OK(ImportHfWeights(base_dir, lora_options.model, *lora_rig->model, *lora_rig->engine,
                            false));
  LoadAdapters(checkpoint, *lora_rig);
  const Batch batch = TokenBatch(lora_options);
  ASSERT_OK_AND_ASSIGN(const double lora_loss, lora_rig->engine->EvalLoss(batch.micro()));
  ASSERT_OK_AND_ASSIGN(const double merged_loss, MergedLoss(lora_options, out, batch));
  EXPECT_NEAR(merged_loss, lora_loss, 1e-5 * std::fabs(lora_loss));
  // The unquantized base with the same adapters computes another loss: the merge used the
  // dequantized one.
  Options plain_options = lora_options;
  plain_options.lora.base_dtype = BaseDType::kTrain;
  ASSERT_OK_AND_ASSIGN(auto plain_rig, MakeEngineRig(plain_options));
  ASSERT_OK(ImportHfWeights(base_dir, plain_options.model, *plain_rig->model,
                            *plain_rig->engine, false));
  LoadAdapters(checkpoint, *plain_rig);
  ASSERT_OK_AND_ASSIGN(const double plain_loss, plain_rig->engine->EvalLoss(batch.micro()));
  EXPECT_GT(std::fabs(plain_loss - lora_loss), 1e-4 * std::fabs(lora_loss));
  ASSERT_OK(Generator::Create(run_dir + "/step-3", SampleOptions(), 8).status());
}

}  // namespace
}  // namespace strata
