// The identity of this run. Every file a run leaves in a shared directory (swap files, lock
// files) carries RunId() in its name, so two runs never write each other's files and the
// leftovers of a crashed run are recognised as that run's. All ranks of one run use rank
// 0's id: session/ broadcasts it at start-up and calls SetRunId on every rank; until then
// (tests, tools) it is this process's own, generated once. DescribeThisProcess is what a
// lock file says about its holder, for the message of a run that finds it.
// Thread-safety: every function may be called from any thread.
#pragma once

#include <string>

namespace strata {

// 12 lowercase hex digits (process id and random bits), e.g. "00b2f1c4e9a7".
std::string RunId();
// Replaces the id (session/rank_agreement.h: rank 0's on every rank). Must be 1-32 characters of [0-9a-z];
// returns false (and changes nothing) otherwise.
bool SetRunId(const std::string& id);
// This machine's host name (gethostname), for messages that name a rank's node.
std::string HostName();
// "pid 4242 on host vm1, started 2026-12-01 02:10:00 UTC: strata train --config c.json"
std::string DescribeThisProcess();

}  // namespace strata
