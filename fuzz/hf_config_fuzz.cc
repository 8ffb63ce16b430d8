// Fuzz target: a Hugging Face model directory's config.json (models/hf/hf_model.h,
// ReadHfConfig), both families: GPT-2 and the LLaMA family (llama, mistral, qwen2, qwen3),
// with rope scaling, head_dim and sliding windows), and its special-token ids as
// generation reads them (ReadHfSpecialTokens: an id, or a list kept a list).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_scratch.h"
#include "models/hf/hf_model.h"
#include "models/hf/hf_special_tokens.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::ResetProcessState();
  strata::fuzz::WriteScratchFile("model/config.json", data, size);
  const std::string dir = strata::fuzz::ScratchDir() + "/model";
  (void)strata::ReadHfConfig(dir);
  strata::StatusOr<strata::HfSpecialTokens> tokens = strata::ReadHfSpecialTokens(dir);
  if (tokens.ok()) (void)tokens->Describe();
  return 0;
}
