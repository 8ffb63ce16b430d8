// Hugging Face import against an independent implementation: tools/hf_reference.py builds
// tiny random GPT-2 and LLaMA models after transformers' modeling code (in float64: Conv1D
// layout, rotate-half RoPE, grouped-query head order, tied and untied heads) and records
// logits, loss and every parameter's gradient for a fixed batch (tests/testdata/hf/). Each
// directory is loaded with model.from=hf:DIR and the fp32 CPU run must match:
//   logits: |got - ref| <= 2e-5 + 1e-4 |ref|; loss: relative 1e-5;
//   gradients (mapped back to Hugging Face's names and layouts): |got - ref| <= 2e-6 +
//   1e-3 |ref| (fp32 sums against float64, over a few hundred terms).
// Also the ranks' own-range loading (stage 3, two ranks, params on NVMe: the same loss)
// and bad weight files: an error naming the tensor before any state changes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "config/options_parse.h"
#include "core/dtype.h"
#include "core/run_inputs.h"
#include "core/testing/status_matchers.h"
#include "data/tokens.h"
#include "interop/import_weights.h"
#include "interop/llmc_model.h"
#include "models/create_model.h"
#include "models/hf/hf_model.h"
#include "models/hf/safetensors.h"
#include "plan/plan.h"
#include "tests/engine_rig.h"
#include "tests/hf_fixtures.h"
#include "tests/placement_runs.h"

namespace strata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::StatusIs;

Options ImportOptions(const std::string& dir, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets = {"model.from=hf:" + dir, "train.micro_batch=2",
                                   "train.seq_len=16",     "train.grad_accum=1",
                                   "device.threads=1",     "train.eval_every=0"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  StatusOr<Options> options = ParseOptions("", sets);
  EXPECT_OK(options);
  return options.ok() ? *options : Options{};
}

std::vector<float> ReadAll(const SafetensorsSet& set, const std::string& name) {
  const StTensor* tensor = set.Find(name);
  EXPECT_NE(tensor, nullptr) << name;
  if (tensor == nullptr) return {};
  std::vector<float> values(tensor->numel);
  EXPECT_OK(set.ReadFloats(*tensor, 0, tensor->numel, values.data()));
  return values;
}

class HfImport : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Fixtures, HfImport,
                         ::testing::Values("gpt2-tiny", "llama-tiny", "llama-tiny-tied",
                                           "qwen2-tiny", "mistral-tiny-hd", "qwen3-tiny"),
                         [](const auto& info) { return HfFixtureTestName(info.param); });

TEST_P(HfImport, MatchesTheReferenceImplementation) {
  const std::string dir = HfFixture(GetParam());
  const Options options = ImportOptions(dir);
  ASSERT_OK_AND_ASSIGN(auto rig, MakeEngineRig(options));
  ASSERT_OK(ImportHfWeights(dir, options.model, *rig->model, *rig->engine, false));
  ASSERT_OK_AND_ASSIGN(const SafetensorsSet reference,
                       SafetensorsSet::OpenFile(dir + "/reference.safetensors"));
  const std::vector<float> inputs_f = ReadAll(reference, "inputs");
  const std::vector<float> targets_f = ReadAll(reference, "targets");
  const std::vector<int32_t> inputs(inputs_f.begin(), inputs_f.end());
  const std::vector<int32_t> targets(targets_f.begin(), targets_f.end());
  ASSERT_EQ(inputs.size(), 32u);
  const MicroBatch batch{inputs.data(), targets.data()};

  // Logits and loss of a forward without gradient.
  ASSERT_OK_AND_ASSIGN(const double eval_loss, rig->engine->EvalLoss(batch));
  const double want_loss = ReadAll(reference, "loss")[0];
  EXPECT_NEAR(eval_loss, want_loss, 1e-5 * want_loss);
  const ModelOptions resolved = ResolveModelOptions(options.model);
  const int V = resolved.vocab, Vp = resolved.padded_vocab;
  const float* logits = static_cast<const float*>(rig->model->logits());
  const std::vector<float> want_logits = ReadAll(reference, "logits");
  ASSERT_EQ(want_logits.size(), 32u * V);
  int bad = 0;
  for (int n = 0; n < 32; ++n) {
    for (int v = 0; v < V; ++v) {
      const float got = logits[size_t(n) * Vp + v], want = want_logits[size_t(n) * V + v];
      if (std::fabs(got - want) > 2e-5 + 1e-4 * std::fabs(want) && bad++ < 5) {
        ADD_FAILURE() << "logit [" << n << ", " << v << "]: " << got << " vs " << want;
      }
    }
  }
  EXPECT_EQ(bad, 0);

  // Gradients, mapped back to Hugging Face's tensors.
  ASSERT_OK_AND_ASSIGN(const double loss, rig->engine->ComputeGradients({batch}));
  EXPECT_NEAR(loss, want_loss, 1e-5 * want_loss);
  ASSERT_OK_AND_ASSIGN(const std::vector<HfTensor> map,
                       HfTensorMap(resolved, rig->model->units()));
  size_t checked = 0;
  for (const HfTensor& entry : map) {
    ASSERT_OK_AND_ASSIGN(const std::vector<float> grads, rig->engine->state().ReadGradients(entry.unit));
    const TensorSpec& spec = rig->model->units()[entry.unit].tensor(entry.tensor);
    const size_t cols = spec.shape.size() == 2 ? size_t(spec.shape[1]) : 1;
    const std::vector<float> want = ReadAll(reference, "grad." + entry.name);
    const size_t rows = want.size() / cols;
    int wrong = 0;
    for (size_t r = 0; r < rows; ++r) {
      for (size_t c = 0; c < cols; ++c) {
        const float got = grads[spec.offset + (entry.row_begin + r) * cols + c];
        // Conv1D: the file's [in, out] is the transpose of strata's [out, in].
        const float ref = entry.transposed ? want[c * rows + r] : want[r * cols + c];
        if (std::fabs(got - ref) > 2e-6 + 1e-3 * std::fabs(ref) && wrong++ < 3) {
          ADD_FAILURE() << entry.name << "[" << r << ", " << c << "]: " << got << " vs " << ref;
        }
        ++checked;
      }
    }
    EXPECT_EQ(wrong, 0) << entry.name;
  }
  // Every gradient of the fixture (over 7,000 elements in each).
  size_t want_checked = 0;
  for (const HfTensor& entry : map) want_checked += ReadAll(reference, "grad." + entry.name).size();
  EXPECT_EQ(checked, want_checked);
  EXPECT_GT(checked, 7000);
}

