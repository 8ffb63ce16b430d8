// Homes of the optimizer-side training state: where a unit's fp32 gradient sums and its
// optimizer state (fp32 master, Adam moments) live, and how work on them is ordered
// against the device's streams. Two tiers:
//   device  the state sits in the device pool; sums run on the comm stream, AdamW on the
//           compute stream with the backend's kernels (the ZeRO stages alone);
//   host    ZeRO-Offload: the state sits in the host pool (pinned with CUDA). A reduced
//           gradient shard goes device -> host on the copy stream as soon as it is ready,
//           is summed into the fp32 shard on the host stream, and the SIMD CPU Adam steps
//           it there; the updated params (compute dtype) go host -> device on the copy
//           stream. The host stream is a stream of the same Device (on CUDA its work runs
//           as host functions), so every join is an ordinary event.
// A GradHome and an OptimizerHome are chosen independently (zero.grad_tier,
// zero.optimizer_tier); an optimizer on the host reads device-tier gradient sums through
// a copy. ZeRO-Infinity adds NVMe homes of both (the state in the NvmeTier's swap files,
// worked on through a few host buffers). The components in runtime/zero_components.cc decide ranges and collectives;
// the homes only place, add, step and copy.
// Thread-safety: driven by the engine's host thread only; work goes onto the streams.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "kernels/ops.h"
#include "core/device.h"
#include "core/unit_layout.h"
#include "tiers/nvme_tier.h"
#include "tiers/unit_state.h"

namespace strata {

struct HomeContext {
  Device* device = nullptr;
  Ops* ops = nullptr;       // the backend's kernels, on device-tier memory
  Ops* host_ops = nullptr;  // CPU kernels on host-tier memory (the CPU optimizer)
  Stream* compute = nullptr;
  Stream* comm = nullptr;
  Stream* copy = nullptr;   // device <-> host copies of the offloaded state
  Stream* host = nullptr;   // the CPU optimizer's work
  DType dtype = DType::kF32;
  const std::vector<UnitLayout>* layouts = nullptr;
  std::vector<UnitState>* units = nullptr;
};

// Allocates `bytes` in `tier` and zeroes it: device memory on the compute stream, host
// memory right away (before any stream can touch it).
StatusOr<Buffer> AllocateZeroedIn(const HomeContext& ctx, Tier tier, StateKind kind,
                                  size_t bytes, const std::string& what);

// Records `event` on `after` and makes `waiter` wait for it: later work on `waiter` runs
// after everything enqueued on `after` so far. A no-op when they are the same stream.
Status Join(Device& device, Stream& waiter, Stream& after, Event& event);

// The NVMe tier keeps each unit's shard in chunks of at most `chunk_elements` elements
// (nvme.chunk_bytes / 4), each chunk an extent of its own (id NvmeChunk::id, the same for
// every kind), so that the optimizer's pipeline and its host buffers work on chunks
// whatever the size of a unit.
struct NvmeChunk {
  int id = 0;        // extent id in the NVMe store
  size_t begin = 0;  // element range within the unit's shard
  size_t end = 0;
};
// The chunks of every unit, given each unit's shard length; ids are numbered in order.
// `chunk_elements` must be a multiple of 2048 (4 KiB of bf16), so that every chunk but a
// shard's last starts and ends on a 4 KiB boundary in any dtype.
std::vector<std::vector<NvmeChunk>> NvmeChunks(const std::vector<size_t>& shard_elements,
                                              size_t chunk_elements);

class GradHome {
 public:
  // The unit's grad_accum must already be allocated in `tier`.
  static StatusOr<std::unique_ptr<GradHome>> Create(const HomeContext& ctx, Tier tier);
  // zero.grad_tier=nvme (stages 2-3, optimizer on nvme): each unit's fp32 sum lives in
  // `nvme` as one kGrads extent per chunk (the optimizer's chunks), and no grad_accum is
  // allocated. An Add runs chunk by chunk through `slots` host buffer pairs: the reduced
  // gradient is copied to a landing buffer (copy stream), the sum so far is read back
  // unless it is the step's first Add, the two are summed and the chunk's sum of squares
  // taken on the host stream, and the sum is written back. Host memory: `slots` chunks of
  // fp32 sum plus landing, whatever the model. The nvme optimizer reads the sums with
  // its state. `nvme` must outlive the home.
  static StatusOr<std::unique_ptr<GradHome>> CreateNvme(
      const HomeContext& ctx, NvmeTier* nvme, std::vector<std::vector<NvmeChunk>> chunks,
      int slots);
  virtual ~GradHome() = default;
  // Where the sums are reachable: kDevice, or kHost (the host tier, or nvme through host
  // buffers: see on_nvme).
  virtual Tier tier() const = 0;
  // The sums live in the NVMe tier (kGrads extents), not in grad_accum.
  virtual bool on_nvme() const { return false; }
  // Copies the unit's sums (its state length) to host memory at `out`. Blocking; the
  // streams must be idle. The NVMe home fails for a unit whose sums it handed over.
  virtual Status ReadSums(int unit, float* out) = 0;

