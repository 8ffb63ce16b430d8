// What the safetensors reader and writer share; see safetensors_common.h.
#include "models/hf/safetensors_common.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace strata {
namespace safetensors_internal {

void ScopedFd::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status InvalidFile(const std::string& file, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors: ", file, ": ", what));
}
Status LostFile(const std::string& file, const std::string& what) {
  return absl::DataLossError(absl::StrCat("safetensors: ", file, ": ", what));
}
Status InvalidTensor(const std::string& file, const std::string& name, const std::string& what) {
  return InvalidFile(file, absl::StrCat("tensor '", name, "': ", what));
}

std::string Printable(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      out.push_back(c);
    } else {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", byte));
    }
  }
  return out;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

StatusOr<std::pair<ScopedFd, uint64_t>> OpenRegular(const std::string& path) {
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError(errno, absl::StrCat("safetensors: cannot open ", path));
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) {
    return ErrnoError(errno, absl::StrCat("safetensors: stat of ", path));
  }
  if (!S_ISREG(info.st_mode)) {
    return InvalidFile(path, S_ISDIR(info.st_mode)
                                 ? "is a directory (SafetensorsSet::OpenDirectory opens one)"
                                 : "is not a regular file");
  }
  return std::make_pair(std::move(fd), static_cast<uint64_t>(info.st_size));
}

bool FileExists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

std::string ParseJsonStrict(std::string_view text, nlohmann::json* out,
                            std::string* duplicate_top_key) {
  struct OpenObject {
    std::set<std::string> keys;
    std::string last_key;
  };
  std::vector<OpenObject> open;
  // A raw NUL is never valid JSON, but nlohmann takes it for the end of the input.
  const size_t nul = text.find('\0');
  if (nul != std::string_view::npos) {
    return absl::StrCat("is not valid UTF-8 JSON: a NUL byte at offset ", nul);
  }
  std::string problem;
  auto callback = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) {
      open.emplace_back();
    } else if (event == Event::object_end) {
      if (!open.empty()) open.pop_back();
    } else if (event == Event::key && !open.empty()) {
      std::string key = parsed.get<std::string>();
      if (!open.back().keys.insert(key).second && problem.empty()) {
        if (depth == 1) {
          *duplicate_top_key = key;
          problem = absl::StrCat("key '", key, "' appears twice");
        } else {
          problem = absl::StrCat("key '", key, "' appears twice in the object of '",
                                 open.size() >= 2 ? open[open.size() - 2].last_key : "", "'");
        }
      }
      open.back().last_key = std::move(key);
    }
    return true;
  };
  try {
    *out = nlohmann::json::parse(text.begin(), text.end(), callback);
  } catch (const nlohmann::json::exception& e) {
    return absl::StrCat("is not valid UTF-8 JSON: ", Printable(e.what()));
  }
  return problem;
}

}  // namespace safetensors_internal
}  // namespace strata
