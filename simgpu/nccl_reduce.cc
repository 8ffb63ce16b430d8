// simgpu/nccl_reduce.cc: see nccl_reduce.h. The work goes in blocks of kBlock elements
// through an accumulator array on the stack: every source of a block is read before the
// block's output is written (so out == sources[k] is safe) and the inner loops vectorize.
// Built with -ffp-contract=off: a sum is the additions its source says, in rank order.
#include "simgpu/nccl_reduce.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/dtype.h"

namespace simgpu {
namespace nccl {
namespace {

constexpr size_t kBlock = 1024;

float BitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

uint32_t FloatToBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// IEEE fp16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
float HalfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  const uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in fp32
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 31) return BitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  return BitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t FloatToHalf(float value) {
  const uint32_t bits = FloatToBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN, kept quiet
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  // 65520 and up round (to even) past 65504, the largest finite half.
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (magnitude < 0x38800000u) {  // below 2^-14: a subnormal half, or zero
    // Scaling by 2^24 is exact; nearbyint rounds to nearest even (the default mode).
    const float units = std::nearbyint(BitsToFloat(magnitude) * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(units));
  }
  const uint32_t rebiased = magnitude - 0x38000000u;  // exponent bias 127 -> 15
  const uint32_t rounding = 0xfffu + ((rebiased >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rebiased + rounding) >> 13));
}

// How each stored type is loaded into its accumulator and stored back.
template <typename T, typename A>
struct Plain {
  using Storage = T;
  using Acc = A;
  static Acc Load(T value) { return static_cast<Acc>(value); }
  static T Store(Acc value) { return static_cast<T>(value); }
};
struct Bf16 {
  using Storage = uint16_t;
  using Acc = float;
  // core/dtype.h's: nearest even, NaN kept a (quiet) NaN, as strata's own reduce.
  static float Load(uint16_t value) { return strata::ToFloat(strata::bf16{value}); }
  static uint16_t Store(float value) { return strata::ToBf16(value).bits; }
};
struct Half {
  using Storage = uint16_t;
  using Acc = float;
  static float Load(uint16_t value) { return HalfToFloat(value); }
  static uint16_t Store(float value) { return FloatToHalf(value); }
};

// Sum and product of integers wrap (through the unsigned type: no signed overflow).
template <typename A>
A Add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <typename A>
A Multiply(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

template <typename Kind>
void ReduceTyped(const void* const* sources, int num_sources, void* out, size_t count,
                 ncclRedOp_t op) {
  using T = typename Kind::Storage;
  using A = typename Kind::Acc;
  A acc[kBlock];
  for (size_t begin = 0; begin < count; begin += kBlock) {
    const size_t n = count - begin < kBlock ? count - begin : kBlock;
    const T* first = static_cast<const T*>(sources[0]) + begin;
    for (size_t i = 0; i < n; ++i) acc[i] = Kind::Load(first[i]);
    for (int s = 1; s < num_sources; ++s) {
      const T* source = static_cast<const T*>(sources[s]) + begin;
      switch (op) {
        case ncclSum:
        case ncclAvg:
          for (size_t i = 0; i < n; ++i) acc[i] = Add(acc[i], Kind::Load(source[i]));
          break;
        case ncclProd:
          for (size_t i = 0; i < n; ++i) acc[i] = Multiply(acc[i], Kind::Load(source[i]));
          break;
        case ncclMax:
          for (size_t i = 0; i < n; ++i) {
            const A value = Kind::Load(source[i]);
            acc[i] = value > acc[i] ? value : acc[i];
          }
          break;
        case ncclMin:
          for (size_t i = 0; i < n; ++i) {
            const A value = Kind::Load(source[i]);
            acc[i] = value < acc[i] ? value : acc[i];
          }
          break;
        default:
          break;
      }
    }
    if (op == ncclAvg) {
      for (size_t i = 0; i < n; ++i) acc[i] = acc[i] / static_cast<A>(num_sources);
    }
    T* target = static_cast<T*>(out) + begin;
    for (size_t i = 0; i < n; ++i) target[i] = Kind::Store(acc[i]);
  }
}

}  // namespace

size_t ElementBytes(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

std::string TypeName(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
      return "int8";
    case ncclUint8:
      return "uint8";
    case ncclInt32:
      return "int32";
    case ncclUint32:
      return "uint32";
    case ncclInt64:
      return "int64";
    case ncclUint64:
      return "uint64";
    case ncclFloat16:
      return "fp16";
    case ncclFloat32:
      return "float";
    case ncclFloat64:
      return "double";
    case ncclBfloat16:
      return "bf16";
    case ncclFloat8e4m3:
      return "fp8e4m3";
    case ncclFloat8e5m2:
      return "fp8e5m2";
    default:
      return "type " + std::to_string(static_cast<int>(type));
  }
}

std::string ReductionName(ncclRedOp_t op) {
  switch (op) {
    case ncclSum:
      return "sum";
    case ncclProd:
      return "prod";
    case ncclMax:
      return "max";
    case ncclMin:
      return "min";
    case ncclAvg:
      return "avg";
    default:
      return "op " + std::to_string(static_cast<int>(op));
  }
}

std::string CheckReduction(ncclDataType_t type, ncclRedOp_t op) {
  if (ElementBytes(type) == 0) return TypeName(type) + " is not an ncclDataType_t";
  if (type == ncclFloat8e4m3 || type == ncclFloat8e5m2) {
    return "reductions over " + TypeName(type) + " are not simulated (only copies are)";
  }
  if (op < ncclSum || op >= ncclNumOps) {
    return ReductionName(op) +
           " is not one of sum, prod, max, min, avg (ncclRedOpCreatePreMulSum is not simulated)";
  }
  return "";
}

void Reduce(const void* const* sources, int num_sources, void* out, size_t count,
            ncclDataType_t type, ncclRedOp_t op) {
  if (count == 0 || num_sources <= 0) return;
  switch (type) {
    case ncclInt8:
      return ReduceTyped<Plain<int8_t, int64_t>>(sources, num_sources, out, count, op);
    case ncclUint8:
      return ReduceTyped<Plain<uint8_t, uint64_t>>(sources, num_sources, out, count, op);
    case ncclInt32:
      return ReduceTyped<Plain<int32_t, int64_t>>(sources, num_sources, out, count, op);
    case ncclUint32:
      return ReduceTyped<Plain<uint32_t, uint64_t>>(sources, num_sources, out, count, op);
    case ncclInt64:
      return ReduceTyped<Plain<int64_t, int64_t>>(sources, num_sources, out, count, op);
    case ncclUint64:
      return ReduceTyped<Plain<uint64_t, uint64_t>>(sources, num_sources, out, count, op);
    case ncclFloat16:
      return ReduceTyped<Half>(sources, num_sources, out, count, op);
    case ncclFloat32:
      return ReduceTyped<Plain<float, float>>(sources, num_sources, out, count, op);
    case ncclFloat64:
      return ReduceTyped<Plain<double, double>>(sources, num_sources, out, count, op);
    case ncclBfloat16:
      return ReduceTyped<Bf16>(sources, num_sources, out, count, op);
    default:
      return;
  }
}

}  // namespace nccl
}  // namespace simgpu
