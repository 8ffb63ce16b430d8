// "Did you mean ...?" for names a user typed: config keys and sections, command words.
// One rule everywhere: the closest candidate by optimal string alignment distance (edits,
// insertions, deletions and adjacent swaps), offered only when it is a plausible typo:
// at most max(1, min(3, length / 4)) edits from the word typed.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace strata {

// Optimal string alignment distance between `a` and `b`.
size_t EditDistance(const std::string& a, const std::string& b);

// The candidate closest to `word` if it is a plausible typo of it (the first of equals, in
// the candidates' order), else "".
std::string ClosestMatch(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace strata
