// Pre-tokenization regexes through PCRE2 (8-bit, UTF mode with Unicode properties for \w,
// \d and POSIX classes, JIT-compiled where the library supports it), and the UTF-8 check
// they need: text is validated once per Encode and then matched with PCRE2_NO_UTF_CHECK,
// so no call re-scans the subject. \s and \S mean Unicode's White_Space property, as in
// Python's `regex` (GPT-2's reference) and Oniguruma (Hugging Face's): PCRE2's own \s
// would also match U+180E. Letters and numbers are those of PCRE2's Unicode tables
// (Unicode 14 in PCRE2 10.42); characters assigned later may classify differently.
//
// Split follows Hugging Face's "Isolated" split behavior: every non-empty match and every
// non-empty stretch between matches is one piece, in order, so the pieces concatenate to
// the subject. An empty match consumes nothing: the character there becomes part of the
// stretch that follows.
//
// Thread-safety: a compiled Pcre2Regex is immutable; Split may run on many threads at once
// (each call has its own match data; the JIT stack is per thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "core/status.h"

struct pcre2_real_code_8;

namespace strata {

// The offset of the first byte that is not part of valid UTF-8 (overlong forms,
// surrogates and code points above U+10FFFF are invalid), or -1 when all of it is valid.
int64_t FindInvalidUtf8(std::string_view text);

class Pcre2Regex {
 public:
  // Compiles `pattern` (a regex, or when `literal`, a plain string to find). Errors
  // (kInvalidArgument) name `what` (e.g. "pre_tokenizer.pretokenizers[0].pattern.Regex"),
  // the pattern and PCRE2's message and offset.
  static StatusOr<Pcre2Regex> Compile(const std::string& pattern, bool literal,
                                      const std::string& what);

  Pcre2Regex(Pcre2Regex&&) noexcept = default;
  Pcre2Regex& operator=(Pcre2Regex&&) noexcept = default;

  // Calls visit(piece) for each piece of `subject` (see the top of the file). `subject`
  // must be valid UTF-8 (FindInvalidUtf8 == -1): it is not checked again. Errors: a match
  // failure such as a resource limit (kResourceExhausted / kInternal, naming the pattern
  // and offset).
  Status Split(std::string_view subject, absl::FunctionRef<void(std::string_view)> visit) const;

  const std::string& pattern() const { return pattern_; }
  bool jit() const { return jit_; }

 private:
  struct CodeDeleter {
    void operator()(pcre2_real_code_8* code) const;
  };
  Pcre2Regex() = default;

  std::unique_ptr<pcre2_real_code_8, CodeDeleter> code_;
  std::string pattern_;
  bool jit_ = false;
};

}  // namespace strata
