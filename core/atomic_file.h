// The policy for whole-file outputs (exported weights and configs, safetensors indexes,
// token files, plans, hardware files, traces): written whole or not at all, and never over
// anything but a regular file that is not an input of this run.
//
// WriteFileAtomically(PATH): PATH must be absent or a regular file (a directory, symbolic
// link, FIFO, device or socket at PATH is refused: renaming over it would replace the link
// or the device node, not write through it) and must not be an input of this run
// (core/run_inputs.h). The bytes go to PATH.partial (created anew: a stale PATH.partial, or
// a symbolic link planted there, is removed first, never written through), which is
// removed if a signal stops the process (core/remove_on_signal.h); then synced and renamed
// over PATH, and PATH's directory synced (best effort: the file is complete either way). A
// failure at any step removes PATH.partial and returns an error naming the file and the
// step; PATH itself is never left half-written.
// Thread-safety: pure functions of the filesystem; two writers of one PATH race.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "core/files.h"  // WriteAllBytes, for the writers
#include "core/status.h"

namespace strata {

// The checks WriteFileAtomically makes on PATH before it writes, for a command that wants
// to refuse before any work (`what` names the output: "--out file").
Status CheckWholeFileOutput(const std::string& path, const std::string& what);
// The same for a directory a command writes files into (export --to hf:DIR): absent or a
// directory, and not an input of this run (the weights' own directory).
Status CheckOutputDirectory(const std::string& dir, const std::string& what);

// `write` fills the open file descriptor `fd` of `partial` (PATH.partial). `what` names
// the output in errors ("--out file").
Status WriteFileAtomically(
    const std::string& path,
    const std::function<Status(int fd, const std::string& partial)>& write,
    const std::string& what = "the output");
Status WriteFileAtomically(const std::string& path, std::string_view bytes,
                           const std::string& what = "the output");

}  // namespace strata
