// Fuzz target: a token file or text (data/tokens.h, LoadTokenFile with data.format=auto):
// format detection by content (llm.c GPT-2 and Llama 3 token files, strata's own, text, a
// near miss of a magic or an llm.c model's magic), the header's fields, the count against
// the file's size, every id against the vocabulary; then the train/validation split. The
// vocabulary is 50304 (GPT-2's padded), so both ids that fit and ids that do not occur.
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/tokens.h"
#include "fuzz/fuzz_scratch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::ResetProcessState();
  const std::string path = strata::fuzz::WriteScratchFile("tokens.bin", data, size);
  strata::StatusOr<strata::TokenDataset> dataset = strata::LoadTokenFile(path, 50304);
  if (!dataset.ok()) return 0;
  if (dataset->num_tokens() < 1) __builtin_trap();  // a loaded dataset is never empty
  (void)strata::SplitTokens(*dataset, 0.1, 8);
  return 0;
}
