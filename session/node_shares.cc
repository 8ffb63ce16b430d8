// See node_shares.h.
#include "session/node_shares.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "collectives/agreement.h"
#include "core/bytes.h"

namespace strata {
namespace {

// Ranks of one host, in rank order, grouped in order of each host's first rank.
std::vector<std::pair<std::string, std::vector<int>>> ByHost(
    const std::vector<RankPlace>& places) {
  std::vector<std::pair<std::string, std::vector<int>>> hosts;
  for (int rank = 0; rank < static_cast<int>(places.size()); ++rank) {
    auto host = std::find_if(hosts.begin(), hosts.end(),
                             [&](const auto& h) { return h.first == places[rank].host; });
    if (host == hosts.end()) host = hosts.insert(hosts.end(), {places[rank].host, {}});
    host->second.push_back(rank);
  }
  return hosts;
}

// "0-3" for a run of consecutive numbers, "0,2" otherwise, "1" for one.
std::string Span(const std::vector<int>& numbers) {
  const bool run = numbers.size() > 1 &&
                   numbers.back() - numbers.front() + 1 == static_cast<int>(numbers.size()) &&
                   std::is_sorted(numbers.begin(), numbers.end());
  return run ? absl::StrCat(numbers.front(), "-", numbers.back()) : absl::StrJoin(numbers, ",");
}

// "5.15 GiB", or "1 GiB/2 GiB" where the ranks differ.
std::string Sizes(const std::vector<uint64_t>& sizes) {
  const bool same = std::all_of(sizes.begin(), sizes.end(),
                                [&](uint64_t s) { return s == sizes.front(); });
  if (same) return FormatBytes(sizes.front());
  std::vector<std::string> shown;
  for (uint64_t size : sizes) shown.push_back(FormatBytes(size));
  return absl::StrJoin(shown, "/");
}

}  // namespace

std::string SerializeRankPlace(const RankPlace& place) {
  return absl::StrCat(place.local_rank, "\t", place.local_size, "\t", place.device_bytes, "\t",
                      place.host_bytes, "\t", place.host);
}

StatusOr<RankPlace> ParseRankPlace(const std::string& text) {
  std::vector<std::string> fields = absl::StrSplit(text, absl::MaxSplits('\t', 4));
  RankPlace place;
  if (fields.size() != 5 || !absl::SimpleAtoi(fields[0], &place.local_rank) ||
      !absl::SimpleAtoi(fields[1], &place.local_size) ||
      !absl::SimpleAtoi(fields[2], &place.device_bytes) ||
      !absl::SimpleAtoi(fields[3], &place.host_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a rank's place on its node is malformed: '", text, "'"));
  }
  place.host = fields[4];
  return place;
}

StatusOr<std::vector<RankPlace>> GatherRankPlaces(Communicator& communicator,
                                                  const RankPlace& mine) {
  ASSIGN_OR_RETURN(const std::vector<std::string> texts,
                   GatherTexts(communicator, SerializeRankPlace(mine)));
  std::vector<RankPlace> places;
  for (const std::string& text : texts) {
    ASSIGN_OR_RETURN(RankPlace place, ParseRankPlace(text));
    places.push_back(std::move(place));
  }
  return places;
}

std::string DescribeNodeShares(const std::vector<RankPlace>& places) {
  std::vector<std::string> clauses;
  for (const auto& [host, ranks] : ByHost(places)) {
    std::vector<int> local_ranks, local_sizes;
    std::vector<uint64_t> device, host_tier;
    for (int rank : ranks) {
      local_ranks.push_back(places[rank].local_rank);
      local_sizes.push_back(places[rank].local_size);
      device.push_back(places[rank].device_bytes);
      host_tier.push_back(places[rank].host_bytes);
    }
    const bool one_size = std::all_of(local_sizes.begin(), local_sizes.end(),
                                      [&](int s) { return s == local_sizes.front(); });
    const std::string device_sizes = Sizes(device), host_sizes = Sizes(host_tier);
    const bool each = ranks.size() > 1 && device_sizes.find('/') == std::string::npos &&
                      host_sizes.find('/') == std::string::npos;
    clauses.push_back(absl::StrCat(
        host, ": ", ranks.size() == 1 ? "rank " : "ranks ", Span(ranks), " (local ",
        ranks.size() == 1 ? "rank " : "ranks ", Span(local_ranks), " of ",
        one_size ? absl::StrCat(local_sizes.front()) : absl::StrJoin(local_sizes, ","), "), ",
        each ? "each " : "", "device ", device_sizes, " + host ", host_sizes));
  }
  return absl::StrJoin(clauses, "; ");
}

std::string NodePlaceMismatch(const std::vector<RankPlace>& places) {
  std::vector<std::string> clauses;
  for (const auto& [host, ranks] : ByHost(places)) {
    const int n = static_cast<int>(ranks.size());
    bool expected = true;
    std::vector<int> local_ranks, local_sizes;
    for (int i = 0; i < n; ++i) {
      const RankPlace& place = places[ranks[i]];
      expected = expected && place.local_rank == i && place.local_size == n;
      local_ranks.push_back(place.local_rank);
      local_sizes.push_back(place.local_size);
    }
    if (expected) continue;
    clauses.push_back(absl::StrCat(host, " has ", n == 1 ? "rank " : "ranks ", Span(ranks),
                                   ", which MPI makes local ", n == 1 ? "rank " : "ranks ",
                                   absl::StrJoin(local_ranks, ","), " of ",
                                   absl::StrJoin(local_sizes, ",")));
  }
  return absl::StrJoin(clauses, "; ");
}

}  // namespace strata
