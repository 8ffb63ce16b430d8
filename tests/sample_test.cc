// Generation with a KV cache against the training forward: for each family (the fixtures
// of tools/hf_reference.py, and a strata checkpoint), the logits the Generator returns
// token by token equal, at every position, the logits of one full forward of the same
// sequence (EvalLoss): |got - ref| <= 1e-5 + 1e-4 |ref| in fp32 (the same kernels, but one
// row at a time: the matmuls sum in another order). A prompt prefilled in batches (all at
// once, or in batches of 5 rows) gives the next-token logits of feeding it one token at a
// time within the same tolerance (the matmuls run over more rows), leaves the same cache
// (the tokens fed after it agree too), and a seeded generation draws the same tokens as
// one fed token by token. Greedy generation is the argmax of those logits; a draw is a
// function of the seed; bad sampling options are errors.
#include "sample/sample.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "config/options_parse.h"
#include "core/testing/status_matchers.h"
#include "interop/import_weights.h"
#include "kernels/counting_ops.h"
#include "runtime/backend.h"
#include "models/create_model.h"
#include "tests/engine_rig.h"
#include "tests/hf_fixtures.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

constexpr int kT = 16;

Options Base(const std::vector<std::string>& extra) {
  std::vector<std::string> sets = {"train.micro_batch=1", "train.seq_len=16", "device.threads=1"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  StatusOr<Options> options = ParseOptions("", sets);
  EXPECT_OK(options);
  return options.ok() ? *options : Options{};
}

// The logits of one forward over `tokens` (positions 0..kT-1) of the model `options` makes,
// weights from the Hugging Face directory `dir`.
std::vector<float> FullForwardLogits(const std::string& dir, const std::vector<int32_t>& tokens) {
  const Options options = Base({"model.from=hf:" + dir});
  StatusOr<std::unique_ptr<EngineRig>> rig = MakeEngineRig(options);
  EXPECT_OK(rig);
  EXPECT_OK(ImportHfWeights(dir, options.model, *(*rig)->model, *(*rig)->engine, false));
  EXPECT_OK((*rig)->engine->EvalLoss({tokens.data(), tokens.data()}).status());
  const int Vp = ResolveModelOptions(options.model).padded_vocab;
  const float* logits = static_cast<const float*>((*rig)->model->logits());
  return std::vector<float>(logits, logits + size_t(kT) * Vp);
}

// Elementwise |got - want| <= 1e-5 + 1e-4 |want|; the first few differences reported.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int wrong = 0;
  for (size_t v = 0; v < want.size(); ++v) {
    if (std::fabs(got[v] - want[v]) > 1e-5f + 1e-4f * std::fabs(want[v]) && wrong++ < 3) {
      ADD_FAILURE() << what << " token " << v << ": " << got[v] << " vs " << want[v];
    }
  }
  EXPECT_EQ(wrong, 0) << what;
}

class Sample : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Fixtures, Sample,
                         ::testing::Values("gpt2-tiny", "llama-tiny", "llama-tiny-tied",
                                           "qwen2-tiny", "mistral-tiny-hd", "qwen3-tiny"),
                         [](const auto& info) { return HfFixtureTestName(info.param); });

TEST_P(Sample, CachedLogitsEqualTheFullForward) {
  const std::string dir = HfFixture(GetParam());
  std::vector<int32_t> tokens(kT);
  for (int t = 0; t < kT; ++t) tokens[t] = (t * 29 + 3) % 64;  // every fixture's vocab
  const std::vector<float> full = FullForwardLogits(dir, tokens);
  ASSERT_OK_AND_ASSIGN(auto generator, Generator::Create("hf:" + dir, Base({}), kT));
  const int V = generator->model_options().vocab, Vp = generator->model_options().padded_vocab;
  ASSERT_EQ(full.size(), size_t(kT) * Vp);
  for (int t = 0; t < kT; ++t) {
    ASSERT_OK_AND_ASSIGN(const std::vector<float> logits, generator->Feed(tokens[t]));
    ASSERT_EQ(logits.size(), size_t(V));
    int wrong = 0;
    for (int v = 0; v < V; ++v) {
      const float want = full[size_t(t) * Vp + v];
      if (std::fabs(logits[v] - want) > 1e-5f + 1e-4f * std::fabs(want) && wrong++ < 3) {
        ADD_FAILURE() << "position " << t << " token " << v << ": " << logits[v] << " vs "
                      << want;
      }
    }
    ASSERT_EQ(wrong, 0) << "position " << t;
  }
  // The cache is full: one more token is an error, not a silent overwrite.
  EXPECT_THAT(generator->Feed(1).status(), StatusIs(absl::StatusCode::kOutOfRange));
}

