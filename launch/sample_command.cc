// `strata sample`: see commands.h and sample.h.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "launch/checkpoint.h"
#include "launch/commands.h"
#include "launch/options_parse.h"
#include "absl/strings/match.h"
#include "data/tokenizer/tokenizer.h"
#include "launch/sample.h"
#include "launch/training_data.h"

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
  // The tokenizer: --tokenizer, else a Hugging Face directory's own, else bytes.
  std::string spec = args.tokenizer;
  if (spec.empty()) {
    Options with_source = options;
    with_source.model.from = absl::StartsWith(args.from, "hf:") ? args.from : "";
    // A LoRA checkpoint's text is its base's: a Hugging Face base's tokenizer.
    if (with_source.model.from.empty()) {
      StatusOr<OpenedCheckpoint> checkpoint = OpenCheckpoint(args.from);
      if (checkpoint.ok() && checkpoint->lora.rank > 0) {
        with_source.model.from = checkpoint->base.from;
      }
    }
    spec = ResolvedTokenizerSpec(with_source);
  }
  ASSIGN_OR_RETURN(const std::unique_ptr<Tokenizer> tokenizer, OpenTokenizer(spec));
  ASSIGN_OR_RETURN(const std::vector<uint32_t> encoded, tokenizer->Encode(args.prompt));
  if (encoded.empty()) return absl::InvalidArgumentError("sample: the prompt gives no tokens");
  const std::vector<int32_t> prompt(encoded.begin(), encoded.end());
  const int max_len = static_cast<int>(prompt.size()) + args.tokens;
  ASSIGN_OR_RETURN(auto generator, Generator::Create(args.from, options, max_len));
  if (tokenizer->vocab_size() > generator->model_options().vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sample: the tokenizer (", tokenizer->Describe(), ") has ", tokenizer->vocab_size(),
        " ids, more than the model's vocabulary (", generator->model_options().vocab,
        "): give the model's own with --tokenizer"));
  }
  std::fprintf(stderr, "sample: %s; %s\n", generator->Describe().c_str(),
               tokenizer->Describe().c_str());
  std::mt19937_64 rng(args.seed);
  const auto start = std::chrono::steady_clock::now();
  StatusOr<std::vector<float>> logits;
  for (int32_t id : prompt) {
    logits = generator->Feed(id);
    RETURN_IF_ERROR(logits.status());
  }
  const auto prefilled = std::chrono::steady_clock::now();
  std::fwrite(args.prompt.data(), 1, args.prompt.size(), stdout);
  // Tokens decode to bytes; a character may span tokens, so the text printed is always the
  // decoding of everything so far, and only its new bytes are written.
  std::vector<uint32_t> generated_ids;
  size_t printed = 0;
  for (int generated = 0; generated < args.tokens; ++generated) {
    const int32_t next = DrawToken(*logits, sampling, rng);
    generated_ids.push_back(static_cast<uint32_t>(next));
    ASSIGN_OR_RETURN(const std::string text, tokenizer->Decode(generated_ids));
    std::fwrite(text.data() + printed, 1, text.size() - printed, stdout);
    printed = text.size();
    std::fflush(stdout);
    if (generated + 1 == args.tokens) break;
    logits = generator->Feed(next);
    RETURN_IF_ERROR(logits.status());
  }
  std::fputc('\n', stdout);
  const auto done = std::chrono::steady_clock::now();
  const double prefill_s = std::chrono::duration<double>(prefilled - start).count();
  const double decode_s = std::chrono::duration<double>(done - prefilled).count();
  std::fprintf(stderr, "sample: prompt %zu tokens in %.1f ms, %d new tokens at %.1f tokens/s\n",
               prompt.size(), prefill_s * 1e3, args.tokens,
               decode_s > 0 ? args.tokens / decode_s : 0.0);
  return absl::OkStatus();
}

}  // namespace strata
