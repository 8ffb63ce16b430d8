// `strata sample`: text from a checkpoint or a Hugging Face directory (sample/sample.h's
// Generator), the prompt through the run's tokenizer (the checkpoint's own by default) and
// each new token printed as it is drawn (data/tokenizer/text_stream.h: only bytes no later
// token can change). Every id the model may draw must decode: a tokenizer with fewer ids
// than the model's vocabulary limits the draw to its ids (said on stderr); bytes guessed
// for a model of more than 256 ids (no tokenizer found) is refused before any work, unless
// --print_ids asks for the ids themselves.
// Thread-safety: called once, from main.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace strata {

struct SampleArgs {
  std::string from;               // --from CHECKPOINT|hf:DIR
  std::string prompt;             // --prompt TEXT
  int tokens = 64;                // --tokens N: new tokens
  float temperature = 1.0f;       // --temperature T: 0 = greedy
  int top_k = 0;                  // --top_k K: 0 = every token
  uint64_t seed = 1;              // --seed S
  std::string tokenizer;          // --tokenizer SPEC: "" = the checkpoint's, hf:DIR's own, else bytes
  bool print_ids = false;         // --print_ids: the new tokens' ids, not their text
  std::string config_path;        // --config: device.* and train.dtype
  std::vector<std::string> sets;  // --set
};

Status RunSample(const SampleArgs& args);

}  // namespace strata