  // Hand-over (NVMe home; a no-op elsewhere). While kept (the last micro-batch of a step
  // whose optimizer steps each unit right after its Add: no clipping), an Add leaves each
  // chunk's final sum in its host buffer instead of writing it out; the optimizer's
  // sub-step that follows takes it from there (KeptSum) and gives the buffer back
  // (ReleaseKeptSum), so the sum never goes through the disk. A buffer an Add needs again
  // first writes its kept sum out, as does ending the keeping (KeepFinalSums(false)).
  virtual Status KeepFinalSums(bool keep) { return absl::OkStatus(); }
  // Chunk `k` of `unit`'s kept sum (fp32, valid for host-stream work enqueued before the
  // release), or null: read it from the tier.
  virtual const float* KeptSum(int unit, size_t k) { return nullptr; }
  // The buffer of a taken sum is free again once `after` (a ticket of the same NvmeTier,
  // posted after the work that reads the sum) is done.
  virtual void ReleaseKeptSum(int unit, size_t k, NvmeTier::Ticket after) {}

  // Adds the reduced gradient of this rank's part of `unit` (grad_accum's length, compute
  // dtype, device tier at `src`, written by work enqueued on `producer` so far) into the
  // unit's grad_accum. Returns the stream whose later work is ordered after the last read
  // of `src` (free or reuse `src` after it).
  virtual StatusOr<Stream*> Add(int unit, const void* src, Stream& producer) = 0;
  // Starts every grad_accum over, after every read of them enqueued so far: a unit's sum
  // is zero before its first Add (the host home lets that Add overwrite it); read a sum
  // only after its Adds (ready).
  virtual Status Zero() = 0;
  // *out_device (one fp32 in device memory) = sum of squares of grad_accum[first, first+n)
  // once the unit's adds are done, on the compute stream (device) or the host stream.
  virtual Status SquaredNorm(int unit, size_t first, size_t n, float* out_device) = 0;
  // The same over several element ranges, summed in their order (host home only: the
  // split of a tied unit).
  virtual Status SquaredNormRanges(int unit, const std::vector<ShardRange>& ranges,
                                   float* out_device);
  // Recorded after the unit's last Add enqueued so far; wait on it to read the sums.
  virtual Event& ready(int unit) = 0;
  // Add over the element ranges [begin, end) only (`src`: the unit's own part, compute
  // dtype, device tier, written by `producer`): a tied unit's gradient added in two parts,
  // the elements final before its last backward stage, then the rest. Each element is
  // added once, as by Add; `last_part` ends the unit's Add for this micro-batch. Host
  // home only.
  virtual Status AddRanges(int unit, const void* src,
                           const std::vector<ShardRange>& ranges,
                           Stream& producer, bool last_part);
};

class OptimizerHome {
 public:
  // master/exp_avg/exp_avg_sq must already be allocated in `tier`, and, for the host
  // tier, the host staging buffers the placement needs (see tiers/unit_state.h).
  // `grads` must outlive the home.
  static StatusOr<std::unique_ptr<OptimizerHome>> Create(const HomeContext& ctx, Tier tier,
                                                         GradHome* grads);
  // ZeRO-Infinity: master/exp_avg/exp_avg_sq of every unit live in `nvme`, one extent
  // per chunk (NvmeChunks of the units' shards, fp32); with `param_nvme` (else null) the
  // param shards' chunks (compute dtype) live there, a tier (I/O thread and queue) of their
  // own so that the reads compute waits for do not queue behind the optimizer's. A
  // sub-step reads a chunk's state into one of `slots` host buffer sets, steps it with the
  // CPU Adam on the host stream and writes it back (and the updated params: to the device,
  // or to `param_nvme`), so host memory holds `slots` chunks' state, whatever the model's
  // size. With `grads` on nvme, each chunk's gradient sum is read with the chunk's state
  // (it is not part of the read ahead made at the end of a step: the sums are not there
  // yet). The tiers and `grads` must outlive the home.
  static StatusOr<std::unique_ptr<OptimizerHome>> CreateNvme(
      const HomeContext& ctx, GradHome* grads, NvmeTier* nvme,
      std::vector<std::vector<NvmeChunk>> chunks, NvmeTier* param_nvme, int slots);
  virtual ~OptimizerHome() = default;
  // Where the optimizer runs: kDevice (backend kernels) or kHost (the CPU Adam; its state
  // in the host tier or on nvme).
  virtual Tier tier() const = 0;

