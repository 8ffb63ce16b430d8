// The ranks of a run (on one node or many) agree on the content of what they read, not
// only on the configuration's text (rank_agreement.h): before the session is built, each
// rank resolves the inputs its options name and computes their identities
// (core/file_identity.h), and the ranks compare them:
// - train.resume: rank 0 resolves it (the step-<k> directory, or the newest under a
//   checkpoint directory) and every rank must find that same directory with the same
//   checkpoint.json (its XXH3: the checkpoint's identity); a rank that resolves another
//   step, finds another run's checkpoint at the path, or finds none, is named with its
//   host. Every rank then loads rank 0's choice.
// - data.path, model.from (a Hugging Face directory's files, or an llm.c file) and
//   data.tokenizer's file: the same identity on every rank.
// A mismatch is kFailedPrecondition naming, per differing input, each group of ranks with
// their hosts, the path and the identity (or why it could not be read), on every rank.
// Also here: every rank's host name, and the node layout logged at start.
// Thread-safety: as the communicator (one thread per rank); collective.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "core/options.h"
#include "core/status.h"

namespace strata {

// One input as this rank sees it.
struct ContentClaim {
  std::string what;       // "data.path"
  std::string path;       // as this rank resolved it
  uint64_t identity = 0;  // core/file_identity.h; 0 with `problem` when it could not be read
  std::string problem;
};

// The claims of `options` on this rank, in a fixed order (every rank makes the same list;
// an unset input is absent on all). train.resume's claim is its resolved step-<k> and the
// identity of that step's checkpoint.json.
std::vector<ContentClaim> ContentClaims(const Options& options);

// Every rank's host name, in rank order.
StatusOr<std::vector<std::string>> GatherHostNames(Communicator& communicator);
// "2 nodes: vm1 (ranks 0-1), vm2 (ranks 2-3)"; "1 node: vm1 (ranks 0-3)".
std::string DescribeNodeLayout(const std::vector<std::string>& hosts);

// Compares the claims (see above). On success returns rank 0's claims (for train.resume:
// the directory every rank loads).
StatusOr<std::vector<ContentClaim>> AgreeOnContent(Communicator& communicator,
                                                   const std::vector<ContentClaim>& claims,
                                                   const std::vector<std::string>& hosts);

}  // namespace strata
