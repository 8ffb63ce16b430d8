// See cli.h.
#include "launch/cli.h"

#include "core/did_you_mean.h"

namespace strata {

void AddJobFlags(CLI::App* app, std::string* config_path, std::vector<std::string>* sets,
                 const std::string& set_help) {
  app->add_option("--config", *config_path,
                  "JSON config file (sections model, data, train, device, zero, ...)");
  app->add_option("--set", *sets, set_help);
}

void AddBenchFlags(CLI::App* app, BenchArgs* args, const std::string& steps_help) {
  AddJobFlags(app, &args->config_path, &args->sets);
  app->add_option("--steps", args->steps,
                  steps_help + " (default " + std::to_string(args->steps) + ")")
      ->check(CLI::Range(1, 1000));
}

std::string UsageProblem(CLI::App& app, int argc, char** argv, const CLI::ParseError& error) {
  CLI::App* level = &app;
  std::string path = "strata";
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') break;  // flags start: the command words are done
    if (level->get_subcommands({}).empty()) break;
    CLI::App* next = nullptr;
    std::vector<std::string> names;
    for (CLI::App* sub : level->get_subcommands({})) {
      if (sub->get_name() == word) next = sub;
      names.push_back(sub->get_name());
    }
    if (next == nullptr) {
      const std::string closest = ClosestMatch(word, names);
      return "'" + path + " " + word + "': unknown command" +
             (closest.empty() ? "" : " (did you mean '" + closest + "'?)") +
             "; expected one of " + CLI::detail::join(names, ", ");
    }
    level = next;
    path += " " + word;
  }
  return path + ": " + error.what();
}

}  // namespace strata
