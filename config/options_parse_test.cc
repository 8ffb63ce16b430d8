// Tests config parsing: defaults, presets, the order file < --set, typed values in both
// syntaxes, every class of error with its message, all problems reported in one status,
// DescribeKeys covering every key and FormatResolved round-tripping through --set.
// Options are compared field by field. Config files are written under TEST_TMPDIR.
#include "config/options_parse.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/testing/status_matchers.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::IsOkAndHolds;
using testing::StatusIs;

// The keys the spec names, in the table's order.
const std::vector<std::string> kAllKeys = {
    "model.preset",
    "model.from",
    "model.family",
    "model.layers",
    "model.heads",
    "model.kv_heads",
    "model.head_dim",
    "model.channels",
    "model.ffn_hidden",
    "model.vocab",
    "model.padded_vocab",
    "model.max_seq_len",
    "model.rope_theta",
    "model.rope_scaling",
    "model.rope_factor",
    "model.rope_low_freq_factor",
    "model.rope_high_freq_factor",
    "model.rope_original_max_seq_len",
    "model.norm_eps",
    "model.tie_embeddings",
    "model.sliding_window",
    "model.qkv_bias",
    "model.qk_norm",
    "data.path",
    "data.format",
    "data.tokenizer",
    "data.cache_dir",
    "data.val_fraction",
    "train.steps",
    "train.micro_batch",
    "train.seq_len",
    "train.grad_accum",
    "train.dtype",
    "train.lr",
    "train.min_lr_fraction",
    "train.warmup_steps",
    "train.weight_decay",
    "train.beta1",
    "train.beta2",
    "train.eps",
    "train.grad_clip",
    "train.seed",
    "train.eval_every",
    "train.eval_batches",
    "train.log_every",
    "train.recompute",
    "train.optimizer_states",
    "train.checkpoint_dir",
    "train.checkpoint_every",
    "train.checkpoint_keep",
    "train.checkpoint_async",
    "train.checkpoint_buffer_bytes",
    "train.resume",
    "train.trace_steps",
    "lora.rank",
    "lora.alpha",
    "lora.targets",
    "lora.dropout",
    "lora.base_tier",
    "lora.base_dtype",
    "device.backend",
    "device.memory_limit",
    "device.threads",
    "device.cuda_attention",
    "zero.stage",
    "zero.world",
    "zero.comm_timeout_s",
    "zero.prefetch_bytes",
    "zero.optimizer_tier",
    "zero.grad_tier",
    "zero.param_tier",
    "zero.param_update",
    "zero.shard_group",
    "zero.nvme_dir",
    "zero.nvme_allow_memory_fs",
    "tiers.host_memory_limit",
    "nvme.engine",
    "nvme.read_ahead_units",
    "nvme.optimizer_buffers",
    "nvme.grad_buffers",
    "nvme.queue_depth",
    "nvme.chunk_bytes",
};

// A GPT's ModelOptions (the preset name and the five dimensions the GPT presets set).
ModelOptions GptModel(const std::string& preset, int layers, int heads, int channels, int vocab,
                      int max_seq_len) {
  ModelOptions m;
  m.preset = preset;
  m.layers = layers;
  m.heads = heads;
  m.channels = channels;
  m.vocab = vocab;
  m.max_seq_len = max_seq_len;
  return m;
}

void ExpectOptionsEqual(const Options& got, const Options& want) {
  EXPECT_EQ(got.model.preset, want.model.preset);
  EXPECT_EQ(got.model.layers, want.model.layers);
  EXPECT_EQ(got.model.heads, want.model.heads);
  EXPECT_EQ(got.model.channels, want.model.channels);
  EXPECT_EQ(got.model.vocab, want.model.vocab);
  EXPECT_EQ(got.model.max_seq_len, want.model.max_seq_len);
  EXPECT_EQ(got.model.family, want.model.family);
  EXPECT_EQ(got.model.kv_heads, want.model.kv_heads);
  EXPECT_EQ(got.model.ffn_hidden, want.model.ffn_hidden);
  EXPECT_EQ(got.model.padded_vocab, want.model.padded_vocab);
  EXPECT_EQ(got.model.rope, want.model.rope);
  EXPECT_EQ(got.model.norm_eps, want.model.norm_eps);
  EXPECT_EQ(got.model.tie_embeddings, want.model.tie_embeddings);
  EXPECT_EQ(got.model.qkv_bias, want.model.qkv_bias);
  EXPECT_EQ(got.model.sliding_window, want.model.sliding_window);
  EXPECT_EQ(got.data.path, want.data.path);
  EXPECT_EQ(got.data.val_fraction, want.data.val_fraction);
  EXPECT_EQ(got.train.steps, want.train.steps);
  EXPECT_EQ(got.train.micro_batch, want.train.micro_batch);
  EXPECT_EQ(got.train.seq_len, want.train.seq_len);
  EXPECT_EQ(got.train.grad_accum, want.train.grad_accum);
  EXPECT_EQ(got.train.dtype, want.train.dtype);
  EXPECT_EQ(got.train.lr, want.train.lr);
  EXPECT_EQ(got.train.min_lr_fraction, want.train.min_lr_fraction);
  EXPECT_EQ(got.train.warmup_steps, want.train.warmup_steps);
  EXPECT_EQ(got.train.weight_decay, want.train.weight_decay);
  EXPECT_EQ(got.train.beta1, want.train.beta1);
  EXPECT_EQ(got.train.beta2, want.train.beta2);
  EXPECT_EQ(got.train.eps, want.train.eps);
  EXPECT_EQ(got.train.grad_clip, want.train.grad_clip);
  EXPECT_EQ(got.train.seed, want.train.seed);
  EXPECT_EQ(got.train.eval_every, want.train.eval_every);
  EXPECT_EQ(got.train.eval_batches, want.train.eval_batches);
  EXPECT_EQ(got.train.log_every, want.train.log_every);
  EXPECT_EQ(got.train.recompute, want.train.recompute);
  EXPECT_EQ(got.train.optimizer_states, want.train.optimizer_states);
  EXPECT_EQ(got.train.checkpoint_dir, want.train.checkpoint_dir);
  EXPECT_EQ(got.train.checkpoint_every, want.train.checkpoint_every);
  EXPECT_EQ(got.train.checkpoint_keep, want.train.checkpoint_keep);
  EXPECT_EQ(got.train.checkpoint_async, want.train.checkpoint_async);
  EXPECT_EQ(got.train.checkpoint_buffer_bytes, want.train.checkpoint_buffer_bytes);
  EXPECT_EQ(got.train.resume, want.train.resume);
  EXPECT_EQ(got.lora.rank, want.lora.rank);
  EXPECT_EQ(got.lora.alpha, want.lora.alpha);
  EXPECT_EQ(got.lora.targets, want.lora.targets);
  EXPECT_EQ(got.lora.dropout, want.lora.dropout);
  EXPECT_EQ(got.lora.base_tier, want.lora.base_tier);
  EXPECT_EQ(got.lora.base_dtype, want.lora.base_dtype);
  EXPECT_EQ(got.device.backend, want.device.backend);
  EXPECT_EQ(got.device.memory_limit, want.device.memory_limit);
  EXPECT_EQ(got.device.threads, want.device.threads);
  EXPECT_EQ(got.device.cuda_attention, want.device.cuda_attention);
  EXPECT_EQ(got.zero.stage, want.zero.stage);
  EXPECT_EQ(got.zero.world, want.zero.world);
  EXPECT_EQ(got.zero.comm_timeout_s, want.zero.comm_timeout_s);
  EXPECT_EQ(got.zero.prefetch_bytes, want.zero.prefetch_bytes);
  EXPECT_EQ(got.zero.optimizer_tier, want.zero.optimizer_tier);
  EXPECT_EQ(got.zero.grad_tier, want.zero.grad_tier);
  EXPECT_EQ(got.zero.param_tier, want.zero.param_tier);
  EXPECT_EQ(got.zero.param_update, want.zero.param_update);
  EXPECT_EQ(got.zero.shard_group, want.zero.shard_group);
  EXPECT_EQ(got.tiers.host_memory_limit, want.tiers.host_memory_limit);
}

