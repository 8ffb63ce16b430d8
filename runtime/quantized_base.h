// A quantized frozen base (lora.base_dtype) at the runtime's edges: a packed unit's stored
// bytes made from its values (host: initialization, import, checkpoints), its values made
// from the bytes (host: reads, hashes, exports), and its dequantization on the device into
// the unit's usual flat buffer just before each use (forward and backward). The stored form
// is core/stored_layout.h's; the formats and kernels are docs/quantization.md's.
// Thread-safety: pure functions; the device version enqueues on the stream it is given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/stored_layout.h"
#include "core/unit_layout.h"
#include "device/device.h"
#include "kernels/ops.h"

namespace strata {

// Elements [begin, end) of the unit's flat fp32 values (the model's layout) into out[0,
// end - begin). Called one tensor or piece at a time, so a caller holds one matrix's
// values, never the unit's or the model's.
using UnitValues = std::function<Status(size_t begin, size_t end, float* out)>;

// Bytes [begin, end) of the packed unit's stored buffer into `out` (end may run past
// stored.bytes() into the shards' padding: zeros). A piece is quantized from all of its
// values whatever part of it the range holds (its absmaxes and offset are the piece's), so
// every shard of every world size holds the same bytes. begin and end are multiples of the
// compute dtype's size.
Status PackRange(const StoredUnit& stored, const UnitLayout& unit, const UnitValues& values,
                 size_t begin, size_t end, uint8_t* out);

// The unit's values as training uses them (dequantized, rounded to the compute dtype,
// widened to fp32) from its whole stored buffer `bytes`, into out[0, unit.used_elements())
// (gaps between tensors: zero).
Status UnpackUnit(const StoredUnit& stored, const UnitLayout& unit, const uint8_t* bytes,
                  float* out);

// One line on a model's quantized base (lora.base_dtype): the matrices' parameters and
// bytes per parameter, the whole base's, and the padding where a matrix's size is not a
// multiple of the block ("" where nothing is packed).
std::string DescribeQuantizedBase(const std::vector<UnitLayout>& units, BaseDType base,
                                  DType dtype);

// Enqueues on `stream` the dequantization of the stored buffer `stored_bytes` (device tier)
// into `out` (device tier, the unit's flat buffer of the compute dtype): each piece by its
// kernel, every other tensor copied as it is.
Status DequantizeUnit(Ops& ops, Device& device, Stream& stream, const StoredUnit& stored,
                      const UnitLayout& unit, const void* stored_bytes, void* out);

}  // namespace strata
