// See file_identity.h.
#include "core/file_identity.h"

#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/input_file.h"
#include "core/pread_fully.h"

namespace strata {
namespace {

StatusOr<uint64_t> FileIdentity(const std::string& path, const std::string& what) {
  ASSIGN_OR_RETURN(const InputFile file, InputFile::Open(path, what));
  const uint64_t size = file.size();
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  XXH3_64bits_update(state, &size, sizeof(size));
  std::vector<char> buffer(kStripeBytes);
  auto hash_range = [&](uint64_t offset, uint64_t bytes) -> Status {
    while (bytes > 0) {
      const size_t piece = static_cast<size_t>(std::min<uint64_t>(bytes, buffer.size()));
      RETURN_IF_ERROR(PreadFully(file.fd(), buffer.data(), piece, offset, path));
      XXH3_64bits_update(state, buffer.data(), piece);
      offset += piece;
      bytes -= piece;
    }
    return absl::OkStatus();
  };
  Status status;
  if (size <= kWholeHashBytes) {
    status = hash_range(0, size);
  } else {
    const uint64_t last = size - kStripeBytes;
    for (int i = 0; i < kStripes && status.ok(); ++i) {
      const uint64_t offset = i == kStripes - 1 ? last : last / (kStripes - 1) * i;
      status = hash_range(offset, kStripeBytes);
    }
  }
  const uint64_t hash = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  RETURN_IF_ERROR(status);
  return hash;
}

}  // namespace

StatusOr<uint64_t> ContentIdentity(const std::string& path, const std::string& what) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) return FileIdentity(path, what);
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(path, error)) {
    if (entry.is_regular_file()) names.push_back(entry.path().filename().string());
  }
  if (error) {
    return absl::UnknownError(absl::StrCat("listing ", what, " ", path, ": ", error.message()));
  }
  std::sort(names.begin(), names.end());
  std::vector<uint64_t> parts;
  for (const std::string& name : names) {
    ASSIGN_OR_RETURN(const uint64_t part, FileIdentity(path + "/" + name, what));
    parts.push_back(XXH3_64bits(name.data(), name.size()));
    parts.push_back(part);
  }
  return XXH3_64bits(parts.data(), parts.size() * sizeof(uint64_t));
}

}  // namespace strata
