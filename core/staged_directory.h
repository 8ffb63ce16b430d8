// The policy for directory outputs (export --to hf:DIR and peft:DIR): every file is written
// into a staging directory beside the target (DIR.partial-<run id>, on the same
// filesystem) and moves into DIR only once all of them are written and synced, so a
// failure part-way (a full disk at config.json, a bad tensor, a signal) leaves DIR as it
// was and removes the staging directory. Commit: a DIR that does not exist is the staging
// directory renamed (atomic); an existing DIR (refused when it is an input of the run,
// core/run_inputs.h) gets each file renamed over its own (each a regular file, not an
// input: core/atomic_file.h's rules), which cannot fail for space. The staging directory
// is registered with core/remove_on_signal.h until it is committed or removed.
// Thread-safety: a StagedDirectory is used by one thread.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"

namespace strata {

class StagedDirectory {
 public:
  // Checks `dir` (CheckOutputDirectory) and makes the staging directory. `what` names the
  // output in errors ("export: --to hf: directory").
  static StatusOr<std::unique_ptr<StagedDirectory>> Begin(const std::string& dir,
                                                          const std::string& what);
  ~StagedDirectory();  // removes the staging directory unless committed
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  // Where to write the files.
  const std::string& path() const { return staging_; }
  // Moves the files into the target (see above); returns how many.
  StatusOr<int> Commit();

 private:
  StagedDirectory() = default;
  std::string dir_, staging_, what_;
  int remove_on_signal_slot_ = -1;
  bool committed_ = false;
};

}  // namespace strata
