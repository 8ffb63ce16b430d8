// Text to a token file (`strata tokenize`); see tokenize_file.h.
#include "data/tokenizer/tokenize_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/atomic_file.h"
#include "core/input_file.h"
#include "core/run_inputs.h"
#include "data/default_corpus.h"
#include "data/tokenizer/tokenizer.h"
#include "data/tokens.h"

namespace strata {
namespace {

}  // namespace

Status TokenizeTextFile(const std::string& input, const std::string& output,
                   const std::string& tokenizer_spec) {
  if (output.empty()) {
    return absl::InvalidArgumentError("tokenize: --out FILE is required (the token file to write)");
  }
  // The input is noted first, so that --out naming it (under any name) is refused.
  if (!input.empty()) RETURN_IF_ERROR(NoteRunInputPath(input, "the --in file"));
  RETURN_IF_ERROR(CheckWholeFileOutput(output, "tokenize: --out file"));
  ASSIGN_OR_RETURN(const std::unique_ptr<Tokenizer> tokenizer, OpenTokenizer(tokenizer_spec));
  std::string text_storage;
  std::string_view text = DefaultCorpus();
  const std::string source =
      input.empty() ? "the embedded default corpus" : absl::StrCat("'", input, "'");
  if (!input.empty()) {
    ASSIGN_OR_RETURN(text_storage, ReadInputFile(input, "tokenize: --in file", kNoInputLimit));
    text = text_storage;
  }
  const auto start = std::chrono::steady_clock::now();
  StatusOr<std::vector<uint32_t>> ids = tokenizer->Encode(text);
  if (!ids.ok()) {
    return Annotate(ids.status(),
                    absl::StrCat("tokenize: ", source, " with ", tokenizer->Describe()));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (ids->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenize: ", source, " gives no tokens (is it empty?)"));
  }
  RETURN_IF_ERROR(WriteTokenFile(output, *ids, tokenizer->vocab_size()));
  uint32_t max_id = 0;
  for (const uint32_t id : *ids) max_id = std::max(max_id, id);
  const int bytes_per_token = max_id < 65536 ? 2 : 4;  // as WriteTokenFile chooses
  std::printf(
      "tokenize: %s (%zu bytes) -> %zu tokens (%.2f bytes a token) with %s; wrote %s (strata "
      "token file, %d bytes a token, vocabulary %d); encoded in %.2f s (%.1f MB/s)\n",
      source.c_str(), text.size(), ids->size(), static_cast<double>(text.size()) / ids->size(),
      tokenizer->Describe().c_str(), output.c_str(), bytes_per_token, tokenizer->vocab_size(),
      seconds, seconds > 0 ? text.size() / seconds / 1e6 : 0.0);
  return absl::OkStatus();
}

}  // namespace strata
