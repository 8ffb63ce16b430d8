// CreateIoEngine (option checks, the io_uring probe and the "auto" fallback) and
// ProbeIoUring; the engines themselves are engine_core + uring/pread backends.
#include "nvme/create_io_engine.h"

#include <liburing.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/logging.h"
#include "nvme/engine_core.h"
#include "nvme/pread_backend.h"
#include "nvme/uring_backend.h"

namespace strata::nvme {
namespace {

constexpr uint32_t kMaxQueueDepth = 4096;
constexpr uint32_t kMaxPreadThreads = 256;

Status ValidateOptions(const IoEngineOptions& options) {
  std::vector<std::string> problems;
  if (options.queue_depth == 0 || options.queue_depth > kMaxQueueDepth) {
    problems.push_back(
        absl::StrFormat("queue_depth: %d is not in [1, %d]", options.queue_depth, kMaxQueueDepth));
  }
  if (options.max_request_bytes == 0 || options.max_request_bytes % kDirectIoAlignment != 0 ||
      options.max_request_bytes > kMaxRequestBytes) {
    problems.push_back(
        absl::StrFormat("max_request_bytes: %d is not a positive multiple of %d of at most %d",
                        options.max_request_bytes, kDirectIoAlignment, kMaxRequestBytes));
  }
  if (options.pread_threads > kMaxPreadThreads) {
    problems.push_back(absl::StrFormat("pread_threads: %d is more than %d", options.pread_threads,
                                       kMaxPreadThreads));
  }
  if (options.max_attempts_without_progress == 0) {
    problems.push_back("max_attempts_without_progress: must be at least 1");
  }
  if (problems.empty()) return Status();
  return absl::InvalidArgumentError(
      absl::StrCat("nvme: bad engine options: ", absl::StrJoin(problems, "; ")));
}

std::unique_ptr<IoEngine> MakePreadEngine(const IoEngineOptions& options,
                                          std::string fallback_reason) {
  const uint32_t threads = options.pread_threads > 0
                               ? options.pread_threads
                               : std::min(options.queue_depth, kMaxPreadThreads);
  auto engine =
      std::make_unique<ChunkedEngine>("pread", options, std::make_unique<PreadBackend>(threads));
  engine->set_fallback_reason(std::move(fallback_reason));
  return engine;
}

}  // namespace

Status ProbeIoUring() {
  struct io_uring ring {};
  int result = io_uring_queue_init(4, &ring, 0);
  if (result < 0) return ErrnoError(-result, "io_uring_queue_init");
  io_uring_queue_exit(&ring);
  return Status();
}

StatusOr<std::unique_ptr<IoEngine>> CreateIoEngine(const IoEngineOptions& options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  if (options.engine == IoEngineKind::kPread) return MakePreadEngine(options, "");

  StatusOr<std::unique_ptr<UringBackend>> uring = UringBackend::Create(options);
  if (uring.ok()) {
    return std::unique_ptr<IoEngine>(
        std::make_unique<ChunkedEngine>("io_uring", options, std::move(uring).value()));
  }
  const std::string reason(uring.status().message());
  if (options.engine == IoEngineKind::kIoUring) {
    return absl::UnavailableError(absl::StrCat(
        "nvme.engine=io_uring, but io_uring is unavailable here (", reason,
        "; e.g. a container's seccomp profile, kernel.io_uring_disabled or an old kernel); "
        "set nvme.engine=auto or nvme.engine=pread to use the pread/pwrite engine"));
  }
  spdlog::warn(
      "nvme: io_uring is unavailable ({}); nvme.engine=auto uses the pread/pwrite "
      "engine",
      reason);
  return MakePreadEngine(options, reason);
}

}  // namespace strata::nvme