TEST_P(Sample, BatchedPrefillEqualsOneTokenAtATime) {
  const std::string from = "hf:" + HfFixture(GetParam());
  std::vector<int32_t> tokens(kT);
  for (int t = 0; t < kT; ++t) tokens[t] = (t * 29 + 3) % 64;
  constexpr int kPrompt = 13;
  // The reference: one token at a time (one row per step, as before batched prefill).
  ASSERT_OK_AND_ASSIGN(auto single, Generator::Create(from, Base({}), kT, /*prefill_rows=*/1));
  std::vector<std::vector<float>> want;
  for (int t = 0; t < kT; ++t) {
    ASSERT_OK_AND_ASSIGN(std::vector<float> logits, single->Feed(tokens[t]));
    if (t + 1 >= kPrompt) want.push_back(std::move(logits));
  }
  for (const int rows : {Generator::kPrefillRows, 5}) {
    SCOPED_TRACE(::testing::Message() << "prefill rows " << rows);
    ASSERT_OK_AND_ASSIGN(auto batched, Generator::Create(from, Base({}), kT, rows));
    ASSERT_OK_AND_ASSIGN(const std::vector<float> logits,
                         batched->Prefill(absl::MakeConstSpan(tokens).first(kPrompt)));
    EXPECT_EQ(batched->position(), kPrompt);
    ExpectClose(logits, want[0], "after the prompt");
    // The cache the prefill left: the tokens fed after it see the same keys and values.
    for (int t = kPrompt; t < kT; ++t) {
      ASSERT_OK_AND_ASSIGN(const std::vector<float> next, batched->Feed(tokens[t]));
      ExpectClose(next, want[t + 1 - kPrompt], absl::StrCat("fed at position ", t));
    }
    EXPECT_THAT(batched->Prefill({tokens.data(), 1}).status(),
                StatusIs(absl::StatusCode::kOutOfRange));
  }
  // A seeded generation draws the same tokens either way (a short prompt; the context
  // slides once: its newest half is prefilled again).
  std::vector<int32_t> draws[2];
  for (const int rows : {1, Generator::kPrefillRows}) {
    ASSERT_OK_AND_ASSIGN(auto generator, Generator::Create(from, Base({}), 12, rows));
    std::mt19937_64 rng(3);
    ASSERT_OK(Generate(*generator, {tokens.begin(), tokens.begin() + 5}, 14, {0.9f, 0, 3}, rng,
                       [&](int32_t token, const std::vector<float>&, int) -> Status {
                         draws[rows == 1 ? 0 : 1].push_back(token);
                         return absl::OkStatus();
                       }));
  }
  EXPECT_EQ(draws[0].size(), 14u);
  EXPECT_EQ(draws[0], draws[1]);
}

