// Writing a checkpoint: the state before a step, each rank writing the shards it owns, the
// manifest written last (a crash never leaves a step-<k> that looks complete), then the
// older ones beyond train.checkpoint_keep removed; synchronously (SaveCheckpoint) or in the
// background (BackgroundCheckpoint: a snapshot into bounded host buffers, a writer thread,
// the manifest at a later step boundary); and the fault the fault suite injects into the
// writer.
// Part of //checkpoint (see checkpoint.h for the layout).
// Thread-safety: SaveCheckpoint is collective (every rank of the engine calls it together);
// one checkpoint is written into a directory at a time.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <string>

#include "checkpoint/lora_base.h"
#include "collectives/communicator.h"
#include "core/options.h"
#include "core/status.h"
#include "runtime/engine.h"
#include "runtime/model.h"

namespace strata {

// A fault the fault suite injects into the checkpoint writer (STRATA_FAULT_CHECKPOINT, read
// once at the top of the program) in the checkpoint of step `step`, on rank `rank` (-1:
// every rank), at one of its phases: kUnit just after unit `unit`'s arrays went into the
// rank's file (some rank files written, no manifest; in the background, on the writer
// thread while the next step runs); kManifest after every rank's file is
// durable, before the manifest is written; kKeep after the manifest is durable on every
// rank, before older checkpoints are removed. kKill raises SIGKILL (a process killed
// there), kEnospc fails as a full disk would.
struct CheckpointFault {
  enum class Action { kKill, kEnospc };
  enum class Phase { kUnit, kManifest, kKeep };
  Action action = Action::kKill;
  Phase phase = Phase::kUnit;
  int step = 0;
  int unit = 0;
  int rank = -1;
};
// "kill|enospc@STEP:WHERE[:RANK]", WHERE a unit's index, "manifest" or "keep"; "" is none;
// anything else kInvalidArgument naming the text.
StatusOr<std::optional<CheckpointFault>> ParseCheckpointFault(const std::string& text);

// What SaveCheckpoint needs besides the engine and the options.
struct CheckpointContext {
  // The run's host communicator (every rank calls SaveCheckpoint together); null: one rank.
  Communicator* communicator = nullptr;
  const LoraBase* base = nullptr;  // a LoRA run: its base, recorded
  // The tokenizer (TrainingTokenizer; "" none), recorded for sample and export.
  std::string tokenizer;
  const CheckpointFault* fault = nullptr;  // the fault suite's (may be null)
  // This rank's host as the manifest records it ("": HostName()). Ranks on one host share
  // a manifest writer.
  std::string host;
};

// Writes the state before step `next_step` to <options.train.checkpoint_dir>/step-<k>;
// returns that path. Format version 8 (checkpoint.h): every rank writes the shard of each
// trainable unit it owns into rank-<r>.bin and syncs it (no gather, one shard in memory);
// the ranks exchange their files' sizes and XXH3 (and whether each succeeded); then the
// lowest rank on each host writes the manifest, checkpoint.json (a temporary file, synced,
// renamed over, the directory synced), identical on every host, so that node-local
// directories each get one and a shared directory ends with one; the ranks agree that
// every manifest is durable, and only then are checkpoints beyond train.checkpoint_keep
// removed (their manifest first). A directory without its manifest is not a checkpoint, so
// a crash at any phase leaves the previous checkpoint valid. Rank 0 shows progress
// (core/progress.h). A failure on any rank is an error on every rank, naming the rank, and
// the incomplete directory is removed.
StatusOr<std::string> SaveCheckpoint(Engine& engine, const Model& model, const Options& options,
                                     int next_step, const CheckpointContext& context = {});

// Host buffers kept from one background checkpoint to the next, by size (a model's units
// repeat theirs), so that a snapshot copies into memory whose pages are already touched
// instead of faulting fresh pages in. Holds at most `limit_bytes` (what is given beyond
// that is freed). Thread-safe; must outlive every BackgroundCheckpoint given it.
class CheckpointBufferPool {
 public:
  explicit CheckpointBufferPool(uint64_t limit_bytes) : limit_bytes_(limit_bytes) {}
  // A kept buffer of exactly `count` floats, or null.
  std::unique_ptr<float[]> Take(size_t count);
  void Give(std::unique_ptr<float[]> buffer, size_t count);

 private:
  std::mutex mutex_;
  std::multimap<size_t, std::unique_ptr<float[]>> free_;
  uint64_t free_bytes_ = 0;
  const uint64_t limit_bytes_;
};

// A checkpoint written in the background (train.checkpoint_async): Start (collective) does
// SaveCheckpoint's preparation, then copies this rank's owned shards, one unit at a time,
// into host buffers bounded by train.checkpoint_buffer_bytes and hands them to a writer
// thread, which writes them into rank-<r>.bin, hashes and syncs it. Start returns once the
// copy is complete (it waits while the buffers are full), so the next step may change the
// state: the checkpoint is the state before `next_step`, whatever runs after. NVMe-resident
// state is read from its swap files one unit at a time; never the whole state in RAM.
// Finish (collective; every rank calls it at the same step boundary) waits for the writer
// and does the rest as SaveCheckpoint does: the exchange of outcomes and XXH3, the
// manifest written last, the barrier, checkpoint_keep. Until the manifest the directory is
// not a checkpoint: a crash while the writer runs leaves the previous one valid. Destroyed
// without Finish, it joins the writer and writes no manifest (an absent checkpoint).
// Thread-safety: Start, Finish and the destructor on the training thread; written() from
// any thread. `engine`, `model` and the context's pointers must outlive it.
class BackgroundCheckpoint {
 public:
  struct Queue;  // the buffers between the snapshot and the writer (checkpoint_write.cc)

  static StatusOr<std::unique_ptr<BackgroundCheckpoint>> Start(Engine& engine,
                                                               const Model& model,
                                                               const Options& options,
                                                               int next_step,
                                                               const CheckpointContext& context,
                                                               CheckpointBufferPool* pool = nullptr);
  ~BackgroundCheckpoint();
  BackgroundCheckpoint(const BackgroundCheckpoint&) = delete;
  BackgroundCheckpoint& operator=(const BackgroundCheckpoint&) = delete;

  int next_step() const;
  // This rank's file is durable (or failed): Finish would not wait for the writer.
  bool written() const;
  // How long the snapshot waited for the writer to drain a buffer (back-pressure).
  double snapshot_wait_ms() const;
  // The most bytes of buffers held at once (at most train.checkpoint_buffer_bytes, or one
  // unit's state range where that alone is larger).
  uint64_t peak_buffer_bytes() const;
  // The path of the complete checkpoint, or every rank's error (named as SaveCheckpoint
  // names it; the incomplete directory removed).
  StatusOr<std::string> Finish();

 private:
  struct Parts;  // the plan and what the manifest needs
  BackgroundCheckpoint();
  std::unique_ptr<Parts> parts_;
  std::unique_ptr<Queue> queue_;
  std::thread writer_;
  bool finished_ = false;
};

}  // namespace strata
