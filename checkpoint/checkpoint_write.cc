// Writing a checkpoint: see checkpoint_write.h.
#include "checkpoint/checkpoint_write.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_files.h"
#include "checkpoint/checkpoint_format.h"
#include "checkpoint/checkpoint_layout.h"
#include "checkpoint/checkpoint_source.h"
#include "checkpoint/checkpoint_tokenizer.h"
#include "collectives/agreement.h"
#include "core/files.h"
#include "core/progress.h"
#include "core/run_identity.h"
#include "data/tokenizer/tokenizer.h"

namespace strata {

using checkpoint_internal::ArrayJson;
using checkpoint_internal::BlocksOfRuns;
using checkpoint_internal::ByteCopy;
using checkpoint_internal::Errno;
using checkpoint_internal::Hex;
using checkpoint_internal::kArrayNames;
using checkpoint_internal::kFormat;
using checkpoint_internal::kVersion;
using checkpoint_internal::ListCheckpoints;
using checkpoint_internal::LoraTargetsOf;
using checkpoint_internal::MetaChecksum;
using checkpoint_internal::ModelJson;
using checkpoint_internal::MomentSliceCopies;
using checkpoint_internal::QuantizedBlocks;
using checkpoint_internal::RankFileLayout;
using checkpoint_internal::RankFileName;
using checkpoint_internal::RankPiece;
using checkpoint_internal::SyncFile;
using checkpoint_internal::WriteFile;

namespace {

namespace fs = std::filesystem;

// The fault suite's fault, if it is due at `phase` (and unit `unit`) of the checkpoint of
// `next_step` on rank `rank`.
Status CheckpointFaultPoint(const CheckpointFault* fault, int next_step, int rank,
                            CheckpointFault::Phase phase, int unit = 0) {
  if (fault == nullptr || fault->step != next_step || fault->phase != phase ||
      (phase == CheckpointFault::Phase::kUnit && fault->unit != unit) ||
      (fault->rank >= 0 && fault->rank != rank)) {
    return absl::OkStatus();
  }
  if (fault->action == CheckpointFault::Action::kKill) ::raise(SIGKILL);
  return Errno(ENOSPC, phase == CheckpointFault::Phase::kUnit
                           ? absl::StrCat("writing unit ", unit, " into ", RankFileName(rank))
                       : phase == CheckpointFault::Phase::kManifest
                           ? std::string("writing checkpoint.json")
                           : std::string("removing older checkpoints"));
}

// Every rank's outcome of a phase: this rank's own error, else the first failed rank's
// (named), else OK. No collective without a communicator or at one rank.
Status AgreeOnStatus(Communicator* communicator, const Status& mine, const std::string& what) {
  if (communicator == nullptr || communicator->world_size() == 1) return mine;
  ASSIGN_OR_RETURN(const std::vector<std::string> all,
                   GatherTexts(*communicator, mine.ok() ? std::string()
                                                        : absl::StrCat("!", mine.message())));
  if (!mine.ok()) return mine;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty()) continue;
    return absl::AbortedError(
        absl::StrCat("checkpoint: rank ", r, " failed ", what, ": ", all[r].substr(1)));
  }
  return absl::OkStatus();
}

// Removes a step-<k> directory: its manifest first (synced: from then on it is not a
// checkpoint), then the rest. Where the directory is shared by the writers of several
// hosts another may be removing it too: what is already gone is not an error.
Status RemoveCheckpointDir(const fs::path& path) {
  std::error_code error;
  if (!fs::exists(path, error)) return absl::OkStatus();
  fs::remove(path / "checkpoint.json", error);
  SyncFile(path.string()).IgnoreError();
  fs::remove_all(path, error);
  if (error && fs::exists(path)) {
    return absl::InternalError(
        absl::StrCat("checkpoint: cannot remove ", path.string(), ": ", error.message()));
  }
  return absl::OkStatus();
}

