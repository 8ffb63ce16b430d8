// Rank agreement; see rank_agreement.h.
#include "session/rank_agreement.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "collectives/agreement.h"
#include "config/options_parse.h"
#include "core/run_identity.h"

namespace strata {
namespace {

bool IsRankLocal(const std::string& key) {
  static const auto* keys_storage = new std::vector<std::string>(RankLocalKeys());
  const std::vector<std::string>& keys = *keys_storage;
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

// The resolved text without the rank-local keys.
std::string SharedPart(const std::string& resolved) {
  std::string shared;
  for (absl::string_view line : absl::StrSplit(resolved, '\n', absl::SkipEmpty())) {
    const std::string key(line.substr(0, line.find('=')));
    if (!IsRankLocal(key)) absl::StrAppend(&shared, line, "\n");
  }
  return shared;
}

std::map<std::string, std::string> KeyValues(const std::string& text) {
  std::map<std::string, std::string> values;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t equals = line.find('=');
    values[std::string(line.substr(0, equals))] =
        equals == absl::string_view::npos ? "" : std::string(line.substr(equals + 1));
  }
  return values;
}

}  // namespace

Status AgreeOnStart(Communicator& communicator, const std::string& resolved) {
  const std::string shared = SharedPart(resolved);
  const uint64_t hash = XXH3_64bits(shared.data(), shared.size());
  // Words 0-1: the hash; 2-4: the run id (12 characters, zero-padded).
  constexpr int kWords = 5;
  std::vector<uint32_t> mine(kWords, 0);
  mine[0] = static_cast<uint32_t>(hash);
  mine[1] = static_cast<uint32_t>(hash >> 32);
  const std::string id = RunId();
  std::memcpy(&mine[2], id.data(), std::min<size_t>(id.size(), 12));
  std::vector<uint32_t> all;
  Status gathered = GatherWords(communicator, mine, &all);
  if (!gathered.ok()) {
    return Annotate(gathered, "comparing the ranks' configurations (the run's first collective)");
  }
  const int world = communicator.world_size();
  bool same = true;
  for (int r = 1; r < world; ++r) {
    same = same && all[kWords * r] == all[0] && all[kWords * r + 1] == all[1];
  }
  if (same) {
    char text[13] = {};
    std::memcpy(text, &all[2], 12);
    SetRunId(text);  // rank 0's
    return absl::OkStatus();
  }
  // Disagreement: every rank's text, to name the keys.
  ASSIGN_OR_RETURN(const std::vector<std::string> texts, GatherTexts(communicator, shared));
  std::vector<std::map<std::string, std::string>> values;
  for (const std::string& text : texts) values.push_back(KeyValues(text));
  std::vector<std::string> problems;
  std::map<std::string, bool> keys;
  for (const auto& rank_values : values) {
    for (const auto& [key, value] : rank_values) keys[key] = true;
  }
  for (const auto& [key, unused] : keys) {
    std::map<std::string, std::vector<int>> ranks_by_value;
    for (int r = 0; r < world; ++r) {
      auto found = values[r].find(key);
      ranks_by_value[found == values[r].end() ? "(missing)" : found->second].push_back(r);
    }
    if (ranks_by_value.size() < 2) continue;
    std::vector<std::string> parts;
    for (const auto& [value, ranks] : ranks_by_value) {
      std::string shown = value.empty() ? "(empty)" : value;
      if (shown.size() > 80) shown = shown.substr(0, 77) + "...";
      parts.push_back(absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ",
                                   absl::StrJoin(ranks, ","), " ", shown));
    }
    problems.push_back(absl::StrCat(key, ": ", absl::StrJoin(parts, "; ")));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "the ranks were started with different configurations (every rank must get the same "
      "config and --set flags; only ",
      absl::StrJoin(RankLocalKeys(), ", "), " may differ):\n  ",
      problems.empty() ? std::string("(no key differs: the texts differ in order)")
                       : absl::StrJoin(problems, "\n  ")));
}

StatusOr<int> AgreeOnStop(Communicator& communicator, int signal_number) {
  ASSIGN_OR_RETURN(const std::vector<uint32_t> all,
                   AgreeOnOutcomes(communicator, static_cast<uint32_t>(signal_number)));
  for (uint32_t value : all) {
    if (value != 0) return static_cast<int>(value);
  }
  return 0;
}

}  // namespace strata
