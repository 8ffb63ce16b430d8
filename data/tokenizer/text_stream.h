// Text of token ids as they come, for printing each new token at once (strata sample).
// Decoding each id on its own is wrong twice over: a character may span ids (byte-level
// BPE's bytes, SentencePiece's byte-fallback pieces <0xNN>), and SentencePiece drops the
// leading space of the first piece a decode sees. So TextStream decodes the ids after a
// short context (the prompt's last ids), hands out only the bytes no later id can change,
// and holds back the rest: a trailing incomplete UTF-8 sequence (byte-level BPE) and
// trailing U+FFFD characters (what SentencePiece makes of the bytes of a character not yet
// complete; a byte-fallback character shrinks when completed, 3 bytes of U+FFFD per byte
// becoming 2 bytes of "é"). Held bytes come out once completed, or with Finish.
//
// Invariants: what Add and Finish return, concatenated, is the decoding of the ids given
// after the context's own decoding (Decode(context + ids) less Decode(context)); bytes once
// returned are never taken back. Should a tokenizer rewrite text already returned (none of
// strata's does once the tail is held back), Add fails naming it rather than print twice.
// The work per id is bounded: the decoded window restarts from a few ids of context once
// nothing is held back.
// Thread-safety: one thread; the tokenizer must outlive the stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "core/status.h"
#include "data/tokenizer/tokenizer.h"

namespace strata {

class TextStream {
 public:
  // `context`: ids already shown (the prompt); its last few are decoded first, so that new
  // text reads as their continuation.
  TextStream(const Tokenizer& tokenizer, absl::Span<const uint32_t> context);

  // The bytes `id` makes final (often all of its text; empty while it only starts a
  // character). Errors: an id the tokenizer has no token for, a decoding that changed
  // text already returned.
  StatusOr<std::string> Add(uint32_t id);
  // Every byte still held back (an incomplete character at the very end); the stream is
  // then empty of held bytes.
  std::string Finish();

  // Ids of context the window restarts from; a window restarts once it is this many
  // ids past them.
  static constexpr size_t kContextIds = 8;
  static constexpr size_t kWindowIds = 64;

 private:
  // Decodes the window; its text after base_bytes_ into *text.
  Status DecodeWindow(std::string* text) const;

  const Tokenizer& tokenizer_;
  std::vector<uint32_t> window_;  // context ids, then the ids added since
  size_t context_ids_ = 0;        // of window_
  std::string base_;              // Decode(window_[0, context_ids_))
  std::string returned_;          // the window's new text already returned
  std::string held_;              // the window's new text held back
};

// The length of `text` without its tail that later bytes may change: an incomplete UTF-8
// sequence at its end, then any U+FFFD characters before that.
size_t FinalTextLength(std::string_view text);

}  // namespace strata