// The byte ranges of a unit's state range as read into memory (the fp32 master over
// `range`, then with 8-bit moments (`blocks` non-empty) each moment's stored form over it,
// else the fp32 moments) that make up its piece [piece.begin, piece.end) in the rank file,
// in file order: copied in this order they give the piece's bytes in a row.
std::vector<ByteCopy> PieceCopies(const QuantizedBlocks& blocks, ShardRange range,
                                  const RankPiece& piece) {
  std::vector<ByteCopy> copies;
  const size_t n = range.end - range.begin;
  const uint64_t within = (piece.begin - range.begin) * sizeof(float);
  uint64_t to = 0;
  auto add = [&](uint64_t from, uint64_t bytes) {
    if (bytes > 0) copies.push_back({from, to, bytes});
    to += bytes;
  };
  add(within, piece.bytes[0]);
  if (blocks.empty()) {
    add(n * sizeof(float) + within, piece.bytes[1]);
    add(2 * n * sizeof(float) + within, piece.bytes[2]);
    return copies;
  }
  const uint64_t moment_bytes = checkpoint_internal::SectionsOver(blocks, range).bytes();
  for (int k = 0; k < 2; ++k) {
    const uint64_t origin = n * sizeof(float) + k * moment_bytes;
    for (const ByteCopy& section :
         MomentSliceCopies(blocks, range, {piece.begin, piece.end}, {piece.begin, piece.end})) {
      add(origin + section.from, section.bytes);
    }
  }
  return copies;
}

// Bytes of a unit's state range as read into memory (see PieceCopies).
uint64_t StateRangeBytes(const QuantizedBlocks& blocks, ShardRange range) {
  const uint64_t n = range.end - range.begin;
  if (blocks.empty()) return 3 * n * sizeof(float);
  return n * sizeof(float) + 2 * checkpoint_internal::SectionsOver(blocks, range).bytes();
}

// A unit's state range read into `data` (StateRangeBytes): the fp32 master and the moments,
// fp32 or (with 8-bit states) in their stored form.
Status ReadUnitState(Engine& engine, int unit, const QuantizedBlocks& blocks, ShardRange range,
                     uint8_t* data) {
  const size_t n = range.end - range.begin;
  float* master = reinterpret_cast<float*>(data);
  if (blocks.empty()) {
    return engine.state().ReadStateRange(unit, master, master + n, master + 2 * n);
  }
  uint8_t* moments = data + n * sizeof(float);
  return engine.state().ReadStateRange8Bit(unit, master, moments,
                                           moments + engine.state().StoredMomentBytes(unit));
}

// This rank's file: the shard it owns of every trainable unit (`layout`), read one unit
// at a time (a shard in memory, or the whole unit where every rank holds it whole), written
// and synced; returns its XXH3.
StatusOr<std::string> WriteRankFile(Engine& engine, const std::vector<int>& trainable,
                                    const std::vector<QuantizedBlocks>& blocks,
                                    const std::vector<RankPiece>& layout, const fs::path& path,
                                    int next_step, int rank, const CheckpointFault* fault,
                                    Progress* progress) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Errno(errno, "cannot create " + path.string());
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } closer{fd};
  XXH3_state_t* hash = XXH3_createState();
  XXH3_64bits_reset(hash);
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> hash_owner(hash,
                                                                              XXH3_freeState);
  std::vector<float> state;  // reused from unit to unit (floats: aligned for the master)
  for (size_t i = 0; i < trainable.size(); ++i) {
    const auto [begin, end] = engine.state().StateRange(trainable[i]);
    const RankPiece& piece = layout[i];
    const size_t count = piece.end - piece.begin;
    if (count > 0 && (piece.begin < begin || piece.end > end)) {
      return absl::InternalError(absl::StrCat("checkpoint: unit ", trainable[i], ": rank ", rank,
                                              " holds [", begin, ", ", end, "), owns [",
                                              piece.begin, ", ", piece.end, ")"));
    }
    const ShardRange range{begin, end};
    state.resize((StateRangeBytes(blocks[i], range) + 3) / 4);
    uint8_t* data = reinterpret_cast<uint8_t*>(state.data());
    RETURN_IF_ERROR(ReadUnitState(engine, trainable[i], blocks[i], range, data));
    uint64_t written = 0;
    for (const ByteCopy& copy :
         count > 0 ? PieceCopies(blocks[i], range, piece) : std::vector<ByteCopy>{}) {
      RETURN_IF_ERROR(
          Annotate(WriteAllBytes(fd, data + copy.from, copy.bytes, path.string()), "checkpoint"));
      XXH3_64bits_update(hash, data + copy.from, copy.bytes);
      written += copy.bytes;
    }
    RETURN_IF_ERROR(
        CheckpointFaultPoint(fault, next_step, rank, CheckpointFault::Phase::kUnit, trainable[i]));
    if (progress != nullptr) progress->Advance(written);
  }
  if (::fsync(fd) != 0) return Errno(errno, "syncing " + path.string());
  closer.fd = -1;
  if (::close(fd) != 0) return Errno(errno, "closing " + path.string());
  return Hex(XXH3_64bits_digest(hash));
}