// What batching buys: a DecodeStep of 13 rows runs each block matrix once over all 13 (not
// 13 times over one row) and the LM head once, over the last row; attention is still each
// row's over the cache up to its position. Counted by the dry run's kernels (no memory is
// touched: any non-null address serves as a parameter).
TEST(SamplePrefill, EachMatrixOncePerBatch) {
  for (const char* fixture : {"gpt2-tiny", "qwen3-tiny"}) {
    SCOPED_TRACE(fixture);
    const Options options = Base({"model.from=hf:" + HfFixture(fixture)});
    const ModelOptions model_options = ResolveModelOptions(options.model);
    ASSERT_OK_AND_ASSIGN(Backend backend, CreateBackend(options));
    ASSERT_OK_AND_ASSIGN(auto model,
                         CreateModel(model_options, Recompute::kNone, DType::kF32));
    constexpr int kRows = 13;
    ASSERT_OK(model->PrepareDecode(*backend.device, kT, kRows));
    ASSERT_OK_AND_ASSIGN(auto stream, backend.device->CreateStream("count"));
    CountingOps counting(DType::kF32);
    StepContext ctx;
    ctx.device = backend.device.get();
    ctx.ops = &counting;
    ctx.stream = stream.get();
    ctx.params.assign(model->units().size(), reinterpret_cast<const void*>(uintptr_t{1} << 20));
    ctx.grads.assign(model->units().size(), nullptr);
    ctx.inputs = reinterpret_cast<const int32_t*>(uintptr_t{1} << 21);
    ASSERT_OK(model->DecodeStep(ctx, 0, kRows));
    const OpCounts counts = counting.counts();
    double batched = 0, single = 0;
    for (const auto& [shape, calls] : counts.shapes) {
      if (shape[0] != OpCounts::kMatmulForward) continue;
      (shape[1] == kRows ? batched : single) += calls;
      EXPECT_TRUE(shape[1] == kRows || shape[1] == 1) << shape[1] << " rows";
    }
    EXPECT_EQ(batched, 4.0 * model_options.layers);  // qkv, attention out, MLP in, MLP out
    EXPECT_EQ(single, 1.0);                           // the LM head
    const int width = model_options.heads * (model_options.head_dim > 0
                                                 ? model_options.head_dim
                                                 : model_options.channels / model_options.heads);
    EXPECT_EQ(counts.attention_flops,
              4.0 * width * kRows * (kRows + 1) / 2 * model_options.layers);
    EXPECT_THAT(model->DecodeStep(ctx, 4, kRows),  // past the cache
                StatusIs(absl::StatusCode::kOutOfRange));
  }
}

