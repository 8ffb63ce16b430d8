// Fuzz target: a Hugging Face tokenizer.json (data/tokenizer/tokenizer.h,
// OpenHfTokenizerJson: the byte-level BPE model, its vocabulary and merges, added tokens,
// Split pre-tokenizers with their PCRE2 patterns, the NFC normalizer), and the special
// tokens a generation takes from it (models/hf/hf_special_tokens.h). A tokenizer that
// opens encodes a fixed text (ASCII, digits, runs of spaces, several scripts, an emoji) and
// decodes the ids back: its merges and patterns came from the input too.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer/tokenizer.h"
#include "fuzz/fuzz_scratch.h"
#include "models/hf/hf_special_tokens.h"

namespace {

constexpr char kText[] =
    "Hello, world! It's 2026:  tabs\tand\nnewlines, 12345 numbers; "
    "\xc3\xa9t\xc3\xa9 \xce\xb1\xce\xb2\xce\xb3 \xe6\x97\xa5\xe6\x9c\xac "
    "\xf0\x9f\x99\x82 <|endoftext|> e\xcc\x81";  // été αβγ 日本 🙂, e + combining acute

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::ResetProcessState();
  const std::string path = strata::fuzz::WriteScratchFile("tokenizer.json", data, size);
  (void)strata::TokenizerSpecialTokens({{path, "tokenizer.json"}});
  strata::StatusOr<std::unique_ptr<strata::Tokenizer>> tokenizer =
      strata::OpenHfTokenizerJson(path);
  if (!tokenizer.ok()) return 0;
  (void)(*tokenizer)->Describe();
  (void)(*tokenizer)->Fingerprint();
  strata::StatusOr<std::vector<uint32_t>> ids = (*tokenizer)->Encode(kText);
  if (!ids.ok()) return 0;
  for (uint32_t id : *ids) {
    if (id >= static_cast<uint32_t>((*tokenizer)->vocab_size())) __builtin_trap();
  }
  (void)(*tokenizer)->Decode(*ids);
  return 0;
}
