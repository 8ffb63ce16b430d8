// `strata export --from CHECKPOINT --to hf:DIR|llmc:FILE|peft:DIR [--dtype fp32|bf16]
// [--shard-size 5GiB] [--merge-lora]`: interop/export_weights.h does it.
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/bytes.h"
#include "interop/export_weights.h"
#include "launch/commands.h"

namespace strata {

void AddExportCommand(CLI::App& app, Commands* commands) {
  auto request = std::make_shared<ExportRequest>();
  auto shard_size = std::make_shared<std::string>("5GiB");
  CLI::App* command = app.add_subcommand(
      "export", "a checkpoint's weights as a Hugging Face directory or an llm.c checkpoint");
  command
      ->add_option("--from", request->from,
                   "checkpoint: step-<k> directory or a checkpoint_dir (its newest)")
      ->required();
  command
      ->add_option("--to", request->to,
                   "hf:DIR (config.json + safetensors), llmc:FILE (llm.c GPT-2, fp32) or, for "
                   "LoRA adapters, peft:DIR (PEFT's adapter files)")
      ->required();
  command->add_option("--dtype", request->dtype, "hf:, peft: fp32 (exact) | bf16")
      ->transform(CLI::CheckedTransformer(OptionValues<DType>()));
  command->add_option("--shard-size", *shard_size,
                      "hf: larger models go into safetensors shards of this size");
  command->add_flag("--merge-lora", request->merge_lora,
                    "a LoRA checkpoint to hf:DIR: its base with the adapters merged in");
  commands->push_back({command, [request, shard_size]() -> Status {
                         StatusOr<uint64_t> shard = ParseBytes(*shard_size);
                         if (!shard.ok() || *shard == 0) {
                           return absl::InvalidArgumentError(absl::StrCat(
                               "export: --shard-size '", *shard_size,
                               "': expected a size like 5GiB"));
                         }
                         request->max_shard_bytes = *shard;
                         ASSIGN_OR_RETURN(const std::string done, ExportWeights(*request));
                         std::printf("%s\n", done.c_str());
                         return absl::OkStatus();
                       }});
}

}  // namespace strata
