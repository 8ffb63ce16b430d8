// Resuming from a checkpoint: see checkpoint_load.h.
#include "checkpoint/checkpoint_load.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_files.h"
#include "checkpoint/checkpoint_open.h"
#include "collectives/agreement.h"
#include "core/progress.h"

namespace strata {

using checkpoint_internal::CheckFile;
using checkpoint_internal::Hex;
using checkpoint_internal::ReadBytesInto;
using checkpoint_internal::ReadUnitArray;

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
  if (checked.ok()) {
    checked = VerifyCheckpointFiles(*opened, show_progress, rank, world, &failed_file);
  }
  if (world > 1) {
    const uint32_t code = checked.ok()       ? kChecked
                          : failed_file >= 0 ? static_cast<uint32_t>(failed_file)
                                             : kFailedBeforeFiles;
    ASSIGN_OR_RETURN(const std::vector<uint32_t> codes, AgreeOnOutcomes(*agree, code));
    RETURN_IF_ERROR(checked);  // this rank's own error
    for (int r = 0; r < world; ++r) {
      if (codes[r] == kChecked) continue;
      if (codes[r] == kFailedBeforeFiles || codes[r] >= opened->units.size()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint: rank ", r, " could not use ", opened->path, " (its own error says why)"));
      }
      // The same error as that rank's, from this rank's own look at the file.
      const OpenedCheckpoint::Unit& file = opened->units[codes[r]];
      RETURN_IF_ERROR(CheckFile(file.file, 3 * file.elements * 4, file.hash, nullptr));
      return absl::DataLossError(absl::StrCat("checkpoint: ", file.file,
                                              " failed its check on rank ", r, " but not on rank ",
                                              rank, ": do the ranks see different files?"));
    }
  }
  RETURN_IF_ERROR(checked);
  const std::string& path = opened->path;
  std::vector<int> trainable;
  for (size_t u = 0; u < model.units().size(); ++u) {
    if (model.units()[u].trainable()) trainable.push_back(static_cast<int>(u));
  }
  const std::vector<OpenedCheckpoint::Unit>& files = opened->units;
  const int next_step = opened->next_step;
  uint64_t checkpoint_bytes = 0;
  for (const OpenedCheckpoint::Unit& file : files) checkpoint_bytes += 3 * file.elements * 4;
  std::optional<Progress> loading;
  if (show_progress) loading.emplace(absl::StrCat("resuming from ", path), checkpoint_bytes);
  // Buffers reused from unit to unit: fresh pages per unit cost more than the copies.
  std::vector<char> bytes;
  UnitOptimizerState state;
  for (size_t u = 0; u < files.size(); ++u) {
    const size_t n = files[u].elements;
    const auto [begin, end] = engine.state().StoredRange(trainable[u]);
    if (begin > 0 || end < n) {
      // This rank stores a shard (stage 3 on several ranks): only its part of each array
      // is read, zero past the used elements.
      const size_t part = end - begin, used = begin < n ? std::min(end, n) - begin : 0;
      std::vector<float>* arrays[] = {&state.master, &state.exp_avg, &state.exp_avg_sq};
      for (int k = 0; k < 3; ++k) {
        arrays[k]->assign(part, 0.0f);
        if (used > 0) {
          RETURN_IF_ERROR(
              ReadUnitArray(files[u].file, files[u].elements, k, begin, used, arrays[k]->data()));
        }
      }
      RETURN_IF_ERROR(engine.state().WriteStoredState(
          trainable[u], state.master.data(), state.exp_avg.data(), state.exp_avg_sq.data()));
      if (loading) loading->Advance(3 * n * sizeof(float));
      continue;
    }
    RETURN_IF_ERROR(ReadBytesInto(files[u].file, &bytes));
    if (bytes.size() != 3 * n * sizeof(float) ||
        Hex(XXH3_64bits(bytes.data(), bytes.size())) != files[u].hash) {
      return absl::DataLossError(absl::StrCat("checkpoint: ", files[u].file,
                                              " changed while "
                                              "it was being loaded"));
    }
    size_t offset = 0;
    const size_t padded = engine.state().PaddedElements(trainable[u]);
    for (std::vector<float>* array : {&state.master, &state.exp_avg, &state.exp_avg_sq}) {
      array->resize(padded);
      std::memcpy(array->data(), bytes.data() + offset, n * sizeof(float));
      std::fill(array->begin() + static_cast<ptrdiff_t>(n), array->end(), 0.0f);
      offset += n * sizeof(float);
    }
    RETURN_IF_ERROR(engine.state().WriteOptimizerState(trainable[u], state));
    if (loading) loading->Advance(bytes.size());
  }
  return LoadedCheckpoint{next_step, path};
}

}  // namespace strata