// What the phases of one checkpoint share: its layout and this rank's part in it.
struct CheckpointPlan {
  Communicator* communicator = nullptr;
  int world = 1, rank = 0, next_step = 0;
  fs::path dir, step_dir, own_file;
  std::string step_name;
  std::vector<int> trainable;  // the units written, in order
  std::vector<size_t> used;    // their used elements
  // Per trainable unit, with 8-bit Adam states: its blocks over the padded unit (which hold
  // 8-bit moments); empty: fp32 moments.
  std::vector<QuantizedBlocks> blocks;
  std::vector<std::vector<RankPiece>> layouts;  // per rank, per trainable unit
  std::vector<uint64_t> file_bytes;             // per rank
  std::vector<std::string> hosts;               // per rank
  bool writes_manifest = false;
  Status created;  // this rank's step directory
};

}  // namespace

StatusOr<std::optional<CheckpointFault>> ParseCheckpointFault(const std::string& text) {
  if (text.empty()) return std::optional<CheckpointFault>();
  const std::vector<std::string> parts = absl::StrSplit(text, absl::ByAnyChar("@:"));
  CheckpointFault fault;
  bool ok = (parts.size() == 3 || parts.size() == 4) &&
            (parts[0] == "kill" || parts[0] == "enospc") &&
            absl::SimpleAtoi(parts[1], &fault.step) && text.find('@') == parts[0].size();
  if (ok) {
    if (parts[2] == "manifest") {
      fault.phase = CheckpointFault::Phase::kManifest;
    } else if (parts[2] == "keep") {
      fault.phase = CheckpointFault::Phase::kKeep;
    } else {
      ok = absl::SimpleAtoi(parts[2], &fault.unit) && fault.unit >= 0;
    }
  }
  if (ok && parts.size() == 4) ok = absl::SimpleAtoi(parts[3], &fault.rank) && fault.rank >= 0;
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "': expected kill|enospc@STEP:WHERE[:RANK] (WHERE: a unit, manifest or keep)"));
  }
  fault.action =
      parts[0] == "kill" ? CheckpointFault::Action::kKill : CheckpointFault::Action::kEnospc;
  return std::optional<CheckpointFault>(fault);
}

