// The files this run reads, so that no output of the run is written over one of them. Every
// input is noted here: opened through core/input_file.h (noted as it is opened), or noted
// by path before any output is opened (the CLI notes what its options name: a directory is
// noted with the files directly in it, so "export onto the weights' own directory" is seen
// before a file of it is read). A file is known by its device and inode, so another name
// for it (a hard link, a path through a symlink, a relative path) is the same input.
// Outputs check FindRunInput before they write (core/atomic_file.h for whole files,
// core/streaming_output.h for streams).
// Thread-safety: every function may be called from any thread (one mutex).
#pragma once

#include <optional>
#include <string>

#include "core/status.h"

namespace strata {

// Notes the file already open as `fd` (an input being read) as `what` ("--config file").
void NoteRunInputFd(int fd, const std::string& what);
// Notes `path` as `what`; a directory also notes the regular files directly in it (under
// "WHAT (DIR)"). A path that does not exist is not an error and notes nothing (the reader
// will say it is missing); other stat errors are returned.
Status NoteRunInputPath(const std::string& path, const std::string& what);

// What `path` (following symlinks) is as an input of this run, e.g. "the --config file
// c.json", or nothing when it is not one (or does not exist).
std::optional<std::string> FindRunInput(const std::string& path);

// Forgets every noted input (tests, and a process that runs several commands).
void ForgetRunInputs();

}  // namespace strata
