// The token cache; see token_cache.h.
#include "data/tokenizer/token_cache.h"

#include <sys/stat.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/file_kind.h"
#include "data/tokens.h"

namespace strata {
namespace {

// mkdir -p: every missing directory of `path`.
Status MakeDirectories(const std::string& path) {
  for (size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    if (!prefix.empty() && ::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoError(errno, absl::StrCat("creating the token cache directory '", prefix, "'"));
    }
    if (slash == std::string::npos) break;
  }
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) {
    return ErrnoError(errno, absl::StrCat("token cache directory '", path, "'"));
  }
  if (!S_ISDIR(info.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "token cache directory '", path, "' is ", FileKindName(info.st_mode), ", not a directory"));
  }
  return absl::OkStatus();
}

}  // namespace

StatusOr<std::string> DefaultTokenCacheDir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return absl::StrCat(xdg, "/strata/tokens");
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] != '\0') return absl::StrCat(home, "/.cache/strata/tokens");
  return absl::FailedPreconditionError(
      "no token cache directory: neither XDG_CACHE_HOME nor HOME is set");
}

std::string TokenCacheFileName(std::string_view text, const Tokenizer& tokenizer) {
  const XXH128_hash_t text_hash = XXH3_128bits(text.data(), text.size());
  const std::string fingerprint = tokenizer.Fingerprint();
  const uint64_t tokenizer_hash = XXH3_64bits(fingerprint.data(), fingerprint.size());
  return absl::StrFormat("%016x%016x-%016x.tokens", text_hash.high64, text_hash.low64,
                         tokenizer_hash);
}

StatusOr<std::string> CachedTokenFile(const std::string& text_path, std::string_view text,
                                      const Tokenizer& tokenizer, const std::string& cache_dir) {
  const std::string source =
      text_path.empty() ? "the embedded default corpus" : absl::StrCat("'", text_path, "'");
  const std::string context = absl::StrCat("tokenizing ", source, " with ", tokenizer.Describe(),
                                           " into the cache ", cache_dir);
  if (cache_dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": no cache directory given"));
  }
  const std::string path = absl::StrCat(cache_dir, "/", TokenCacheFileName(text, tokenizer));
  struct stat info;
  if (::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode)) return path;
  RETURN_IF_ERROR(Annotate(MakeDirectories(cache_dir), context));
  StatusOr<std::vector<uint32_t>> ids = tokenizer.Encode(text);
  if (!ids.ok()) return Annotate(ids.status(), context);
  RETURN_IF_ERROR(Annotate(WriteTokenFile(path, *ids, tokenizer.vocab_size()), context));
  return path;
}

}  // namespace strata
