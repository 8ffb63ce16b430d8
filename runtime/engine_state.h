// EngineState: a rank's training state as seen from outside the step, read and written by
// checkpoints, imports, exports and tests, with one verb pair named from the caller's
// side: Read* brings values out of the engine, Write* puts them in. Obtained from
// Engine::state(); it is the engine's, and valid as long as the engine. It works on the
// engine's parts (EngineState::Parts), not on the engine, so it knows nothing of the step.
//
// Reads give fp32 views of one unit (the full unit, padded length). With a sharded
// optimizer they gather the shards: every rank must call them together. A frozen unit
// (UnitLayout::trainable false: a LoRA base) has no master, gradients or optimizer state
// (FailedPrecondition); ReadParams reads any unit's compute-dtype params (widened to fp32;
// gathered where sharded). Writes of full units (WriteMaster, WriteOptimizerState) keep
// what this rank owns; the partial writes take the elements this rank stores
// (StoredRange), and ranks need not call them together (no collective). Every call first
// waits for the engine's streams and write-backs; none counts as a step's NVMe traffic.
// Thread-safety: as the engine (one host thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/stored_layout.h"

namespace strata {

class Communicator;
class Device;
class Model;
class Ops;
class Stream;
class ZeroComponents;
struct EngineConfig;
struct NvmeTraffic;
struct StateRun;
struct UnitState;

// A unit's master weights and Adam moments, full units (checkpoints).
struct UnitOptimizerState {
  std::vector<float> master, exp_avg, exp_avg_sq;
};

// Where an importer may write one unit's StoredRange directly instead of through buffers
// of its own (EngineState::WriteTargets): the one answer to "where may an importer write?".
struct UnitWriteTargets {
  // fp32 values: the unit's master itself holds exactly the range (trainable; stage 0 or
  // 3, or any stage on one rank) in memory the host can address in a run (a host-tier
  // optimizer, or any tier of a CPU device): a run's importer writes it straight. A dry run
  // answers for the run it models.
  bool master_straight = false;
  // ... and where the host can write it now (not a dry run): that master. Written after
  // Engine::Finish(), before the next step; then WriteStoredValues(unit, master).
  float* master = nullptr;
  // bf16 params: the engine takes the unit's bf16 params as they are (a bf16 file's own
  // bits) in WriteStoredValues: a bf16 engine whose param part is exactly the range.
  bool takes_bf16_params = false;
  // ... straight into their home, which sits in memory the host can address (the CPU
  // device, or params on the host tier); `params` is that memory (null in a dry run).
  bool params_straight = false;
  bf16* params = nullptr;
  // The unit's params are its fp32 master itself (an fp32 engine at stage 0 with the
  // optimizer and params on the device tier: one buffer, which AdamW updates in place).
  bool params_share_master = false;
};

class EngineState {
 public:
  // What of the engine the state works on (runtime/engine.h makes one for its own): all
  // must outlive the EngineState; the streams are the engine's, made after this is.
  struct Parts {
    const EngineConfig& config;
    Device* device;
    Ops* ops;       // the device's kernels
    Ops* host_ops;  // CPU kernels on host memory
    Model* model;
    Communicator* communicator;
    const std::unique_ptr<Stream>* compute;
    const std::unique_ptr<Stream>* comm;
    const std::unique_ptr<Stream>* host;
    std::vector<UnitState>& units;
    // Each unit's stored form: a packed unit (a quantized base, core/stored_layout.h) keeps
    // its stored bytes in the param home; the views here are of its values all the same.
    const std::vector<StoredUnit>& stored;
    ZeroComponents& components;
    NvmeTraffic& traffic_counted;  // the NVMe traffic not a step's (reads and writes here)
    std::function<Status()> sync;  // pending updates in place, every stream to its end
  };
  explicit EngineState(Parts parts) : parts_(std::move(parts)) {}
  EngineState(const EngineState&) = delete;
  EngineState& operator=(const EngineState&) = delete;

  // Pending updates in place and every stream of the engine at its end (what each call
  // here does first): a caller that then uses the engine's communicator from the host
  // (a checkpoint's agreements) finds no collective of the engine in flight.
  Status Sync();

  // Reads (see above).
  StatusOr<std::vector<float>> ReadParams(int unit);
  StatusOr<std::vector<float>> ReadMaster(int unit);
  StatusOr<std::vector<float>> ReadGradients(int unit);
  StatusOr<UnitOptimizerState> ReadOptimizerState(int unit);
  // The same into `out`, whose vectors' memory is reused (a checkpoint of many units then
  // touches fresh pages once, not per unit).
  Status ReadOptimizerState(int unit, UnitOptimizerState* out);

  // Writes of whole units: master weights (and the compute-dtype params) from the unit's
  // full values, with zeroed Adam moments; or with the moments given (full unit each).
  Status WriteMaster(int unit, const std::vector<float>& values);
  Status WriteOptimizerState(int unit, const UnitOptimizerState& state);
  // One unit's master weights (and params) and Adam moments from the elements this rank
  // stores, StoredRange(unit), each array over that range (a checkpoint read in part).
  Status WriteStoredState(int unit, const float* master, const float* exp_avg,
                          const float* exp_avg_sq);
  // One unit's master weights (and params) from `fill`, with zeroed Adam moments, asking
  // only for the elements this rank stores: the whole unit where its params are replicated
  // (stages 0-2), else its own shard (stage 3 with a sharded optimizer). `fill` writes
  // elements [begin, end) of the unit's flat fp32 values (padding included: zero) to
  // out[0, end - begin): the unit's master itself where WriteTargets allows (a failed fill
  // then leaves it part-written), else one range of memory, never the model.
  using UnitFill = std::function<Status(size_t begin, size_t end, float* out)>;
  Status WriteUnit(int unit, const UnitFill& fill);
  // WriteUnit with the values at hand: `values` holds StoredRange(unit) (so a caller may
  // read the next unit while this one is written). `params` (WriteTargets' takes_bf16_params):
  // the unit's bf16 params for that range as they are, not cast again: already in place
  // where they are WriteTargets' params, else put in their home as they are. `values` may
  // then be null for a unit without optimizer state (frozen: a LoRA model's base).
  Status WriteStoredValues(int unit, const float* values, const bf16* params = nullptr);

