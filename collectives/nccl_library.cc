// See nccl_library.h.
#include "collectives/nccl_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#ifndef STRATA_CUDA_ROOT
#define STRATA_CUDA_ROOT "/usr/local/cuda"
#endif

namespace strata {
namespace nccl_internal {
namespace {

NcclLibrary* g_library = nullptr;

template <typename F>
bool Resolve(void* handle, const char* name, F* out, std::vector<std::string>* missing) {
  *out = reinterpret_cast<F>(dlsym(handle, name));
  if (*out == nullptr) missing->push_back(name);
  return *out != nullptr;
}

StatusOr<NcclLibrary*> Load() {
  std::vector<std::string> candidates;
  if (const char* path = std::getenv("STRATA_NCCL_LIBRARY"); path != nullptr && *path != 0) {
    candidates.push_back(path);  // the user's choice, and only it
  } else {
    candidates.push_back("libnccl.so.2");
    candidates.push_back(STRATA_CUDA_ROOT "/lib64/libnccl.so.2");
  }
  std::vector<std::string> tried;
  void* handle = nullptr;
  std::string path;
  for (const std::string& candidate : candidates) {
    handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      path = candidate;
      break;
    }
    const char* why = dlerror();
    tried.push_back(absl::StrCat(candidate, " (", why != nullptr ? why : "not found", ")"));
  }
  if (handle == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "NCCL is needed for more than one GPU rank but was not found; tried ",
        absl::StrJoin(tried, "; "),
        ". Set STRATA_NCCL_LIBRARY to a libnccl.so.2, or put its folder on LD_LIBRARY_PATH "
        "(e.g. a Python environment's nvidia/nccl/lib)"));
  }
  auto library = std::make_unique<NcclLibrary>();
  library->path = path;
  std::vector<std::string> missing;
  Resolve(handle, "ncclGetVersion", &library->GetVersion, &missing);
  Resolve(handle, "ncclGetErrorString", &library->GetErrorString, &missing);
  Resolve(handle, "ncclGetLastError", &library->GetLastError, &missing);
  Resolve(handle, "ncclGetUniqueId", &library->GetUniqueId, &missing);
  Resolve(handle, "ncclCommInitRankConfig", &library->CommInitRankConfig, &missing);
  Resolve(handle, "ncclCommGetAsyncError", &library->CommGetAsyncError, &missing);
  Resolve(handle, "ncclCommFinalize", &library->CommFinalize, &missing);
  Resolve(handle, "ncclCommDestroy", &library->CommDestroy, &missing);
  Resolve(handle, "ncclCommAbort", &library->CommAbort, &missing);
  Resolve(handle, "ncclAllReduce", &library->AllReduce, &missing);
  Resolve(handle, "ncclReduceScatter", &library->ReduceScatter, &missing);
  Resolve(handle, "ncclAllGather", &library->AllGather, &missing);
  Resolve(handle, "ncclBroadcast", &library->Broadcast, &missing);
  Resolve(handle, "ncclSend", &library->Send, &missing);
  Resolve(handle, "ncclRecv", &library->Recv, &missing);
  Resolve(handle, "ncclGroupStart", &library->GroupStart, &missing);
  Resolve(handle, "ncclGroupEnd", &library->GroupEnd, &missing);
  if (library->GetVersion == nullptr ||
      library->GetVersion(&library->version) != ncclSuccess) {
    library->version = 0;
  }
  if (library->version < kMinNcclVersionCode || !missing.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "NCCL at ", path, " is version ", NcclVersionText(library->version),
        "; strata needs ", NcclVersionText(kMinNcclVersionCode), " or newer (built against ",
        NcclVersionText(NCCL_VERSION_CODE), ")",
        missing.empty() ? "" : absl::StrCat("; missing ", absl::StrJoin(missing, ", "))));
  }
  return library.release();  // lives as long as the process, like the dlopen handle
}

}  // namespace

std::string NcclVersionText(int code) {
  if (code <= 0) return "unknown";
  // Codes below 2.9 were X*1000 + Y*100 + Z, since then X*10000 + Y*100 + Z.
  if (code < 10000) return absl::StrCat(code / 1000, ".", code % 1000 / 100, ".", code % 100);
  return absl::StrCat(code / 10000, ".", code % 10000 / 100, ".", code % 100);
}

StatusOr<const NcclLibrary*> LoadNccl() {
  static std::once_flag once;
  static Status failure;
  std::call_once(once, [] {
    StatusOr<NcclLibrary*> loaded = Load();
    if (loaded.ok()) {
      g_library = *loaded;
    } else {
      failure = loaded.status();
    }
  });
  if (g_library == nullptr) return failure;
  return g_library;
}

const NcclLibrary& Nccl() { return *g_library; }

}  // namespace nccl_internal
}  // namespace strata
