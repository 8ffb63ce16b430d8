// Fuzz target: a SentencePiece model file (data/tokenizer/tokenizer.h,
// OpenSentencePieceTokenizer): strata's reading of the file and whatever it checks before
// handing the bytes to libsentencepiece, then the library's loading (Debian's build, not
// instrumented: libFuzzer's coverage counts strata's code only, and ASan sees the
// library's heap through its allocator). A model that loads encodes a fixed text and
// decodes the ids back.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer/tokenizer.h"
#include "fuzz/fuzz_scratch.h"

namespace {

constexpr char kText[] =
    "It is a truth universally acknowledged, 1811.  Two  spaces\tand a tab; "
    "\xc3\xa9t\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82";  // été 日本 🙂

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::ResetProcessState();
  const std::string path = strata::fuzz::WriteScratchFile("tokenizer.model", data, size);
  strata::StatusOr<std::unique_ptr<strata::Tokenizer>> tokenizer =
      strata::OpenSentencePieceTokenizer(path);
  if (!tokenizer.ok()) return 0;
  (void)(*tokenizer)->Describe();
  strata::StatusOr<std::vector<uint32_t>> ids = (*tokenizer)->Encode(kText);
  if (!ids.ok()) return 0;
  (void)(*tokenizer)->Decode(*ids);
  return 0;
}
