// What kind of file a stat(2) mode names, for errors about inputs and outputs that are not
// the regular file or directory expected ("a FIFO (named pipe)", "a character device").
// Thread-safety: a pure function.
#pragma once

#include <sys/stat.h>

namespace strata {

// "a regular file", "a directory", "a FIFO (named pipe)", "a character device",
// "a block device", "a socket", "a symbolic link", else "an unknown kind of file".
inline const char* FileKindName(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "an unknown kind of file";
}

}  // namespace strata
