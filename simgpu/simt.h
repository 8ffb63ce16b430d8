// simgpu/simt.h: the CUDA language for g++, so that strata's kernels (.cu files) compile
// unchanged as C++ and run on simgpu's SIMT executor (executor.h, docs/simgpu.md).
// --config=simgpu force-includes this header before anything else in every .cu
// (`g++ -x c++ -ffp-contract=off -DSTRATA_SIMGPU -include simgpu/simt.h`); nvcc never sees it.
//
// What a kernel gets here, and how it differs from a GPU:
// - __global__, __device__, __host__ are empty; __shared__ is `static`. A static __shared__
//   variable is therefore one object per function, shared by every thread of a block; the
//   executor runs one block at a time in the whole process, which keeps it per block.
// - threadIdx, blockIdx, blockDim, gridDim read the running thread's coordinates (a thread is
//   a fiber); warpSize is 32. Calling them outside a kernel aborts with a message.
// - __syncthreads, __syncwarp and the warp intrinsics (__shfl*_sync, __ballot_sync,
//   __any_sync, __all_sync) suspend the calling fiber until its barrier or warp operation
//   completes; misuse (a barrier some live thread never reaches, a mask naming an exited or
//   missing lane, a shuffle from a lane outside its mask, lanes of one mask at different
//   operations) fails the launch with a message naming the kernel and block, never a hang.
// - __launch_bounds__ expands to nothing: g++ cannot read the attribute back. Its limit is
//   enforced by a source check over the kernels (the launch's threads per block against the
//   bound), not here.
// - The float intrinsics (__fadd_rn ...) are plain IEEE operations on float; the build sets
//   -ffp-contract=off, so no multiply-add is fused unless the kernel asks (__fmaf_rn).
// - Also from CUDA's device headers: integer and float min/max, __ffs/__popc/__clz, and the
//   runtime's cudaFuncSetAttribute/cudaFuncGetAttributes overloads taking a kernel pointer.
//   Math (expf, fmaxf, tanhf, ...) is <cmath>'s. `#pragma unroll` is unknown to g++: compile
//   with -Wno-unknown-pragmas.
// - simgpu::Launch checks a launch as an H200 would (CUDA's own error codes through
//   cudaGetLastError, the kernel not run), then enqueues the grid on the runtime double's
//   stream (work.h) with the kernel's pointer arguments as the operation's accesses.
// Thread-safety: launches are thread-safe (as the CUDA runtime); the device-side functions
// may only be called by a kernel's threads.
#pragma once

#if defined(__CUDACC__)
#error "simgpu/simt.h is the CUDA language for g++; nvcc must not include it"
#endif

// Defined before CUDA's headers: crt/host_defines.h keeps a host compiler's own definitions.
// (Undefined first in case a CUDA header came before this one; this header is meant to be
// the first thing a .cu includes.)
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#undef __managed__
#undef __grid_constant__
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __constant__
#define __managed__
#define __grid_constant__

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "simgpu/work.h"

#undef __forceinline__
#define __forceinline__ inline
#undef __launch_bounds__
#define __launch_bounds__(...)

// device_launch_parameters.h declares threadIdx & co. as extern objects, which the macros
// below replace; its guard is set so that a later #include of it is a no-op.
#define __DEVICE_LAUNCH_PARAMETERS_H__