TEST(SampleDraw, GreedyTopKAndSeeds) {
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f, 0.0f};
  std::mt19937_64 rng(7);
  EXPECT_EQ(DrawToken(logits, {0.0f, 0, 1}, rng), 1);  // greedy
  EXPECT_EQ(DrawToken(logits, {1.0f, 1, 1}, rng), 1);  // top-1
  // top-2 draws only tokens 1 and 3; a seed gives the same sequence.
  std::mt19937_64 a(5), b(5);
  std::vector<int32_t> first, second;
  for (int i = 0; i < 200; ++i) {
    first.push_back(DrawToken(logits, {1.0f, 2, 5}, a));
    second.push_back(DrawToken(logits, {1.0f, 2, 5}, b));
  }
  EXPECT_EQ(first, second);
  int ones = 0;
  for (int32_t id : first) {
    ASSERT_TRUE(id == 1 || id == 3) << id;
    ones += id == 1;
  }
  // P(1) = e^0.1 / (1 + e^0.1) = 0.525: 200 draws within 5 standard deviations.
  EXPECT_NEAR(ones / 200.0, 0.525, 5 * std::sqrt(0.525 * 0.475 / 200));
  // drawable_ids: ids at or above it (a tokenizer's missing ids) are never drawn, not by
  // greedy (the best, id 1, is excluded at a limit of 1) nor top-k nor a full draw.
  EXPECT_EQ(DrawToken(logits, {0.0f, 0, 1, 1}, rng), 0);
  const std::vector<float> flat = {0.0f, 0.0f, 9.0f, 9.0f, 9.0f};  // most mass above the limit
  std::mt19937_64 limited(11);
  for (int i = 0; i < 500; ++i) {
    ASSERT_LT(DrawToken(flat, {1.0f, 0, 1, 2}, limited), 2);
    ASSERT_LT(DrawToken(flat, {1.0f, 3, 1, 2}, limited), 2);
  }
  EXPECT_THAT(ValidateSampling({-1.0f, 0, 1}), StatusIs(absl::StatusCode::kInvalidArgument,
                                                        HasSubstr("--temperature")));
  EXPECT_THAT(ValidateSampling({1.0f, -2, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--top_k")));
}

// Past the cache the context slides: at every draw the logits are those of a fresh
// generator prefilled with the newest `context` tokens from position 0 (within the
// tolerance above: Generate prefills a block and feeds the rest one by one), the context
// never exceeds the cache and restarts from its newest half when full; a prompt longer
// than the cache is continued from its newest part.
TEST(SampleWindow, PastTheCacheTheContextSlides) {
  const std::string from = "hf:" + HfFixture("llama-tiny");
  constexpr int kCache = 10;  // < the model's 16, to show the cache is what slides
  ASSERT_OK_AND_ASSIGN(const int limit, PositionLimit(from));
  EXPECT_EQ(limit, kT);
  for (const int prompt_length : {3, 13}) {
    std::vector<int32_t> prompt(prompt_length);
    for (int t = 0; t < prompt_length; ++t) prompt[t] = (t * 37 + 5) % 100;
    ASSERT_OK_AND_ASSIGN(auto generator, Generator::Create(from, Base({}), kCache));
    ASSERT_OK_AND_ASSIGN(auto fresh, Generator::Create(from, Base({}), kCache));
    std::vector<int32_t> sequence = prompt, contexts;
    std::mt19937_64 rng(3);
    int checked = 0;
    ASSERT_OK(Generate(*generator, prompt, 30, {0.9f, 0, 3}, rng,
                       [&](int32_t token, const std::vector<float>& logits, int context) -> Status {
                         contexts.push_back(context);
                         EXPECT_GE(context, 1);
                         EXPECT_LE(context, kCache);
                         fresh->Restart();
                         ASSIGN_OR_RETURN(const std::vector<float> want,
                                          fresh->Prefill(absl::MakeConstSpan(sequence).last(
                                              static_cast<size_t>(context))));
                         ExpectClose(logits, want,
                                     absl::StrCat("draw ", contexts.size(), ", context ",
                                                  context));
                         ++checked;
                         sequence.push_back(token);
                         return absl::OkStatus();
                       }));
    EXPECT_EQ(checked, 30);
    // The contexts: the prompt (its newest kCache tokens), + 1 per draw up to kCache, then
    // kCache / 2 after each restart.
    std::vector<int32_t> want_contexts;
    int context = std::min(prompt_length, kCache);
    for (int i = 0; i < 30; ++i) {
      want_contexts.push_back(context);
      context = context == kCache ? kCache / 2 : context + 1;
    }
    EXPECT_EQ(contexts, want_contexts) << "prompt of " << prompt_length;
  }
}

TEST(SampleSetup, TooLongForTheModelIsAClearError) {
  EXPECT_THAT(Generator::Create("hf:" + HfFixture("llama-tiny"), Base({}), 17).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("do not fit")));
  EXPECT_THAT(Generator::Create("/nonexistent/checkpoint", Base({}), 4).status(),
              StatusIs(::testing::_, HasSubstr("/nonexistent/checkpoint")));
}

// A model with a sliding window (Mistral's) generates within it: strata's full attention
// equals the window's only there.
TEST(SampleSetup, LongerThanTheSlidingWindowIsAClearError) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/windowed";
  std::filesystem::create_directories(dir);
  const std::string from = HfFixture("llama-tiny");
  std::filesystem::copy_file(from + "/model.safetensors", dir + "/model.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  std::ifstream in(from + "/config.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = text.find("\"rope_theta\"");
  ASSERT_NE(at, std::string::npos);
  text.insert(at, "\"sliding_window\": 8,\n  ");
  std::ofstream(dir + "/config.json") << text;
  EXPECT_THAT(Generator::Create("hf:" + dir, Base({"train.seq_len=8"}), 9).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sliding window of 8")));
  ASSERT_OK_AND_ASSIGN(auto generator,
                       Generator::Create("hf:" + dir, Base({"train.seq_len=8"}), 8));
  EXPECT_EQ(generator->model_options().sliding_window, 8);
}

}  // namespace
}  // namespace strata
