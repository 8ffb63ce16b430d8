// `strata sample`: see sample_run.h and sample.h.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "config/options_parse.h"
#include "data/tokenizer/tokenizer.h"
#include "data/tokenizer/training_data.h"
#include "sample/sample.h"
#include "sample/sample_run.h"

namespace strata {

Status RunSample(const SampleArgs& args) {
  SamplingOptions sampling{args.temperature, args.top_k, args.seed};
  RETURN_IF_ERROR(ValidateSampling(sampling));
  if (args.tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("sample: --tokens ", args.tokens,
                                                   ": expected >= 1"));
  }
  if (args.prompt.empty()) {
    return absl::InvalidArgumentError("sample: --prompt is empty: give the text to continue");
  }
  ASSIGN_OR_RETURN(const Options options, ParseOptions(args.config_path, args.sets));
  // The tokenizer: --tokenizer, else the one the checkpoint's training used, else a Hugging
  // Face directory's own (a LoRA checkpoint's base's), else bytes.
  std::string spec = args.tokenizer, recorded;
  if (spec.empty()) {
    Options with_source = options;
    with_source.model.from = absl::StartsWith(args.from, "hf:") ? args.from : "";
    if (with_source.model.from.empty()) {
      StatusOr<OpenedCheckpoint> checkpoint = OpenCheckpoint(args.from);
      if (checkpoint.ok()) {
        // Its own copy of the tokenizer's files where it holds one (checked), else the spec.
        StatusOr<std::string> own = CheckpointTokenizer(*checkpoint);
        if (!own.ok()) {
          return Status(own.status().code(), absl::StrCat("sample: ", own.status().message(),
                                                          "; give a tokenizer with --tokenizer"));
        }
        recorded = *own;
        if (checkpoint->lora.enabled()) with_source.model.from = checkpoint->base.from;
      }
    }
    spec = recorded.empty() ? ResolvedTokenizerSpec(with_source) : recorded;
  }
  StatusOr<std::unique_ptr<Tokenizer>> opened = OpenTokenizer(spec);
  if (!opened.ok() && !recorded.empty()) {
    return Status(opened.status().code(),
                  absl::StrCat("sample: the tokenizer the checkpoint was trained with (", recorded,
                               "): ", opened.status().message(), "; give one with --tokenizer"));
  }
  RETURN_IF_ERROR(opened.status());
  const std::unique_ptr<Tokenizer> tokenizer = std::move(*opened);
  ASSIGN_OR_RETURN(const std::vector<uint32_t> encoded, tokenizer->Encode(args.prompt));
  if (encoded.empty()) return absl::InvalidArgumentError("sample: the prompt gives no tokens");
  const std::vector<int32_t> prompt(encoded.begin(), encoded.end());
  // The cache: the whole text where it fits the model's positions, else those positions
  // (the context then slides: Generate).
  ASSIGN_OR_RETURN(const int limit, PositionLimit(args.from));
  const int64_t wanted = static_cast<int64_t>(prompt.size()) + args.tokens;
  const int max_len = static_cast<int>(std::min<int64_t>(wanted, limit));
  ASSIGN_OR_RETURN(auto generator, Generator::Create(args.from, options, max_len));
  // A tokenizer larger than the vocabulary is not the model's; bytes (the fallback of a
  // model without a tokenizer file) is, where the prompt's bytes are ids of the model.
  const int vocab = generator->model_options().vocab;
  if (spec != "bytes" && tokenizer->vocab_size() > vocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample: the tokenizer (", tokenizer->Describe(), ") has ",
                     tokenizer->vocab_size(), " ids, more than the model's vocabulary (", vocab,
                     "): give the model's own with --tokenizer"));
  }
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("sample: the prompt's token ", i, " is id ", prompt[i], " (",
                       tokenizer->Describe(), "), outside the model's vocabulary of ", vocab));
    }
  }
  std::fprintf(stderr, "sample: %s; %s\n", generator->Describe().c_str(),
               tokenizer->Describe().c_str());
  if (wanted > limit) {
    std::fprintf(stderr,
                 "sample: %lld positions (prompt + new tokens) exceed the model's %d: the "
                 "context slides (each time it is full, the newest %d tokens again from "
                 "position 0)\n",
                 static_cast<long long>(wanted), limit, std::max(1, max_len / 2));
  }
  std::mt19937_64 rng(args.seed);
  const auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point prefilled;
  std::fwrite(args.prompt.data(), 1, args.prompt.size(), stdout);
  // Tokens decode to bytes; a character may span tokens, so the text printed is always the
  // decoding of everything so far, and only its new bytes are written.
  std::vector<uint32_t> generated_ids;
  size_t printed = 0;
  RETURN_IF_ERROR(Generate(*generator, prompt, args.tokens, sampling, rng,
                           [&](int32_t next, const std::vector<float>&, int) -> Status {
                             if (generated_ids.empty()) {
                               prefilled = std::chrono::steady_clock::now();
                             }
                             generated_ids.push_back(static_cast<uint32_t>(next));
                             ASSIGN_OR_RETURN(const std::string text,
                                              tokenizer->Decode(generated_ids));
                             std::fwrite(text.data() + printed, 1, text.size() - printed, stdout);
                             printed = text.size();
                             std::fflush(stdout);
                             return absl::OkStatus();
                           }));
  std::fputc('\n', stdout);
  std::fflush(stdout);  // before the rate on stderr
  const auto done = std::chrono::steady_clock::now();
  const double prefill_s = std::chrono::duration<double>(prefilled - start).count();
  const double decode_s = std::chrono::duration<double>(done - prefilled).count();
  // The first token is drawn from the prompt's logits: the rate counts the other ones.
  const int decoded = args.tokens - 1;
  std::fprintf(stderr, "sample: prompt %zu tokens in %.1f ms, %d new tokens at %.1f tokens/s\n",
               prompt.size(), prefill_s * 1e3, args.tokens,
               decode_s > 0 && decoded > 0 ? decoded / decode_s : 0.0);
  return absl::OkStatus();
}

}  // namespace strata
