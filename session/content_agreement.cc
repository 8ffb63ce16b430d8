// See content_agreement.h.
#include "session/content_agreement.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "checkpoint/checkpoint.h"
#include "collectives/agreement.h"
#include "core/file_identity.h"
#include "core/run_identity.h"
#include "session/file_checks.h"

namespace strata {
namespace {

ContentClaim Claim(const std::string& what, const std::string& path, const std::string& file) {
  ContentClaim claim{what, path, 0, ""};
  StatusOr<uint64_t> identity = ContentIdentity(file, what);
  if (identity.ok()) {
    claim.identity = *identity;
  } else {
    claim.problem = std::string(identity.status().message());
  }
  return claim;
}

std::string Ranks(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ","));
}

// "what<TAB>path<TAB>identity<TAB>problem" per line: a rank's claims for the message.
std::string Serialize(const std::vector<ContentClaim>& claims) {
  std::string text;
  for (const ContentClaim& claim : claims) {
    absl::StrAppend(&text, claim.what, "\t", claim.path, "\t", claim.identity, "\t",
                    claim.problem, "\n");
  }
  return text;
}

std::string Shown(absl::string_view line) {
  std::vector<std::string> fields = absl::StrSplit(line, absl::MaxSplits('\t', 3));
  fields.resize(4);
  if (!fields[3].empty()) return absl::StrCat(fields[1], " (", fields[3], ")");
  uint64_t identity = 0;
  if (!absl::SimpleAtoi(fields[2], &identity)) identity = 0;
  return absl::StrFormat("%s (identity %016x)", fields[1], identity);
}

}  // namespace

std::vector<ContentClaim> ContentClaims(const Options& options) {
  std::vector<ContentClaim> claims;
  if (!options.train.resume.empty()) {
    StatusOr<std::string> step = ResolveCheckpointPath(options.train.resume);
    if (step.ok()) {
      claims.push_back(Claim("train.resume", *step, *step + "/checkpoint.json"));
    } else {
      claims.push_back({"train.resume", options.train.resume, 0,
                        std::string(step.status().message())});
    }
  }
  if (!options.data.path.empty()) {
    claims.push_back(Claim("data.path", options.data.path, options.data.path));
  }
  const std::string model = SourcePath(options.model.from);
  if (!model.empty()) claims.push_back(Claim("model.from", model, model));
  const std::string tokenizer = SourcePath(options.data.tokenizer);
  if (!tokenizer.empty()) claims.push_back(Claim("data.tokenizer", tokenizer, tokenizer));
  return claims;
}

StatusOr<std::vector<std::string>> GatherHostNames(Communicator& communicator) {
  return GatherTexts(communicator, HostName());
}

std::string DescribeNodeLayout(const std::vector<std::string>& hosts) {
  std::vector<std::pair<std::string, std::vector<int>>> nodes;  // in order of first rank
  for (int rank = 0; rank < static_cast<int>(hosts.size()); ++rank) {
    auto node = std::find_if(nodes.begin(), nodes.end(),
                             [&](const auto& n) { return n.first == hosts[rank]; });
    if (node == nodes.end()) node = nodes.insert(nodes.end(), {hosts[rank], {}});
    node->second.push_back(rank);
  }
  std::vector<std::string> parts;
  for (const auto& [host, ranks] : nodes) {
    const bool contiguous = ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size());
    parts.push_back(absl::StrCat(
        host, " (",
        ranks.size() == 1 ? absl::StrCat("rank ", ranks[0])
        : contiguous      ? absl::StrCat("ranks ", ranks.front(), "-", ranks.back())
                          : Ranks(ranks),
        ")"));
  }
  return absl::StrCat(nodes.size(), nodes.size() == 1 ? " node: " : " nodes: ",
                      absl::StrJoin(parts, ", "));
}

StatusOr<std::vector<ContentClaim>> AgreeOnContent(Communicator& communicator,
                                                   const std::vector<ContentClaim>& claims,
                                                   const std::vector<std::string>& hosts) {
  const int world = communicator.world_size();
  if (world == 1) return claims;
  // Words per claim: the identity's halves and whether it could be read.
  const size_t words = 3 * claims.size() + 1;
  std::vector<uint32_t> mine(words, 0);
  mine[0] = static_cast<uint32_t>(claims.size());
  for (size_t i = 0; i < claims.size(); ++i) {
    mine[1 + 3 * i] = static_cast<uint32_t>(claims[i].identity);
    mine[2 + 3 * i] = static_cast<uint32_t>(claims[i].identity >> 32);
    mine[3 + 3 * i] = claims[i].problem.empty() ? 1 : 0;
  }
  std::vector<uint32_t> all;
  RETURN_IF_ERROR(GatherWords(communicator, mine, &all));
  // Which claims differ: an identity that is not rank 0's, or a rank that could not read an
  // input others read (when no rank can read it, its own reader says why, later).
  std::vector<size_t> differing;
  for (size_t i = 0; i < claims.size(); ++i) {
    bool same = true, any_read = false;
    for (int r = 0; r < world; ++r) {
      const uint32_t* word = &all[r * words];
      same = same && word[1 + 3 * i] == all[1 + 3 * i] && word[2 + 3 * i] == all[2 + 3 * i] &&
             word[3 + 3 * i] == all[3 + 3 * i];
      any_read = any_read || word[3 + 3 * i] == 1;
    }
    if (!same && any_read) differing.push_back(i);
  }
  if (differing.empty()) return claims;
  // Every rank's claims as text, to name paths, hosts and problems.
  ASSIGN_OR_RETURN(const std::vector<std::string> texts,
                   GatherTexts(communicator, Serialize(claims)));
  std::vector<std::string> problems;
  for (size_t i : differing) {
    std::map<std::string, std::vector<int>> ranks_by_view;
    for (int r = 0; r < world; ++r) {
      std::vector<std::string> lines = absl::StrSplit(texts[r], '\n', absl::SkipEmpty());
      ranks_by_view[i < lines.size() ? Shown(lines[i]) : "(none)"].push_back(r);
    }
    std::vector<std::string> parts;
    for (const auto& [view, ranks] : ranks_by_view) {
      std::vector<std::string> on;
      for (int r : ranks) {
        const std::string host = r < static_cast<int>(hosts.size()) ? hosts[r] : "?";
        if (std::find(on.begin(), on.end(), host) == on.end()) on.push_back(host);
      }
      parts.push_back(absl::StrCat(Ranks(ranks), " on ", absl::StrJoin(on, ","), ": ", view));
    }
    problems.push_back(absl::StrCat(claims[i].what, " is not the same on every rank: ",
                                    absl::StrJoin(parts, "; ")));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "the ranks would read different content at the same paths (each node has its own copy; "
      "every node must hold the same files):\n  ",
      absl::StrJoin(problems, "\n  ")));
}

}  // namespace strata
