// Range and cross-field checks of merged options; see option_keys.h (CheckOptions) and
// options_parse.h (ValidateOptions). The placement's combinations are ResolvePlacement's
// rules (runtime/placement.h), listed here with every other problem.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "config/option_keys.h"
#include "config/options_parse.h"
#include "runtime/placement.h"

namespace strata::option_keys {

void CheckOptions(const Options& options, std::vector<std::string>* problems) {
  auto expect = [problems](bool ok, const char* key, const std::string& got,
                           const std::string& expected) {
    if (!ok) problems->push_back(absl::StrCat(key, ": got ", got, ", expected ", expected));
  };
  auto at_least = [&expect](const char* key, int value, int min) {
    expect(value >= min, key, NumberText(value), absl::StrCat(">= ", min));
  };
  // Upper bounds far above any real use: a key at an absurd value gets this error instead
  // of an allocation the pools never see (per-layer tables, per-buffer bookkeeping, threads).
  auto in_range = [&expect](const char* key, int value, int min, int max) {
    expect(value >= min && value <= max, key, NumberText(value),
           absl::StrCat("in [", min, ", ", max, "]"));
  };
  const ModelOptions& model = options.model;
  if (FindPreset(model.preset) == nullptr) {
    expect(false, "model.preset", absl::StrCat("'", model.preset, "'"),
           absl::StrCat("one of ", PresetList()));
  }
  in_range("model.layers", model.layers, 1, 1024);
  in_range("model.heads", model.heads, 1, 4096);
  in_range("model.channels", model.channels, 1, 1048576);
  in_range("model.vocab", model.vocab, 1, 1073741824);
  in_range("model.max_seq_len", model.max_seq_len, 1, 1048576);
  in_range("model.kv_heads", model.kv_heads, 0, 4096);
  in_range("model.head_dim", model.head_dim, 0, 65536);
  in_range("model.ffn_hidden", model.ffn_hidden, 0, 4194304);
  if (model.padded_vocab != 0) {
    in_range("model.padded_vocab", model.padded_vocab, std::max(model.vocab, 1), 1073741824);
  }
  in_range("model.sliding_window", model.sliding_window, 0, 1048576);
  if (Status rope = CheckRopeSpec(model.rope); !rope.ok()) {
    problems->push_back(std::string(rope.message()));
  }
  expect(model.norm_eps > 0, "model.norm_eps", NumberText(model.norm_eps), "> 0");
  if (model.heads >= 1 && model.channels >= 1 && model.head_dim == 0) {
    expect(model.channels % model.heads == 0, "model.channels", NumberText(model.channels),
           absl::StrCat("a multiple of model.heads (", model.heads,
                        ") where model.head_dim is 0 (the head size)"));
  }
  if (model.family == ModelFamily::kGpt) {
    expect(model.head_dim == 0 || model.head_dim * model.heads == model.channels, "model.head_dim",
           NumberText(model.head_dim),
           absl::StrCat("0 or model.channels / model.heads for model.family=gpt"));
    expect(model.kv_heads == 0 || model.kv_heads == model.heads, "model.kv_heads",
           NumberText(model.kv_heads),
           absl::StrCat("0 or model.heads (", model.heads,
                        ") for model.family=gpt (grouped-query attention is llama's)"));
    expect(model.ffn_hidden == 0 || model.ffn_hidden == 4 * model.channels, "model.ffn_hidden",
           NumberText(model.ffn_hidden),
           absl::StrCat("0 or 4 x model.channels (", 4 * model.channels,
                        ") for model.family=gpt"));
    expect(model.tie_embeddings, "model.tie_embeddings", "false",
           "true for model.family=gpt (GPT-2's LM head is its token embedding)");
    expect(model.sliding_window == 0, "model.sliding_window", NumberText(model.sliding_window),
           "0 for model.family=gpt");
    expect(!model.qkv_bias, "model.qkv_bias", "true",
           "false for model.family=gpt (GPT-2 has biases on every projection already)");
    expect(!model.qk_norm, "model.qk_norm", "true",
           "false for model.family=gpt (Qwen3's per-head norms are llama's)");
    expect(model.rope.scaling == RopeScaling::kNone, "model.rope_scaling",
           OptionName(model.rope.scaling),
           "none for model.family=gpt (it has no rotary embedding)");
  } else {
    if (model.kv_heads >= 1 && model.heads >= 1) {
      expect(model.heads % model.kv_heads == 0, "model.heads", NumberText(model.heads),
             absl::StrCat("a multiple of model.kv_heads (", model.kv_heads, ")"));
    }
    expect(!(model.qk_norm && model.qkv_bias), "model.qk_norm", "true with model.qkv_bias",
           "one of them (Qwen3 has q/k norms and no biases, Qwen2 biases and no norms; no "
           "architecture has both, so such a model could not be exported)");
    if (model.head_dim > 0) {
      expect(model.head_dim % 2 == 0, "model.head_dim", NumberText(model.head_dim),
             "even (rotary embeddings turn pairs of a head's channels)");
    } else if (model.heads >= 1 && model.channels >= 1 && model.channels % model.heads == 0) {
      expect((model.channels / model.heads) % 2 == 0, "model.channels",
             NumberText(model.channels),
             absl::StrCat("an even head size model.channels / model.heads (now ",
                          model.channels / model.heads, ") for rotary embeddings"));
    }
  }

  const DataOptions& data = options.data;
  expect(data.val_fraction > 0 && data.val_fraction < 1, "data.val_fraction",
         NumberText(data.val_fraction), "a fraction in (0, 1)");

  const TrainOptions& train = options.train;
  at_least("train.steps", train.steps, 1);
  in_range("train.micro_batch", train.micro_batch, 1, 1 << 20);
  at_least("train.seq_len", train.seq_len, 1);
  if (train.seq_len >= 1) {
    expect(train.seq_len <= model.max_seq_len, "train.seq_len", NumberText(train.seq_len),
           absl::StrCat("<= model.max_seq_len (", model.max_seq_len, ")"));
  }
  if (model.rope.scaling == RopeScaling::kDynamic) {  // so every sequence stays within it
    expect(model.max_seq_len <= model.rope.original_max_seq_len, "model.max_seq_len",
           NumberText(model.max_seq_len),
           absl::StrCat("<= model.rope_original_max_seq_len (", model.rope.original_max_seq_len,
                        "): a dynamic rotary scaling turns by the default frequencies only "
                        "within it, and strata does not raise them beyond"));
  }
  if (model.sliding_window > 0) {
    expect(train.seq_len <= model.sliding_window, "train.seq_len", NumberText(train.seq_len),
           absl::StrCat("<= model.sliding_window (", model.sliding_window,
                        "): strata's attention is full causal, the same as the model's "
                        "sliding window only for sequences within it"));
  }
  in_range("train.grad_accum", train.grad_accum, 1, 65536);
  expect(train.lr > 0, "train.lr", NumberText(train.lr), "> 0");
  expect(train.min_lr_fraction >= 0 && train.min_lr_fraction <= 1, "train.min_lr_fraction",
         NumberText(train.min_lr_fraction), "a fraction in [0, 1]");
  at_least("train.warmup_steps", train.warmup_steps, 0);
  expect(train.weight_decay >= 0, "train.weight_decay", NumberText(train.weight_decay), ">= 0");
  expect(train.beta1 >= 0 && train.beta1 < 1, "train.beta1", NumberText(train.beta1),
         "a value in [0, 1)");
  expect(train.beta2 >= 0 && train.beta2 < 1, "train.beta2", NumberText(train.beta2),
         "a value in [0, 1)");
  expect(train.eps > 0, "train.eps", NumberText(train.eps), "> 0");
  expect(train.grad_clip >= 0, "train.grad_clip", NumberText(train.grad_clip),
         ">= 0 (0 disables clipping)");
  at_least("train.eval_every", train.eval_every, 0);
  in_range("train.eval_batches", train.eval_batches, 1, 1 << 20);
  at_least("train.log_every", train.log_every, 1);
  at_least("train.checkpoint_every", train.checkpoint_every, 0);
  at_least("train.checkpoint_keep", train.checkpoint_keep, 0);
  if (StatusOr<std::pair<int, int>> range = ParseStepRange(train.trace_steps); !range.ok()) {
    problems->push_back(std::string(range.status().message()));
  }
  if (train.checkpoint_every > 0 && train.checkpoint_dir.empty()) {
    problems->push_back("train.checkpoint_every is set but train.checkpoint_dir is empty: set "
                        "train.checkpoint_dir to a directory");
  }

  const LoraOptions& lora = options.lora;
  in_range("lora.rank", lora.rank, 0, 4096);
  expect(lora.alpha > 0, "lora.alpha", NumberText(lora.alpha), "> 0");
  expect(lora.dropout >= 0 && lora.dropout < 1, "lora.dropout", NumberText(lora.dropout),
         "a value in [0, 1)");

  const DeviceOptions& device = options.device;
  in_range("device.threads", device.threads, 0, 1024);

  const ZeroOptions& zero = options.zero;
  expect(zero.stage >= 0 && zero.stage <= 3, "zero.stage", NumberText(zero.stage),
         "0, 1, 2 or 3");
  expect(zero.world >= 1 && zero.world <= 64, "zero.world", NumberText(zero.world),
         "a rank count in [1, 64]");
  expect(zero.comm_timeout_s > 0, "zero.comm_timeout_s", NumberText(zero.comm_timeout_s),
         "> 0 seconds");

  // Which placements can run together: the rules live with the placement's resolution.
  for (std::string& problem : PlacementProblems(options)) problems->push_back(std::move(problem));
  const NvmeOptions& nvme = options.nvme;
  in_range("nvme.read_ahead_units", nvme.read_ahead_units, 1, 1024);
  in_range("nvme.optimizer_buffers", nvme.optimizer_buffers, 2, 1024);
  in_range("nvme.grad_buffers", nvme.grad_buffers, 2, 1024);
  expect(nvme.queue_depth >= 1 && nvme.queue_depth <= 4096, "nvme.queue_depth",
         NumberText(nvme.queue_depth), "a depth in [1, 4096]");
  expect(nvme.chunk_bytes >= 8192 && nvme.chunk_bytes % 8192 == 0, "nvme.chunk_bytes",
         SizeText(nvme.chunk_bytes), "a multiple of 8 KiB (8192 bytes)");
}

}  // namespace strata::option_keys
