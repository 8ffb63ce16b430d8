// Homes of the fp32 gradient sums: where a unit's sums live and how the reduced gradients
// of each micro-batch are added into them, ordered against the device's streams.
//   device  the sums sit in the device pool and are added on the stream that produced the
//           reduced gradient (comm);
//   host    ZeRO-Offload: each reduced gradient shard goes device -> host on the copy
//           stream as soon as it is ready and is summed into the fp32 shard on the host
//           stream (on CUDA its work runs as host functions, so every join is an event);
//   nvme    ZeRO-Infinity: the sums live in the NvmeTier's swap file, chunk by chunk
//           through a few host buffer pairs.
// The components in runtime/ decide ranges and collectives; a home only places, adds, norms
// and copies. Thread-safety: driven by the engine's host thread; work goes onto the streams.
#pragma once

#include <memory>
#include <vector>

#include "tiers/home_context.h"
#include "nvme/nvme_tier.h"

namespace strata {

class RangedGradHome;
class SumHandOver;

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
  // Where the sums live: kDevice (grad_accum in the device pool), kHost (grad_accum in the
  // host pool) or kNvme (kGrads extents of the NvmeTier, worked on through host buffers).
  virtual StateTier tier() const = 0;
  // Copies the unit's sums (its state length) to host memory at `out`. Blocking; the
  // streams must be idle. The NVMe home fails for a unit whose sums it handed over.
  virtual Status ReadSums(int unit, float* out) = 0;

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
  // Recorded after the unit's last Add enqueued so far; wait on it to read the sums.
  virtual Event& ready(int unit) = 0;

  // Capabilities, null where the home has none (callers ask, instead of knowing which
  // home they hold):
  // adds and norms over element ranges (host: the split of a tied unit);
  virtual RangedGradHome* ranged() { return nullptr; }
  // final sums handed to the optimizer in memory (nvme; wired by the component factory).
  virtual SumHandOver* hand_over() { return nullptr; }
};

// Capability: a unit's gradient added in two parts, the elements final before its last
// backward stage, then the rest (the split of a tied unit).
class RangedGradHome {
 public:
  virtual ~RangedGradHome() = default;
  // Add over the element ranges [begin, end) only (`src`: the unit's own part, compute
  // dtype, device tier, written by `producer`). Each element is added once, as by Add;
  // `last_part` ends the unit's Add for this micro-batch.
  virtual Status AddRanges(int unit, const void* src, const std::vector<ShardRange>& ranges,
                           Stream& producer, bool last_part) = 0;
  // SquaredNorm over several element ranges, summed in their order.
  virtual Status SquaredNormRanges(int unit, const std::vector<ShardRange>& ranges,
                                   float* out_device) = 0;
};

// Capability: the NVMe gradient home's link to the NVMe optimizer home. While kept (the
// last micro-batch of a step whose optimizer steps each unit right after its Add: no
// clipping), an Add leaves each chunk's final sum in its host buffer instead of writing it
// out; the optimizer's sub-step that follows takes it from there (KeptSum) and gives the
// buffer back (ReleaseKeptSum), so the sum never goes through the disk. A buffer an Add
// needs again first writes its kept sum out, as does ending the keeping.
class SumHandOver {
 public:
  virtual ~SumHandOver() = default;
  virtual Status KeepFinalSums(bool keep) = 0;
  // Chunk `k` of `unit`'s kept sum (fp32, valid for host-stream work enqueued before the
  // release), or null: read it from the tier.
  virtual const float* KeptSum(int unit, size_t k) = 0;
  // The buffer of a taken sum is free again once `after` (a ticket of the same NvmeTier,
  // posted after the work that reads the sum) is done.
  virtual void ReleaseKeptSum(int unit, size_t k, NvmeTier::Ticket after) = 0;
};

}  // namespace strata