namespace simgpu {

// The built-in variables of one thread of a running kernel.
struct ThreadCoordinates {
  uint3 thread_index;
  uint3 block_index;
  dim3 block_dim;
  dim3 grid_dim;
};

namespace internal {

// The running kernel thread's coordinates on this OS thread; nullptr outside a kernel.
// Every threadIdx reads it: __thread (no C++ thread_local wrapper call) in the initial-exec
// model (one %fs-relative load, no __tls_get_addr), which holds as long as the executor's
// library is loaded with the program, never with dlopen.
extern __thread const ThreadCoordinates* current_coordinates
    __attribute__((tls_model("initial-exec")));

// Aborts: `what` (threadIdx, __syncthreads, ...) used outside a kernel's thread.
[[noreturn]] void OutsideKernel(const char* what);

inline const ThreadCoordinates& Coordinates(const char* what) {
  const ThreadCoordinates* coordinates = current_coordinates;
  if (__builtin_expect(coordinates == nullptr, 0)) OutsideKernel(what);
  return *coordinates;
}

// The warp operations; each names the CUDA intrinsic in messages.
enum class WarpOpKind : int {
  kShuffleIndex,
  kShuffleUp,
  kShuffleDown,
  kShuffleXor,
  kBallot,
  kAny,
  kAll,
  kSyncWarp,
};

// Blocks the calling kernel thread until every lane of `mask` has arrived at the same
// operation with the same mask; returns the lane's result: the shuffled value's bits (value
// is `value_bytes` long), the ballot, the any/all predicate. `lane_argument` is srcLane,
// delta or laneMask; `width` the shuffle's segment width. Out of line on purpose: a fiber
// switch inside it makes the compiler reload the thread-local coordinates afterwards.
uint64_t WarpOperation(WarpOpKind kind, unsigned mask, uint64_t value, int value_bytes,
                       int lane_argument, int width);

// __syncthreads: blocks until every thread of the block that has not exited arrives.
void SyncThreads();

// The current block's dynamic shared memory (see DynamicSharedMemory).
void* CurrentDynamicShared();

// "AdamWKernel<float>" from gcc's __PRETTY_FUNCTION__ of KernelName<kKernel>.
std::string KernelNameFromSignature(const char* pretty_function);

// Checks the launch (H200 limits) and enqueues the grid; see Launch.
void LaunchKernel(const char* name, const void* kernel, dim3 grid, dim3 block,
                  size_t shared_bytes, cudaStream_t stream, std::vector<Access> accesses,
                  std::function<void()> thread_body);

template <typename T>
T Shuffle(WarpOpKind kind, unsigned mask, T value, int lane_argument, int width) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8,
                "a warp shuffle moves a trivially copyable value of at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = WarpOperation(kind, mask, bits, static_cast<int>(sizeof(T)), lane_argument, width);
  T result;
  std::memcpy(&result, &bits, sizeof(T));
  return result;
}

template <typename T>
void AddAccess(std::vector<Access>& accesses, const T& value) {
  if constexpr (std::is_pointer_v<T> && std::is_object_v<std::remove_pointer_t<T>>) {
    if (value != nullptr) {
      // Only the element the pointer points at: strata packs small arrays that different
      // streams write element by element into one buffer (a page would race falsely).
      accesses.push_back(Access{reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(value)),
                                sizeof(std::remove_pointer_t<T>),
                                !std::is_const_v<std::remove_pointer_t<T>>});
    }
  }
}

}  // namespace internal

// The kernel's name for messages ("AdamWKernel<float>": without namespaces), computed once.
template <auto kKernel>
const char* KernelName() {
  static const std::string name = internal::KernelNameFromSignature(__PRETTY_FUNCTION__);
  return name.c_str();
}

// The running block's dynamic shared memory: the launch's shared_bytes, filled with 0xff
// bytes (NaN as float) when the block starts, ending exactly at an inaccessible page so an
// overrun faults. Its address is aligned as its size allows (to 16 bytes when the size is a
// multiple of 16). Aborts outside a kernel.
inline void* DynamicSharedMemory() { return internal::CurrentDynamicShared(); }

// Launches `kernel` (called `name` in messages) as CUDA's <<<grid, block, shared_bytes,
// stream>>> would: the arguments are converted to the kernel's parameter types and copied
// now; a launch beyond an H200's limits (threads per block 1..1024 with x, y <= 1024 and
// z <= 64; grid x 1..2^31-1, y and z 1..65535: cudaErrorInvalidConfiguration; dynamic
// shared memory above cudaFuncAttributeMaxDynamicSharedMemorySize (48 KiB unless raised, at
// most 232448 bytes): cudaErrorInvalidValue) is reported through cudaGetLastError and not
// run. Static __shared__ sizes are unknown to g++ and not counted. Otherwise the grid is
// enqueued on `stream` as the operation "kernel <name>", each non-null pointer argument an
// access (a write unless it points to const), its blocks run in the random order of
// simgpu::Seed().
template <typename... Params, typename... Args>
void Launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block,
            size_t shared_bytes, cudaStream_t stream, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args),
                "a kernel launch passes one argument per kernel parameter");
  auto values = std::tuple<Params...>(std::forward<Args>(args)...);
  std::vector<Access> accesses;
  std::apply([&accesses](const auto&... value) { (internal::AddAccess(accesses, value), ...); },
             values);
  // Each thread gets its own copy of the parameters, as kernel parameters are per thread.
  std::function<void()> thread_body = [kernel, values]() { std::apply(kernel, values); };
  internal::LaunchKernel(name, reinterpret_cast<const void*>(kernel), grid, block, shared_bytes,
                         stream, std::move(accesses), std::move(thread_body));
}

}  // namespace simgpu