namespace {

// Phases 0-1 of a checkpoint (collective): the layout, the manifest writers, the room,
// a step-<k> of an earlier run removed; and this rank's step directory created.
StatusOr<CheckpointPlan> PrepareCheckpoint(Engine& engine, const Model& model,
                                           const Options& options, int next_step,
                                           const CheckpointContext& context) {
  CheckpointPlan plan;
  plan.next_step = next_step;
  Communicator* communicator = plan.communicator = context.communicator;
  const int world = plan.world = communicator != nullptr ? communicator->world_size() : 1;
  const int rank = plan.rank = communicator != nullptr ? communicator->rank() : 0;
  const std::string host = context.host.empty() ? HostName() : context.host;
  const fs::path dir = plan.dir = options.train.checkpoint_dir;
  const fs::path step_dir = plan.step_dir = dir / absl::StrCat("step-", next_step);
  const std::string step_name = plan.step_name = absl::StrCat("step-", next_step);
  plan.own_file = step_dir / RankFileName(rank);
  const std::vector<UnitLayout>& units = model.units();
  std::vector<int>& trainable = plan.trainable;
  std::vector<size_t>& used = plan.used;
  std::vector<size_t> shard_elements;
  for (size_t u = 0; u < units.size(); ++u) {
    if (!units[u].trainable()) continue;  // a LoRA base: referred to by its hash
    trainable.push_back(static_cast<int>(u));
    used.push_back(units[u].used_elements());
    const size_t padded = engine.state().PaddedElements(static_cast<int>(u));
    shard_elements.push_back(padded / world);
    // 8-bit states: the rule's blocks over the whole unit (every rank's decision for a block
    // is the same), checked against this rank's own runs.
    QuantizedBlocks& blocks = plan.blocks.emplace_back();
    const std::vector<StateRun>& runs = engine.state().MomentRuns(static_cast<int>(u));
    if (runs.empty()) continue;
    blocks = BlocksOfRuns(StateRuns(units[u], {0, padded}));
    const QuantizedBlocks own = BlocksOfRuns(runs);
    for (size_t b = runs.front().begin / kAdamStateBlock; b * kAdamStateBlock < runs.back().end;
         ++b) {
      if (blocks.quantized(b) != own.quantized(b)) {
        return absl::InternalError(
            absl::StrCat("checkpoint: unit ", units[u].name(), ": block ", b,
                         " of this rank's 8-bit states differs from the rule's"));
      }
    }
  }
  std::vector<std::vector<RankPiece>>& layouts = plan.layouts;
  std::vector<uint64_t>& file_bytes = plan.file_bytes;
  layouts.resize(world);
  file_bytes.resize(world);
  for (int r = 0; r < world; ++r) {
    layouts[r] = RankFileLayout(used, shard_elements, plan.blocks, r, &file_bytes[r]);
  }
  // Nothing of the engine in flight on the communicator before the agreements below (a
  // delayed update is put in place first).
  RETURN_IF_ERROR(engine.state().Sync());
  // The manifest writers: the lowest rank on each host.
  std::vector<std::string>& hosts = plan.hosts;
  hosts = {host};
  if (communicator != nullptr) {
    ASSIGN_OR_RETURN(hosts, GatherTexts(*communicator, host));
  }
  const bool writes_manifest = plan.writes_manifest =
      std::find(hosts.begin(), hosts.end(), host) - hosts.begin() == rank;

  // 1. The room for this rank's files, and a step-<k> of an earlier run removed (manifest
  //    first) before any rank writes into it.
  Status prepared = [&]() -> Status {
    std::error_code error;
    fs::create_directories(dir, error);
    if (error) {
      return absl::InternalError(
          absl::StrCat("checkpoint: cannot create ", dir.string(), ": ", error.message()));
    }
    uint64_t bytes = file_bytes[rank];
    if (writes_manifest) {
      bytes += 1 << 20;  // the manifest and slack
      for (const auto& file : TokenizerFiles(context.tokenizer)) {
        const uintmax_t size = fs::file_size(file.first, error);
        if (!error) bytes += size;  // else said when the copy is tried
      }
      bytes += ModelSourceBytes(options.model.from);
      RETURN_IF_ERROR(RemoveCheckpointDir(step_dir));
      RETURN_IF_ERROR(RemoveCheckpointDir(dir / (step_name + ".partial")));  // versions 1-5
    }
    return CheckRoomForCheckpoint(dir.string(), bytes);
  }();
  RETURN_IF_ERROR(AgreeOnStatus(communicator, prepared, "to prepare " + step_dir.string()));

  // This rank's room in it (an error here is this rank's outcome, exchanged later).
  std::error_code error;
  fs::create_directories(step_dir, error);
  if (error) {
    plan.created = absl::InternalError(
        absl::StrCat("checkpoint: cannot create ", step_dir.string(), ": ", error.message()));
  }
  return plan;
}

// Phases 3-6 (collective), once this rank's file is durable (`own_hash`) or failed: the
// exchange of outcomes and hashes, the manifest, the barrier, checkpoint_keep.
StatusOr<std::string> CompleteCheckpoint(const CheckpointPlan& plan,
                                         const StatusOr<std::string>& own_hash,
                                         const Model& model, const Options& options,
                                         const CheckpointContext& context) {
  // 3. The exchange: each rank's outcome and its file's XXH3.
  const std::vector<UnitLayout>& units = model.units();
  Communicator* communicator = plan.communicator;
  const int world = plan.world;
  const int rank = plan.rank;
  const int next_step = plan.next_step;
  const fs::path& dir = plan.dir;
  const fs::path& step_dir = plan.step_dir;
  const std::string& step_name = plan.step_name;
  const fs::path& own_file = plan.own_file;
  const bool writes_manifest = plan.writes_manifest;
  const std::vector<int>& trainable = plan.trainable;
  const std::vector<size_t>& used = plan.used;
  const std::vector<std::vector<RankPiece>>& layouts = plan.layouts;
  const std::vector<uint64_t>& file_bytes = plan.file_bytes;
  const std::vector<std::string>& hosts = plan.hosts;
  std::vector<std::string> hashes = {own_hash.ok() ? *own_hash : std::string()};
  Status written = own_hash.status();
  if (communicator != nullptr && world > 1) {
    ASSIGN_OR_RETURN(hashes, GatherTexts(*communicator,
                                         own_hash.ok() ? *own_hash
                                                       : absl::StrCat("!", own_hash.status().message())));
    for (int r = 0; r < world && written.ok(); ++r) {
      if (!hashes[r].empty() && hashes[r][0] == '!') {
        written = absl::AbortedError(absl::StrCat("checkpoint: rank ", r, " failed to write ",
                                                  (step_dir / RankFileName(r)).string(), ": ",
                                                  hashes[r].substr(1)));
      }
    }
  }
  if (!written.ok()) {
    // Every rank is done with the directory: nothing of it stays.
    std::error_code ignored;
    fs::remove(own_file, ignored);
    if (writes_manifest) RemoveCheckpointDir(step_dir).IgnoreError();
    return written;
  }

  // 4. The manifest, last: written by the lowest rank on each host, identical everywhere.
  Status manifest = [&]() -> Status {
    RETURN_IF_ERROR(
        CheckpointFaultPoint(context.fault, next_step, rank, CheckpointFault::Phase::kManifest));
    if (!writes_manifest) return absl::OkStatus();
    nlohmann::json meta = {{"format", kFormat},
                           {"version", kVersion},
                           {"next_step", next_step},
                           {"train_steps", options.train.steps},
                           {"model", ModelJson(options.model)},
                           {"world", world},
                           {"files", nlohmann::json::array()},
                           {"units", nlohmann::json::array()}};
    for (int r = 0; r < world; ++r) {
      meta["files"].push_back({{"rank", r},
                               {"name", RankFileName(r)},
                               {"host", hosts[r]},
                               {"bytes", file_bytes[r]},
                               {"xxh3", hashes[r]}});
    }
    for (size_t i = 0; i < trainable.size(); ++i) {
      nlohmann::json arrays = nlohmann::json::array();
      for (int k = 0; k < 3; ++k) {
        nlohmann::json shards = nlohmann::json::array();
        for (int r = 0; r < world; ++r) {
          const RankPiece& piece = layouts[r][i];
          if (piece.end == piece.begin) continue;
          shards.push_back({{"rank", r},
                            {"begin", piece.begin},
                            {"end", piece.end},
                            {"offset", piece.offsets[k]}});
        }
        arrays.push_back(ArrayJson(k, plan.blocks[i], used[i], std::move(shards)));
      }
      meta["units"].push_back({{"name", units[trainable[i]].name()},
                               {"elements", used[i]},
                               {"arrays", std::move(arrays)}});
    }
    const std::string& tokenizer = context.tokenizer;
    if (!tokenizer.empty()) {
      meta["tokenizer"] = tokenizer;
      ASSIGN_OR_RETURN(const auto copied, CopyTokenizerFiles(tokenizer, step_dir.string()));
      if (!copied.empty()) {
        nlohmann::json entries = nlohmann::json::array();
        for (const auto& [name, xxh3] : copied) entries.push_back({{"name", name}, {"xxh3", xxh3}});
        meta["tokenizer_files"] = std::move(entries);
      }
    }
    ASSIGN_OR_RETURN(nlohmann::json source, CopyModelSource(options.model.from, step_dir.string()));
    if (!source.is_null()) meta["source"] = std::move(source);
    if (options.lora.enabled()) {
      const LoraBase* base = context.base;
      if (base == nullptr) return absl::InternalError("checkpoint: a LoRA run without its base");
      meta["lora"] = {{"rank", options.lora.rank},
                      {"alpha", absl::StrCat(options.lora.alpha)},
                      {"targets", LoraTargetsOf(model)}};
      meta["base"] = {{"from", base->from},
                      {"seed", base->seed},
                      {"dtype", DTypeName(base->dtype)},
                      {"base_dtype", BaseDTypeName(base->base_dtype)},
                      {"xxh3", base->xxh3}};
    }
    meta["checksum"] = MetaChecksum(meta);
    const std::string text = meta.dump(2) + "\n";
    // The copies (tokenizer, source) on the disk before the manifest names them.
    std::error_code error, ignored;
    for (const fs::directory_entry& entry : fs::recursive_directory_iterator(step_dir, error)) {
      if (entry.is_directory(ignored)) RETURN_IF_ERROR(SyncFile(entry.path().string()));
      if (entry.is_regular_file(ignored) &&
          entry.path().filename().string().rfind("rank-", 0) != 0) {
        RETURN_IF_ERROR(SyncFile(entry.path().string()));
      }
    }
    // A temporary name of this rank's own, so that writers sharing the directory never
    // write into one file; the rename of identical bytes over each other is harmless.
    const fs::path temporary = step_dir / absl::StrCat("checkpoint.json.tmp-", rank);
    RETURN_IF_ERROR(WriteFile(temporary.string(), {{text.data(), text.size()}}));
    RETURN_IF_ERROR(SyncFile(temporary.string()));
    fs::rename(temporary, step_dir / "checkpoint.json", error);
    if (error) {
      return absl::InternalError(absl::StrCat("checkpoint: cannot rename ", temporary.string(),
                                              ": ", error.message()));
    }
    RETURN_IF_ERROR(SyncFile(step_dir.string()));
    return SyncFile(dir.string());
  }();
  // 5. Every manifest durable (a barrier): only then may older checkpoints go. A manifest
  //    missing on any host makes the checkpoint absent everywhere.
  Status everywhere = AgreeOnStatus(communicator, manifest, "to write " + step_name + "'s manifest");
  if (!everywhere.ok()) {
    if (writes_manifest) RemoveCheckpointDir(step_dir).IgnoreError();
    return everywhere;
  }

  // 6. checkpoint_keep: the older step-<k> beyond the newest N, on each host by its
  //    manifest writer.
  RETURN_IF_ERROR(CheckpointFaultPoint(context.fault, next_step, rank, CheckpointFault::Phase::kKeep));
  const int keep = options.train.checkpoint_keep;
  if (keep > 0 && writes_manifest) {
    const auto found = ListCheckpoints(dir.string());
    for (size_t i = 0; i + keep < found.size(); ++i) {
      if (found[i].second == step_dir) continue;
      RETURN_IF_ERROR(RemoveCheckpointDir(found[i].second));
    }
  }
  return step_dir.string();
}


}  // namespace

