// Home of the parameters (compute dtype) between uses: what this rank stores of each unit
// (its "part": the full unit where every rank keeps one, ZeRO stages 0-2; its own shard at
// stage 3) and how that part reaches the device for compute.
//   device  the parts in the device pool, read in place (by compute, or by the gather);
//   host    ZeRO-Offload (stage 3): the shards in the host pool (pinned with CUDA), copied
//           up on the copy stream before their gather;
//   nvme    ZeRO-Infinity (stage 3): the shards in a swap file of their own, one extent per
//           chunk (NvmeChunks of the shards), behind an NvmeTier of their own (its own I/O
//           thread and queue, so the reads compute waits for never queue behind the
//           optimizer's); CopyUp reads a shard into one of a few host buffers, so host
//           memory holds that many shards whatever the model.
// Parameters need no optimizer: a frozen set is stored and copied up like any other. An
// optimizer writes its updates into part() (device, host) or, on nvme, through the
// write_back() capability (null where the parts are in memory).
// Thread-safety: driven by the engine's host thread; work goes onto the streams.
#pragma once

#include <memory>
#include <vector>

#include "tiers/home_context.h"
#include "nvme/nvme_tier.h"

namespace strata {

// Params on nvme: the optimizer's side of the swap file (the NVMe optimizer home writes the
// updated chunks back through it).
class ParamWriteBack {
 public:
  virtual ~ParamWriteBack() = default;
  // The tier the write-backs go through (tickets, waits, held writes on rotating events).
  virtual NvmeTier& tier() = 0;
  // The padded bytes of chunk `chunk_id`'s extent: a buffer to write it from holds as many.
  virtual uint64_t ChunkBytes(int chunk_id) const = 0;
  // Posts the write of chunk `chunk_id` from `src` (host, ChunkBytes) to start once `after`
  // has completed (see NvmeTier::WriteAfter for the event's rules).
  virtual NvmeTier::Ticket WriteAfter(int chunk_id, const void* src, Event* after) = 0;
};

class ParamHome {
 public:
  // The parts in memory: unit u's part is `part_elements[u]` elements of ctx.dtype in
  // `tier` (kDevice, or kHost for stage-3 shards), zeroed; 0: the unit is not kept here.
  // `shared` (empty, or one entry per unit): a unit whose entry is not null has no part of
  // its own: its part is that memory (an fp32 engine's master over the same elements in
  // the same tier, which the optimizer updates in place), owned elsewhere.
  static StatusOr<std::unique_ptr<ParamHome>> CreateResident(
      const HomeContext& ctx, Tier tier, const std::vector<size_t>& part_elements,
      const std::vector<void*>& shared = {});
  // The shards on nvme: `tier` (owned) holds one kParams extent per chunk of `chunks`
  // (each unit's chunks cover its whole shard, or are none: the unit is not kept here);
  // `read_buffers` (>= 1) host buffers of one
  // shard each carry CopyUp's reads.
  static StatusOr<std::unique_ptr<ParamHome>> CreateNvme(
      const HomeContext& ctx, std::unique_ptr<NvmeTier> tier,
      std::vector<std::vector<NvmeChunk>> chunks, int read_buffers);
  // `trainable` keeps the trainable units and `frozen` the frozen ones (frozen_units[u]),
  // each created with the other group's units left out (no part, no chunks): a frozen base
  // placed apart from the trainable params (lora.base_tier). tier() is the trainable
  // units' (the optimizer writes only theirs), unit_tier(u) each unit's.
  static std::unique_ptr<ParamHome> CreateSplit(std::unique_ptr<ParamHome> trainable,
                                                std::unique_ptr<ParamHome> frozen,
                                                std::vector<bool> frozen_units);
  virtual ~ParamHome() = default;

  virtual StateTier tier() const = 0;
  // Where unit `unit`'s part lives (tier(), but for a split home's frozen units).
  virtual StateTier unit_tier(int unit) const { return (void)unit, tier(); }
  size_t part_elements(int unit) const { return part_elements_[unit]; }
  // The unit's part in memory (device or host tier, as tier() says), or null on nvme.
  virtual void* part(int unit) = 0;
  // Puts `values` (part_elements(unit) of the compute dtype, host memory) in place of the
  // unit's part. Blocking; the streams must be idle.
  virtual Status Write(int unit, const void* values) = 0;
  // Copies the unit's part to `out` (host memory, part_elements(unit) elements). Blocking;
  // the streams must be idle.
  virtual Status Read(int unit, void* out) = 0;
  // Brings the unit's part to `dest` (device tier) on `copy`: later work on `copy` sees it
  // there. Host: one copy. Nvme: the part is read into the next read buffer (blocking the
  // host only until that buffer's previous part has gone up) and copied once the reads are
  // done; the tier orders the reads after every write-back posted before. Device parts are
  // read in place: CopyUp copies them all the same.
  virtual Status CopyUp(int unit, void* dest, Stream& copy) = 0;
  // How many parts CopyUp can have on their way at once before it blocks for a buffer (the
  // read buffers on nvme); 0: no bound.
  virtual int read_buffers() const { return 0; }
  // Params on nvme: the optimizer's write-back side; null where the parts are in memory.
  virtual ParamWriteBack* write_back() { return nullptr; }
  // NVMe traffic of the params so far (0 where the parts are in memory).
  virtual uint64_t bytes_read() const { return 0; }
  virtual uint64_t bytes_written() const { return 0; }
  virtual double busy_ms() const { return 0.0; }
  // Bytes of the swap file(s) the parts live in (0 where they are in memory).
  virtual uint64_t nvme_file_bytes() const { return 0; }
  // Waits for every read and write-back posted so far; the first error since the last one.
  virtual Status Drain() { return absl::OkStatus(); }

 protected:
  explicit ParamHome(std::vector<size_t> part_elements)
      : part_elements_(std::move(part_elements)) {}

 private:
  std::vector<size_t> part_elements_;
};

}  // namespace strata
