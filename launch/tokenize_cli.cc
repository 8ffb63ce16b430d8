// `strata tokenize --tokenizer SPEC [--in TEXT] --out FILE`: data/tokenizer/tokenize_file.h.
#include <memory>
#include <string>

#include "data/tokenizer/tokenize_file.h"
#include "launch/commands.h"

namespace strata {

void AddTokenizeCommand(CLI::App& app, Commands* commands) {
  struct Args {
    std::string in, out, spec = "gpt2";
  };
  auto args = std::make_shared<Args>();
  CLI::App* tokenize = app.add_subcommand(
      "tokenize", "text to a token file ahead of training (data.path takes the file)");
  tokenize->add_option("--tokenizer", args->spec,
                       "bytes | gpt2 | sentencepiece:FILE | hf:PATH (default gpt2)");
  tokenize->add_option("--in", args->in, "text file (default: the embedded corpus)");
  tokenize->add_option("--out", args->out, "token file to write")->required();
  commands->push_back(
      {tokenize, [args]() { return TokenizeTextFile(args->in, args->out, args->spec); }});
}

}  // namespace strata