// Stage 3 over two ranks with params and optimizer on NVMe: each rank reads only its shard
// into the swap files (for GPT-2, parts of transposed Conv1D matrices: shard boundaries
// fall inside them); the losses equal those of the device placement, whose ranks store
// whole units (stage 3 without NVMe still shards: equal losses mean equal weights).
class HfImportRanks : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Fixtures, HfImportRanks, ::testing::Values("gpt2-tiny", "llama-tiny"),
                         [](const auto& info) { return HfFixtureTestName(info.param); });

TEST_P(HfImportRanks, ShardedLoadOnNvmeGivesTheSameLoss) {
  const std::string dir = HfFixture(GetParam());
  std::vector<double> losses[3];
  // 0: stage 0 (whole units, each straight into its master); 1: stage 3 with params and
  // optimizer on NVMe (shards through the importer's buffers into the swap files); 2: stage
  // 3 in memory (each rank's shard straight into its master shard).
  for (int variant = 0; variant < 3; ++variant) {
    // Tokens of both vocabularies (96, 100): the corpus's bytes would not fit.
    // Written once: a run's data is an input strata never writes over (in this process too).
    const std::string data = TestDir("hf-data") + "/tokens.bin";
    if (!std::filesystem::exists(data)) {
      std::vector<uint32_t> tokens(4096);
      for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = (i * 37 + i / 7) % 96;
      ASSERT_OK(WriteTokenFile(data, tokens, 96));
    }
    std::vector<std::string> sets = {"zero.world=2", "zero.stage=3", "train.micro_batch=1",
                                     "train.steps=2", "zero.comm_timeout_s=60",
                                     "data.path=" + data};
    if (variant == 0) sets[1] = "zero.stage=0";  // every rank stores whole units
    if (variant == 1) {
      sets.insert(sets.end(), {"zero.optimizer_tier=nvme", "zero.param_tier=nvme",
                               "zero.nvme_dir=" + TestDir("hf-swap")});
    }
    const PlacementRun run = TrainAllRanks(ImportOptions(dir, sets));
    ASSERT_OK(run.status);
    losses[variant] = run.losses;
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_EQ(losses[0], losses[2]);
  // An imported model starts near ln(V) = 4.6 plus what its random weights add, not where
  // a different init would: the reference batch's loss is 5.28; a step's batch differs.
  ASSERT_EQ(losses[0].size(), 2u);
  EXPECT_GT(losses[0][0], 4.0);
}

// Where the engine allows (its fp32 master holds the rank's stored range in memory the host
// writes: here the CPU device, one rank), the import writes each unit's values straight
// into the master; elsewhere (optimizer on NVMe) through buffers of its own. Both give the
// same master and params, bit for bit (fp32 and bf16 params: a CPU device's master on the
// device tier is cast by the device's kernels), and zeroed moments, also when the import
// follows a training step (the step's moments and its pending update must not survive).
TEST(HfImportTargets, MastersTakeTheValuesWhereTheEngineAllows) {
  const std::string dir = HfFixture("gpt2-tiny");
  for (const char* dtype : {"fp32", "bf16"}) {
    SCOPED_TRACE(dtype);
    std::vector<std::vector<float>> masters[2], params[2];
    for (int nvme = 0; nvme < 2; ++nvme) {
      // One rank: stage 1's shard is the whole unit.
      std::vector<std::string> sets = {"zero.stage=1", std::string("train.dtype=") + dtype};
      if (nvme) {
        sets.insert(sets.end(), {"zero.optimizer_tier=nvme",
                                 "zero.nvme_dir=" + TestDir("targets-swap")});
      }
      const Options options = ImportOptions(dir, sets);
      ASSERT_OK_AND_ASSIGN(auto rig, MakeEngineRig(options));
      const size_t units = rig->model->units().size();
      for (size_t u = 0; u < units; ++u) {
        EXPECT_EQ(rig->engine->state().WriteTargets(static_cast<int>(u)).master != nullptr, !nvme) << u;
      }
      // A step first, so moments and master hold something else.
      std::vector<int32_t> tokens(32);
      for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7) % 96);
      ASSERT_OK(rig->engine->TrainStep({{tokens.data(), tokens.data()}}, 1e-2f, 1).status());
      ASSERT_OK(ImportHfWeights(dir, options.model, *rig->model, *rig->engine, false));
      for (size_t u = 0; u < units; ++u) {
        const int unit = static_cast<int>(u);
        ASSERT_OK_AND_ASSIGN(UnitOptimizerState state,
                             rig->engine->state().ReadOptimizerState(unit));
        const std::vector<float> zeros(state.master.size(), 0.0f);
        EXPECT_EQ(state.exp_avg, zeros) << u;
        EXPECT_EQ(state.exp_avg_sq, zeros) << u;
        ASSERT_OK_AND_ASSIGN(std::vector<float> unit_params, rig->engine->state().ReadParams(unit));
        // The params are the master's values in the compute dtype.
        ASSERT_EQ(unit_params.size(), state.master.size());
        for (size_t i = 0; i < unit_params.size(); ++i) {
          const float want = options.train.dtype == DType::kF32
                                 ? state.master[i]
                                 : ToFloat(ToBf16(state.master[i]));
          if (unit_params[i] != want) {
            ADD_FAILURE() << "unit " << u << " param " << i << ": " << unit_params[i]
                          << ", the master's " << state.master[i];
            break;
          }
        }
        masters[nvme].push_back(std::move(state.master));
        params[nvme].push_back(std::move(unit_params));
      }
    }
    EXPECT_EQ(masters[0], masters[1]);
    EXPECT_EQ(params[0], params[1]);
    // The values are the file's, not the step's: one tensor checked against the file.
    ASSERT_OK_AND_ASSIGN(const SafetensorsSet set, SafetensorsSet::OpenDirectory(dir));
    const std::vector<float> wte = ReadAll(set, "transformer.wte.weight");
    ASSERT_FALSE(masters[0].empty());
    ASSERT_GE(masters[0][0].size(), wte.size());
    EXPECT_TRUE(std::equal(wte.begin(), wte.end(), masters[0][0].begin()));
  }
}