  // The optimizer state of one unit as this rank holds it, without a collective where it
  // can be done without one (per-rank checkpoints): StateRange is the element range of
  // the padded unit whose master and moments this rank holds (its own shard where the
  // optimizer state is sharded, else the whole unit). ReadStateRange brings the three
  // arrays out over that range (each `end - begin` long; no collective); WriteStateRange
  // puts them in, with the params cast from the master: where the params are whole but
  // the state a shard (stages 1-2 on several ranks) the masters are gathered for the
  // params, so every rank must call it together for each unit; elsewhere no collective.
  std::pair<size_t, size_t> StateRange(int unit) const;
  Status ReadStateRange(int unit, float* master, float* exp_avg, float* exp_avg_sq);
  Status WriteStateRange(int unit, const float* master, const float* exp_avg,
                         const float* exp_avg_sq);

  // 8-bit Adam states (train.optimizer_states = int8): the runs of the unit's StateRange
  // (which blocks hold 8-bit moments; tiers/state_blocks.h), empty with fp32 moments. The
  // state range as it is held, no conversion: ReadStateRange8Bit brings out the fp32 master
  // (`end - begin` floats) and each moment in its stored form over the range
  // (StoredMomentBytes each: fp32 runs' values, quantized runs' codes, their blocks'
  // absmaxes); WriteStateRange8Bit puts them in (the params cast from the master, collective
  // as WriteStateRange), so that a unit written with what was read is exactly as it was
  // (a checkpoint of 8-bit states resumes bit for bit). FailedPrecondition without 8-bit
  // states.
  const std::vector<StateRun>& MomentRuns(int unit) const;
  size_t StoredMomentBytes(int unit) const;
  Status ReadStateRange8Bit(int unit, float* master, uint8_t* exp_avg, uint8_t* exp_avg_sq);
  Status WriteStateRange8Bit(int unit, const float* master, const uint8_t* exp_avg,
                             const uint8_t* exp_avg_sq);

  // The length of the full-unit views (the unit padded to the world size).
  size_t PaddedElements(int unit) const;

  // A packed unit (a quantized frozen base): ReadParams dequantizes it; the writes of
  // whole units and WriteUnit quantize (runtime/quantized_base.h: every piece from all of
  // its values). WriteStoredValues and WriteTargets' straight routes do not apply to it.
  bool Packed(int unit) const { return parts_.stored[unit].packed(); }
  const StoredUnit& stored(int unit) const { return parts_.stored[unit]; }
  // The unit's whole stored buffer as it is (its padded stored elements' bytes: a packed
  // unit's quantized bytes, else its compute-dtype params), gathered where sharded (every
  // rank calls it together then).
  StatusOr<std::vector<uint8_t>> ReadStoredBytes(int unit);
  // The element range [begin, end) of `unit` this rank stores, which the partial writes
  // take: the whole unit, or its own shard.
  std::pair<size_t, size_t> StoredRange(int unit) const;
  // Where an importer may write the unit's StoredRange (see UnitWriteTargets).
  UnitWriteTargets WriteTargets(int unit) const;

 private:
  Stream& compute() const { return **parts_.compute; }
  Stream& comm() const { return **parts_.comm; }
  Stream& host() const { return **parts_.host; }

  // FailedPrecondition naming a frozen unit.
  Status CheckTrainable(int unit) const;
  // Elements of the unit's optimizer-side state on this rank (shard or full unit).
  size_t StateElements(int unit) const;
  // The full unit from this rank's part of it (all ranks call together when sharded).
  StatusOr<std::vector<float>> ReadFull(int unit, std::vector<float> own_part);
  // The full unit from this rank's shard `own` into `out` (resized; all ranks together).
  Status GatherInto(int unit, const float* own, std::vector<float>* out);
  // The partial and full writes' work: elements [begin, end) of the unit's master and
  // moments (moments null: zero), each pointer at element `begin`; the range must hold
  // everything this rank stores (StoredRange).
  struct UnitStateView {
    const float* master = nullptr;
    const float* exp_avg = nullptr;
    const float* exp_avg_sq = nullptr;
    size_t begin = 0, end = 0;
  };
  // `params`: the bf16 params as they are (WriteStoredValues), else cast from the master.
  // `full_master` (WriteStateRange at stages 1-2): the whole unit's master for the params,
  // where the view holds the own shard only.
  Status WriteState(int unit, const UnitStateView& view, const bf16* params = nullptr,
                    const float* full_master = nullptr);
  // A packed unit's own stored bytes, quantized from `values` (the unit's flat fp32 values,
  // asked for a piece at a time), put in its param home.
  Status WritePacked(int unit, const UnitFill& values);
  // Marks what moved on NVMe so far as not a step's traffic.
  void ForgetTraffic();

  Parts parts_;
  std::vector<char> store_host_;  // WriteState's params on their way to their home
};

}  // namespace strata
