// See fuzz_scratch.h.
#include "fuzz/fuzz_scratch.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/run_inputs.h"

namespace strata {
namespace fuzz {
namespace {

[[noreturn]] void HarnessFailure(const std::string& what) {
  std::fprintf(stderr, "fuzz harness: %s: %s\n", what.c_str(), std::strerror(errno));
  std::abort();
}

std::string* scratch_dir = nullptr;

void RemoveScratchDir() {
  if (scratch_dir == nullptr) return;
  std::error_code ignored;
  std::filesystem::remove_all(*scratch_dir, ignored);
}

}  // namespace

const std::string& ScratchDir() {
  if (scratch_dir != nullptr) return *scratch_dir;
  const char* base = std::getenv("TEST_TMPDIR");
  if (base == nullptr || *base == '\0') base = std::getenv("TMPDIR");
  if (base == nullptr || *base == '\0') base = "/tmp";
  std::string pattern = std::string(base) + "/strata-fuzz-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (::mkdtemp(buffer.data()) == nullptr) HarnessFailure("mkdtemp " + pattern);
  scratch_dir = new std::string(buffer.data());
  const char* keep = std::getenv("STRATA_FUZZ_KEEP_SCRATCH");
  if (keep != nullptr && *keep != '\0') {
    std::fprintf(stderr, "fuzz harness: scratch directory %s kept\n", scratch_dir->c_str());
  } else {
    std::atexit(RemoveScratchDir);
  }
  return *scratch_dir;
}

std::string WriteScratchFile(const std::string& name, std::string_view bytes) {
  const std::string path = ScratchDir() + "/" + name;
  const size_t slash = name.find('/');
  if (slash != std::string::npos) {
    const std::string dir = ScratchDir() + "/" + name.substr(0, slash);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) HarnessFailure("mkdir " + dir);
  }
  // O_TRUNC, not a new file renamed over: the inode stays the same from input to input.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) HarnessFailure("open " + path);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t wrote = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) HarnessFailure("write " + path);
    done += static_cast<size_t>(wrote);
  }
  if (::close(fd) != 0) HarnessFailure("close " + path);
  return path;
}

void RemoveScratchFile(const std::string& name) {
  const std::string path = ScratchDir() + "/" + name;
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) HarnessFailure("unlink " + path);
}

void ResetProcessState() { ForgetRunInputs(); }

}  // namespace fuzz
}  // namespace strata
