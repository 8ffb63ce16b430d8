// TextStream; see text_stream.h.
#include "data/tokenizer/text_stream.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace strata {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

}  // namespace

size_t FinalTextLength(std::string_view text) {
  size_t n = text.size();
  // An incomplete sequence at the end: a lead byte followed by fewer continuation bytes
  // than it announces.
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    const auto byte = static_cast<unsigned char>(text[n - back]);
    if ((byte & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t length = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1;
    if (length > back) n -= back;
    break;
  }
  while (n >= kReplacement.size() &&
         text.substr(n - kReplacement.size(), kReplacement.size()) == kReplacement) {
    n -= kReplacement.size();
  }
  return n;
}

TextStream::TextStream(const Tokenizer& tokenizer, absl::Span<const uint32_t> context)
    : tokenizer_(tokenizer) {
  const size_t keep = std::min(context.size(), kContextIds);
  window_.assign(context.end() - keep, context.end());
  context_ids_ = keep;
}

Status TextStream::DecodeWindow(std::string* text) const {
  ASSIGN_OR_RETURN(*text, tokenizer_.Decode(window_));
  if (!absl::StartsWith(*text, base_)) {
    return absl::InternalError(absl::StrCat(
        "sample: ", tokenizer_.Describe(), " decodes the ids after the context so that the "
        "context's own text changes; the new text cannot be printed as it comes"));
  }
  text->erase(0, base_.size());
  return absl::OkStatus();
}

StatusOr<std::string> TextStream::Add(uint32_t id) {
  if (window_.size() == context_ids_ && returned_.empty() && held_.empty()) {
    // The context's own text (first use, or a restarted window).
    ASSIGN_OR_RETURN(base_, tokenizer_.Decode(absl::MakeConstSpan(window_.data(), context_ids_)));
  }
  window_.push_back(id);
  std::string text;
  RETURN_IF_ERROR(DecodeWindow(&text));
  if (!absl::StartsWith(text, returned_)) {
    return absl::InternalError(absl::StrCat(
        "sample: ", tokenizer_.Describe(), " decodes id ", id,
        " so that text already printed changes; strata prints each byte once"));
  }
  const size_t final_length = std::max(FinalTextLength(text), returned_.size());
  std::string out = text.substr(returned_.size(), final_length - returned_.size());
  returned_.append(out);
  held_ = text.substr(final_length);
  // Nothing held back: restart the window from its last ids, so a long generation does not
  // decode ever more ids per token.
  if (held_.empty() && window_.size() - context_ids_ >= kWindowIds) {
    window_.erase(window_.begin(), window_.end() - kContextIds);
    context_ids_ = window_.size();
    returned_.clear();
  }
  return out;
}

std::string TextStream::Finish() {
  std::string out = std::move(held_);
  returned_.append(out);
  held_.clear();
  return out;
}

}  // namespace strata
