// Writing a checkpoint: see checkpoint_write.h.
#include "checkpoint/checkpoint_write.h"

#include <signal.h>
#include <xxhash.h>

#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_files.h"
#include "checkpoint/checkpoint_format.h"
#include "checkpoint/checkpoint_source.h"
#include "checkpoint/checkpoint_tokenizer.h"
#include "core/progress.h"
#include "data/tokenizer/tokenizer.h"

namespace strata {

using checkpoint_internal::Errno;
using checkpoint_internal::Hex;
using checkpoint_internal::kFormat;
using checkpoint_internal::kVersion;
using checkpoint_internal::ListCheckpoints;
using checkpoint_internal::LoraTargetsOf;
using checkpoint_internal::MetaChecksum;
using checkpoint_internal::ModelJson;
using checkpoint_internal::SyncFile;
using checkpoint_internal::WriteFile;

namespace {

// The fault suite's fault, if it is due after unit `unit` of the checkpoint of `next_step`.
Status CheckpointFaultPoint(const CheckpointFault* fault, int next_step, size_t unit) {
  if (fault == nullptr || fault->step != next_step || fault->unit != static_cast<int>(unit)) {
    return absl::OkStatus();
  }
  if (fault->action == CheckpointFault::Action::kKill) ::raise(SIGKILL);
  return Errno(ENOSPC, absl::StrCat("writing unit-", unit, ".bin"));
}

}  // namespace

StatusOr<std::optional<CheckpointFault>> ParseCheckpointFault(const std::string& text) {
  if (text.empty()) return std::optional<CheckpointFault>();
  const size_t at = text.find('@');
  const size_t colon = text.find(':', at == std::string::npos ? 0 : at);
  CheckpointFault fault;
  const std::string action = text.substr(0, at);
  if (at == std::string::npos || colon == std::string::npos ||
      !absl::SimpleAtoi(text.substr(at + 1, colon - at - 1), &fault.step) ||
      !absl::SimpleAtoi(text.substr(colon + 1), &fault.unit) ||
      (action != "kill" && action != "enospc")) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "': expected kill|enospc@STEP:UNIT"));
  }
  fault.action =
      action == "kill" ? CheckpointFault::Action::kKill : CheckpointFault::Action::kEnospc;
  return std::optional<CheckpointFault>(fault);
}

