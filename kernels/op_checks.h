// Argument checks shared by the Ops backends (kernels/cpu, kernels/cuda): each fails with
// kInvalidArgument naming the op and every offending argument, before anything is enqueued.
// Thread-safety: plain functions.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/rope.h"
#include "core/status.h"

namespace strata {

// Fails naming the op and every negative size.
inline Status CheckNonNegative(const char* op,
                               std::initializer_list<std::pair<const char*, long>> sizes) {
  std::string problems;
  for (const auto& [name, value] : sizes) {
    if (value < 0) absl::StrAppend(&problems, problems.empty() ? "" : ", ", name, "=", value);
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": negative size ", problems));
}

// Fails naming the op and every null pointer that the op needs.
inline Status CheckNotNull(const char* op,
                           std::initializer_list<std::pair<const char*, const void*>> pointers) {
  std::string problems;
  for (const auto& [name, pointer] : pointers) {
    if (pointer == nullptr) absl::StrAppend(&problems, problems.empty() ? "" : ", ", name);
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": null pointer ", problems));
}

// Attention (and rotary) head shapes: non-negative B, T, C; NH > 0 dividing C; NKV > 0
// dividing NH.
inline Status CheckHeadShape(const char* op, int B, int T, int C, int NH, int NKV) {
  RETURN_IF_ERROR(CheckNonNegative(op, {{"B", B}, {"T", T}, {"C", C}}));
  if (NH <= 0 || C % NH != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": C=", C, " must be a positive multiple of NH=", NH));
  }
  if (NKV <= 0 || NH % NKV != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": NH=", NH, " query heads must be a positive multiple of NKV=", NKV,
        " key/value heads"));
  }
  return absl::OkStatus();
}

// Rotary embedding: head shapes as CheckHeadShape with C = NH * hs, hs even, the rope's
// fields in range (CheckRopeSpec), position0 >= 0.
inline Status CheckRopeShape(const char* op, int B, int T, int NH, int NKV, int hs,
                             const RopeSpec& rope, int position0) {
  RETURN_IF_ERROR(CheckNonNegative(op, {{"hs", hs}, {"position0", position0}}));
  RETURN_IF_ERROR(CheckHeadShape(op, B, T, NH * hs, NH, NKV));
  if (hs % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": head size hs=", hs, " must be even"));
  }
  if (Status valid = CheckRopeSpec(rope); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", valid.message()));
  }
  return absl::OkStatus();
}

// CopyHeads: non-negative sizes, heads [first, first + count) within heads_per_row.
inline Status CheckHeadsShape(const char* op, int N, int heads_per_row, int first, int count,
                              int hs) {
  RETURN_IF_ERROR(CheckNonNegative(op, {{"N", N},
                                        {"heads_per_row", heads_per_row},
                                        {"first", first},
                                        {"count", count},
                                        {"hs", hs}}));
  if (first + count > heads_per_row) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": heads [", first, ", ", first + count,
                                                   ") outside the row's ", heads_per_row));
  }
  return absl::OkStatus();
}

// A column slice [col, col + n) of N rows of `cols` elements (the LoRA ops): all four
// non-negative and col + n <= cols; `cols_name` names the row width in the message.
inline Status CheckColumnSlice(const char* op, const char* cols_name, int cols, int col, int N,
                               int n) {
  RETURN_IF_ERROR(CheckNonNegative(op, {{"N", N}, {"n", n}, {cols_name, cols}, {"col", col}}));
  if (long{col} + n > cols) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": columns [col=", col, ", col + n=",
                                                   long{col} + n, ") exceed ", cols_name, "=",
                                                   cols));
  }
  return absl::OkStatus();
}

// Dropout: N, C, row0 >= 0 (row0 is a global sample row), T >= 1 positions per sample row,
// and a drop probability p in [0, 1) (NaN is outside).
inline Status CheckDropout(const char* op, int N, int C, int T, int64_t row0, float p) {
  RETURN_IF_ERROR(CheckNonNegative(op, {{"N", N}, {"C", C}, {"row0", long{row0}}}));
  if (T < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": T=", T, " positions per sample row must be >= 1"));
  }
  if (!(p >= 0.0f && p < 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": drop probability p=", p, " must be in [0, 1)"));
  }
  return absl::OkStatus();
}

// Cross-entropy: N, V >= 0, V <= Vp, and some class when there are rows.
inline Status CheckCrossEntropyShape(const char* op, int N, int V, int Vp) {
  RETURN_IF_ERROR(CheckNonNegative(op, {{"N", N}, {"V", V}, {"Vp", Vp}}));
  if (N > 0 && V == 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": V=0 (no classes) with N > 0"));
  }
  if (V > Vp) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": V=", V, " real classes exceed the padded row of Vp=", Vp));
  }
  return absl::OkStatus();
}

}  // namespace strata