// Writes `contents` to a file under TEST_TMPDIR and returns its path.
std::string WriteConfig(const std::string& name, const std::string& contents) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  std::ofstream out(path, std::ios::trunc);
  out << contents;
  return path;
}

// The problem lines of a failed parse (the header line dropped).
std::vector<std::string> ProblemLines(const Status& status) {
  std::vector<std::string> lines = absl::StrSplit(std::string(status.message()), '\n');
  if (!lines.empty()) lines.erase(lines.begin());
  return lines;
}

// Parses and expects exactly one problem containing every fragment.
void ExpectOneProblem(const std::string& path, const std::vector<std::string>& sets,
                      const std::vector<std::string>& fragments) {
  StatusOr<Options> parsed = ParseOptions(path, sets);
  ASSERT_THAT(parsed, StatusIs(absl::StatusCode::kInvalidArgument))
      << "sets[0]=" << (sets.empty() ? "" : sets[0]);
  std::vector<std::string> lines = ProblemLines(parsed.status());
  ASSERT_EQ(lines.size(), 1u) << parsed.status().message();
  for (const std::string& fragment : fragments) {
    EXPECT_THAT(lines[0], HasSubstr(fragment));
  }
}

TEST(ParseOptions, NoFileNoSetsGivesDefaults) {
  StatusOr<Options> parsed = ParseOptions("", {});
  ASSERT_OK(parsed);
  ExpectOptionsEqual(*parsed, Options{});
  EXPECT_OK(ValidateOptions(Options{}));
}

TEST(ParseOptions, ConfigKeysAreExactlyTheSpecKeys) {
  EXPECT_EQ(ConfigKeys(), kAllKeys);
  EXPECT_EQ(ModelPresetNames(),
            (std::vector<std::string>{"tiny", "small", "gpt2-124m", "gpt2-1.5b", "llama-tiny",
                                      "llama-1b", "llama-8b", "llama-70b"}));
}

TEST(ParseOptions, PresetsSetModelDimensions) {
  struct Case {
    std::string name;
    int layers, heads, channels, vocab, max_seq_len;
  };
  for (const Case& c : std::vector<Case>{{"tiny", 2, 2, 64, 256, 64},
                                         {"small", 4, 4, 256, 50304, 256},
                                         {"gpt2-124m", 12, 12, 768, 50257, 1024}}) {
    StatusOr<Options> parsed = ParseOptions("", {"model.preset=" + c.name});
    ASSERT_OK(parsed);
    EXPECT_EQ(parsed->model.preset, c.name);
    EXPECT_EQ(parsed->model.layers, c.layers) << c.name;
    EXPECT_EQ(parsed->model.heads, c.heads) << c.name;
    EXPECT_EQ(parsed->model.channels, c.channels) << c.name;
    EXPECT_EQ(parsed->model.vocab, c.vocab) << c.name;
    EXPECT_EQ(parsed->model.max_seq_len, c.max_seq_len) << c.name;
  }
}

TEST(ParseOptions, LlamaPresetsSetEveryModelKey) {
  StatusOr<Options> parsed = ParseOptions("", {"model.preset=llama-8b"});
  ASSERT_OK(parsed);
  const ModelOptions& m = parsed->model;
  EXPECT_EQ(m.family, ModelFamily::kLlama);
  EXPECT_EQ(m.layers, 32);
  EXPECT_EQ(m.heads, 32);
  EXPECT_EQ(m.kv_heads, 8);
  EXPECT_EQ(m.channels, 4096);
  EXPECT_EQ(m.ffn_hidden, 14336);
  EXPECT_EQ(m.vocab, 128256);
  EXPECT_EQ(m.rope.theta, 500000.0f);
  EXPECT_EQ(m.rope, (RopeSpec{500000.0f, RopeScaling::kLlama3, 8.0f, 1.0f, 4.0f, 8192}));
  EXPECT_FALSE(m.tie_embeddings);
  // A preset replaces the whole model: a GPT preset after it restores GPT's keys.
  parsed = ParseOptions("", {"model.preset=llama-1b"});
  ASSERT_OK(parsed);
  EXPECT_TRUE(parsed->model.tie_embeddings);
  EXPECT_EQ(parsed->model.layers, 16);
  EXPECT_EQ(parsed->model.rope.factor, 32.0f);
}