StatusOr<std::string> SaveCheckpoint(Engine& engine, const Model& model, const Options& options,
                                     int next_step, const CheckpointContext& context) {
  ASSIGN_OR_RETURN(const CheckpointPlan plan,
                   PrepareCheckpoint(engine, model, options, next_step, context));
  // 2. Every rank's own file, synced.
  std::optional<Progress> progress;
  if (plan.rank == 0) {
    progress.emplace(absl::StrCat("checkpoint ", plan.step_name,
                                  plan.world > 1 ? " (rank 0's file)" : ""),
                     plan.file_bytes[0]);
  }
  StatusOr<std::string> own_hash = [&]() -> StatusOr<std::string> {
    RETURN_IF_ERROR(plan.created);
    ASSIGN_OR_RETURN(
        std::string hash,
        WriteRankFile(engine, plan.trainable, plan.blocks, plan.layouts[plan.rank], plan.own_file,
                      next_step, plan.rank, context.fault, progress ? &*progress : nullptr));
    RETURN_IF_ERROR(SyncFile(plan.step_dir.string()));  // its entry
    return hash;
  }();
  return CompleteCheckpoint(plan, own_hash, model, options, context);
}

// The background writer's shared state: the snapshot's buffers on their way to the file,
// bounded by `budget_bytes` (the training thread waits in Acquire while they are full), and
// the writer's outcome.
struct BackgroundCheckpoint::Queue {
  struct Piece {
    int unit = 0;                    // for the fault point
    // The owned piece's bytes as the file holds them (master, exp_avg, exp_avg_sq in a row),
    // in floats (aligned for the master's read).
    std::unique_ptr<float[]> data;
    size_t bytes = 0;                // of them in `data`
    size_t held = 0;                 // floats `data` holds (counted against the budget)
  };
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Piece> pieces;
  uint64_t budget_bytes = 0;
  uint64_t held_bytes = 0;  // in `pieces` and in the writer's hands
  uint64_t peak_held_bytes = 0;
  bool closed = false;      // the snapshot is complete (or abandoned)
  double waited_ms = 0.0;   // the snapshot's waits for room
  StatusOr<std::string> outcome = absl::UnknownError("checkpoint: writer not finished");
  std::atomic<bool> done{false};
  CheckpointBufferPool* pool = nullptr;  // where buffers go back to (may be null)