StatusOr<std::string> SaveCheckpoint(Engine& engine, const Model& model, const Options& options,
                                     int next_step, bool write, const LoraBase* base,
                                     const std::string& tokenizer, const CheckpointFault* fault) {
  namespace fs = std::filesystem;
  const fs::path dir = options.train.checkpoint_dir;
  const fs::path final_dir = dir / absl::StrCat("step-", next_step);
  const fs::path partial = dir / absl::StrCat("step-", next_step, ".partial");
  std::error_code error;
  // A checkpoint that fails half-way (a full disk, an I/O error) leaves nothing behind.
  struct PartialGuard {
    fs::path path;
    bool armed = false;
    ~PartialGuard() {
      std::error_code ignored;
      if (armed) fs::remove_all(path, ignored);
    }
  } guard{partial};
  if (write) {
    fs::create_directories(dir, error);
    if (error)
      return absl::InternalError(
          absl::StrCat("checkpoint: cannot create ", dir.string(), ": ", error.message()));
    // Room for every unit's three fp32 arrays before anything is written (a leftover
    // partial directory of the same step goes first).
    fs::remove_all(partial, error);
    uint64_t tokenizer_bytes = 0;  // the copy of its files
    for (const auto& file : TokenizerFiles(tokenizer)) {
      const uintmax_t size = fs::file_size(file.first, error);
      if (!error) tokenizer_bytes += size;  // else said when the copy is tried
    }
    RETURN_IF_ERROR(CheckRoomForCheckpoint(
        dir.string(),
        CheckpointBytes(model) + tokenizer_bytes + ModelSourceBytes(options.model.from)));
    fs::create_directory(partial, error);
    if (error)
      return absl::InternalError(
          absl::StrCat("checkpoint: cannot create ", partial.string(), ": ", error.message()));
    guard.armed = true;
  }
  nlohmann::json meta = {{"format", kFormat},
                         {"version", kVersion},
                         {"next_step", next_step},
                         {"train_steps", options.train.steps},
                         {"model", ModelJson(options.model)},
                         {"units", nlohmann::json::array()}};
  if (!tokenizer.empty()) meta["tokenizer"] = tokenizer;
  if (write && !tokenizer.empty()) {
    ASSIGN_OR_RETURN(const auto copied, CopyTokenizerFiles(tokenizer, partial.string()));
    if (!copied.empty()) {
      nlohmann::json entries = nlohmann::json::array();
      for (const auto& [name, xxh3] : copied) entries.push_back({{"name", name}, {"xxh3", xxh3}});
      meta["tokenizer_files"] = std::move(entries);
    }
  }
  if (write) {
    ASSIGN_OR_RETURN(nlohmann::json source, CopyModelSource(options.model.from, partial.string()));
    if (!source.is_null()) meta["source"] = std::move(source);
  }
  if (options.lora.enabled()) {
    if (base == nullptr) return absl::InternalError("checkpoint: a LoRA run without its base");
    meta["lora"] = {{"rank", options.lora.rank},
                    {"alpha", absl::StrCat(options.lora.alpha)},
                    {"targets", LoraTargetsOf(model)}};
    meta["base"] = {{"from", base->from},
                    {"seed", base->seed},
                    {"dtype", DTypeName(base->dtype)},
                    {"xxh3", base->xxh3}};
  }
  const std::vector<UnitLayout>& units = model.units();
  std::optional<Progress> progress;
  if (write) progress.emplace(absl::StrCat("checkpoint step-", next_step), CheckpointBytes(model));
  UnitOptimizerState state;  // reused from unit to unit
  for (size_t u = 0; u < units.size(); ++u) {
    if (!units[u].trainable()) continue;  // a LoRA base: referred to by its hash
    // Collective: every rank reads (gathers) the unit; rank 0 writes it.
    RETURN_IF_ERROR(engine.state().ReadOptimizerState(static_cast<int>(u), &state));
    if (!write) continue;
    const size_t n = units[u].used_elements();
    std::vector<std::pair<const char*, size_t>> pieces;
    XXH3_state_t* hash = XXH3_createState();
    XXH3_64bits_reset(hash);
    for (const std::vector<float>* array : {&state.master, &state.exp_avg, &state.exp_avg_sq}) {
      pieces.push_back({reinterpret_cast<const char*>(array->data()), n * sizeof(float)});
      XXH3_64bits_update(hash, array->data(), n * sizeof(float));
    }
    const std::string digest = Hex(XXH3_64bits_digest(hash));
    XXH3_freeState(hash);
    const std::string file = absl::StrCat("unit-", u, ".bin");
    RETURN_IF_ERROR(WriteFile((partial / file).string(), pieces));
    RETURN_IF_ERROR(CheckpointFaultPoint(fault, next_step, u));
    progress->Advance(3 * n * sizeof(float));
    meta["units"].push_back(
        {{"name", units[u].name()}, {"elements", n}, {"file", file}, {"xxh3", digest}});
  }
  if (!write) return final_dir.string();
  meta["checksum"] = MetaChecksum(meta);
  const std::string text = meta.dump(2) + "\n";
  RETURN_IF_ERROR(WriteFile((partial / "checkpoint.json").string(), {{text.data(), text.size()}}));
  // Every file (and the tokenizer's directory) on the disk before the rename makes the
  // checkpoint visible.
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(partial, error)) {
    RETURN_IF_ERROR(SyncFile(entry.path().string()));
  }
  if (error)
    return absl::InternalError(
        absl::StrCat("checkpoint: cannot list ", partial.string(), ": ", error.message()));
  RETURN_IF_ERROR(SyncFile(partial.string()));  // its entries
  fs::remove_all(final_dir, error);
  if (error)
    return absl::InternalError(
        absl::StrCat("checkpoint: cannot replace ", final_dir.string(), ": ", error.message()));
  fs::rename(partial, final_dir, error);
  if (error)
    return absl::InternalError(
        absl::StrCat("checkpoint: cannot rename ", partial.string(), ": ", error.message()));
  guard.armed = false;
  // The rename itself is durable once the directory is synced (best effort: the
  // checkpoint is complete either way).
  SyncFile(dir.string()).IgnoreError();
  const int keep = options.train.checkpoint_keep;
  if (keep > 0) {
    const auto found = ListCheckpoints(dir.string());
    for (size_t i = 0; i + keep < found.size(); ++i) {
      if (found[i].second == final_dir) continue;
      fs::remove_all(found[i].second, error);
      if (error)
        return absl::InternalError(absl::StrCat("checkpoint: cannot remove ",
                                                found[i].second.string(), ": ", error.message()));
    }
  }
  return final_dir.string();
}

}  // namespace strata
