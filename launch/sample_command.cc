// `strata sample`: see commands.h and sample.h.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "launch/commands.h"
#include "launch/options_parse.h"
#include "launch/sample.h"

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
  // Byte-level text: every byte of the prompt is one token.
  std::vector<int32_t> prompt(args.prompt.begin(), args.prompt.end());
  for (int32_t& id : prompt) id = static_cast<unsigned char>(id);
  const int max_len = static_cast<int>(prompt.size()) + args.tokens;
  ASSIGN_OR_RETURN(auto generator, Generator::Create(args.from, options, max_len));
  if (generator->model_options().vocab < 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sample: the model's vocabulary (", generator->model_options().vocab,
        ") is smaller than the byte-level tokenizer's 256"));
  }
  std::fprintf(stderr, "sample: %s\n", generator->Describe().c_str());
  std::mt19937_64 rng(args.seed);
  const auto start = std::chrono::steady_clock::now();
  StatusOr<std::vector<float>> logits;
  for (int32_t id : prompt) {
    logits = generator->Feed(id);
    RETURN_IF_ERROR(logits.status());
  }
  const auto prefilled = std::chrono::steady_clock::now();
  std::fwrite(args.prompt.data(), 1, args.prompt.size(), stdout);
  int generated = 0;
  for (; generated < args.tokens; ++generated) {
    const int32_t next = DrawToken(*logits, sampling, rng);
    const char byte = static_cast<char>(next < 256 ? next : '?');
    std::fputc(byte, stdout);
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