  // Room for `bytes`: waits while the buffers held would exceed the budget (a piece larger
  // than the whole budget waits until nothing else is held).
  // Uninitialised: the snapshot overwrites it whole.
  std::unique_ptr<float[]> Acquire(size_t count) {
    const uint64_t bytes = count * sizeof(float);
    std::unique_lock<std::mutex> lock(mutex);
    const auto start = std::chrono::steady_clock::now();
    changed.wait(lock, [&] { return held_bytes == 0 || held_bytes + bytes <= budget_bytes; });
    waited_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                           start).count();
    held_bytes += bytes;
    peak_held_bytes = std::max(peak_held_bytes, held_bytes);
    lock.unlock();
    if (pool != nullptr) {
      if (std::unique_ptr<float[]> kept = pool->Take(count)) return kept;
    }
    return std::unique_ptr<float[]>(new float[count]);
  }
  void Push(Piece piece) {
    std::lock_guard<std::mutex> lock(mutex);
    pieces.push_back(std::move(piece));
    changed.notify_all();
  }
  void Close() {
    std::lock_guard<std::mutex> lock(mutex);
    closed = true;
    changed.notify_all();
  }
  // The next piece, or none once closed and drained.
  std::optional<Piece> Pop() {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return closed || !pieces.empty(); });
    if (pieces.empty()) return std::nullopt;
    Piece piece = std::move(pieces.front());
    pieces.pop_front();
    return piece;
  }
  void Release(size_t count) {
    std::lock_guard<std::mutex> lock(mutex);
    held_bytes -= count * sizeof(float);
    changed.notify_all();
  }
};

