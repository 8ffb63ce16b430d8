// The quantized base's edges: packing a unit (every shard range of it the same bytes as the
// whole), unpacking it (the pieces' dequantized values, the rest as stored), the device's
// dequantization (bit for bit the unpacked values, fp32 and bf16), and the description.
#include "runtime/quantized_base.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/testing/status_matchers.h"
#include "device/cpu_device.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/quantize.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

// A frozen block: a norm, a fused q|k|v of pieces 64, 32, 32 rows by 96 columns, a bias,
// a 3 x 7 matrix (one padded block).
UnitLayout Block() {
  UnitLayout block("block 0");
  block.Add("norm", {96}, false, InitKind::kOnes);
  block.MarkLinear(block.Add("qkv", {128, 96}, true, InitKind::kNormal, 0.02f), {64, 32, 32});
  block.Add("bias", {50}, false, InitKind::kZeros);
  block.MarkLinear(block.Add("odd", {3, 7}, true, InitKind::kNormal, 0.02f));
  block.set_trainable(false);
  return block;
}

std::vector<float> Values(const UnitLayout& unit) {
  std::vector<float> values(unit.used_elements(), 0.0f);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (const TensorSpec& t : unit.tensors()) {
    for (size_t i = 0; i < t.numel; ++i) values[t.offset + i] = normal(rng);
  }
  return values;
}

UnitValues From(const std::vector<float>& values) {
  return [&values](size_t begin, size_t end, float* out) {
    std::copy(values.begin() + begin, values.begin() + end, out);
    return absl::OkStatus();
  };
}

TEST(QuantizedBase, EveryRangeHoldsTheWholeUnitsBytes) {
  const UnitLayout block = Block();
  const std::vector<float> values = Values(block);
  for (const BaseDType base : {BaseDType::kNF4, BaseDType::kInt8, BaseDType::kBF16}) {
    for (const DType dtype : {DType::kF32, DType::kBF16}) {
      const StoredUnit stored = StoredUnit::Of(block, base, dtype);
      const size_t total = stored.stored_elements() * DTypeBytes(dtype) + 4096;  // + padding
      std::vector<uint8_t> whole(total);
      ASSERT_OK(PackRange(stored, block, From(values), 0, total, whole.data()));
      // The bytes past the unit are zero; each piece is QuantizePiece of its values.
      for (size_t i = stored.bytes(); i < total; ++i) ASSERT_EQ(whole[i], 0) << i;
      const StoredTensor& qkv = stored.tensors()[1];
      std::vector<uint8_t> piece(qkv.pieces[1].layout.bytes);
      ASSERT_OK(cpu::QuantizePiece(base, values.data() + block.tensor(1).offset + 6144, 3072,
                                   piece.data()));
      EXPECT_EQ(0, std::memcmp(piece.data(), whole.data() + qkv.pieces[1].byte, piece.size()));
      // Ranges of 3 shards (cutting pieces and tensors anywhere an element allows) hold
      // the same bytes as the whole.
      const size_t shard = total / 3 / DTypeBytes(dtype) * DTypeBytes(dtype);
      std::vector<uint8_t> joined(total);
      for (size_t begin = 0; begin < total; begin += shard) {
        const size_t end = std::min(total, begin + shard);
        ASSERT_OK(PackRange(stored, block, From(values), begin, end, joined.data() + begin));
      }
      EXPECT_EQ(joined, whole) << BaseDTypeName(base) << " " << DTypeName(dtype);
    }
  }
}

TEST(QuantizedBase, UnpackAndTheDevicesDequantizationAgree) {
  const UnitLayout block = Block();
  const std::vector<float> values = Values(block);
  auto device = CreateCpuDevice({});
  ASSERT_OK_AND_ASSIGN(auto stream, device->CreateStream("test"));
  for (const BaseDType base : {BaseDType::kNF4, BaseDType::kInt8, BaseDType::kBF16}) {
    for (const DType dtype : {DType::kF32, DType::kBF16}) {
      const StoredUnit stored = StoredUnit::Of(block, base, dtype);
      std::vector<uint8_t> bytes(stored.bytes());
      ASSERT_OK(PackRange(stored, block, From(values), 0, bytes.size(), bytes.data()));
      std::vector<float> unpacked(block.used_elements());
      ASSERT_OK(UnpackUnit(stored, block, bytes.data(), unpacked.data()));
      // Raw tensors as stored (rounded to the dtype); pieces within their format's error.
      for (const TensorSpec& t : block.tensors()) {
        for (size_t i = t.offset; i < t.offset + t.numel; ++i) {
          const float rounded = dtype == DType::kBF16 ? ToFloat(ToBf16(values[i])) : values[i];
          if (!t.linear) {
            ASSERT_EQ(unpacked[i], rounded) << t.name;
          } else {
            ASSERT_NEAR(unpacked[i], values[i], 0.2f * 0.25f) << t.name;
          }
        }
      }
      ASSERT_OK_AND_ASSIGN(auto ops, CreateCpuOps(dtype, 1));
      ASSERT_OK_AND_ASSIGN(Buffer in, device->Allocate(Tier::kDevice, StateKind::kParams,
                                                       bytes.size(), "stored"));
      ASSERT_OK_AND_ASSIGN(Buffer out,
                           device->Allocate(Tier::kDevice, StateKind::kParams,
                                            block.used_elements() * DTypeBytes(dtype), "values"));
      ASSERT_OK(device->CopyAsync(in.data(), bytes.data(), bytes.size(), *stream));
      ASSERT_OK(DequantizeUnit(*ops, *device, *stream, stored, block, in.data(), out.data()));
      std::vector<uint8_t> got(out.bytes());
      ASSERT_OK(device->CopyAsync(got.data(), out.data(), got.size(), *stream));
      ASSERT_OK(stream->Synchronize());
      for (const TensorSpec& t : block.tensors()) {
        for (size_t i = t.offset; i < t.offset + t.numel; ++i) {
          float v;
          if (dtype == DType::kF32) {
            std::memcpy(&v, got.data() + 4 * i, 4);
          } else {
            bf16 h;
            std::memcpy(&h, got.data() + 2 * i, 2);
            v = ToFloat(h);
          }
          ASSERT_EQ(v, unpacked[i]) << BaseDTypeName(base) << " " << DTypeName(dtype) << " "
                                    << t.name << " " << i;
        }
      }
    }
  }
}

TEST(QuantizedBase, DescriptionSaysBytesAndPadding) {
  const std::vector<UnitLayout> units = {Block()};
  const std::string line = DescribeQuantizedBase(units, BaseDType::kNF4, DType::kBF16);
  EXPECT_THAT(line, HasSubstr("base stored as nf4: 4 matrices"));
  EXPECT_THAT(line, HasSubstr("43 elements of zero padding"));
  EXPECT_EQ(DescribeQuantizedBase(units, BaseDType::kTrain, DType::kBF16), "");
}

}  // namespace
}  // namespace strata