// A bf16 copy of fixture `name` (its config.json, its weights rounded to bf16) in a
// temporary directory: what the LLaMA family ships.
std::string Bf16Copy(const std::string& name) {
  const std::string dir = TestDir("bf16-" + name);
  const std::string from = HfFixture(name);
  std::filesystem::copy_file(from + "/config.json", dir + "/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  StatusOr<SafetensorsSet> set = SafetensorsSet::OpenDirectory(from);
  EXPECT_OK(set);
  if (!set.ok()) return dir;
  std::vector<StOutputTensor> tensors;
  for (const StTensor& tensor : set->tensors()) {
    const SafetensorsSet* source = &*set;
    tensors.push_back(
        {tensor.name, tensor.shape, [source, &tensor](uint64_t begin, uint64_t count, float* out) {
           return source->ReadFloats(tensor, begin, count, out);
         }});
  }
  // A fixture rewritten between the runs of one test process: an earlier run's inputs are
  // no longer inputs (strata never writes over an input of the run that reads it).
  ForgetRunInputs();
  EXPECT_OK(WriteSafetensorsDirectory(dir, tensors, StDType::kBF16, uint64_t{5} << 30, {}));
  return dir;
}

// A bf16 file into a bf16 engine goes to its params as the file's bits, with no cast:
// straight into them where the host can write them (the CPU device; params on the host
// tier: EngineState::WriteTargets: params), else (params on NVMe) through the importer's bf16
// buffers into their home. Every placement ends with the same params and master, bit for
// bit, the params equal to the file's values and zeroed moments, also after a step (stale
// params would show). A LoRA model's frozen base takes the bits with no fp32 values at
// all. An fp32 engine takes no bf16 params (an error, not a silent cast).
TEST(HfImportTargets, Bf16FilesGoStraightIntoBf16Params) {
  const std::string dir = Bf16Copy("llama-tiny");
  const std::string swap = "zero.nvme_dir=" + TestDir("bf16-params-swap");
  struct Case {
    const char* name;
    std::vector<std::string> sets;
    bool param_target;  // for every base unit
  };
  const std::vector<Case> cases = {
      {"device", {"zero.stage=1"}, true},
      {"params on NVMe (through buffers)",
       {"zero.stage=3", "zero.optimizer_tier=nvme", "zero.param_tier=nvme", swap},
       false},
      {"params on the host",
       {"zero.stage=3", "zero.optimizer_tier=host", "zero.param_tier=host"},
       true},
      {"LoRA, base on the device", {"lora.rank=2"}, true},
      {"LoRA, base on NVMe (through buffers)",
       {"lora.rank=2", "zero.stage=3", "lora.base_tier=nvme", swap},
       false},
  };
  ASSERT_OK_AND_ASSIGN(const SafetensorsSet set, SafetensorsSet::OpenDirectory(dir));
  const std::vector<float> embedding = ReadAll(set, "model.embed_tokens.weight");
  std::vector<std::vector<float>> want_params, want_master;  // the first case's
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<std::string> sets = c.sets;
    sets.push_back("train.dtype=bf16");
    const Options options = ImportOptions(dir, sets);
    ASSERT_OK_AND_ASSIGN(auto rig, MakeEngineRig(options));
    const std::vector<int> base = BaseUnits(*rig->model);
    for (const int unit : base) {
      EXPECT_EQ(rig->engine->state().WriteTargets(unit).params != nullptr, c.param_target) << unit;
      EXPECT_TRUE(rig->engine->state().WriteTargets(unit).takes_bf16_params) << unit;
    }
    std::vector<int32_t> tokens(32);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7) % 96);
    ASSERT_OK(rig->engine->TrainStep({{tokens.data(), tokens.data()}}, 1e-1f, 1).status());
    ASSERT_OK(ImportHfWeights(dir, options.model, *rig->model, *rig->engine, false));
    for (const int unit : base) {
      ASSERT_OK_AND_ASSIGN(std::vector<float> params, rig->engine->state().ReadParams(unit));
      std::vector<float> master;
      if (rig->model->units()[unit].trainable()) {
        ASSERT_OK_AND_ASSIGN(UnitOptimizerState state,
                             rig->engine->state().ReadOptimizerState(unit));
        const std::vector<float> zeros(state.master.size(), 0.0f);
        EXPECT_EQ(state.exp_avg, zeros) << unit;
        EXPECT_EQ(state.exp_avg_sq, zeros) << unit;
        EXPECT_EQ(state.master, params) << unit;  // bf16 values: exact in both
        master = std::move(state.master);
      }
      if (unit == 0) {  // the embedding, against the file
        ASSERT_GE(params.size(), embedding.size());
        EXPECT_TRUE(std::equal(embedding.begin(), embedding.end(), params.begin()));
      }
      if (want_params.size() < base.size()) {
        want_params.push_back(std::move(params));
        want_master.push_back(std::move(master));
        continue;
      }
      EXPECT_EQ(params, want_params[unit]) << unit;
      if (!master.empty()) {
        EXPECT_EQ(master, want_master[unit]) << unit;
      }
    }
  }
  const Options fp32 = ImportOptions(dir, {"train.dtype=fp32"});
  ASSERT_OK_AND_ASSIGN(auto rig, MakeEngineRig(fp32));
  EXPECT_FALSE(rig->engine->state().WriteTargets(0).takes_bf16_params);
  EXPECT_EQ(rig->engine->state().WriteTargets(0).params, nullptr);
  const auto [begin, end] = rig->engine->state().StoredRange(0);
  const std::vector<float> values(end - begin, 0.5f);
  const std::vector<bf16> halves(end - begin, ToBf16(0.5f));
  EXPECT_THAT(rig->engine->state().WriteStoredValues(0, values.data(), halves.data()),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("bf16 params")));
  EXPECT_THAT(rig->engine->state().WriteStoredValues(0, nullptr),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("no values")));
}

// Two ranks, bf16 files into a bf16 engine: at stage 3 in memory each rank's param shard
// takes its part of the files' bits straight (WriteTargets' params of a shard); the first
// step's loss equals that of whole units (stage 0, also straight) and of params on NVMe
// (each rank's shard of the bits through the importer's buffers), bit for bit.
TEST(HfImportTargets, Bf16ShardsOfTwoRanksGiveTheSameLoss) {
  const std::string dir = Bf16Copy("llama-tiny");
  const std::string data = TestDir("hf-bf16-data") + "/tokens.bin";
  std::vector<uint32_t> tokens(4096);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = (i * 37 + i / 7) % 96;
  ASSERT_OK(WriteTokenFile(data, tokens, 96));
  std::vector<double> losses[3];
  for (int variant = 0; variant < 3; ++variant) {
    std::vector<std::string> sets = {
        "zero.world=2",           "zero.stage=3",     "train.micro_batch=1", "train.steps=1",
        "zero.comm_timeout_s=60", "train.dtype=bf16", "data.path=" + data};
    if (variant == 0) sets[1] = "zero.stage=0";
    if (variant == 1) {
      sets.insert(sets.end(), {"zero.optimizer_tier=nvme", "zero.param_tier=nvme",
                               "zero.nvme_dir=" + TestDir("hf-bf16-swap")});
    }
    const PlacementRun run = TrainAllRanks(ImportOptions(dir, sets));
    ASSERT_OK(run.status);
    losses[variant] = run.losses;
  }
  ASSERT_EQ(losses[0].size(), 1u);
  EXPECT_GT(losses[0][0], 4.0);
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_EQ(losses[0], losses[2]);
}