// The runtime's C++ overloads that take a kernel by its function pointer; cuda_runtime.h
// declares them only for nvcc (__CUDACC__).
template <typename T>
inline cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute attribute, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(entry), attribute, value);
}
template <typename T>
inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, T* entry) {
  return ::cudaFuncGetAttributes(attributes, reinterpret_cast<const void*>(entry));
}

// The built-in variables of the running thread.
#define threadIdx (::simgpu::internal::Coordinates("threadIdx").thread_index)
#define blockIdx (::simgpu::internal::Coordinates("blockIdx").block_index)
#define blockDim (::simgpu::internal::Coordinates("blockDim").block_dim)
#define gridDim (::simgpu::internal::Coordinates("gridDim").grid_dim)
inline constexpr int warpSize = 32;

// Barriers.
inline void __syncthreads() { ::simgpu::internal::SyncThreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::simgpu::internal::WarpOperation(::simgpu::internal::WarpOpKind::kSyncWarp, mask, 0, 0, 0,
                                    warpSize);
}

// Warp shuffles of any trivially copyable value up to 8 bytes (float, double, int, ...).
template <typename T>
inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize) {
  return ::simgpu::internal::Shuffle(::simgpu::internal::WarpOpKind::kShuffleIndex, mask, var,
                                     srcLane, width);
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  return ::simgpu::internal::Shuffle(::simgpu::internal::WarpOpKind::kShuffleUp, mask, var,
                                     static_cast<int>(delta), width);
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  return ::simgpu::internal::Shuffle(::simgpu::internal::WarpOpKind::kShuffleDown, mask, var,
                                     static_cast<int>(delta), width);
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize) {
  return ::simgpu::internal::Shuffle(::simgpu::internal::WarpOpKind::kShuffleXor, mask, var,
                                     laneMask, width);
}

// Warp votes.
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return static_cast<unsigned>(::simgpu::internal::WarpOperation(
      ::simgpu::internal::WarpOpKind::kBallot, mask, predicate != 0, 4, 0, warpSize));
}
inline int __any_sync(unsigned mask, int predicate) {
  return static_cast<int>(::simgpu::internal::WarpOperation(
      ::simgpu::internal::WarpOpKind::kAny, mask, predicate != 0, 4, 0, warpSize));
}
inline int __all_sync(unsigned mask, int predicate) {
  return static_cast<int>(::simgpu::internal::WarpOperation(
      ::simgpu::internal::WarpOpKind::kAll, mask, predicate != 0, 4, 0, warpSize));
}

// CUDA's integer and floating-point min/max (crt/math_functions.h): non-template overloads,
// so that std::min and std::max win where both are visible.
#define SIMGPU_MIN_MAX(result, a_type, b_type)                                          \
  inline result min(a_type a, b_type b) {                                               \
    return static_cast<result>(a) < static_cast<result>(b) ? static_cast<result>(a)     \
                                                           : static_cast<result>(b);    \
  }                                                                                     \
  inline result max(a_type a, b_type b) {                                               \
    return static_cast<result>(a) > static_cast<result>(b) ? static_cast<result>(a)     \
                                                           : static_cast<result>(b);    \
  }
SIMGPU_MIN_MAX(int, int, int)
SIMGPU_MIN_MAX(unsigned, unsigned, unsigned)
SIMGPU_MIN_MAX(unsigned, int, unsigned)
SIMGPU_MIN_MAX(unsigned, unsigned, int)
SIMGPU_MIN_MAX(long, long, long)
SIMGPU_MIN_MAX(unsigned long, unsigned long, unsigned long)
SIMGPU_MIN_MAX(unsigned long, long, unsigned long)
SIMGPU_MIN_MAX(unsigned long, unsigned long, long)
SIMGPU_MIN_MAX(long long, long long, long long)
SIMGPU_MIN_MAX(unsigned long long, unsigned long long, unsigned long long)
SIMGPU_MIN_MAX(unsigned long long, long long, unsigned long long)
SIMGPU_MIN_MAX(unsigned long long, unsigned long long, long long)
#undef SIMGPU_MIN_MAX
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
inline double min(float a, double b) { return std::fmin(static_cast<double>(a), b); }
inline double max(float a, double b) { return std::fmax(static_cast<double>(a), b); }
inline double min(double a, float b) { return std::fmin(a, static_cast<double>(b)); }
inline double max(double a, float b) { return std::fmax(a, static_cast<double>(b)); }

// Bit intrinsics.
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }

// Single-precision arithmetic with round-to-nearest-even: IEEE float operations.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }

// Bit casts.
inline unsigned __float_as_uint(float x) {
  unsigned bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}
inline float __uint_as_float(unsigned bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}
inline int __float_as_int(float x) {
  int bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}
inline float __int_as_float(int bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}
