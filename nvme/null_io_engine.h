// The engine of a dry run (`strata plan`; NvmeStoreOptions::dry_run): every request
// completes at once and successfully, and no byte moves; the buffers are never read or
// written, because a dry device's buffers are address ranges with no memory behind them.
// Files are names only: OpenFile records one and touches nothing. Requests are validated as
// the real engines do (an open file, a length, a buffer, O_DIRECT alignment), so a dry run
// rejects what a real one would, and the stats count the bytes a real engine would move.
// Thread-safety: thread-compatible, like every IoEngine.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "nvme/io_engine.h"

namespace strata::nvme {

class NullIoEngine final : public IoEngine {
 public:
  explicit NullIoEngine(const IoEngineOptions& options);

  StatusOr<FileHandle> OpenFile(const std::string& path, const FileOptions& options) override;
  Status CloseFile(FileHandle file) override;
  std::string FileName(FileHandle file) const override;
  Status RegisterBuffers(absl::Span<const BufferRegion> regions) override { return Status(); }
  Status UnregisterBuffers() override { return Status(); }
  Status Submit(absl::Span<const IoRequest> requests) override;
  size_t Poll(std::vector<IoCompletion>* completions) override;
  // Everything outstanding is finished already: never waits.
  Status Wait(size_t min_completions, std::chrono::milliseconds timeout,
              std::vector<IoCompletion>* completions) override;
  Status Drain() override { return Status(); }
  size_t Outstanding() const override { return ready_.size(); }
  EngineInfo info() const override { return info_; }
  EngineStats stats() const override { return stats_; }

 private:
  struct File {
    std::string path;
    bool direct = false;
    bool open = false;
    uint32_t outstanding = 0;
  };

  bool IsOpen(FileHandle file) const;
  Status Validate(const IoRequest& request) const;

  EngineInfo info_;
  EngineStats stats_;
  std::vector<File> files_;  // index = FileHandle::id
  std::deque<IoCompletion> ready_;
};

}  // namespace strata::nvme