// strata plan's dry run knows what a real import will do (ImportPlan: each unit's route,
// the importer's buffers, which its RSS estimate counts): on the CPU device its plan equals
// the one PlanImport makes of a real engine, route by route, over placements that send
// values straight or through buffers; a dry run modelling a GPU sends what sits in the
// device tier through buffers (the master of a device optimizer, the params of any
// trainable model) and what sits in pinned host memory straight, so its buffers are larger.
TEST(HfImportTargets, PlansDryRunRoutesAsTheRunDoes) {
  const std::string bf16_dir = Bf16Copy("llama-tiny");
  const std::string swap = "zero.nvme_dir=" + TestDir("plan-routes-swap");
  struct Case {
    const char* name;
    bool bf16_files;
    std::vector<std::string> sets;
  };
  const std::vector<Case> cases = {
      {"fp32 files, fp32 engine", false, {"zero.stage=1"}},
      {"bf16 files, bf16 engine", true, {"train.dtype=bf16"}},
      {"bf16 files, optimizer on NVMe",
       true,
       {"train.dtype=bf16", "zero.stage=3", "zero.optimizer_tier=nvme", swap}},
      {"bf16 files, params on NVMe",
       true,
       {"train.dtype=bf16", "zero.stage=3", "zero.optimizer_tier=nvme", "zero.param_tier=nvme",
        swap}},
      {"bf16 files, optimizer and params on the host",
       true,
       {"train.dtype=bf16", "zero.stage=3", "zero.optimizer_tier=host", "zero.param_tier=host"}},
      {"bf16 files, LoRA base on NVMe",
       true,
       {"train.dtype=bf16", "lora.rank=2", "zero.stage=3", "lora.base_tier=nvme", swap}},
  };
  auto routes_text = [](const ImportPlan& plan) {
    std::string text;
    for (size_t i = 0; i < plan.units.size(); ++i) {
      const UnitImportRoute& r = plan.routes[i];
      absl::StrAppend(&text, plan.units[i], ":", r.master_straight, r.raw_params, r.params_straight,
                      r.fp32_buffer, r.bf16_buffer, " ");
    }
    return text;
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = c.bf16_files ? bf16_dir : HfFixture("llama-tiny");
    const Options options = ImportOptions(dir, c.sets);
    ASSERT_OK_AND_ASSIGN(auto rig, MakeEngineRig(options));
    ASSERT_OK_AND_ASSIGN(const HfWeights weights, HfWeights::Open(dir, options.model, *rig->model));
    const ImportPlan real = PlanImport(weights, *rig->engine, *rig->model);
    ASSERT_OK_AND_ASSIGN(const DryRunResult cpu, DryRun(options, 1, BackendKind::kCpu));
    EXPECT_EQ(routes_text(cpu.import), routes_text(real));
    EXPECT_EQ(cpu.import.largest_fp32, real.largest_fp32);
    EXPECT_EQ(cpu.import.largest_bf16, real.largest_bf16);
    EXPECT_EQ(cpu.staging_bytes, real.HostBytes());
    ASSERT_FALSE(real.units.empty());

    ASSERT_OK_AND_ASSIGN(const DryRunResult gpu, DryRun(options, 1, BackendKind::kCuda));
    ASSERT_EQ(gpu.import.units, real.units);
    const bool master_on_host = options.zero.optimizer_tier == StateTier::kHost;
    const bool params_on_host = options.zero.param_tier == StateTier::kHost;
    size_t largest = 0;
    for (size_t i = 0; i < real.units.size(); ++i) {
      const int unit = real.units[i];
      const UnitImportRoute& r = gpu.import.routes[i];
      SCOPED_TRACE(absl::StrCat("unit ", unit));
      const bool trainable = rig->model->units()[unit].trainable();
      // The master on the GPU, or on NVMe: through a buffer; in pinned host memory: straight.
      EXPECT_EQ(r.master_straight, trainable && master_on_host);
      EXPECT_EQ(r.fp32_buffer, !r.master_straight && (trainable || !r.raw_params));
      EXPECT_EQ(r.raw_params, real.routes[i].raw_params);
      EXPECT_EQ(r.params_straight, r.raw_params && params_on_host);
      EXPECT_EQ(r.bf16_buffer, r.raw_params && !params_on_host);
      const auto [begin, end] = rig->engine->state().StoredRange(unit);
      if (r.fp32_buffer) largest = std::max(largest, end - begin);
    }
    EXPECT_EQ(gpu.import.largest_fp32, largest);
    // More buffers where anything sits in the GPU's memory, the same where all is on NVMe
    // or in pinned host memory.
    EXPECT_EQ(gpu.staging_bytes > cpu.staging_bytes,
              routes_text(gpu.import) != routes_text(cpu.import));
    EXPECT_GE(gpu.staging_bytes, cpu.staging_bytes);
  }
}

// Copies fixture `name` to a temporary directory, so a test can damage it.
std::string CopyFixture(const std::string& name, const std::string& as) {
  const std::string out = TestDir(as);
  for (const char* file : {"config.json", "model.safetensors"}) {
    std::filesystem::copy_file(HfFixture(name) + "/" + file, out + "/" + file,
                               std::filesystem::copy_options::overwrite_existing);
  }
  return out;
}

