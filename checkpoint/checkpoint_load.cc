// Resuming from a checkpoint: see checkpoint_load.h.
#include "checkpoint/checkpoint_load.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_layout.h"
#include "checkpoint/checkpoint_open.h"
#include "collectives/agreement.h"
#include "core/logging.h"
#include "core/progress.h"

namespace strata {

using checkpoint_internal::BlocksOfRuns;
using checkpoint_internal::ByteCopy;
using checkpoint_internal::MomentSliceCopies;
using checkpoint_internal::QuantizedBlocks;

namespace {

// What a rank tells the others of its share of a resume's file checks (else the index of
// the file that failed).
constexpr uint32_t kChecked = 0xffffffffu;
constexpr uint32_t kFailedBeforeFiles = 0xfffffffeu;

// What LoadUnit reuses from unit to unit (fresh pages per unit cost more than the copies)
// and what it converted so far.
struct UnitLoad {
  UnitOptimizerState state;
  std::vector<uint8_t> stored[2], part;
  std::vector<float> values;
  bool to_fp32 = false;       // 8-bit moments dequantized for an fp32 run
  bool to_8bit = false;       // fp32 moments quantized for an int8 run
  bool other_blocks = false;  // 8-bit moments on other blocks than the run's: through fp32
};

// Checkpoint unit `u` into the engine's unit `unit` over the range this rank holds, zero
// past the used elements. The moments as the engine keeps them: fp32 (an 8-bit array
// dequantized), or 8-bit in their stored form, taken as they are where the checkpoint's
// blocks are the engine's (an exact resume), else quantized from fp32 values. Collective at
// stages 1-2 on several ranks (the params gathered from the masters).
Status LoadUnit(Engine& engine, const OpenedCheckpoint& opened, int u, int unit, UnitLoad* load) {
  const OpenedCheckpoint::Unit& entry = opened.units[u];
  const size_t n = entry.elements;
  const auto [begin, end] = engine.state().StateRange(unit);
  const size_t used = begin < n ? std::min(end, n) - begin : 0;
  UnitOptimizerState& state = load->state;
  state.master.assign(end - begin, 0.0f);
  if (used > 0) {
    RETURN_IF_ERROR(ReadCheckpointArray(opened, u, 0, begin, used, state.master.data()));
  }
  const std::vector<StateRun>& runs = engine.state().MomentRuns(unit);
  if (runs.empty()) {  // fp32 moments
    std::vector<float>* moments[] = {&state.exp_avg, &state.exp_avg_sq};
    for (int k = 1; k < 3; ++k) {
      moments[k - 1]->assign(end - begin, 0.0f);
      if (used == 0) continue;
      RETURN_IF_ERROR(ReadCheckpointArray(opened, u, k, begin, used, moments[k - 1]->data()));
      load->to_fp32 = load->to_fp32 || entry.eight_bit(k);
    }
    return engine.state().WriteStateRange(unit, state.master.data(), state.exp_avg.data(),
                                          state.exp_avg_sq.data());
  }
  // 8-bit moments.
  const QuantizedBlocks mine = BlocksOfRuns(runs);
  const ShardRange range{begin, end}, held{begin, begin + used};
  std::vector<float>& values = load->values;
  for (int k = 1; k < 3; ++k) {
    std::vector<uint8_t>& out = load->stored[k - 1];
    out.resize(engine.state().StoredMomentBytes(unit));
    const bool is_signed = k == 1;
    bool same = entry.eight_bit(k);
    for (size_t b = begin / kAdamStateBlock; same && b * kAdamStateBlock < held.end; ++b) {
      same = mine.quantized(b) == entry.blocks[k].quantized(b);
    }
    values.assign(end - begin, 0.0f);
    if (!same) {  // quantized from fp32 values (an 8-bit array dequantized first)
      if (used > 0) {
        RETURN_IF_ERROR(ReadCheckpointArray(opened, u, k, begin, used, values.data()));
      }
      MomentFromFp32(runs, is_signed, values.data(), out.data());
      (entry.eight_bit(k) ? load->other_blocks : load->to_8bit) = true;
      continue;
    }
    // As they are: the fresh form (zero moments: the padding's), then the checkpoint's
    // form of the used elements, a prefix of each of its sections.
    MomentFromFp32(runs, is_signed, values.data(), out.data());
    if (used == 0) continue;
    std::vector<uint8_t>& part = load->part;
    part.resize(CheckpointMoment8BitBytes(opened, u, k, held.begin, held.end));
    RETURN_IF_ERROR(ReadCheckpointMoment8Bit(opened, u, k, held.begin, held.end, part.data()));
    for (const ByteCopy& copy : MomentSliceCopies(mine, held, range, held)) {
      std::memcpy(out.data() + copy.to, part.data() + copy.from, copy.bytes);
    }
  }
  return engine.state().WriteStateRange8Bit(unit, state.master.data(), load->stored[0].data(),
                                            load->stored[1].data());
}

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
      // An 8-bit moment is read in whole blocks (an fp32 run's shards need not be on them).
      const bool blocks = opened->units[i].eight_bit(1) || opened->units[i].eight_bit(2);
      const size_t first = blocks ? begin / kAdamStateBlock * kAdamStateBlock : begin;
      const size_t last = std::min(
          used, blocks ? (end + kAdamStateBlock - 1) / kAdamStateBlock * kAdamStateBlock : end);
      for (const int file : CheckpointFilesFor(*opened, static_cast<int>(i), first, last)) {
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
  // The bytes of the checkpoint a rank reads for unit u's used elements [begin, begin + used).
  auto unit_bytes = [&](size_t u, size_t begin, size_t used) {
    uint64_t bytes = used * sizeof(float);
    for (int k = 1; k < 3 && used > 0; ++k) {
      bytes += files[u].eight_bit(k)
                   ? CheckpointMoment8BitBytes(*opened, static_cast<int>(u), k, begin, begin + used)
                   : used * sizeof(float);
    }
    return bytes;
  };
  uint64_t checkpoint_bytes = 0;
  for (size_t u = 0; u < files.size(); ++u) {
    const auto [begin, end] = engine.state().StateRange(trainable[u]);
    const size_t n = files[u].elements;
    if (begin < n) checkpoint_bytes += unit_bytes(u, begin, std::min(end, n) - begin);
  }
  std::optional<Progress> loading;
  if (show_progress) loading.emplace(absl::StrCat("resuming from ", path), checkpoint_bytes);
  // Each unit's state over the range this rank holds (its shard where the optimizer state is
  // sharded, else the whole unit), read from whichever files hold it (pread).
  UnitLoad load;
  for (size_t u = 0; u < files.size(); ++u) {
    RETURN_IF_ERROR(LoadUnit(engine, *opened, static_cast<int>(u), trainable[u], &load));
    const auto [begin, end] = engine.state().StateRange(trainable[u]);
    const size_t n = files[u].elements;
    if (loading) loading->Advance(unit_bytes(u, begin, begin < n ? std::min(end, n) - begin : 0));
  }
  if (show_progress && load.to_fp32) {
    spdlog::info(
        "resuming {}: converted 8-bit Adam states to fp32 (the checkpoint's run had "
        "train.optimizer_states=int8, this one fp32)",
        path);
  }
  if (show_progress && load.to_8bit) {
    spdlog::info(
        "resuming {}: converted fp32 Adam states to 8-bit (the checkpoint's run had "
        "train.optimizer_states=fp32, this one int8)",
        path);
  }
  if (show_progress && load.other_blocks) {
    spdlog::warn(
        "resuming {}: the checkpoint's 8-bit Adam states are on other blocks than this "
        "run's: converted through fp32 (close, not exact)",
        path);
  }
  return LoadedCheckpoint{next_step, path};
}

}  // namespace strata
