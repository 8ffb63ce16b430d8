// `strata sample --from CHECKPOINT|hf:DIR --prompt TEXT [...]`: sample/sample_run.h.
#include <memory>

#include "launch/commands.h"
#include "sample/sample_run.h"

namespace strata {

void AddSampleCommand(CLI::App& app, Commands* commands) {
  auto args = std::make_shared<SampleArgs>();
  CLI::App* sample = app.add_subcommand(
      "sample", "generate text from a checkpoint or a Hugging Face directory (KV cache)");
  sample->add_option("--from", args->from, "checkpoint (step-<k> or a checkpoint_dir) or hf:DIR")
      ->required();
  sample->add_option("--prompt", args->prompt, "the text to continue")->required();
  sample->add_option("--tokens", args->tokens,
                     "new tokens (default 64); past the model's positions the context slides");
  sample->add_option("--temperature", args->temperature, "0 = greedy (default 1)");
  sample->add_option("--top_k", args->top_k, "draw from the k most likely; 0 = all");
  sample->add_option("--seed", args->seed, "the draw's seed (default 1)");
  sample->add_option("--tokenizer", args->tokenizer,
                     "bytes | gpt2 | sentencepiece:FILE | hf:PATH; default: the one the "
                     "checkpoint was trained with, else hf:DIR's own, else bytes");
  sample->add_flag("--print_ids", args->print_ids,
                   "print the new tokens' ids instead of their text (a model without its "
                   "tokenizer)");
  AddJobFlags(sample, &args->config_path, &args->sets,
              "device.backend=cuda, train.dtype=bf16, ... (device.* and train.dtype apply)");
  commands->push_back({sample, [args]() { return RunSample(*args); }});
}

}  // namespace strata
