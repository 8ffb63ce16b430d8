// IoOpName and ExecuteAll; the engines are made by create_io_engine.h.
#include "nvme/io_engine.h"

#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace strata::nvme {

const char* IoOpName(IoOp op) { return op == IoOp::kRead ? "read" : "write"; }

Status ExecuteAll(IoEngine* engine, absl::Span<const IoRequest> requests,
                  std::chrono::milliseconds timeout) {
  if (engine->Outstanding() != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "nvme: ExecuteAll needs an idle engine; ", engine->Outstanding(), " extents outstanding"));
  }
  RETURN_IF_ERROR(engine->Submit(requests));
  std::vector<IoCompletion> completions;
  completions.reserve(requests.size());
  Status waited = engine->Wait(requests.size(), timeout, &completions);
  for (const IoCompletion& completion : completions) {
    if (!completion.status.ok()) return completion.status;
  }
  return waited;
}

}  // namespace strata::nvme
