// Pcre2Regex and FindInvalidUtf8; see pcre2_regex.h.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/tokenizer/pcre2_regex.h"

#include <pcre2.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

std::string Pcre2Message(int error_code) {
  PCRE2_UCHAR buffer[256];
  const int length = pcre2_get_error_message(error_code, buffer, sizeof(buffer));
  if (length < 0) return absl::StrCat("PCRE2 error ", error_code);
  return std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(length));
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

// The JIT's backtracking stack, one per thread, grown on demand up to 8 MiB: PCRE2's
// default (32 KiB on the machine stack) can be too small for a long run of whitespace
// under `\s+(?!\S)`, and a per-call stack would cost an mmap per Split.
struct JitStack {
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* context = nullptr;
  JitStack() {
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    if (stack != nullptr && context != nullptr) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~JitStack() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
  JitStack(const JitStack&) = delete;
  JitStack& operator=(const JitStack&) = delete;
};

pcre2_match_context* ThreadMatchContext() {
  thread_local JitStack jit_stack;
  return jit_stack.context;
}

// Bytes of the UTF-8 character that starts with `lead` (valid text only).
inline size_t Utf8Length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

inline bool IsContinuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

// `pattern` with \s and \S spelled \p{White_Space} and \P{White_Space}, inside classes too
// (PCRE2 allows both there). Text between \Q and \E is left as it is.
std::string WithWhiteSpaceProperty(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  bool quoted = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out.push_back(pattern[i]);
      continue;
    }
    const char next = pattern[++i];
    if (quoted) {
      quoted = next != 'E';
      out.push_back('\\');
      out.push_back(next);
    } else if (next == 's') {
      out += "\\p{White_Space}";
    } else if (next == 'S') {
      out += "\\P{White_Space}";
    } else {
      quoted = next == 'Q';
      out.push_back('\\');
      out.push_back(next);
    }
  }
  return out;
}

}  // namespace

int64_t FindInvalidUtf8(std::string_view text) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t size = text.size();
  size_t i = 0;
  while (i < size) {
    // ASCII runs eight bytes at a time (most training text).
    if (i + 8 <= size) {
      uint64_t word;
      std::memcpy(&word, bytes + i, 8);
      if ((word & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned char lead = bytes[i];
    if (lead < 0x80) {
      ++i;
      continue;
    }
    size_t length;
    unsigned char second_min = 0x80, second_max = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) second_min = 0xA0;  // overlong
      if (lead == 0xED) second_max = 0x9F;  // surrogates U+D800..U+DFFF
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) second_min = 0x90;  // overlong
      if (lead == 0xF4) second_max = 0x8F;  // above U+10FFFF
    } else {
      return static_cast<int64_t>(i);  // a continuation byte, 0xC0/0xC1 or 0xF5..0xFF
    }
    if (i + length > size) return static_cast<int64_t>(i);
    if (bytes[i + 1] < second_min || bytes[i + 1] > second_max) return static_cast<int64_t>(i);
    for (size_t k = 2; k < length; ++k) {
      if (!IsContinuation(bytes[i + k])) return static_cast<int64_t>(i);
    }
    i += length;
  }
  return -1;
}

void Pcre2Regex::CodeDeleter::operator()(pcre2_real_code_8* code) const { pcre2_code_free(code); }

StatusOr<Pcre2Regex> Pcre2Regex::Compile(const std::string& pattern, bool literal,
                                         const std::string& what) {
  // UCP: \d, \w and [:classes:] follow Unicode properties, as in Python's `regex` and
  // Oniguruma, which GPT-2's and Hugging Face's references use. \s is rewritten to the
  // White_Space property: PCRE2's own \s also matches U+180E (Mongolian vowel separator,
  // whitespace before Unicode 6.3), which both references treat as a non-space.
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK;
  if (literal) options = PCRE2_UTF | PCRE2_LITERAL;
  if (FindInvalidUtf8(pattern) >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the pattern is not valid UTF-8"));
  }
  const std::string compiled = literal ? pattern : WithWhiteSpaceProperty(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                                   options, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": PCRE2 cannot compile '", pattern, "': ", Pcre2Message(error_code),
                     " at pattern offset ", error_offset,
                     compiled == pattern
                         ? ""
                         : absl::StrCat(" (of '", compiled, "', with \\s as \\p{White_Space})")));
  }
  Pcre2Regex regex;
  regex.code_.reset(code);
  regex.pattern_ = pattern;
  // Without JIT support (a build of PCRE2 without it, or a system that forbids executable
  // memory) the interpreter gives the same matches, slower.
  regex.jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return regex;
}

Status Pcre2Regex::Split(std::string_view subject,
                         absl::FunctionRef<void(std::string_view)> visit) const {
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> match_data(
      pcre2_match_data_create_from_pattern(code_.get(), nullptr));
  if (match_data == nullptr) return absl::ResourceExhaustedError("PCRE2: out of memory");
  pcre2_match_context* context = ThreadMatchContext();
  const auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const size_t size = subject.size();
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data.get());
  size_t start = 0;    // where the next match attempt begins
  size_t stretch = 0;  // where the unmatched stretch before the next match begins
  while (start < size) {
    const int rc =
        jit_ ? pcre2_jit_match(code_.get(), data, size, start, 0, match_data.get(), context)
             : pcre2_match(code_.get(), data, size, start, PCRE2_NO_UTF_CHECK, match_data.get(),
                           context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      const auto code = (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_MATCHLIMIT ||
                         rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT ||
                         rc == PCRE2_ERROR_NOMEMORY)
                            ? absl::StatusCode::kResourceExhausted
                            : absl::StatusCode::kInternal;
      return Status(code, absl::StrCat("PCRE2 matching '", pattern_, "' at text offset ", start,
                                       ": ", Pcre2Message(rc)));
    }
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end <= begin) {
      // An empty match: the character there joins the stretch; try after it.
      if (begin >= size) break;
      start = begin + Utf8Length(data[begin]);
      continue;
    }
    if (begin > stretch) visit(subject.substr(stretch, begin - stretch));
    visit(subject.substr(begin, end - begin));
    start = stretch = end;
  }
  if (stretch < size) visit(subject.substr(stretch));
  return absl::OkStatus();
}

}  // namespace strata
