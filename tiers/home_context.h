// What every state home works with: the device, both kernel sets, the rank's streams, the
// units' layouts and their state; and how the NVMe tiers cut a unit's shard into chunks.
// Thread-safety: plain data, used by the engine's host thread.
#pragma once

#include <cstddef>
#include <vector>

#include "device/device.h"
#include "core/unit_layout.h"
#include "kernels/ops.h"
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

// OK, or InvalidArgument when a member a home needs is missing.
Status CheckHomeContext(const HomeContext& ctx);

// Element `elements` of a buffer of `element_bytes`-byte elements at `base`.
inline char* ElementAt(void* base, size_t elements, size_t element_bytes) {
  return static_cast<char*>(base) + elements * element_bytes;
}

// The NVMe tier keeps each unit's shard in chunks of at most `chunk_elements` elements
// (nvme.chunk_bytes / 4), each chunk an extent of its own (id NvmeChunk::id, the same for
// every kind), so that the optimizer's pipeline and its host buffers work on chunks
// whatever the size of a unit.
struct NvmeChunk {
  int id = 0;        // extent id in the NVMe store
  size_t begin = 0;  // element range within the unit's shard
  size_t end = 0;
};
// The chunks of every unit, given each unit's shard length (0: none); ids are numbered in
// order from `first_id`.
// `chunk_elements` must be a multiple of 2048 (4 KiB of bf16), so that every chunk but a
// shard's last starts and ends on a 4 KiB boundary in any dtype.
std::vector<std::vector<NvmeChunk>> NvmeChunks(const std::vector<size_t>& shard_elements,
                                              size_t chunk_elements, int first_id = 0);

// OK when `chunks` has one list per unit and each unit's chunks cover its shard
// ([0, shard_elements), in order, without gaps), a frozen unit's possibly none; else
// InvalidArgument naming the unit.
Status CheckNvmeChunks(const HomeContext& ctx, const std::vector<std::vector<NvmeChunk>>& chunks);

}  // namespace strata
