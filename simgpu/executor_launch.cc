// simgpu/executor_launch.cc: the launch half of simt.h: checking a launch against an H200's
// limits with CUDA's error codes, enqueueing the grid on the runtime double's stream
// (work.h), and kernel names from gcc's __PRETTY_FUNCTION__.
#include "simgpu/simt.h"

#include <cstdint>
#include <string>
#include <utility>

#include "simgpu/executor.h"
#include "simgpu/executor_memory.h"
#include "simgpu/work.h"

namespace simgpu::internal {
namespace {

// The error an H200 gives this launch configuration, or cudaSuccess. Static __shared__
// sizes are unknown under g++; only the dynamic size is checked.
cudaError_t CheckLaunch(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64) {
    return cudaErrorInvalidConfiguration;
  }
  if (grid.x == 0 || grid.x > 0x7fffffffu || grid.y == 0 || grid.y > 65535 || grid.z == 0 ||
      grid.z > 65535) {
    return cudaErrorInvalidConfiguration;
  }
  const int max_dynamic_bytes = MaxDynamicSharedBytes(kernel);
  if (shared_bytes > executor::kMaxSharedBytesPerBlock ||
      (max_dynamic_bytes >= 0 && shared_bytes > static_cast<size_t>(max_dynamic_bytes))) {
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

}  // namespace

void LaunchKernel(const char* name, const void* kernel, dim3 grid, dim3 block,
                  size_t shared_bytes, cudaStream_t stream, std::vector<Access> accesses,
                  std::function<void()> thread_body) {
  const cudaError_t invalid = CheckLaunch(kernel, grid, block, shared_bytes);
  if (invalid != cudaSuccess) {
    SetLaunchError(invalid);
    return;
  }
  const uint64_t seed = Seed();
  // The closure owns a copy of the name: a stream may run it after KernelName's static died.
  const cudaError_t enqueued = Enqueue(
      stream, std::string("kernel ") + name, std::move(accesses),
      [kernel_name = std::string(name), grid, block, shared_bytes, seed,
       body = std::move(thread_body)]() {
        return RunGrid(kernel_name.c_str(), grid, block, shared_bytes, seed, body);
      });
  if (enqueued != cudaSuccess) SetLaunchError(enqueued);
}

std::string KernelNameFromSignature(const char* pretty_function) {
  const std::string signature = pretty_function;
  static constexpr char kMarker[] = "kKernel = ";
  const size_t marker = signature.find(kMarker);
  const size_t end = signature.rfind(']');
  if (marker == std::string::npos || end == std::string::npos || end < marker) return signature;
  std::string name = signature.substr(marker + sizeof(kMarker) - 1,
                                      end - marker - (sizeof(kMarker) - 1));
  // "& ns::Kernel" or "(& ns::Kernel)" where gcc prints the address.
  while (!name.empty() && (name.front() == '&' || name.front() == '(' || name.front() == ' ')) {
    name.erase(0, 1);
  }
  if (!name.empty() && name.back() == ')' && name.find('(') == std::string::npos) name.pop_back();
  // Drop the qualification: everything up to the last "::" outside template arguments.
  int depth = 0;
  size_t unqualified = 0;
  for (size_t i = 0; i + 1 < name.size(); ++i) {
    if (name[i] == '<') ++depth;
    if (name[i] == '>') --depth;
    if (depth == 0 && name[i] == ':' && name[i + 1] == ':') unqualified = i + 2;
  }
  return name.substr(unqualified);
}

}  // namespace simgpu::internal
