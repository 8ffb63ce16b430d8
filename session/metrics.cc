// JSONL metrics writer; see metrics.h.
#include "session/metrics.h"

#include <cerrno>

#include "core/streaming_output.h"

namespace strata {

StatusOr<std::unique_ptr<MetricsWriter>> MetricsWriter::Open(const std::string& path,
                                                             bool append) {
  std::FILE* file = nullptr;
  if (!path.empty()) {
    ASSIGN_OR_RETURN(file, OpenStreamingOutput(path, "--metrics file", append));
  }
  return std::unique_ptr<MetricsWriter>(new MetricsWriter(path, file));
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

Status MetricsWriter::Write(const nlohmann::json& record) {
  if (file_ == nullptr) return absl::OkStatus();
  std::string line = record.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    return ErrnoError(errno, "cannot write metrics file '" + path_ + "'");
  }
  return absl::OkStatus();
}

}  // namespace strata
