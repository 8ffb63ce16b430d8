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
#include "core/file_kind.h"
#include "core/files.h"
#include "data/default_corpus.h"
#include "data/tokenizer/tokenizer.h"
#include "data/tokens.h"

namespace strata {
namespace {

StatusOr<std::string> ReadText(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    return ErrnoError(errno, absl::StrCat("tokenize: --in '", path, "'"));
  }
  if (!S_ISREG(info.st_mode)) {  // a FIFO or a device could block or never end
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenize: --in '", path, "' is ", FileKindName(info.st_mode), ", not a regular file"));
  }
  StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return Annotate(text.status(), "tokenize: --in");
  return text;
}

// The two paths name one file (an existing output that is the input).
bool SameFile(const std::string& a, const std::string& b) {
  struct stat first, second;
  return ::stat(a.c_str(), &first) == 0 && ::stat(b.c_str(), &second) == 0 &&
         first.st_dev == second.st_dev && first.st_ino == second.st_ino;
}

}  // namespace

Status TokenizeTextFile(const std::string& input, const std::string& output,
                   const std::string& tokenizer_spec) {
  if (output.empty()) {
    return absl::InvalidArgumentError("tokenize: --out FILE is required (the token file to write)");
  }
  if (!input.empty() && SameFile(input, output)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenize: --out '", output, "' is the input file; writing it would replace the text"));
  }
  ASSIGN_OR_RETURN(const std::unique_ptr<Tokenizer> tokenizer, OpenTokenizer(tokenizer_spec));
  std::string text_storage;
  std::string_view text = DefaultCorpus();
  const std::string source =
      input.empty() ? "the embedded default corpus" : absl::StrCat("'", input, "'");
  if (!input.empty()) {
    ASSIGN_OR_RETURN(text_storage, ReadText(input));
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
