// A checkpoint gathered into one directory: see checkpoint_consolidate.h.
#include "checkpoint/checkpoint_consolidate.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint_files.h"
#include "checkpoint/checkpoint_format.h"
#include "checkpoint/checkpoint_layout.h"
#include "checkpoint/checkpoint_open.h"
#include "core/files.h"
#include "core/progress.h"
#include "core/run_identity.h"

namespace strata {

using checkpoint_internal::ArrayJson;
using checkpoint_internal::Errno;
using checkpoint_internal::Hex;
using checkpoint_internal::kGenerationConfig;
using checkpoint_internal::kSourceDir;
using checkpoint_internal::kTokenizerDir;
using checkpoint_internal::kVersion;
using checkpoint_internal::MetaChecksum;
using checkpoint_internal::RankFileName;
using checkpoint_internal::ReadBytes;
using checkpoint_internal::SyncFile;
using checkpoint_internal::WriteFile;

namespace {

namespace fs = std::filesystem;

// Elements copied at a time.
constexpr size_t kPieceElements = size_t{4} << 20;

// Looks for each rank file missing beside the manifest in the other `from` directories.
Status FindRankFiles(const std::vector<std::string>& from, OpenedCheckpoint* checkpoint) {
  const std::string step = fs::path(checkpoint->path).filename().string();
  for (OpenedCheckpoint::File& file : checkpoint->files) {
    std::error_code error;
    if (fs::exists(file.path, error)) continue;
    const std::string name = fs::path(file.path).filename().string();
    std::vector<std::string> searched = {fs::path(file.path).parent_path().string()};
    bool found = false;
    for (size_t i = 1; i < from.size() && !found; ++i) {
      const fs::path candidates[] = {fs::path(from[i]) / name, fs::path(from[i]) / step / name};
      for (const fs::path& candidate : candidates) {
        if (fs::exists(candidate, error)) {
          file.path = candidate.string();
          found = true;
          break;
        }
      }
      searched.push_back(from[i]);
    }
    if (!found) {
      return absl::NotFoundError(absl::StrCat(
          "checkpoint consolidate: ", name,
          file.rank >= 0
              ? absl::StrCat(" (written by rank ", file.rank, " on host ", file.host, ")")
              : std::string(),
          " is in none of ", absl::StrJoin(searched, ", "),
          ": give the directory that holds it with another --from"));
    }
  }
  return absl::OkStatus();
}

// Copies the files of `sub` (tokenizer/, source/) named in the manifest.
Status CopySubdirectory(const std::string& from, const std::string& to, const std::string& sub) {
  std::error_code error;
  if (!fs::is_directory(fs::path(from) / sub, error)) return absl::OkStatus();
  fs::create_directories(fs::path(to) / sub, error);
  for (const fs::directory_entry& entry : fs::directory_iterator(fs::path(from) / sub, error)) {
    ASSIGN_OR_RETURN(const std::vector<char> bytes, ReadBytes(entry.path().string()));
    const std::string target = (fs::path(to) / sub / entry.path().filename()).string();
    RETURN_IF_ERROR(WriteFile(target, {{bytes.data(), bytes.size()}}));
    RETURN_IF_ERROR(SyncFile(target));
  }
  if (error) {
    return absl::InternalError(absl::StrCat("checkpoint consolidate: cannot list ",
                                            (fs::path(from) / sub).string(), ": ",
                                            error.message()));
  }
  return SyncFile((fs::path(to) / sub).string());
}

}  // namespace

StatusOr<std::string> ConsolidateCheckpoint(const ConsolidateRequest& request) {
  if (request.from.empty() || request.to.empty()) {
    return absl::InvalidArgumentError("checkpoint consolidate: --from and --to are required");
  }
  ASSIGN_OR_RETURN(OpenedCheckpoint checkpoint, OpenCheckpoint(request.from[0]));
  const fs::path to = request.to;
  std::error_code error;
  if (fs::exists(to, error) && (!fs::is_directory(to, error) || !fs::is_empty(to, error))) {
    return absl::AlreadyExistsError(absl::StrCat(
        "checkpoint consolidate: --to ", to.string(),
        " exists and is not an empty directory: name a new one (nothing is written over)"));
  }
  RETURN_IF_ERROR(FindRankFiles(request.from, &checkpoint));
  std::vector<int> all(checkpoint.files.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  RETURN_IF_ERROR(VerifyCheckpointFileList(checkpoint, all, request.show_progress));

  fs::create_directories(to, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("checkpoint consolidate: cannot create ", to.string(), ": ", error.message()));
  }
  // One rank's file: every unit's master, exp_avg and exp_avg_sq whole, in order; 8-bit
  // moments in their stored form over the whole unit, as they are.
  uint64_t total = 0;
  for (size_t u = 0; u < checkpoint.units.size(); ++u) {
    for (int k = 0; k < 3; ++k) {
      const OpenedCheckpoint::Unit& unit = checkpoint.units[u];
      total += unit.eight_bit(k)
                   ? CheckpointMoment8BitBytes(checkpoint, static_cast<int>(u), k, 0, unit.elements)
                   : unit.elements * sizeof(float);
    }
  }
  std::optional<Progress> progress;
  if (request.show_progress) progress.emplace("consolidating " + checkpoint.path, total);
  const fs::path file_path = to / RankFileName(0);
  const int fd = ::open(file_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Errno(errno, "cannot create " + file_path.string());
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } closer{fd};
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> hash(XXH3_createState(),
                                                                       XXH3_freeState);
  XXH3_64bits_reset(hash.get());
  std::vector<float> piece;
  std::vector<uint8_t> stored;
  nlohmann::json units = nlohmann::json::array();
  uint64_t offset = 0;
  for (size_t u = 0; u < checkpoint.units.size(); ++u) {
    const size_t n = checkpoint.units[u].elements;
    nlohmann::json arrays = nlohmann::json::array();
    for (int k = 0; k < 3; ++k) {
      arrays.push_back(ArrayJson(k, checkpoint.units[u].blocks[k], n,
                                 {{{"rank", 0}, {"begin", 0}, {"end", n}, {"offset", offset}}}));
      if (checkpoint.units[u].eight_bit(k)) {  // the stored form, whole (about a byte an element)
        stored.resize(CheckpointMoment8BitBytes(checkpoint, static_cast<int>(u), k, 0, n));
        RETURN_IF_ERROR(
            ReadCheckpointMoment8Bit(checkpoint, static_cast<int>(u), k, 0, n, stored.data()));
        RETURN_IF_ERROR(
            Annotate(WriteAllBytes(fd, stored.data(), stored.size(), file_path.string()),
                     "checkpoint consolidate"));
        XXH3_64bits_update(hash.get(), stored.data(), stored.size());
        if (progress) progress->Advance(stored.size());
        offset += stored.size();
        continue;
      }
      for (size_t begin = 0; begin < n; begin += kPieceElements) {
        const size_t count = std::min(kPieceElements, n - begin);
        piece.resize(count);
        RETURN_IF_ERROR(
            ReadCheckpointArray(checkpoint, static_cast<int>(u), k, begin, count, piece.data()));
        RETURN_IF_ERROR(
            Annotate(WriteAllBytes(fd, piece.data(), count * sizeof(float), file_path.string()),
                     "checkpoint consolidate"));
        XXH3_64bits_update(hash.get(), piece.data(), count * sizeof(float));
        if (progress) progress->Advance(count * sizeof(float));
      }
      offset += n * sizeof(float);
    }
    units.push_back(
        {{"name", checkpoint.units[u].name}, {"elements", n}, {"arrays", std::move(arrays)}});
  }
  if (::fsync(fd) != 0) return Errno(errno, "syncing " + file_path.string());
  closer.fd = -1;
  if (::close(fd) != 0) return Errno(errno, "closing " + file_path.string());

  // The manifest: the source's, with the one file, last.
  ASSIGN_OR_RETURN(const std::vector<char> text, ReadBytes(checkpoint.path + "/checkpoint.json"));
  nlohmann::json meta = nlohmann::json::parse(text.begin(), text.end());  // checked by Open
  meta["version"] = kVersion;
  meta["world"] = 1;
  meta["files"] = {{{"rank", 0},
                    {"name", RankFileName(0)},
                    {"host", HostName()},
                    {"bytes", offset},
                    {"xxh3", Hex(XXH3_64bits_digest(hash.get()))}}};
  meta["units"] = std::move(units);
  meta["checksum"] = MetaChecksum(meta);
  RETURN_IF_ERROR(CopySubdirectory(checkpoint.path, to.string(), kTokenizerDir));
  RETURN_IF_ERROR(CopySubdirectory(checkpoint.path, to.string(), kSourceDir));
  const std::string out = meta.dump(2) + "\n";
  const fs::path temporary = to / "checkpoint.json.tmp";
  RETURN_IF_ERROR(WriteFile(temporary.string(), {{out.data(), out.size()}}));
  RETURN_IF_ERROR(SyncFile(temporary.string()));
  fs::rename(temporary, to / "checkpoint.json", error);
  if (error) {
    return absl::InternalError(absl::StrCat("checkpoint consolidate: cannot rename ",
                                            temporary.string(), ": ", error.message()));
  }
  RETURN_IF_ERROR(SyncFile(to.string()));
  return to.string();
}

}  // namespace strata
