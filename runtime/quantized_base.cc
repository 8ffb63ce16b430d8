// A quantized frozen base at the runtime's edges; see quantized_base.h.
#include "runtime/quantized_base.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/cpu/quantize.h"

namespace strata {

Status PackRange(const StoredUnit& stored, const UnitLayout& unit, const UnitValues& values,
                 size_t begin, size_t end, uint8_t* out) {
  const size_t element_bytes = DTypeBytes(stored.dtype());
  if (!stored.packed() || begin > end || begin % element_bytes != 0 ||
      end % element_bytes != 0) {
    return absl::InternalError(absl::StrCat("unit '", unit.name(), "': bytes [", begin, ", ",
                                            end, ") of a stored form that cannot hold them"));
  }
  std::memset(out, 0, end - begin);
  std::vector<float> scratch;
  std::vector<uint8_t> piece_bytes;
  // Copies bytes [from, from + n) of the stored buffer, held in `src`, where they overlap.
  auto put = [&](size_t from, const uint8_t* src, size_t n) {
    const size_t lo = std::max(from, begin), hi = std::min(from + n, end);
    if (lo < hi) std::memcpy(out + (lo - begin), src + (lo - from), hi - lo);
  };
  for (const StoredTensor& t : stored.tensors()) {
    if (t.byte >= end || t.byte + t.bytes <= begin) continue;
    const TensorSpec& spec = unit.tensor(t.tensor);
    if (!t.quantized) {
      // Compute-dtype values: only the elements in range.
      const size_t lo = std::max(begin, t.byte), hi = std::min(end, t.byte + t.bytes);
      const size_t e0 = (lo - t.byte) / element_bytes, e1 = (hi - t.byte) / element_bytes;
      scratch.resize(e1 - e0);
      RETURN_IF_ERROR(values(spec.offset + e0, spec.offset + e1, scratch.data()));
      uint8_t* dst = out + (lo - begin);
      for (size_t i = 0; i < scratch.size(); ++i) {
        if (stored.dtype() == DType::kF32) {
          std::memcpy(dst + 4 * i, &scratch[i], 4);
        } else {
          const bf16 v = ToBf16(scratch[i]);
          std::memcpy(dst + 2 * i, &v, 2);
        }
      }
      continue;
    }
    for (const StoredPiece& piece : t.pieces) {
      if (piece.byte >= end || piece.byte + piece.layout.bytes <= begin) continue;
      const size_t n = piece.layout.elements;
      scratch.resize(n);
      RETURN_IF_ERROR(values(spec.offset + piece.first, spec.offset + piece.first + n,
                             scratch.data()));
      piece_bytes.assign(piece.layout.bytes, 0);
      RETURN_IF_ERROR(cpu::QuantizePiece(stored.base(), scratch.data(), n, piece_bytes.data()));
      put(piece.byte, piece_bytes.data(), piece_bytes.size());
    }
  }
  return absl::OkStatus();
}

Status UnpackUnit(const StoredUnit& stored, const UnitLayout& unit, const uint8_t* bytes,
                  float* out) {
  if (!stored.packed()) {
    return absl::InternalError(absl::StrCat("unit '", unit.name(), "' is not packed"));
  }
  std::fill(out, out + unit.used_elements(), 0.0f);
  for (const StoredTensor& t : stored.tensors()) {
    const TensorSpec& spec = unit.tensor(t.tensor);
    float* dst = out + spec.offset;
    if (!t.quantized) {
      for (size_t i = 0; i < spec.numel; ++i) {
        if (stored.dtype() == DType::kF32) {
          std::memcpy(&dst[i], bytes + t.byte + 4 * i, 4);
        } else {
          bf16 v;
          std::memcpy(&v, bytes + t.byte + 2 * i, 2);
          dst[i] = ToFloat(v);
        }
      }
      continue;
    }
    for (const StoredPiece& piece : t.pieces) {
      cpu::DequantizePiece(stored.base(), bytes + piece.byte, piece.layout.elements,
                      dst + piece.first);
    }
    if (stored.dtype() == DType::kBF16) {  // as the device's kernels store them
      for (size_t i = 0; i < spec.numel; ++i) dst[i] = ToFloat(ToBf16(dst[i]));
    }
  }
  return absl::OkStatus();
}

std::string DescribeQuantizedBase(const std::vector<UnitLayout>& units, BaseDType base,
                                  DType dtype) {
  uint64_t matrix_params = 0, matrix_bytes = 0, base_params = 0, base_bytes = 0, padding = 0;
  int pieces = 0;
  for (const UnitLayout& unit : units) {
    if (unit.trainable()) continue;
    const StoredUnit stored = StoredUnit::Of(unit, base, dtype);
    base_params += unit.num_params();
    if (!stored.packed()) {
      base_bytes += unit.num_params() * DTypeBytes(dtype);
      continue;
    }
    base_bytes += stored.bytes();
    padding += stored.padding_elements();
    for (const StoredTensor& t : stored.tensors()) {
      if (!t.quantized) continue;
      matrix_params += unit.tensor(t.tensor).numel;
      matrix_bytes += t.bytes;
      pieces += static_cast<int>(t.pieces.size());
    }
  }
  if (matrix_params == 0) return "";
  std::string line = absl::StrFormat(
      "base stored as %s: %d matrices (%.1fM params) at %.3f bytes/param; the whole base "
      "(embeddings, norms, head in %s) %.3f bytes/param, %.1f MiB",
      BaseDTypeName(base), pieces, matrix_params / 1e6, double(matrix_bytes) / matrix_params,
      DTypeName(dtype), double(base_bytes) / base_params, base_bytes / 1048576.0);
  if (padding > 0) {
    absl::StrAppend(&line, "; ", padding, " elements of zero padding (matrices whose size is "
                    "not a multiple of ", kQuantBlock, " have their last block padded)");
  }
  return line;
}

Status DequantizeUnit(Ops& ops, Device& device, Stream& stream, const StoredUnit& stored,
                      const UnitLayout& unit, const void* stored_bytes, void* out) {
  const size_t element_bytes = DTypeBytes(stored.dtype());
  const auto* in = static_cast<const uint8_t*>(stored_bytes);
  auto* dst = static_cast<uint8_t*>(out);
  for (const StoredTensor& t : stored.tensors()) {
    const TensorSpec& spec = unit.tensor(t.tensor);
    uint8_t* tensor_out = dst + spec.offset * element_bytes;
    if (!t.quantized) {
      RETURN_IF_ERROR(device.CopyAsync(tensor_out, in + t.byte, t.bytes, stream));
      continue;
    }
    for (const StoredPiece& piece : t.pieces) {
      const uint8_t* p = in + piece.byte;
      const QuantPiece& q = piece.layout;
      void* piece_out = tensor_out + piece.first * element_bytes;
      switch (stored.base()) {
        case BaseDType::kNF4:
          RETURN_IF_ERROR(ops.DequantizeNf4(stream, piece_out, p + q.codes, p + q.absmax,
                                            reinterpret_cast<const float*>(p + q.absmax2),
                                            reinterpret_cast<const float*>(p + q.offset),
                                            q.elements));
          break;
        case BaseDType::kInt8:
          RETURN_IF_ERROR(ops.DequantizeInt8(stream, piece_out,
                                             reinterpret_cast<const int8_t*>(p + q.codes),
                                             reinterpret_cast<const float*>(p + q.absmax),
                                             q.elements));
          break;
        case BaseDType::kBF16:
          RETURN_IF_ERROR(ops.WidenBf16(stream, piece_out,
                                        reinterpret_cast<const bf16*>(p + q.codes), q.elements));
          break;
        case BaseDType::kTrain:
          return absl::InternalError("a packed unit of base dtype train");
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace strata
