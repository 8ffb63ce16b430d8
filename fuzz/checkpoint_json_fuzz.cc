// Fuzz target: a checkpoint's checkpoint.json (checkpoint/checkpoint_open.h,
// OpenCheckpoint): the format and version, the checksum (version 2 on), the model's shape
// key by key (keys an older version lacked), rope scaling, LoRA and its base, the
// tokenizer's and the source's file lists, the units. Version 2 and later carry an XXH3 of
// the other fields that a mutation almost always breaks, so most seeds are version 1 (no
// checksum), which reaches every check after it; a few are current checkpoints as written.
#include <cstddef>
#include <cstdint>
#include <string>

#include "checkpoint/checkpoint_open.h"
#include "fuzz/fuzz_scratch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::fuzz::ResetProcessState();
  strata::fuzz::WriteScratchFile("step-1/checkpoint.json", data, size);
  (void)strata::OpenCheckpoint(strata::fuzz::ScratchDir() + "/step-1");
  return 0;
}