namespace {

// The writer thread: each piece into the rank file (`fd`, owned), hashed, then the file
// synced and its directory entry; the outcome (XXH3 or the first error) into the queue.
// After an error it goes on draining (discarding), so that the snapshot never waits for a
// writer that stopped.
void WriteInBackground(BackgroundCheckpoint::Queue* queue, int fd, fs::path path,
                       fs::path step_dir, int next_step, int rank, const CheckpointFault* fault) {
  XXH3_state_t* hash = XXH3_createState();
  XXH3_64bits_reset(hash);
  Status status;
  while (std::optional<BackgroundCheckpoint::Queue::Piece> piece = queue->Pop()) {
    const size_t bytes = piece->bytes;
    if (status.ok() && bytes > 0) {
      status = Annotate(WriteAllBytes(fd, piece->data.get(), bytes, path.string()), "checkpoint");
      if (status.ok()) XXH3_64bits_update(hash, piece->data.get(), bytes);
    }
    if (status.ok()) {
      status = CheckpointFaultPoint(fault, next_step, rank, CheckpointFault::Phase::kUnit,
                                    piece->unit);
    }
    queue->Release(piece->held);
    if (queue->pool != nullptr) queue->pool->Give(std::move(piece->data), piece->held);
  }
  if (status.ok() && ::fsync(fd) != 0) status = Errno(errno, "syncing " + path.string());
  if (::close(fd) != 0 && status.ok()) status = Errno(errno, "closing " + path.string());
  if (status.ok()) status = SyncFile(step_dir.string());  // its entry
  StatusOr<std::string> outcome =
      status.ok() ? StatusOr<std::string>(Hex(XXH3_64bits_digest(hash))) : StatusOr<std::string>(status);
  XXH3_freeState(hash);
  {
    std::lock_guard<std::mutex> lock(queue->mutex);
    queue->outcome = std::move(outcome);
  }
  queue->done = true;
}

}  // namespace

struct BackgroundCheckpoint::Parts {
  CheckpointPlan plan;
  const Model* model = nullptr;
  Options options;
  CheckpointContext context;
};

BackgroundCheckpoint::BackgroundCheckpoint() = default;

BackgroundCheckpoint::~BackgroundCheckpoint() {
  if (writer_.joinable()) {
    queue_->Close();
    writer_.join();
  }
}

std::unique_ptr<float[]> CheckpointBufferPool::Take(size_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = free_.find(count);
  if (found == free_.end()) return nullptr;
  std::unique_ptr<float[]> buffer = std::move(found->second);
  free_.erase(found);
  free_bytes_ -= count * sizeof(float);
  return buffer;
}

void CheckpointBufferPool::Give(std::unique_ptr<float[]> buffer, size_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (buffer == nullptr || free_bytes_ + count * sizeof(float) > limit_bytes_) return;
  free_bytes_ += count * sizeof(float);
  free_.emplace(count, std::move(buffer));
}

