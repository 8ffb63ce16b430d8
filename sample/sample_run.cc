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
#include "data/tokenizer/text_stream.h"
#include "data/tokenizer/tokenizer.h"
#include "models/hf/hf_model.h"
#include "data/tokenizer/training_data.h"
#include "sample/sample.h"
#include "sample/sample_run.h"

namespace strata {
namespace {

// The model `from` holds (its vocabulary), from config.json or checkpoint.json alone.
StatusOr<ModelOptions> SourceModelOptions(const std::string& from) {
  if (absl::StartsWith(from, "hf:")) return ReadHfConfig(from.substr(3));
  ASSIGN_OR_RETURN(const OpenedCheckpoint checkpoint, OpenCheckpoint(from));
  return checkpoint.model;
}

// Which ids of a model of `vocab` ids may be drawn so that `tokenizer` decodes each: 0 for
// all of them, else a limit below vocab. Refused before any work: a tokenizer with more
// ids than the model (not the model's; bytes excepted, whose ids a larger model has), bytes
// guessed for a model of more than 256 ids (its ids are not bytes), an id below the limit
// that the tokenizer has no token for. --print_ids draws every id and decodes none.
StatusOr<int> DrawableIds(const Tokenizer& tokenizer, const std::string& spec, bool guessed,
                          int vocab, bool print_ids) {
  if (print_ids) return 0;
  const int ids = tokenizer.vocab_size();
  if (spec != "bytes" && ids > vocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample: the tokenizer (", tokenizer.Describe(), ") has ", ids,
                     " ids, more than the model's vocabulary (", vocab,
                     "): give the model's own with --tokenizer"));
  }
  if (guessed && vocab > ids) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sample: the model has ", vocab, " ids but no tokenizer was found (not given, not "
        "recorded by the checkpoint, none in the directory), and bytes decode only ids 0..",
        ids - 1, ": give the model's tokenizer with --tokenizer, or --print_ids to print "
        "the ids"));
  }
  const int limit = std::min(ids, vocab);
  for (int id = 0; id < limit; ++id) {
    const uint32_t one = static_cast<uint32_t>(id);
    if (StatusOr<std::string> text = tokenizer.Decode({&one, 1}); !text.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sample: the model may draw id ", id, ", which the tokenizer (", tokenizer.Describe(),
          ") has no token for: give the model's own with --tokenizer, or --print_ids to "
          "print the ids"));
    }
  }
  return limit < vocab ? limit : 0;
}

}  // namespace

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
  // Bytes chosen for want of a tokenizer (none given, recorded or in the directory).
  const bool guessed = args.tokenizer.empty() && recorded.empty() && spec == "bytes";
  ASSIGN_OR_RETURN(const ModelOptions model, SourceModelOptions(args.from));
  ASSIGN_OR_RETURN(sampling.drawable_ids,
                   DrawableIds(*tokenizer, spec, guessed, model.vocab, args.print_ids));
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] >= model.vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("sample: the prompt's token ", i, " is id ", prompt[i], " (",
                       tokenizer->Describe(), "), outside the model's vocabulary of ",
                       model.vocab));
    }
  }
  ASSIGN_OR_RETURN(auto generator, Generator::Create(args.from, options, max_len));
  std::fprintf(stderr, "sample: %s; %s\n", generator->Describe().c_str(),
               tokenizer->Describe().c_str());
  if (sampling.drawable_ids > 0) {
    std::fprintf(stderr,
                 "sample: the tokenizer has %d ids, the model %d: only ids below %d are drawn "
                 "(%d..%d have no text)\n",
                 sampling.drawable_ids, model.vocab, sampling.drawable_ids,
                 sampling.drawable_ids, model.vocab - 1);
  }
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
  if (!args.print_ids) std::fwrite(args.prompt.data(), 1, args.prompt.size(), stdout);
  // Tokens decode to bytes and a character may span tokens: the stream hands out only the
  // bytes no later token can change, as the continuation of the prompt's last tokens.
  TextStream text(*tokenizer, encoded);
  bool first = true;
  RETURN_IF_ERROR(Generate(*generator, prompt, args.tokens, sampling, rng,
                           [&](int32_t next, const std::vector<float>&, int) -> Status {
                             if (first) prefilled = std::chrono::steady_clock::now();
                             if (args.print_ids) {
                               std::fprintf(stdout, first ? "%d" : " %d", next);
                             } else {
                               ASSIGN_OR_RETURN(const std::string bytes,
                                                text.Add(static_cast<uint32_t>(next)));
                               std::fwrite(bytes.data(), 1, bytes.size(), stdout);
                             }
                             first = false;
                             std::fflush(stdout);
                             return absl::OkStatus();
                           }));
  if (!args.print_ids) {
    const std::string rest = text.Finish();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
  }
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
