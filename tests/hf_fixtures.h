// The Hugging Face directories tools/hf_reference.py made (tests/testdata/hf/), found
// from a Bazel test's runfiles or the source tree. Thread-safety: a plain function.
#pragma once

#include <cstdlib>
#include <string>

namespace strata {

// tests/testdata/hf/<name>: "gpt2-tiny", "llama-tiny" or "llama-tiny-tied".
inline std::string HfFixture(const std::string& name) {
  const char* dir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (dir != nullptr && workspace != nullptr) {
    return std::string(dir) + "/" + workspace + "/tests/testdata/hf/" + name;
  }
  return "tests/testdata/hf/" + name;
}

// A test-parameter name of a fixture ("gpt2-tiny" -> "gpt2_tiny").
inline std::string HfFixtureTestName(std::string name) {
  for (char& c : name) c = c == '-' ? '_' : c;
  return name;
}

}  // namespace strata
