// Encode throughput of the GPT-2 tokenizer on the embedded corpus (a measurement, tagged
// manual). Three figures from one process, alternated so a change of the machine's speed
// shows in all of them: PCRE2's pre-tokenization alone (the floor of any GPT-2 encode),
// a full encode with a cold word cache (a fresh tokenizer each pass), and with a warm one.
// Prints the CPU model and MB/s (10^6 bytes/s), best of N passes, plus the ratios.
//   bazel run -c opt //data/tokenizer:tokenizer_bench -- [PASSES]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "data/default_corpus.h"
#include "data/tokenizer/byte_level_bpe.h"
#include "data/tokenizer/pcre2_regex.h"
#include "data/tokenizer/tokenizer.h"

namespace {

std::string CpuModel() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

template <typename Work>
double Seconds(Work work) {
  const auto start = std::chrono::steady_clock::now();
  work();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int passes = argc > 1 ? std::atoi(argv[1]) : 5;
  const std::string_view corpus = strata::DefaultCorpus();
  auto tokenizer = strata::OpenInstalledGpt2Tokenizer();
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  auto regex = strata::Pcre2Regex::Compile(strata::kGpt2Pattern, false, "GPT-2 regex");
  if (!regex.ok()) return 1;
  double split_best = 1e9, cold_best = 1e9, warm_best = 1e9;
  size_t words = 0, tokens = 0;
  for (int pass = 0; pass < passes; ++pass) {
    words = 0;
    split_best =
        std::min(split_best,
                 Seconds([&] { (void)regex->Split(corpus, [&](std::string_view) { ++words; }); }));
    auto fresh = strata::OpenInstalledGpt2Tokenizer();
    cold_best = std::min(cold_best, Seconds([&] { tokens = (*fresh)->Encode(corpus)->size(); }));
    warm_best = std::min(warm_best, Seconds([&] { (void)(*tokenizer)->Encode(corpus); }));
  }
  const double megabytes = corpus.size() / 1e6;
  std::printf("CPU: %s (1 thread); PCRE2 JIT: %s\n", CpuModel().c_str(),
              regex->jit() ? "yes" : "no");
  std::printf(
      "corpus: %zu bytes, %zu pre-tokens, %zu GPT-2 tokens (%.2f bytes/token); best of "
      "%d passes\n",
      corpus.size(), words, tokens, static_cast<double>(corpus.size()) / tokens, passes);
  std::printf("pre-tokenization only:   %7.1f MB/s\n", megabytes / split_best);
  std::printf("encode, cold word cache: %7.1f MB/s (%.2f of pre-tokenization)\n",
              megabytes / cold_best, split_best / cold_best);
  std::printf("encode, warm word cache: %7.1f MB/s (%.2f of pre-tokenization)\n",
              megabytes / warm_best, split_best / warm_best);
  return 0;
}