StatusOr<std::unique_ptr<BackgroundCheckpoint>> BackgroundCheckpoint::Start(
    Engine& engine, const Model& model, const Options& options, int next_step,
    const CheckpointContext& context, CheckpointBufferPool* pool) {
  std::unique_ptr<BackgroundCheckpoint> checkpoint(new BackgroundCheckpoint());
  checkpoint->parts_ = std::make_unique<Parts>();
  Parts& parts = *checkpoint->parts_;
  ASSIGN_OR_RETURN(parts.plan, PrepareCheckpoint(engine, model, options, next_step, context));
  parts.model = &model;
  parts.options = options;
  parts.context = context;
  checkpoint->queue_ = std::make_unique<Queue>();
  Queue& queue = *checkpoint->queue_;
  queue.budget_bytes = options.train.checkpoint_buffer_bytes;
  queue.pool = pool;
  const CheckpointPlan& plan = parts.plan;
  Status opened = plan.created;
  int fd = -1;
  if (opened.ok()) {
    fd = ::open(plan.own_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) opened = Errno(errno, "cannot create " + plan.own_file.string());
  }
  if (!opened.ok()) {  // this rank's outcome, exchanged by Finish
    queue.outcome = opened;
    queue.done = true;
    return checkpoint;
  }
  checkpoint->writer_ = std::thread(WriteInBackground, &queue, fd, plan.own_file, plan.step_dir,
                                    next_step, plan.rank, context.fault);
  // The snapshot: one unit's owned piece at a time into the queue's buffers, read from the
  // state's tier (device, host, or the NVMe swap files) before the next step can change it.
  const std::vector<RankPiece>& layout = plan.layouts[plan.rank];
  Status snapshot;
  for (size_t i = 0; i < plan.trainable.size() && snapshot.ok(); ++i) {
    const int unit = plan.trainable[i];
    const RankPiece& piece = layout[i];
    const size_t count = piece.end - piece.begin;
    Queue::Piece out;
    out.unit = unit;
    if (count > 0) {
      const auto [begin, end] = engine.state().StateRange(unit);
      if (piece.begin < begin || piece.end > end) {
        snapshot = absl::InternalError(absl::StrCat("checkpoint: unit ", unit, ": rank ",
                                                    plan.rank, " holds [", begin, ", ", end,
                                                    "), owns [", piece.begin, ", ", piece.end,
                                                    ")"));
        break;
      }
      // The state's whole range is read straight into the buffer (no second copy), then the
      // owned piece of each array (of each section of an 8-bit moment's stored form) moved
      // to the front, in a row (where a unit is held whole or padded, the range is larger
      // than the piece). In file order each part's place starts at or before its source and
      // ends before the next part's source starts: moved in order, none overwrites a source.
      const ShardRange range{begin, end};
      const QuantizedBlocks& blocks = plan.blocks[i];
      out.held = (StateRangeBytes(blocks, range) + 3) / 4;
      out.bytes = piece.bytes[0] + piece.bytes[1] + piece.bytes[2];
      out.data = queue.Acquire(out.held);
      uint8_t* data = reinterpret_cast<uint8_t*>(out.data.get());
      snapshot = ReadUnitState(engine, unit, blocks, range, data);
      if (!snapshot.ok()) {
        queue.Release(out.held);
        break;
      }
      for (const ByteCopy& copy : PieceCopies(blocks, range, piece)) {
        if (copy.to != copy.from) std::memmove(data + copy.to, data + copy.from, copy.bytes);
      }
    }
    queue.Push(std::move(out));
  }
  if (!snapshot.ok()) {
    // The file must not look written: the writer stops, and this rank's outcome is the
    // snapshot's error.
    queue.Close();
    checkpoint->writer_.join();
    std::error_code ignored;
    fs::remove(plan.own_file, ignored);
    queue.outcome = snapshot;
    return checkpoint;
  }
  queue.Close();
  return checkpoint;
}

int BackgroundCheckpoint::next_step() const { return parts_->plan.next_step; }

bool BackgroundCheckpoint::written() const { return queue_->done; }

double BackgroundCheckpoint::snapshot_wait_ms() const {
  std::lock_guard<std::mutex> lock(queue_->mutex);
  return queue_->waited_ms;
}

uint64_t BackgroundCheckpoint::peak_buffer_bytes() const {
  std::lock_guard<std::mutex> lock(queue_->mutex);
  return queue_->peak_held_bytes;
}

StatusOr<std::string> BackgroundCheckpoint::Finish() {
  if (finished_) return absl::FailedPreconditionError("checkpoint: Finish called twice");
  finished_ = true;
  if (writer_.joinable()) writer_.join();
  StatusOr<std::string> own_hash = queue_->outcome;
  return CompleteCheckpoint(parts_->plan, own_hash, *parts_->model, parts_->options,
                            parts_->context);
}

}  // namespace strata
