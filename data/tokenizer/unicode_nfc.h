// Unicode NFC (canonical composition) of UTF-8 text, through ICU's Normalizer2: what a
// Hugging Face tokenizer.json's {"type": "NFC"} normalizer does before its added tokens
// are matched and its pre-tokenizer runs (Qwen2 / Qwen2.5). Internal to data/tokenizer.
// Thread-safety: stateless functions over ICU's shared, immutable NFC instance.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace strata {

// Whether `text` (valid UTF-8) is already in NFC. Error: ICU failed (its error name).
StatusOr<bool> IsNfc(std::string_view text);
// The NFC form of `text` (valid UTF-8). Error: ICU failed (its error name).
StatusOr<std::string> ToNfc(std::string_view text);

}  // namespace strata