TEST(ParseOptions, FamilyRulesAreChecked) {
  // GPT has neither grouped-query attention nor an untied head nor a free MLP width.
  EXPECT_THAT(ParseOptions("", {"model.preset=tiny", "model.kv_heads=1"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.kv_heads")));
  EXPECT_THAT(ParseOptions("", {"model.preset=tiny", "model.tie_embeddings=false"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.tie_embeddings")));
  EXPECT_THAT(ParseOptions("", {"model.preset=tiny", "model.ffn_hidden=100"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.ffn_hidden")));
  // LLaMA: heads a multiple of kv_heads, an even head size, padded_vocab >= vocab.
  EXPECT_THAT(ParseOptions("", {"model.preset=llama-tiny", "model.kv_heads=3"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.kv_heads (3)")));
  EXPECT_THAT(ParseOptions("", {"model.preset=llama-tiny", "model.heads=2", "model.channels=6"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("even head size")));
  EXPECT_THAT(ParseOptions("", {"model.preset=llama-tiny", "model.padded_vocab=100"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.padded_vocab")));
  EXPECT_THAT(ParseOptions("", {"model.preset=llama-tiny", "model.rope_theta=0"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.rope_theta")));
  EXPECT_THAT(
      ParseOptions("", {"model.preset=llama-tiny", "model.rope_scaling=llama3",
                        "model.rope_high_freq_factor=0.5"}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.rope_high_freq_factor")));
  // Dynamic NTK: the model's sequences within its original context (where it is the
  // default; the model's max_seq_len bounds train.seq_len and sample lengths).
  EXPECT_OK(ParseOptions("", {"model.preset=llama-tiny", "model.rope_scaling=dynamic",
                              "model.rope_original_max_seq_len=64", "model.max_seq_len=64"}));
  EXPECT_THAT(ParseOptions("", {"model.preset=llama-tiny", "model.rope_scaling=dynamic",
                                "model.rope_original_max_seq_len=32", "model.max_seq_len=64"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("model.max_seq_len"),
                             HasSubstr("<= model.rope_original_max_seq_len (32)"))));
  EXPECT_THAT(ParseOptions("", {"model.preset=llama-tiny", "model.rope_scaling=yarn"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.rope_scaling")));
  EXPECT_THAT(ParseOptions("", {"model.preset=tiny", "model.qkv_bias=true"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.qkv_bias")));
  EXPECT_THAT(ParseOptions("", {"model.preset=tiny", "model.sliding_window=64"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.sliding_window")));
  // A window shorter than the sequence: strata's full attention would differ from it.
  EXPECT_THAT(
      ParseOptions("", {"model.preset=llama-tiny", "model.sliding_window=16", "train.seq_len=32"}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("expected <= model.sliding_window (16)")));
  EXPECT_OK(
      ParseOptions("", {"model.preset=llama-tiny", "model.sliding_window=32", "train.seq_len=32"}));
  // GPT has no rotary embedding to scale.
  EXPECT_THAT(ParseOptions("", {"model.preset=tiny", "model.rope_scaling=linear"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.rope_scaling")));
}

TEST(ParseOptions, FilePresetThenFileKeysThenSets) {
  std::string path = WriteConfig(
      "order.json",
      R"({"train": {"steps": 10, "micro_batch": 2}, "model": {"layers": 3, "preset": "tiny"}})");
  StatusOr<Options> parsed = ParseOptions(path, {"train.steps=20", "train.steps=30"});
  ASSERT_OK(parsed);
  Options want;
  want.model = GptModel("tiny", 3, 2, 64, 256, 64);  // the file's layers beat the preset
  want.train.steps = 30;                     // the last --set beats the file and earlier sets
  want.train.micro_batch = 2;
  ExpectOptionsEqual(*parsed, want);
}

TEST(ParseOptions, SetPresetAppliesBeforeFileKeysAndBeatsFilePreset) {
  std::string path =
      WriteConfig("preset.json", R"({"model": {"preset": "gpt2-124m", "channels": 128}})");
  StatusOr<Options> parsed = ParseOptions(path, {"model.preset=tiny", "model.heads=4"});
  ASSERT_OK(parsed);
  Options want;
  want.model = GptModel("tiny", 2, 4, 128, 256, 64);
  ExpectOptionsEqual(*parsed, want);
}

TEST(ParseOptions, SetPresetAfterAnotherKeyStillAppliesFirst) {
  StatusOr<Options> parsed = ParseOptions("", {"model.layers=7", "model.preset=gpt2-124m"});
  ASSERT_OK(parsed);
  EXPECT_EQ(parsed->model.layers, 7);
  EXPECT_EQ(parsed->model.heads, 12);
  EXPECT_EQ(parsed->model.max_seq_len, 1024);
}

TEST(ParseOptions, EveryKeyThroughSet) {
  StatusOr<Options> parsed = ParseOptions("", {"model.preset=tiny",
                                               "model.family=llama",
                                               "model.layers=3",
                                               "model.heads=4",
                                               "model.kv_heads=2",
                                               "model.channels=96",
                                               "model.ffn_hidden=200",
                                               "model.vocab=300",
                                               "model.padded_vocab=320",
                                               "model.max_seq_len=128",
                                               "model.rope_theta=5e5",
                                               "model.rope_scaling=llama3",
                                               "model.rope_factor=16",
                                               "model.rope_low_freq_factor=2",
                                               "model.rope_high_freq_factor=8",
                                               "model.rope_original_max_seq_len=4096",
                                               "model.norm_eps=1e-6",
                                               "model.tie_embeddings=false",
                                               "model.sliding_window=64",
                                               "model.qkv_bias=true",
                                               "data.path=/data/a=b.txt",
                                               "data.val_fraction=0.25",
                                               "train.steps=7",
                                               "train.micro_batch=8",
                                               "train.seq_len=32",
                                               "train.grad_accum=2",
                                               "train.dtype=bf16",
                                               "train.lr=3e-4",
                                               "train.min_lr_fraction=0",
                                               "train.warmup_steps=0",
                                               "train.weight_decay=0.01",
                                               "train.beta1=0.8",
                                               "train.beta2=0.999",
                                               "train.eps=1e-6",
                                               "train.grad_clip=0",
                                               "train.seed=18446744073709551615",
                                               "train.eval_every=0",
                                               "train.eval_batches=2",
                                               "train.log_every=10",
                                               "device.backend=cpu",
                                               "device.memory_limit=512MiB",
                                               "device.threads=3",
                                               "device.cuda_attention=flash",
                                               "zero.stage=2",
                                               "zero.world=3",
                                               "zero.comm_timeout_s=7.5",
                                               "zero.prefetch_bytes=64MiB",
                                               "zero.stage=3",
                                               "zero.optimizer_tier=host",
                                               "zero.grad_tier=host",
                                               "zero.param_tier=host",
                                               "tiers.host_memory_limit=3GiB"});
  ASSERT_OK(parsed);
  Options want;
  want.model = GptModel("tiny", 3, 4, 96, 300, 128);
  want.model.family = ModelFamily::kLlama;
  want.model.kv_heads = 2;
  want.model.ffn_hidden = 200;
  want.model.padded_vocab = 320;
  want.model.rope = {5e5f, RopeScaling::kLlama3, 16.0f, 2.0f, 8.0f, 4096};
  want.model.norm_eps = 1e-6f;
  want.model.tie_embeddings = false;
  want.model.qkv_bias = true;
  want.model.sliding_window = 64;
  want.data = {"/data/a=b.txt", DataFormat::kAuto, 0.25};
  want.train.steps = 7;
  want.train.micro_batch = 8;
  want.train.seq_len = 32;
  want.train.grad_accum = 2;
  want.train.dtype = DType::kBF16;
  want.train.lr = 3e-4f;
  want.train.min_lr_fraction = 0.0f;
  want.train.warmup_steps = 0;
  want.train.weight_decay = 0.01f;
  want.train.beta1 = 0.8f;
  want.train.beta2 = 0.999f;
  want.train.eps = 1e-6f;
  want.train.grad_clip = 0.0f;
  want.train.seed = 18446744073709551615ull;
  want.train.eval_every = 0;
  want.train.eval_batches = 2;
  want.train.log_every = 10;
  want.device = {BackendKind::kCpu, 512ull << 20, 3, CudaAttentionKind::kFlash};
  want.zero = {3, 3, 7.5f, 64ull << 20, StateTier::kHost, StateTier::kHost, StateTier::kHost};
  want.tiers.host_memory_limit = 3ull << 30;
  ExpectOptionsEqual(*parsed, want);
}

TEST(ParseOptions, EveryKeyThroughFile) {
  std::string path = WriteConfig("all.json", R"({
    "model": {"preset": "tiny", "layers": 3, "heads": 4, "channels": 96, "vocab": 300,
              "max_seq_len": 128},
    "data": {"path": "corpus.txt", "val_fraction": 0.25},
    "train": {"steps": 7, "micro_batch": 8, "seq_len": 32, "grad_accum": 2, "dtype": "bf16",
              "lr": 0.0003, "min_lr_fraction": 1, "warmup_steps": 0, "weight_decay": 0.01,
              "beta1": 0.8, "beta2": 0.999, "eps": 1e-6, "grad_clip": 0.5,
              "seed": 42, "eval_every": 0, "eval_batches": 2, "log_every": 10},
    "device": {"backend": "cpu", "memory_limit": "2GiB", "threads": 3},
    "zero": {"stage": 0, "world": 1}
  })");
  StatusOr<Options> parsed = ParseOptions(path, {});
  ASSERT_OK(parsed);
  Options want;
  want.model = GptModel("tiny", 3, 4, 96, 300, 128);
  want.data = {"corpus.txt", DataFormat::kAuto, 0.25};
  want.train.steps = 7;
  want.train.micro_batch = 8;
  want.train.seq_len = 32;
  want.train.grad_accum = 2;
  want.train.dtype = DType::kBF16;
  want.train.lr = 0.0003f;
  want.train.min_lr_fraction = 1.0f;
  want.train.warmup_steps = 0;
  want.train.weight_decay = 0.01f;
  want.train.beta1 = 0.8f;
  want.train.beta2 = 0.999f;
  want.train.eps = 1e-6f;
  want.train.grad_clip = 0.5f;
  want.train.seed = 42;
  want.train.eval_every = 0;
  want.train.eval_batches = 2;
  want.train.log_every = 10;
  want.device = {BackendKind::kCpu, 2ull << 30, 3};
  want.zero = {0, 1};
  ExpectOptionsEqual(*parsed, want);
}

// device.memory_limit as parsed from `path` and `sets`.
StatusOr<uint64_t> ParsedMemoryLimit(const std::string& path,
                                     const std::vector<std::string>& sets) {
  ASSIGN_OR_RETURN(const Options options, ParseOptions(path, sets));
  return options.device.memory_limit;
}

TEST(ParseOptions, SizesThroughSetAndFile) {
  EXPECT_THAT(ParsedMemoryLimit("", {"device.memory_limit=2GiB"}), IsOkAndHolds(2ull << 30));
  EXPECT_THAT(ParsedMemoryLimit("", {"device.memory_limit=4096"}), IsOkAndHolds(4096u));
  EXPECT_THAT(ParsedMemoryLimit("", {"device.memory_limit=1.5GB"}), IsOkAndHolds(1500000000ull));
  std::string bytes = WriteConfig("bytes.json", R"({"device": {"memory_limit": 1048576}})");
  EXPECT_THAT(ParsedMemoryLimit(bytes, {}), IsOkAndHolds(1048576u));
  std::string text = WriteConfig("text.json", R"({"device": {"memory_limit": "512MiB"}})");
  EXPECT_THAT(ParsedMemoryLimit(text, {}), IsOkAndHolds(512ull << 20));
  // A --set beats the file.
  EXPECT_THAT(ParsedMemoryLimit(text, {"device.memory_limit=1GiB"}), IsOkAndHolds(1ull << 30));
  ExpectOneProblem("", {"device.memory_limit=lots"},
                   {"device.memory_limit: got 'lots', expected a size", "[in --set"});
  ExpectOneProblem("", {"device.memory_limit=2XB"}, {"device.memory_limit: got '2XB'"});
  ExpectOneProblem("", {"device.memory_limit=99999999999TiB"},
                   {"device.memory_limit: got '99999999999TiB', expected a size"});
}

TEST(ParseOptions, UnknownKeysAreErrorsWithSuggestions) {
  ExpectOneProblem(
      "", {"train.stpes=5"},
      {"train.stpes: unknown key (did you mean train.steps?)", "[in --set train.stpes=5]"});
  ExpectOneProblem("", {"trian.steps=5"},
                   {"trian.steps: unknown section 'trian'", "did you mean train.steps?"});
  ExpectOneProblem("", {"train.memory_limit=1GiB"},
                   {"train.memory_limit: unknown key (did you mean device.memory_limit?)"});
  ExpectOneProblem("", {"train.learning_rate=1"}, {"train.learning_rate: unknown key"});
  EXPECT_THAT(
      ParseOptions("", {"train.learning_rate=1"}),
      StatusIs(absl::StatusCode::kInvalidArgument, ::testing::Not(HasSubstr("did you mean"))));

  std::string path =
      WriteConfig("unknown.json", R"({"trian": {"steps": 1}, "model": {"layres": 2}, "steps": 3})");
  StatusOr<Options> parsed = ParseOptions(path, {});
  ASSERT_FALSE(parsed.ok());
  std::vector<std::string> lines = ProblemLines(parsed.status());
  ASSERT_EQ(lines.size(), 3u) << parsed.status().message();
  // nlohmann objects iterate in key order: model, steps, trian.
  EXPECT_THAT(lines[0],
              HasSubstr("model.layres: unknown key (did you mean model.layers?) [in " + path));
  EXPECT_THAT(lines[1], HasSubstr("steps: unknown section"));
  EXPECT_THAT(lines[1], HasSubstr("did you mean train.steps?"));
  EXPECT_THAT(lines[2], HasSubstr("trian: unknown section"));
  EXPECT_THAT(lines[2], HasSubstr("(did you mean train?)"));
}

TEST(ParseOptions, MalformedSetsAreErrors) {
  ExpectOneProblem("", {"train.steps"},
                   {"--set 'train.steps': expected section.key=value (missing '=')"});
  ExpectOneProblem("", {"steps=5"},
                   {"--set 'steps=5': expected section.key=value",
                    "key 'steps' has no section; did you mean train.steps?"});
  ExpectOneProblem("", {"=5"}, {"--set '=5': expected section.key=value"});
  ExpectOneProblem("", {".steps=5"}, {".steps: unknown section ''"});
}

TEST(ParseOptions, UnparsableValuesNameKeyValueAndExpectation) {
  ExpectOneProblem("", {"train.steps=abc"},
                   {"train.steps: got 'abc', expected an integer", "[in --set train.steps=abc]"});
  ExpectOneProblem("", {"train.steps=1.5"}, {"train.steps: got '1.5', expected an integer"});
  ExpectOneProblem("", {"train.steps=99999999999"},
                   {"train.steps: got '99999999999', expected an integer in"});
  ExpectOneProblem("", {"train.steps="}, {"train.steps: got '', expected an integer"});
  ExpectOneProblem("", {"train.steps= 5"}, {"train.steps: got ' 5', expected an integer"});
  ExpectOneProblem("", {"train.lr=fast"}, {"train.lr: got 'fast', expected a finite number"});
  ExpectOneProblem("", {"train.lr=nan"}, {"train.lr: got 'nan', expected a finite number"});
  ExpectOneProblem("", {"train.lr=1e60"}, {"train.lr: got '1e60', expected a finite number"});
  ExpectOneProblem("", {"data.val_fraction=half"},
                   {"data.val_fraction: got 'half', expected a finite number"});
  ExpectOneProblem("", {"train.seed=-1"},
                   {"train.seed: got '-1', expected an unsigned 64-bit integer"});
  ExpectOneProblem("", {"train.dtype=fp16"}, {"train.dtype: got 'fp16', expected fp32 or bf16"});
}

TEST(ParseOptions, RangeChecksNameKeyValueAndBound) {
  struct Case {
    std::string set;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {"model.layers=0", "model.layers: got 0, expected in [1, 1024]"},
      {"model.heads=0", "model.heads: got 0, expected in [1, 4096]"},
      {"model.channels=0", "model.channels: got 0, expected in [1, 1048576]"},
      {"model.vocab=0", "model.vocab: got 0, expected in [1, 1073741824]"},
      {"data.val_fraction=0", "data.val_fraction: got 0, expected a fraction in (0, 1)"},
      {"data.val_fraction=1", "data.val_fraction: got 1, expected a fraction in (0, 1)"},
      {"train.steps=0", "train.steps: got 0, expected >= 1"},
      {"train.micro_batch=0", "train.micro_batch: got 0, expected in [1, 1048576]"},
      {"train.seq_len=0", "train.seq_len: got 0, expected >= 1"},
      {"train.seq_len=257", "train.seq_len: got 257, expected <= model.max_seq_len (256)"},
      {"train.grad_accum=0", "train.grad_accum: got 0, expected in [1, 65536]"},
      {"train.lr=0", "train.lr: got 0, expected > 0"},
      {"train.lr=-0.1", "train.lr: got -0.1, expected > 0"},
      {"train.min_lr_fraction=1.5", "train.min_lr_fraction: got 1.5, expected a fraction in"},
      {"train.warmup_steps=-1", "train.warmup_steps: got -1, expected >= 0"},
      {"train.weight_decay=-1", "train.weight_decay: got -1, expected >= 0"},
      {"train.beta1=1", "train.beta1: got 1, expected a value in [0, 1)"},
      {"train.beta1=-0.5", "train.beta1: got -0.5, expected a value in [0, 1)"},
      {"train.beta2=1", "train.beta2: got 1, expected a value in [0, 1)"},
      {"train.eps=0", "train.eps: got 0, expected > 0"},
      {"train.grad_clip=-1", "train.grad_clip: got -1, expected >= 0"},
      {"train.eval_every=-1", "train.eval_every: got -1, expected >= 0"},
      {"train.eval_batches=0", "train.eval_batches: got 0, expected in [1, 1048576]"},
      {"train.log_every=0", "train.log_every: got 0, expected >= 1"},
      {"device.threads=-1", "device.threads: got -1, expected in [0, 1024]"},
      {"device.backend=tpu", "device.backend: got 'tpu', expected cpu or cuda"},
      {"device.cuda_attention=fast", "device.cuda_attention: got 'fast', expected gemm or flash"},
      {"zero.stage=4", "zero.stage: got 4, expected 0, 1, 2 or 3"},
      {"zero.stage=-1", "zero.stage: got -1, expected 0, 1, 2 or 3"},
      {"zero.world=0", "zero.world: got 0, expected a rank count in [1, 64]"},
      {"zero.world=65", "zero.world: got 65, expected a rank count in [1, 64]"},
      {"zero.comm_timeout_s=0", "zero.comm_timeout_s: got 0, expected > 0 seconds"},
      {"model.preset=huge", "model.preset: got 'huge', expected one of tiny, small, gpt2-124m"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.set);
    ExpectOneProblem("", {c.set}, {c.fragment});
  }
}

TEST(ParseOptions, CrossFieldChecksRunOnTheMergedResult) {
  // Invalid alone (seq_len 128 > tiny's 64) but valid once max_seq_len is raised later.
  StatusOr<Options> ok =
      ParseOptions("", {"model.preset=tiny", "train.seq_len=128", "model.max_seq_len=128"});
  ASSERT_OK(ok);
  EXPECT_EQ(ok->train.seq_len, 128);
  // Heads must divide channels, checked after the preset and overrides are merged.
  ExpectOneProblem("", {"model.preset=tiny", "model.heads=3"},
                   {"model.channels: got 64, expected a multiple of model.heads (3)"});
  std::string path = WriteConfig("cross.json", R"({"model": {"preset": "tiny"}})");
  ExpectOneProblem(path, {"train.seq_len=100"},
                   {"train.seq_len: got 100, expected <= model.max_seq_len (64)"});
}

TEST(ParseOptions, JsonTypeErrorsNameTheKey) {
  struct Case {
    std::string json;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {R"({"train": {"steps": "10"}})", "train.steps: got \"10\" (string), expected an integer"},
      {R"({"train": {"steps": 10.5}})", "train.steps: got 10.5 (number), expected an integer"},
      {R"({"train": {"steps": 3000000000}})", "train.steps: got 3000000000 (number), expected"},
      {R"({"train": {"steps": null}})", "train.steps: got null (null), expected an integer"},
      {R"({"train": {"lr": true}})", "train.lr: got true (boolean), expected a finite number"},
      {R"({"train": {"lr": 1e300}})", "train.lr: got 1e+300 (number), expected a finite"},
      {R"({"train": {"seed": -1}})",
       "train.seed: got -1 (number), expected an unsigned 64-bit integer"},
      {R"({"train": {"dtype": 16}})", "train.dtype: got 16 (number), expected a string"},
      {R"({"train": {"dtype": "fp16"}})", "train.dtype: got \"fp16\" (string), expected fp32"},
      {R"({"data": {"path": ["a"]}})", "data.path: got [\"a\"] (array), expected a string"},
      {R"({"model": {"preset": 1}})", "model.preset: got 1 (number), expected a string"},
      {R"({"device": {"memory_limit": -5}})",
       "device.memory_limit: got -5 (number), expected a size"},
      {R"({"device": {"memory_limit": "lots"}})",
       "device.memory_limit: got \"lots\" (string), expected a size"},
      {R"({"device": {"memory_limit": 1.5}})", "device.memory_limit: got 1.5 (number)"},
      {R"({"train": 5})", "train: got 5 (number), expected an object of keys"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].json);
    std::string path = WriteConfig("types" + std::to_string(i) + ".json", cases[i].json);
    ExpectOneProblem(path, {}, {cases[i].fragment, "[in " + path + "]"});
  }
  std::string array = WriteConfig("array.json", "[1, 2]");
  ExpectOneProblem(array, {},
                   {"config file '" + array + "': got [1,2] (array), expected an object"});
}

TEST(ParseOptions, FileErrorsNameTheFileAndPosition) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string missing = std::string(dir != nullptr ? dir : "/tmp") + "/does_not_exist.json";
  ExpectOneProblem(missing, {},
                   {"cannot open the --config file " + missing + ": No such file or directory"});
  std::string bad = WriteConfig("bad.json", "{\n  \"train\": {\"steps\": 10,}\n}\n");
  ExpectOneProblem(bad, {}, {"config file '" + bad + "': invalid JSON: parse error at line 2"});
  std::string empty = WriteConfig("empty.json", "");
  ExpectOneProblem(empty, {}, {"config file '" + empty + "': invalid JSON", "line 1, column 1"});
  ExpectOneProblem(std::string(dir != nullptr ? dir : "/tmp"), {},
                   {"the --config file ", "a directory, not a regular file"});
}

TEST(ParseOptions, ConfigFilesAreBoundedInSizeNestingAndKind) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string base = std::string(dir != nullptr ? dir : "/tmp");
  // Deep nesting is refused before the parser sees it (no stack to exhaust).
  const std::string deep = WriteConfig("deep.json", std::string(100000, '[') + std::string(100000, ']'));
  ExpectOneProblem(deep, {}, {"config file '" + deep + "': nested deeper than 32 levels"});
  // Brackets inside strings do not count.
  const std::string quoted = WriteConfig(
      "quoted.json", R"({"data": {"path": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[.txt"}})");
  StatusOr<Options> parsed = ParseOptions(quoted, {});
  ASSERT_OK(parsed);
  EXPECT_EQ(parsed->data.path, std::string(40, '[') + ".txt");
  // A file larger than any config: the wrong file.
  const std::string big = WriteConfig("big.json", "{\"train\": {}}" + std::string(2 << 20, ' '));
  ExpectOneProblem(big, {}, {"the --config file " + big + " is 2.00 MiB", "more than the 1.00 MiB"});
  // A FIFO or a device is refused without reading (it could block or never end).
  const std::string fifo = base + "/config.fifo";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  ExpectOneProblem(fifo, {}, {"a FIFO (named pipe), not a regular file"});
  ExpectOneProblem("/dev/zero", {}, {"a character device, not a regular file"});
}

TEST(ParseOptions, EveryProblemIsReportedInOneStatus) {
  std::string path =
      WriteConfig("many.json", R"({"train": {"steps": "ten", "lr": -1}, "zero": {"stage": 5}})");
  StatusOr<Options> parsed = ParseOptions(path, {"train.stpes=5", "device.backend=tpu", "nokey",
                                                 "train.micro_batch=x", "model.heads=3"});
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  std::string message(parsed.status().message());
  EXPECT_EQ(message.rfind("invalid configuration (8 problems):\n", 0), 0u) << message;
  std::vector<std::string> lines = ProblemLines(parsed.status());
  const std::vector<std::string> want = {
      "--set 'nokey': expected section.key=value (missing '=')",
      "train.stpes: unknown key (did you mean train.steps?) [in --set train.stpes=5]",
      "train.steps: got \"ten\" (string), expected an integer",
      "train.micro_batch: got 'x', expected an integer",
      "model.channels: got 256, expected a multiple of model.heads (3)",
      "train.lr: got -1, expected > 0",
      "device.backend: got 'tpu', expected cpu or cuda",
      "zero.stage: got 5, expected 0, 1, 2 or 3",
  };
  ASSERT_EQ(lines.size(), want.size()) << message;
  for (const std::string& fragment : want) {
    EXPECT_THAT(message, HasSubstr(fragment));
  }
}

TEST(ParseOptions, FailedKeyDoesNotHideOtherSetsOrFileKeys) {
  // A bad value is reported, and the rest still parse (so their checks still run).
  StatusOr<Options> parsed = ParseOptions("", {"train.steps=x", "train.micro_batch=0"});
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(ProblemLines(parsed.status()).size(), 2u) << parsed.status().message();
}

TEST(ValidateOptions, ReportsProblemsOfOptionsBuiltInCode) {
  Options options;
  options.train.steps = 0;
  options.zero.world = 65;
  Status status = ValidateOptions(options);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  std::vector<std::string> lines = ProblemLines(status);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "  train.steps: got 0, expected >= 1");
  EXPECT_EQ(lines[1], "  zero.world: got 65, expected a rank count in [1, 64]");
}

TEST(DescribeKeys, MentionsEveryKeyWithItsDefault) {
  std::string text = DescribeKeys();
  for (const std::string& key : kAllKeys) {
    EXPECT_THAT(text, HasSubstr("  " + key + " (")) << key;
  }
  EXPECT_THAT(text, HasSubstr("train.steps (int, default 50)"));
  EXPECT_THAT(text, HasSubstr("model.preset (string, default \"small\")"));
  EXPECT_THAT(text, HasSubstr("train.lr (float, default 0.001)"));
  // A key of a few values lists them as its type.
  EXPECT_THAT(text, HasSubstr("train.dtype (fp32|bf16, default fp32)"));
  EXPECT_THAT(text, HasSubstr("zero.optimizer_tier (device|host|nvme, default device)"));
  EXPECT_THAT(text, HasSubstr("train.seed (uint64, default 1337)"));
  EXPECT_THAT(text, HasSubstr("device.memory_limit (size, default 0)"));
  EXPECT_THAT(text, HasSubstr("gpt2-124m: gpt, layers 12, heads 12, channels 768, vocab 50257, "
                              "max_seq_len 1024"));
}

TEST(FormatResolved, OneLinePerKeyThatParsesBackExactly) {
  StatusOr<Options> parsed =
      ParseOptions("", {"model.preset=tiny", "train.lr=0.00031", "train.eps=1e-7",
                        "data.val_fraction=0.123456789", "device.memory_limit=1536MiB",
                        "device.memory_limit=1000001", "train.seed=12345678901234567",
                        "train.dtype=bf16", "data.path=/tmp/corpus.txt"});
  ASSERT_OK(parsed);
  std::string text = FormatResolved(*parsed);
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), kAllKeys.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i].rfind(kAllKeys[i] + "=", 0), 0u) << lines[i];
  }
  auto line_of = [](const std::vector<std::string>& lines, const std::string& key) {
    for (const std::string& line : lines) {
      if (line.rfind(key + "=", 0) == 0) return line;
    }
    return std::string("(no line for ") + key + ")";
  };
  EXPECT_EQ(lines[0], "model.preset=tiny");
  EXPECT_EQ(line_of(lines, "train.lr"), "train.lr=0.00031");
  EXPECT_EQ(line_of(lines, "device.memory_limit"), "device.memory_limit=1000001");
  StatusOr<Options> again = ParseOptions("", lines);
  ASSERT_OK(again);
  ExpectOptionsEqual(*again, *parsed);

  std::vector<std::string> defaults =
      absl::StrSplit(FormatResolved(Options{}), '\n', absl::SkipEmpty());
  ASSERT_EQ(defaults.size(), kAllKeys.size());
  EXPECT_EQ(line_of(defaults, "device.memory_limit"), "device.memory_limit=0");
  EXPECT_EQ(line_of(defaults, "data.path"), "data.path=");
  EXPECT_EQ(line_of(defaults, "model.family"), "model.family=gpt");
  EXPECT_EQ(line_of(defaults, "model.tie_embeddings"), "model.tie_embeddings=true");
}


TEST(ValidatePlacement, RunnableCombinationsPass) {
  const std::vector<std::vector<std::string>> ok = {
      {},
      {"zero.stage=1", "zero.optimizer_tier=host", "zero.grad_tier=host"},
      {"zero.stage=2", "zero.optimizer_tier=host"},  // sums on the device, copied at the step
      {"lora.rank=8", "zero.stage=3", "lora.base_tier=nvme", "zero.nvme_dir=/d"},
      {"lora.rank=8", "zero.stage=3", "lora.base_tier=host", "zero.optimizer_tier=host"},
      {"lora.rank=8", "lora.base_dtype=nf4"},
      {"zero.stage=3", "zero.optimizer_tier=host", "zero.grad_tier=host",
       "zero.param_tier=host"},
      {"zero.stage=3", "zero.optimizer_tier=nvme", "zero.param_tier=nvme", "zero.nvme_dir=/d"},
      {"zero.stage=2", "zero.optimizer_tier=nvme", "zero.grad_tier=host", "zero.nvme_dir=/d"},
      {"zero.stage=3", "zero.optimizer_tier=nvme", "zero.grad_tier=nvme", "zero.param_tier=nvme",
       "zero.nvme_dir=/d"},
      {"zero.stage=3", "zero.optimizer_tier=host", "zero.grad_tier=host",
       "zero.param_update=delayed"},
      {"zero.stage=1", "zero.shard_group=node"},
      {"zero.stage=3", "zero.shard_group=node", "zero.optimizer_tier=nvme",
       "zero.param_tier=nvme", "zero.nvme_dir=/d"},
  };
  for (const auto& sets : ok) {
    ASSERT_OK_AND_ASSIGN(const Options options, ParseOptions("", sets));
    // Accepted as asked: every setting is in the resolved options, none was dropped.
    const std::vector<std::string> resolved =
        absl::StrSplit(FormatResolved(options), '\n', absl::SkipEmpty());
    for (const std::string& set : sets) {
      EXPECT_THAT(resolved, ::testing::Contains(set)) << absl::StrJoin(sets, " ");
    }
  }
}

TEST(ValidatePlacement, EachImpossibleCombinationSaysWhatWouldWork) {
  struct Case {
    std::vector<std::string> sets;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{"zero.optimizer_tier=host"}, "needs zero.stage >= 1"},
      {{"zero.stage=1", "zero.grad_tier=host"}, "set zero.optimizer_tier=host or zero.grad_tier=device"},
      {{"zero.stage=2", "zero.optimizer_tier=host", "zero.param_tier=host"},
       "zero.param_tier=host needs zero.stage=3"},
      {{"zero.stage=3", "zero.param_tier=host"}, "zero.param_tier=host needs zero.optimizer_tier=host"},
      {{"zero.optimizer_tier=cpu"}, "zero.optimizer_tier: got 'cpu', expected device, host or nvme"},
      {{"zero.param_tier=ssd"}, "zero.param_tier: got 'ssd', expected device, host or nvme"},
      {{"zero.grad_tier=disk"}, "zero.grad_tier: got 'disk', expected device, host or nvme"},
      {{"zero.grad_tier=nvme"},
       "zero.grad_tier=nvme needs zero.optimizer_tier=nvme and zero.stage 2 or 3 (got "
       "zero.optimizer_tier=device, zero.stage=0"},
      {{"zero.stage=1", "zero.optimizer_tier=nvme", "zero.grad_tier=nvme", "zero.nvme_dir=/d"},
       "got zero.optimizer_tier=nvme, zero.stage=1"},
      {{"zero.stage=3", "zero.optimizer_tier=host", "zero.param_tier=nvme",
        "zero.nvme_dir=/x"}, "zero.param_tier=nvme needs zero.optimizer_tier=nvme"},
      {{"zero.stage=1", "zero.optimizer_tier=nvme"}, "zero.nvme_dir is empty"},
      {{"nvme.engine=spdk"}, "nvme.engine: got 'spdk', expected auto, io_uring or pread"},
      {{"nvme.read_ahead_units=0"}, "nvme.read_ahead_units: got 0, expected in [1, 1024]"},
      {{"nvme.optimizer_buffers=1"}, "nvme.optimizer_buffers: got 1, expected in [2, 1024]"},
      {{"nvme.grad_buffers=0"}, "nvme.grad_buffers: got 0, expected in [2, 1024]"},
      {{"train.checkpoint_every=5"}, "train.checkpoint_dir is empty"},
      {{"train.checkpoint_every=-1"}, "train.checkpoint_every: got -1, expected >= 0"},
      {{"train.checkpoint_keep=-2"}, "train.checkpoint_keep: got -2, expected >= 0"},
      {{"train.checkpoint_buffer_bytes=1000"},
       "train.checkpoint_buffer_bytes: got 1000, expected >= 1048576 (1 MiB)"},
      {{"train.checkpoint_async=maybe"},
       "train.checkpoint_async: got 'maybe', expected true or false"},
      {{"train.recompute=all"}, "train.recompute: got 'all', expected none or blocks"},
      {{"zero.param_update=stale"}, "zero.param_update: got 'stale', expected exact or delayed"},
      {{"lora.rank=-1"}, "lora.rank: got -1, expected in [0, 4096]"},
      {{"lora.rank=4", "lora.alpha=0"}, "lora.alpha: got 0, expected > 0"},
      {{"lora.rank=4", "lora.dropout=1"}, "lora.dropout: got 1, expected a value in [0, 1)"},
      {{"lora.base_tier=nvme", "zero.stage=3", "zero.nvme_dir=/d"},
       "lora.base_tier=nvme places a frozen LoRA base, but lora.rank is 0"},
      {{"lora.rank=4", "lora.base_tier=host", "zero.stage=2"},
       "lora.base_tier=host needs zero.stage=3"},
      {{"lora.rank=4", "lora.base_tier=nvme", "zero.stage=3"}, "zero.nvme_dir is empty"},
      {{"lora.base_tier=disk"}, "lora.base_tier: got 'disk', expected device, host or nvme"},
      {{"lora.base_dtype=nf4"},
       "lora.base_dtype=nf4 quantizes a frozen LoRA base, but lora.rank is 0"},
      {{"lora.rank=4", "lora.base_dtype=fp4"},
       "lora.base_dtype: got 'fp4', expected train, bf16, int8 or nf4"},
      {{"zero.shard_group=rack"}, "zero.shard_group: got 'rack', expected world or node"},
      {{"zero.shard_group=node"}, "zero.shard_group=node needs zero.stage >= 1"},
      {{"zero.stage=1", "zero.shard_group=node", "device.backend=cuda"},
       "zero.shard_group=node needs device.backend=cpu"},
      {{"zero.stage=2", "zero.param_update=delayed"},
       "zero.param_update=delayed needs zero.optimizer_tier=host, zero.grad_tier=host and "
       "zero.param_tier=device (got device, device, device)"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ParseOptions("", c.sets),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.needle)))
        << absl::StrJoin(c.sets, " ");
  }
}

}  // namespace
}  // namespace strata