// The text of file `path`.
std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(HfImportErrors, BadDirectoriesAreClearErrors) {
  // A shape the weights do not fit: the tensor, the file's shape and the model's.
  {
    const std::string dir = HfFixture("llama-tiny");
    const Options options = ImportOptions(dir, {"model.ffn_hidden=64"});
    ASSERT_OK_AND_ASSIGN(auto rig, MakeEngineRig(options));
    EXPECT_THAT(ImportHfWeights(dir, options.model, *rig->model, *rig->engine, false),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("mlp.gate_proj.weight has shape [48, 32], the model needs "
                                   "[64, 32]")));
  }
  // An architecture strata does not implement, named by its field.
  {
    const std::string dir = CopyFixture("llama-tiny", "hf-qwen");
    std::string text = ReadText(dir + "/config.json");
    const size_t at = text.find("\"attention_bias\": false");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, 23, "\"attention_bias\": true");
    std::ofstream(dir + "/config.json") << text;
    EXPECT_THAT(ParseOptions("", {"model.from=hf:" + dir}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("field 'attention_bias' is true")));
  }
  // head_dim: read where it differs from hidden_size / num_attention_heads (the fixture:
  // 16 against 8); an odd one refused naming the field; absent, the width must divide.
  {
    ASSERT_OK_AND_ASSIGN(
        const Options hd,
        ParseOptions("", {"model.from=hf:" + HfFixture("mistral-tiny-hd"), "train.seq_len=16"}));
    EXPECT_EQ(hd.model.head_dim, 16);
    EXPECT_EQ(hd.model.channels, 16);
    const std::string dir = CopyFixture("llama-tiny", "hf-head-dim");
    std::string text = ReadText(dir + "/config.json");
    const size_t at = text.find("\"head_dim\": 8");
    ASSERT_NE(at, std::string::npos);
    std::ofstream(dir + "/config.json") << std::string(text).replace(at, 13, "\"head_dim\": 7");
    EXPECT_THAT(ParseOptions("", {"model.from=hf:" + dir}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("field 'head_dim' is 7")));
    std::string no_head_dim = std::string(text).replace(at, 13, "\"head_dim\": null");
    const size_t width = no_head_dim.find("\"hidden_size\": 32");
    ASSERT_NE(width, std::string::npos);
    std::ofstream(dir + "/config.json") << no_head_dim.replace(width, 17, "\"hidden_size\": 30");
    EXPECT_THAT(ParseOptions("", {"model.from=hf:" + dir}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("'hidden_size' (30) is not a multiple of "
                                   "'num_attention_heads' (4) and there is no 'head_dim'")));
  }
  // Architectures outside the families (Qwen3's mixture of experts among them), named.
  for (const auto& [type, why] : std::vector<std::pair<std::string, std::string>>{
           {"qwen3_moe", "strata reads \"gpt2\" and the LLaMA family"},
           {"falcon", "strata reads \"gpt2\" and the LLaMA family"}}) {
    const std::string dir = CopyFixture("llama-tiny", "hf-type-" + type);
    std::string text = ReadText(dir + "/config.json");
    const size_t at = text.find("\"model_type\": \"llama\"");
    ASSERT_NE(at, std::string::npos);
    std::ofstream(dir + "/config.json") << text.replace(at, 21, "\"model_type\": \"" + type + "\"");
    EXPECT_THAT(
        ParseOptions("", {"model.from=hf:" + dir}),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 AllOf(HasSubstr("field 'model_type' is \"" + type + "\""), HasSubstr(why))));
  }
  // Rotary scalings: llama3 read with every factor; dynamic read and written back; one
  // strata does not implement, and a llama3 scaling without its original context (or a
  // dynamic one without its factor), refused naming the field.
  {
    ASSERT_OK_AND_ASSIGN(const Options tied,
                         ParseOptions("", {"model.from=hf:" + HfFixture("llama-tiny-tied")}));
    EXPECT_EQ(tied.model.rope, (RopeSpec{10000.0f, RopeScaling::kLlama3, 8.0f, 1.0f, 4.0f, 128}));
    const std::string dir = CopyFixture("llama-tiny-tied", "hf-yarn");
    const std::string text = ReadText(dir + "/config.json");
    const size_t at = text.find("\"rope_type\": \"llama3\"");
    ASSERT_NE(at, std::string::npos);
    std::string yarn = text;
    yarn.replace(at, 21, "\"rope_type\": \"yarn\"");
    std::ofstream(dir + "/config.json") << yarn;
    EXPECT_THAT(ParseOptions("", {"model.from=hf:" + dir}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("field 'rope_scaling' has rope_type \"yarn\"")));
    // Dynamic NTK: its original context is max_position_embeddings (here 512); exported
    // back as it came.
    std::string dynamic = text;
    const size_t scaling = dynamic.find("\"rope_scaling\"");
    ASSERT_NE(scaling, std::string::npos);
    const size_t scaling_end = dynamic.find('}', scaling);
    dynamic.replace(scaling, scaling_end + 1 - scaling,
                    "\"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2.0}");
    std::ofstream(dir + "/config.json") << dynamic;
    ASSERT_OK_AND_ASSIGN(const Options dyn, ParseOptions("", {"model.from=hf:" + dir}));
    EXPECT_EQ(dyn.model.rope,
              (RopeSpec{10000.0f, RopeScaling::kDynamic, 2.0f, 1.0f, 4.0f, dyn.model.max_seq_len}));
    EXPECT_EQ(dyn.model.max_seq_len, 512);
    std::ofstream(dir + "/config.json") << HfConfigJson(dyn.model, "float32");
    ASSERT_OK_AND_ASSIGN(const Options again, ParseOptions("", {"model.from=hf:" + dir}));
    EXPECT_EQ(again.model.rope, dyn.model.rope);
    EXPECT_EQ(again.model.max_seq_len, 512);
    std::string no_factor = dynamic;
    no_factor.replace(no_factor.find(", \"factor\": 2.0"), 15, "");
    std::ofstream(dir + "/config.json") << no_factor;
    EXPECT_THAT(ParseOptions("", {"model.from=hf:" + dir}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("field 'rope_scaling' (dynamic) lacks the number 'factor'")));
    const size_t original = text.find("\"original_max_position_embeddings\"");
    ASSERT_NE(original, std::string::npos);
    std::string lacking = text;
    lacking.replace(original, 34, "\"original_context\"");
    std::ofstream(dir + "/config.json") << lacking;
    EXPECT_THAT(ParseOptions("", {"model.from=hf:" + dir}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("lacks the number 'original_max_position_embeddings'")));
  }
  // Qwen2: read with its q/k/v biases; a sliding window it says it uses is kept
  // (model.sliding_window) and holds train.seq_len to it (one it does not use, as the
  // fixture's, is not kept).
  {
    ASSERT_OK_AND_ASSIGN(
        const Options qwen,
        ParseOptions("", {"model.from=hf:" + HfFixture("qwen2-tiny"), "train.seq_len=16"}));
    EXPECT_TRUE(qwen.model.qkv_bias);
    EXPECT_EQ(qwen.model.family, ModelFamily::kLlama);
    EXPECT_EQ(qwen.model.sliding_window, 0);
    const std::string dir = CopyFixture("qwen2-tiny", "hf-qwen-window");
    std::string text = ReadText(dir + "/config.json");
    const size_t at = text.find("\"use_sliding_window\": false");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, 27, "\"use_sliding_window\": true");
    const size_t window = text.find("\"sliding_window\": 16");
    ASSERT_NE(window, std::string::npos);
    text.replace(window, 20, "\"sliding_window\": 8");
    std::ofstream(dir + "/config.json") << text;
    EXPECT_THAT(ParseOptions("", {"model.from=hf:" + dir, "train.seq_len=16"}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("train.seq_len: got 16, expected <= model.sliding_window (8)")));
    ASSERT_OK_AND_ASSIGN(const Options windowed,
                         ParseOptions("", {"model.from=hf:" + dir, "train.seq_len=8"}));
    EXPECT_EQ(windowed.model.sliding_window, 8);
    // Exported back with its window: as Qwen2 (biases), and as Mistral without them.
    for (const bool bias : {true, false}) {
      ModelOptions model = windowed.model;
      model.qkv_bias = bias;
      const std::string out = TestDir(bias ? "hf-window-qwen" : "hf-window-mistral");
      std::ofstream(out + "/config.json") << HfConfigJson(model, "float32");
      ASSERT_OK_AND_ASSIGN(const ModelOptions back, ReadHfConfig(out));
      EXPECT_EQ(back.sliding_window, 8) << bias;
      EXPECT_EQ(back.qkv_bias, bias);
    }
  }
  // A missing directory and a wrong prefix.
  EXPECT_THAT(ParseOptions("", {"model.from=hf:/nonexistent"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("config.json not found")));
  EXPECT_THAT(ParseOptions("", {"model.from=/some/dir"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected hf:DIR")));
  // A truncated weights file: named, before any unit is stored.
  {
    const std::string dir = CopyFixture("gpt2-tiny", "hf-truncated");
    std::filesystem::resize_file(dir + "/model.safetensors",
                                 std::filesystem::file_size(dir + "/model.safetensors") - 100);
    const Options options = ImportOptions(dir);
    ASSERT_OK_AND_ASSIGN(auto rig, MakeEngineRig(options));
    ASSERT_OK_AND_ASSIGN(const std::vector<float> before, rig->engine->state().ReadMaster(1));
    Status status = ImportHfWeights(dir, options.model, *rig->model, *rig->engine, false);
    EXPECT_THAT(status, StatusIs(::testing::_, HasSubstr("model.safetensors")));
    EXPECT_THAT(status.message(), HasSubstr("truncated"));
    ASSERT_OK_AND_ASSIGN(const std::vector<float> after, rig->engine->state().ReadMaster(1));
    EXPECT_EQ(before, after);
  }
}

// Fixture `name`'s config.json and weights in a temporary directory `as`, plus
// "lm_head.weight": the tensor `embedding` with `change` (element index, value) applied, in
// `dtype` like every other tensor.
std::string WithLmHead(const std::string& name, const std::string& as,
                       const std::string& embedding,
                       const std::function<float(uint64_t, float)>& change, StDType dtype) {
  const std::string dir = TestDir(as);
  std::filesystem::copy_file(HfFixture(name) + "/config.json", dir + "/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  StatusOr<SafetensorsSet> set = SafetensorsSet::OpenDirectory(HfFixture(name));
  EXPECT_OK(set);
  if (!set.ok()) return dir;
  const SafetensorsSet* source = &*set;
  std::vector<StOutputTensor> tensors;
  for (const StTensor& tensor : set->tensors()) {
    tensors.push_back(
        {tensor.name, tensor.shape, [source, &tensor](uint64_t begin, uint64_t count, float* out) {
           return source->ReadFloats(tensor, begin, count, out);
         }});
  }
  const StTensor* head = set->Find(embedding);
  EXPECT_NE(head, nullptr) << embedding;
  if (head == nullptr) return dir;
  tensors.push_back({"lm_head.weight", head->shape,
                     [source, head, change](uint64_t begin, uint64_t count, float* out) {
                       RETURN_IF_ERROR(source->ReadFloats(*head, begin, count, out));
                       for (uint64_t i = 0; i < count; ++i) out[i] = change(begin + i, out[i]);
                       return absl::OkStatus();
                     }});
  EXPECT_OK(WriteSafetensorsDirectory(dir, tensors, dtype, uint64_t{5} << 30, {{"format", "pt"}}));
  return dir;
}

// Every unit's master (used elements) after importing `dir`, or the import's error.
StatusOr<std::vector<std::vector<float>>> ImportedMasters(const std::string& dir) {
  const Options options = ImportOptions(dir);
  ASSIGN_OR_RETURN(auto rig, MakeEngineRig(options));
  RETURN_IF_ERROR(ImportHfWeights(dir, options.model, *rig->model, *rig->engine, false));
  std::vector<std::vector<float>> masters;
  for (size_t u = 0; u < rig->model->units().size(); ++u) {
    ASSIGN_OR_RETURN(std::vector<float> master, rig->engine->state().ReadMaster(static_cast<int>(u)));
    master.resize(rig->model->units()[u].used_elements());
    masters.push_back(std::move(master));
  }
  return masters;
}

// A file holding a tied model's LM head beside its embedding (GPT2LMHeadModel's state_dict
// has both; save_pretrained leaves lm_head.weight out, other writers keep it): equal to the
// embedding, it loads as the file without it does (fp32 and bf16 files); differing in one
// element, or in shape, it is refused naming both tensors (a tied model holds one matrix).
TEST(HfImportTiedHead, AnEqualCopyLoadsADifferentOneIsRefused) {
  for (const auto& [fixture, embedding] : std::vector<std::pair<std::string, std::string>>{
           {"gpt2-tiny", "transformer.wte.weight"},
           {"llama-tiny-tied", "model.embed_tokens.weight"}}) {
    SCOPED_TRACE(fixture);
    ASSERT_OK_AND_ASSIGN(const auto plain, ImportedMasters(HfFixture(fixture)));
    for (const StDType dtype : {StDType::kF32, StDType::kBF16}) {
      SCOPED_TRACE(StDTypeName(dtype));
      const std::string tag = fixture + "-" + StDTypeName(dtype);
      const std::string equal = WithLmHead(
          fixture, "tied-equal-" + tag, embedding, [](uint64_t, float v) { return v; }, dtype);
      ASSERT_OK_AND_ASSIGN(const auto loaded, ImportedMasters(equal));
      if (dtype == StDType::kF32) {
        EXPECT_EQ(loaded, plain);
      } else {
        ASSERT_OK_AND_ASSIGN(const auto no_head, ImportedMasters(Bf16Copy(fixture)));
        EXPECT_EQ(loaded, no_head);
      }
    }
    const std::string differs = WithLmHead(
        fixture, "tied-differs-" + fixture, embedding,
        [](uint64_t i, float v) { return i == 37 ? v + 0.5f : v; }, StDType::kF32);
    EXPECT_THAT(ImportedMasters(differs),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("tensor lm_head.weight"), HasSubstr("beside " + embedding),
                               HasSubstr("differs from it (element 37: "),
                               HasSubstr("ties its LM head to the token embedding"))));
  }
  // Of another shape: named with both shapes.
  {
    const std::string dir = CopyFixture("gpt2-tiny", "tied-shape");
    ASSERT_OK_AND_ASSIGN(const SafetensorsSet set, SafetensorsSet::OpenDirectory(dir));
    std::vector<StOutputTensor> tensors;
    for (const StTensor& tensor : set.tensors()) {
      tensors.push_back({tensor.name, tensor.shape,
                         [&set, &tensor](uint64_t begin, uint64_t count, float* out) {
                           return set.ReadFloats(tensor, begin, count, out);
                         }});
    }
    tensors.push_back({"lm_head.weight", {95, 32}, [](uint64_t, uint64_t count, float* out) {
                         std::fill(out, out + count, 0.0f);
                         return absl::OkStatus();
                       }});
    const std::string out = TestDir("tied-shape-out");
    std::filesystem::copy_file(dir + "/config.json", out + "/config.json",
                               std::filesystem::copy_options::overwrite_existing);
    ASSERT_OK(WriteSafetensorsDirectory(out, tensors, StDType::kF32, uint64_t{5} << 30, {})
                  .status());
    EXPECT_THAT(ImportedMasters(out),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("tensor lm_head.weight [95, 32] beside transformer.wte.weight "
                                   "[96, 32]: the model ties")));
  }
  // An untied LLaMA's lm_head.weight is its own head, as ever (the fixture's differs from
  // its embedding).
  EXPECT_OK(ImportedMasters(HfFixture("llama-tiny")).status());
}

// A GPT-2 shape whose Conv1D matrices (stored transposed) are larger than one 4 MiB read
// task, so the importer splits them into bands of file rows on several threads: every
// unit, whole and in a range starting and ending inside rows, equals a plain gather from
// the file's values, exactly, in fp32 files and in bf16 ones.
TEST(HfWeightsFill, BandsAndRangesMatchAPlainGather) {
  StatusOr<Options> parsed = ParseOptions(
      "", {"model.preset=tiny", "model.layers=1", "model.channels=768", "model.heads=12"});
  ASSERT_OK(parsed);
  const ModelOptions model_options = ResolveModelOptions(parsed->model);
  ASSERT_OK_AND_ASSIGN(auto model, CreateModel(model_options, Recompute::kNone, DType::kF32));
  ASSERT_OK_AND_ASSIGN(const std::vector<HfTensor> map,
                       HfTensorMap(model_options, model->units()));
  // Integer values (exact in fp32), distinct per tensor and element.
  auto value = [](size_t tensor, uint64_t i) {
    return static_cast<float>((i * 7 + tensor * 131) % 4093) - 2046.0f;
  };
  std::vector<StOutputTensor> tensors;
  bool banded = false;
  for (size_t k = 0; k < map.size(); ++k) {
    uint64_t numel = 1;
    for (int64_t d : map[k].shape) numel *= static_cast<uint64_t>(d);
    banded = banded || (map[k].transposed && numel * 2 > (uint64_t{4} << 20));
    tensors.push_back({map[k].name, map[k].shape,
                       [k, value](uint64_t begin, uint64_t count, float* out) {
                         for (uint64_t i = 0; i < count; ++i) out[i] = value(k, begin + i);
                         return absl::OkStatus();
                       }});
  }
  ASSERT_TRUE(banded) << "no transposed matrix spans several read tasks";
  // fp32 files, and bf16 ones (the values rounded; transposed from the bf16 read itself).
  for (const StDType dtype : {StDType::kF32, StDType::kBF16}) {
    SCOPED_TRACE(StDTypeName(dtype));
    const std::string dir =
        std::string(std::getenv("TEST_TMPDIR")) + "/banded-" + StDTypeName(dtype);
    std::filesystem::create_directories(dir);
    ASSERT_OK(WriteSafetensorsDirectory(dir, tensors, dtype, uint64_t{5} << 30, {}).status());
    std::ofstream(dir + "/config.json") << HfConfigJson(model_options, "float32");
    ASSERT_OK_AND_ASSIGN(const HfWeights weights, HfWeights::Open(dir, model_options, *model));
    auto stored = [&](size_t tensor, uint64_t i) {
      return dtype == StDType::kF32 ? value(tensor, i) : ToFloat(ToBf16(value(tensor, i)));
    };

    for (size_t u = 0; u < model->units().size(); ++u) {
      const UnitLayout& unit = model->units()[u];
      std::vector<float> expected(unit.used_elements(), 0.0f);
      for (size_t k = 0; k < map.size(); ++k) {
        if (map[k].unit != static_cast<int>(u)) continue;
        const TensorSpec& spec = unit.tensor(map[k].tensor);
        const size_t cols = spec.shape.size() == 2 ? static_cast<size_t>(spec.shape[1]) : 1;
        uint64_t numel = 1;
        for (int64_t d : map[k].shape) numel *= static_cast<uint64_t>(d);
        const size_t rows = numel / cols;
        const size_t first = spec.offset + static_cast<size_t>(map[k].row_begin) * cols;
        for (uint64_t i = 0; i < numel; ++i) {
          // Transposed: the file holds [cols, rows], element i = (c, r).
          const size_t at = map[k].transposed ? (i % rows) * cols + i / rows : i;
          expected[first + at] = stored(k, i);
        }
      }
      const size_t n = expected.size();
      for (const auto& [lo, hi] :
           std::vector<std::pair<size_t, size_t>>{{0, n}, {n / 3 + 5, 2 * n / 3 + 7}}) {
        if (hi > n || lo >= hi) continue;
        std::vector<float> got(hi - lo, -1.0f);
        ASSERT_OK(weights.Fill(static_cast<int>(u), lo, hi, got.data(), nullptr));
        for (size_t e = lo; e < hi; ++e) {
          ASSERT_EQ(got[e - lo], expected[e]) << unit.name() << " element " << e;
        }
      }
    }
  }
}

// Fixture `name` in a temporary directory `as`, its weights in `dtype`, with element
// `element` of tensor `tensor` set to `value`.
std::string WithValue(const std::string& name, const std::string& as, StDType dtype,
                      const std::string& tensor_name, uint64_t element, float value) {
  const std::string dir = TestDir(as);
  std::filesystem::copy_file(HfFixture(name) + "/config.json", dir + "/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  StatusOr<SafetensorsSet> set = SafetensorsSet::OpenDirectory(HfFixture(name));
  EXPECT_OK(set);
  if (!set.ok()) return dir;
  const SafetensorsSet* source = &*set;
  std::vector<StOutputTensor> tensors;
  for (const StTensor& tensor : set->tensors()) {
    const bool edit = tensor.name == tensor_name;
    tensors.push_back({tensor.name, tensor.shape,
                       [=, &tensor](uint64_t begin, uint64_t count, float* out) {
                         RETURN_IF_ERROR(source->ReadFloats(tensor, begin, count, out));
                         if (edit && element >= begin && element < begin + count) {
                           out[element - begin] = value;
                         }
                         return absl::OkStatus();
                       }});
  }
  EXPECT_OK(WriteSafetensorsDirectory(dir, tensors, dtype, uint64_t{5} << 30, {}));
  return dir;
}

// Weights that are not finite are refused as they are read, naming the file, the tensor, the
// element (flat and per dimension, in the file's layout) and the value: in plain and in
// transposed (Conv1D) tensors, fp32 files and bf16 ones (also bf16 straight into a bf16
// engine's params). Before, they loaded, and training blamed the learning rate.
TEST(HfImportErrors, WeightsThatAreNotFiniteAreRefusedNamingTheTensor) {
  const float kNan = std::nanf(""), kInf = std::numeric_limits<float>::infinity();
  struct Case {
    std::string fixture, tensor;
    uint64_t element;
    float value;
    StDType dtype;
    std::string engine_dtype, message;
  };
  const Case cases[] = {
      {"gpt2-tiny", "transformer.h.1.attn.c_attn.weight", 100, kNan, StDType::kF32, "fp32",
       "tensor 'transformer.h.1.attn.c_attn.weight' [32, 96]: element 100 [1, 4] is NaN"},
      {"gpt2-tiny", "transformer.wte.weight", 37, -kInf, StDType::kF32, "fp32",
       "tensor 'transformer.wte.weight' [96, 32]: element 37 [1, 5] is -inf"},
      {"gpt2-tiny", "transformer.h.0.mlp.c_proj.weight", 4000, kInf, StDType::kBF16, "fp32",
       "tensor 'transformer.h.0.mlp.c_proj.weight' [128, 32]: element 4000 [125, 0] is inf"},
      {"llama-tiny", "model.layers.0.mlp.down_proj.weight", 5, kInf, StDType::kBF16, "bf16",
       "tensor 'model.layers.0.mlp.down_proj.weight' [32, 48]: element 5 [0, 5] is inf"},
      {"llama-tiny", "model.norm.weight", 31, kNan, StDType::kF32, "fp32",
       "tensor 'model.norm.weight' [32]: element 31 [31] is NaN"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    const std::string dir = WithValue(c.fixture, "hf-nonfinite-" + c.tensor + c.engine_dtype,
                                      c.dtype, c.tensor, c.element, c.value);
    const Options options = ImportOptions(dir, {"train.dtype=" + c.engine_dtype});
    ASSERT_OK_AND_ASSIGN(auto rig, MakeEngineRig(options));
    EXPECT_THAT(ImportHfWeights(dir, options.model, *rig->model, *rig->engine, false),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr(dir + "/model.safetensors"), HasSubstr(c.message),
                               HasSubstr("weights must be finite"))));
  }
  // A range (a stage-3 shard) is checked only where it reads: c_attn's file element 100 is
  // the destination's row 4, column 1 (element 4 * 32 + 1 of the tensor in the unit).
  const std::string dir = WithValue("gpt2-tiny", "hf-nonfinite-range", StDType::kF32,
                                    "transformer.h.1.attn.c_attn.weight", 100, kNan);
  const Options options = ImportOptions(dir);
  const ModelOptions model_options = ResolveModelOptions(options.model);
  ASSERT_OK_AND_ASSIGN(auto model, CreateModel(model_options, Recompute::kNone, DType::kF32));
  ASSERT_OK_AND_ASSIGN(const HfWeights weights, HfWeights::Open(dir, model_options, *model));
  const UnitLayout& block = model->units()[2];
  size_t bad = 0;
  for (const TensorSpec& spec : block.tensors()) {
    if (spec.name == "attn.qkv.weight") bad = spec.offset + 4 * 32 + 1;
  }
  ASSERT_GT(bad, 0u);
  std::vector<float> values(block.used_elements());
  EXPECT_OK(weights.Fill(2, 0, bad, values.data(), nullptr));
  EXPECT_OK(weights.Fill(2, bad + 1, block.used_elements(), values.data(), nullptr));
  EXPECT_THAT(weights.Fill(2, bad - 5, bad + 1, values.data(), nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("element 100 [1, 4] is NaN")));
}

// An llm.c file with a value that is not finite: refused naming the unit, the tensor, the
// element and its byte offset.
TEST(LlmcImportErrors, WeightsThatAreNotFiniteAreRefusedNamingTheTensor) {
  // GPT T 8, V 10 (padded 16), L 1, H 2, C 4: 348 parameters; wte first, then wpe
  // [8, 4] from element 64; the NaN at wpe's element 6 ([1, 2]).
  const std::string path = TestDir("llmc-nonfinite") + "/model.bin";
  int32_t header[256] = {20240326, 3, 8, 10, 1, 2, 4, 16};
  std::vector<float> values(348, 0.25f);
  values[64 + 6] = std::nanf("");
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header), sizeof(header));
    out.write(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  }
  StatusOr<Options> parsed =
      ParseOptions("", {"model.from=llmc:" + path, "train.seq_len=8", "train.micro_batch=1",
                        "device.threads=1"});
  ASSERT_OK(parsed);
  ASSERT_OK_AND_ASSIGN(auto rig, MakeEngineRig(*parsed));
  EXPECT_THAT(ImportLlmcWeights(path, parsed->model, *rig->model, *rig->engine, false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(path), HasSubstr("embedding tensor 'wpe' [8, 4]"),
                             HasSubstr("element 6 (byte offset 1304) is NaN"))));
  values[64 + 6] = 0.5f;
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header), sizeof(header));
    out.write(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  }
  EXPECT_OK(ImportLlmcWeights(path, parsed->model, *rig->model, *rig->engine, false));
}

}  // namespace
}  // namespace strata
