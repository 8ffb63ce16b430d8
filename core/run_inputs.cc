// See run_inputs.h.
#include "core/run_inputs.h"

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <map>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

using FileKey = std::pair<dev_t, ino_t>;

struct Registry {
  std::mutex mutex;
  std::map<FileKey, std::string> inputs;
};

Registry& TheRegistry() {
  static Registry* registry = new Registry;  // never destroyed: used until the process ends
  return *registry;
}

void Note(const struct stat& info, const std::string& what) {
  Registry& registry = TheRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.inputs.emplace(FileKey{info.st_dev, info.st_ino}, what);  // the first name stays
}

}  // namespace

void NoteRunInputFd(int fd, const std::string& what) {
  struct stat info {};
  if (::fstat(fd, &info) == 0) Note(info, what);
}

Status NoteRunInputPath(const std::string& path, const std::string& what) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return absl::OkStatus();
    return ErrnoError(errno, absl::StrCat("stat of ", path, " (", what, ")"));
  }
  Note(info, absl::StrCat(what, " ", path));
  if (!S_ISDIR(info.st_mode)) return absl::OkStatus();
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(path, error)) {
    struct stat file {};
    if (::stat(entry.path().c_str(), &file) == 0 && S_ISREG(file.st_mode)) {
      Note(file, absl::StrCat(entry.path().string(), " (in ", what, " ", path, ")"));
    }
  }
  if (error) return absl::UnknownError(absl::StrCat("listing ", path, " (", what, "): ",
                                                    error.message()));
  return absl::OkStatus();
}

std::optional<std::string> FindRunInput(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return std::nullopt;
  Registry& registry = TheRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  auto found = registry.inputs.find(FileKey{info.st_dev, info.st_ino});
  if (found == registry.inputs.end()) return std::nullopt;
  return found->second;
}

void ForgetRunInputs() {
  Registry& registry = TheRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.inputs.clear();
}

}  // namespace strata
