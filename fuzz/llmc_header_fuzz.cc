// Fuzz target: llm.c's GPT-2 checkpoint header (models/llmc/llmc_header.h, ReadLlmcHeader):
// 256 int32, the magic (a token file's named), the version, the sizes, and the file's size
// against the parameter count the header implies (in 128 bits). Seeds are small headers
// followed by exactly their parameter bytes, so mutations reach the checks past the size.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_scratch.h"
#include "models/llmc/llmc_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::ResetProcessState();
  const std::string path = strata::fuzz::WriteScratchFile("model.bin", data, size);
  (void)strata::ReadLlmcHeader(path);
  return 0;
}