  // One AdamW sub-step of `unit` over the unit elements `range`, tensor by tensor (weight
  // decay only where the tensor asks). The state buffers hold unit elements from
  // `state_offset` on; the updated params (compute dtype) for element range.begin go to
  // `param_dest` in tier `param_tier`. Ordered after the unit's gradient sums.
  virtual Status Step(int unit, const AdamParams& params, ShardRange range,
                      size_t state_offset, void* param_dest, Tier param_tier) = 0;
  // Delayed update (zero.delayed_update, host tier only): Step's AdamW, with the updated
  // params left staged on the host; PublishStaged copies them to `param_dest` (for
  // element range.begin) once `after` has passed everything enqueued on it so far (the
  // last use of the old params), and records params_ready.
  virtual Status StepStaged(int unit, const AdamParams& params, ShardRange range,
                            size_t state_offset);
  virtual Status PublishStaged(int unit, ShardRange range, void* param_dest, Stream& after);
  // Step over several disjoint sub-ranges of the unit's elements (each within the state
  // from `state_offset` on) as one sub-step; `param_dest` is the params' element
  // state_offset in the device tier. Host tier only (the split of a tied unit).
  virtual Status StepRanges(int unit, const AdamParams& params,
                            const std::vector<ShardRange>& ranges, size_t state_offset,
                            void* param_dest);
  // Recorded once the params of the unit's last Step are in `param_dest`.
  virtual Event& params_ready(int unit) = 0;
  // Blocks until every AdamW enqueued so far has run (copies may still be in flight).
  virtual Status WaitSteps() = 0;
  // Milliseconds the AdamW sub-steps have run so far, in total (the standalone time).
  virtual double busy_ms() const = 0;
  // The owned fp32 optimizer state of a unit (its state length each), to or from host
  // memory; a null array is skipped on load, and on store means zeros (a null master is
  // not allowed). Blocking; the streams must be idle.
  virtual Status LoadState(int unit, float* master, float* exp_avg, float* exp_avg_sq) = 0;
  virtual Status StoreState(int unit, const float* master, const float* exp_avg,
                            const float* exp_avg_sq) = 0;
  // Blocks until every write-back of state is on its tier; the first error, if any.
  virtual Status Flush() { return absl::OkStatus(); }
};

}  // namespace strata
