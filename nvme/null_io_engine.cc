// See null_io_engine.h.
#include "nvme/null_io_engine.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace strata::nvme {

NullIoEngine::NullIoEngine(const IoEngineOptions& options) {
  info_.engine = "null";
  info_.queue_depth = options.queue_depth;
  info_.max_request_bytes = options.max_request_bytes;
}

StatusOr<FileHandle> NullIoEngine::OpenFile(const std::string& path,
                                            const FileOptions& options) {
  files_.push_back({path, options.direct_io, /*open=*/true, /*outstanding=*/0});
  return FileHandle{static_cast<int32_t>(files_.size() - 1)};
}

Status NullIoEngine::CloseFile(FileHandle file) {
  if (!IsOpen(file)) {
    return absl::InvalidArgumentError(absl::StrCat("nvme: close of unknown file ", file.id));
  }
  if (files_[file.id].outstanding > 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("nvme: close of %s with %d extents outstanding", files_[file.id].path,
                        files_[file.id].outstanding));
  }
  files_[file.id].open = false;
  return Status();
}

std::string NullIoEngine::FileName(FileHandle file) const {
  if (!file.valid() || file.id >= static_cast<int32_t>(files_.size())) {
    return absl::StrCat("<unknown file ", file.id, ">");
  }
  return files_[file.id].path;
}

Status NullIoEngine::Submit(absl::Span<const IoRequest> requests) {
  for (size_t i = 0; i < requests.size(); ++i) {
    Status valid = Validate(requests[i]);
    if (!valid.ok()) {
      return Annotate(valid, absl::StrFormat("nvme: request %d of a batch of %d (tag %d), "
                                             "batch rejected",
                                             i, requests.size(), requests[i].tag));
    }
  }
  for (const IoRequest& request : requests) {
    ++files_[request.file.id].outstanding;
    ready_.push_back(IoCompletion{request.tag, Status(), request.op, request.file,
                                  request.offset, request.length, request.length});
    ++stats_.extents_completed;
    stats_.transfers_issued +=
        info_.max_request_bytes == 0
            ? 1
            : (request.length + info_.max_request_bytes - 1) / info_.max_request_bytes;
    (request.op == IoOp::kRead ? stats_.bytes_read : stats_.bytes_written) += request.length;
  }
  return Status();
}

size_t NullIoEngine::Poll(std::vector<IoCompletion>* completions) {
  const size_t count = ready_.size();
  for (IoCompletion& completion : ready_) {
    --files_[completion.file.id].outstanding;
    completions->push_back(std::move(completion));
  }
  ready_.clear();
  return count;
}

Status NullIoEngine::Wait(size_t min_completions, std::chrono::milliseconds timeout,
                          std::vector<IoCompletion>* completions) {
  Poll(completions);
  return Status();
}

bool NullIoEngine::IsOpen(FileHandle file) const {
  return file.valid() && file.id < static_cast<int32_t>(files_.size()) && files_[file.id].open;
}

Status NullIoEngine::Validate(const IoRequest& request) const {
  if (!IsOpen(request.file)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "nvme: %s of unknown or closed file %d", IoOpName(request.op), request.file.id));
  }
  const File& file = files_[request.file.id];
  auto invalid = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrFormat("nvme: %s of %s at offset %d, length %d: %s", IoOpName(request.op),
                        file.path, request.offset, request.length, why));
  };
  if (request.length == 0) return invalid("length is zero");
  if (request.buffer == nullptr) return invalid("buffer is null");
  if (request.offset + request.length < request.offset) return invalid("extent overflows");
  const uint64_t address = reinterpret_cast<uintptr_t>(request.buffer);
  if (file.direct && (request.offset % kDirectIoAlignment != 0 ||
                      request.length % kDirectIoAlignment != 0 ||
                      address % kDirectIoAlignment != 0)) {
    return invalid(absl::StrFormat(
        "O_DIRECT needs offset, length and buffer address (0x%x) aligned to %d bytes", address,
        kDirectIoAlignment));
  }
  return Status();
}

}  // namespace strata::nvme
