// Resuming from a checkpoint: see checkpoint_load.h.
#include "checkpoint/checkpoint_load.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_open.h"
#include "collectives/agreement.h"
#include "core/progress.h"

namespace strata {


namespace {

// What a rank tells the others of its share of a resume's file checks (else the index of
// the file that failed).
constexpr uint32_t kChecked = 0xffffffffu;
constexpr uint32_t kFailedBeforeFiles = 0xfffffffeu;

}  // namespace

StatusOr<LoadedCheckpoint> LoadCheckpoint(Engine& engine, const Model& model,
                                          const Options& options, const std::string& where,
                                          bool show_progress, const LoraBase* base,
                                          Communicator* agree) {
  // Every check before any state changes: the metadata against the run, then the files
  // (streamed: host memory holds one unit, whatever the model), each rank its share, and
  // every rank learns whether any failed.
  const int world = agree != nullptr ? agree->world_size() : 1;
  const int rank = agree != nullptr ? agree->rank() : 0;
  StatusOr<OpenedCheckpoint> opened =
      OpenCheckpointForRun(model, options, where, base, /*say=*/show_progress);
  int failed_file = -1;
  Status checked = opened.status();
  std::vector<int> trainable;
  for (size_t u = 0; u < model.units().size(); ++u) {
    if (model.units()[u].trainable()) trainable.push_back(static_cast<int>(u));
  }
  if (checked.ok()) {
    // Where every rank holds whole units (one rank, or stage 0) the ranks share the files'
    // check (rank r checks files r, r + world, ...); where each holds its shard it checks
    // the files its shards lie in (at the writer's world size and stage: its own file).
    bool whole = true;
    std::vector<int> needed;
    for (size_t i = 0; i < trainable.size() && i < opened->units.size(); ++i) {
      const auto [begin, end] = engine.state().StateRange(trainable[i]);
      if (begin > 0 || end < engine.state().PaddedElements(trainable[i])) whole = false;
      const size_t used = opened->units[i].elements;
      if (begin >= used) continue;
      for (const int file : CheckpointFilesFor(*opened, static_cast<int>(i), begin,
                                               std::min(end, used))) {
        needed.push_back(file);
      }
    }
    std::sort(needed.begin(), needed.end());
    needed.erase(std::unique(needed.begin(), needed.end()), needed.end());
    // Every file this rank reads is there (node-local directories hold only their own
    // ranks' files): a missing one is named, with its host, before any state changes.
    for (const int file : needed) {
      if (!checked.ok()) break;
      std::error_code error;
      if (!std::filesystem::exists(opened->files[file].path, error)) {
        checked = VerifyCheckpointFileList(*opened, {file}, false, &failed_file);
      }
    }
    if (checked.ok()) {
      checked = whole ? VerifyCheckpointFiles(*opened, show_progress, rank, world, &failed_file)
                      : VerifyCheckpointFileList(*opened, needed, show_progress, &failed_file);
    }
  }
  if (world > 1) {
    const uint32_t code = checked.ok()       ? kChecked
                          : failed_file >= 0 ? static_cast<uint32_t>(failed_file)
                                             : kFailedBeforeFiles;
    ASSIGN_OR_RETURN(const std::vector<uint32_t> codes, AgreeOnOutcomes(*agree, code));
    RETURN_IF_ERROR(checked);  // this rank's own error
    for (int r = 0; r < world; ++r) {
      if (codes[r] == kChecked) continue;
      if (codes[r] == kFailedBeforeFiles || codes[r] >= opened->files.size()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint: rank ", r, " could not use ", opened->path, " (its own error says why)"));
      }
      // The same error as that rank's, from this rank's own look at the file.
      const int index = static_cast<int>(codes[r]);
      RETURN_IF_ERROR(VerifyCheckpointFileList(*opened, {index}, false));
      return absl::DataLossError(absl::StrCat("checkpoint: ", opened->files[index].path,
                                              " failed its check on rank ", r, " but not on rank ",
                                              rank, ": do the ranks see different files (node-local "
                                              "directories without every file each rank reads)?"));
    }
  }
  RETURN_IF_ERROR(checked);
  const std::string& path = opened->path;
  const std::vector<OpenedCheckpoint::Unit>& files = opened->units;
  const int next_step = opened->next_step;
  uint64_t checkpoint_bytes = 0;
  for (size_t u = 0; u < files.size(); ++u) {
    const auto [begin, end] = engine.state().StateRange(trainable[u]);
    const size_t n = files[u].elements;
    if (begin < n) checkpoint_bytes += 3 * (std::min(end, n) - begin) * sizeof(float);
  }
  std::optional<Progress> loading;
  if (show_progress) loading.emplace(absl::StrCat("resuming from ", path), checkpoint_bytes);
  // Each unit's state over the range this rank holds (its shard where the optimizer state is
  // sharded, else the whole unit), read from whichever files hold it (pread), zero past the
  // used elements. Buffers reused from unit to unit: fresh pages per unit cost more than
  // the copies.
  UnitOptimizerState state;
  for (size_t u = 0; u < files.size(); ++u) {
    const size_t n = files[u].elements;
    const auto [begin, end] = engine.state().StateRange(trainable[u]);
    const size_t used = begin < n ? std::min(end, n) - begin : 0;
    std::vector<float>* arrays[] = {&state.master, &state.exp_avg, &state.exp_avg_sq};
    for (int k = 0; k < 3; ++k) {
      arrays[k]->assign(end - begin, 0.0f);
      if (used > 0) {
        RETURN_IF_ERROR(ReadCheckpointArray(*opened, static_cast<int>(u), k, begin, used,
                                            arrays[k]->data()));
      }
    }
    // Collective at stages 1-2 on several ranks (the params gathered from the masters).
    RETURN_IF_ERROR(engine.state().WriteStateRange(
        trainable[u], state.master.data(), state.exp_avg.data(), state.exp_avg_sq.data()));
    if (loading) loading->Advance(3 * used * sizeof(float));
  }
  return LoadedCheckpoint{next_step, path};
}

}  // namespace strata
