// Text generation (`strata sample`): a model's weights from a checkpoint or a Hugging Face
// directory, placed whole on the device in the compute dtype, run with a KV cache
// (Model::PrepareDecode / DecodeStep): the prompt prefilled in batches of up to
// kPrefillRows tokens (each matrix read once per batch, not once per token), then each new
// token one row of every matrix and attention over the cached keys; the next token drawn
// from the logits
// (temperature, top-k, a seeded generator: the same seed gives the same text). Past the
// positions a model has (its max_seq_len, a Mistral's sliding window), the context slides
// (Generate): the cache restarts from the newest half of the sequence, re-encoded at
// positions from 0, as nanoGPT crops its context to the block size.
// A LoRA checkpoint runs unmerged: its base made again from where training took it
// (interop/export_weights.h LoraBaseReader), refused when it no longer hashes as it did,
// and the adapters applied in every forward as in training.
// Thread-safety: a Generator is driven by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "device/memory.h"
#include "core/options.h"
#include "runtime/backend.h"
#include "runtime/model.h"

namespace strata {

// A model ready to generate: weights on the device, an empty KV cache.
class Generator {
 public:
  // `source`: a checkpoint (step-<k> or a checkpoint_dir: its newest; a LoRA checkpoint
  // with its base) or "hf:DIR". The model's shape comes from the source; `options` gives
  // the backend (device.*) and train.dtype (the compute dtype). `max_len`: positions the
  // cache holds (<= the model's max_seq_len).
  // `prefill_rows`: the most tokens one DecodeStep runs (1: one at a time).
  static constexpr int kPrefillRows = 1024;
  static StatusOr<std::unique_ptr<Generator>> Create(const std::string& source,
                                                     const Options& options, int max_len,
                                                     int prefill_rows = kPrefillRows);
  ~Generator();

  // Runs `tokens` at the next positions, in batches of up to prefill_rows; returns the
  // next token's logits [vocab] in fp32 (those after the last of them).
  StatusOr<std::vector<float>> Prefill(absl::Span<const int32_t> tokens);
  // Runs `token` at the next position (Prefill of one).
  StatusOr<std::vector<float>> Feed(int32_t token) { return Prefill({&token, 1}); }
  // Empties the cache: the next Feed is at position 0 (older rows are overwritten as it
  // fills again, never read).
  void Restart() { position_ = 0; }
  int position() const { return position_; }
  int max_len() const { return max_len_; }
  const ModelOptions& model_options() const { return model_options_; }  // resolved
  const Model& model() const { return *model_; }
  std::string Describe() const;

 private:
  Generator() = default;
  ModelOptions model_options_;
  Backend backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Stream> stream_;
  std::vector<Buffer> params_;
  Buffer token_, logits_f32_;
  StepContext ctx_;
  int position_ = 0, max_len_ = 0, prefill_rows_ = 1;
  std::string lora_;  // a LoRA checkpoint's adapters and base, for Describe; else ""
};

// The most positions a Generator of `source` (as Create takes it) may hold: the model's
// max_seq_len, or its sliding window where that is smaller.
StatusOr<int> PositionLimit(const std::string& source);

// How the next token is drawn from logits: temperature 0 = the most likely (greedy);
// top_k 0 = every token, else the k most likely, renormalised.
struct SamplingOptions {
  float temperature = 1.0f;
  int top_k = 0;
  uint64_t seed = 1;
  // > 0: only ids below it are drawn (a tokenizer with fewer ids than the model's
  // vocabulary: Qwen2's padded rows, a model trained on bytes with a larger vocabulary);
  // 0: every id of the logits.
  int drawable_ids = 0;
};
Status ValidateSampling(const SamplingOptions& sampling);
// One draw from `logits` with `rng` (deterministic for a seed).
int32_t DrawToken(const std::vector<float>& logits, const SamplingOptions& sampling,
                  std::mt19937_64& rng);

// What Generate tells its caller of each new token: the token, the logits it was drawn
// from, and how many of the newest tokens those logits saw (the generator's context).
using TokenSink =
    std::function<Status(int32_t token, const std::vector<float>& logits, int context)>;
// Draws `count` tokens after `prompt` with `generator` (fresh: position 0), each handed to
// `sink` as it is drawn. The prompt is prefilled (Generator::Prefill), each new token fed
// on its own. A prompt longer than the cache (generator.max_len()) is continued from its
// newest max_len tokens; when the cache is full and a token must be fed, the cache
// restarts with the newest max_len / 2 tokens prefilled (at least one; the token fed among
// them), so the logits of each draw are always those of the newest `context` tokens run
// from position 0.
Status Generate(Generator& generator, const std::vector<int32_t>& prompt, int count,
                const SamplingOptions& sampling, std::mt19937_64& rng, const TokenSink& sink);

}  // namespace strata
