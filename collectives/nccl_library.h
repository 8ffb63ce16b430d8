// NCCL, loaded at run time: the NCCL communicator's calls go through this table, filled by
// dlopen the first time more than one GPU rank needs NCCL. So strata's binaries do not
// link libnccl (hundreds of MB, and the GPU machine's copy may be another version): runs
// and tests with one GPU, or none, never need it. Built only with CUDA (nccl.h gives the
// types and the version the build saw).
// Where it looks: $STRATA_NCCL_LIBRARY (a path to libnccl.so.*) where set, and only there;
// else the dynamic loader's search for libnccl.so.2 (LD_LIBRARY_PATH, the binary's RPATH,
// the ldconfig cache), then <CUDA toolkit>/lib64/libnccl.so.2 of the build. A library older
// than kMinNcclVersionCode (the oldest with every call used here) is refused.
// Thread-safety: LoadNccl is safe to call from any thread; the table is immutable.
#pragma once

#include <nccl.h>

#include <string>

#include "core/status.h"

namespace strata {
namespace nccl_internal {

// 2.14.0: ncclCommInitRankConfig, ncclCommFinalize and non-blocking communicators.
inline constexpr int kMinNcclVersionCode = 21400;

struct NcclLibrary {
  std::string path;     // the file loaded
  int version = 0;      // its ncclGetVersion code, e.g. 22809 for 2.28.9
  decltype(&ncclGetVersion) GetVersion = nullptr;
  decltype(&ncclGetErrorString) GetErrorString = nullptr;
  decltype(&ncclGetLastError) GetLastError = nullptr;
  decltype(&ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&ncclCommInitRankConfig) CommInitRankConfig = nullptr;
  decltype(&ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&ncclCommFinalize) CommFinalize = nullptr;
  decltype(&ncclCommDestroy) CommDestroy = nullptr;
  decltype(&ncclCommAbort) CommAbort = nullptr;
  decltype(&ncclAllReduce) AllReduce = nullptr;
  decltype(&ncclReduceScatter) ReduceScatter = nullptr;
  decltype(&ncclAllGather) AllGather = nullptr;
  decltype(&ncclBroadcast) Broadcast = nullptr;
  decltype(&ncclSend) Send = nullptr;
  decltype(&ncclRecv) Recv = nullptr;
  decltype(&ncclGroupStart) GroupStart = nullptr;
  decltype(&ncclGroupEnd) GroupEnd = nullptr;
};

// The library, loaded once per process. kFailedPrecondition naming every place searched
// (and the loader's reason), a missing symbol, or the version found and the one needed.
StatusOr<const NcclLibrary*> LoadNccl();

// "2.28.9" from a version code.
std::string NcclVersionText(int code);

// The loaded library's table; only after LoadNccl succeeded.
const NcclLibrary& Nccl();

}  // namespace nccl_internal
}  // namespace strata
