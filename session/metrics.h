// Writes one JSON object per line (JSONL) for `--metrics FILE`. Each training step's
// record has at least: step, loss, lr, ms_per_step, tokens_per_s, peak_bytes {device,
// host}; plus grad_norm, forward/backward/optimizer ms, state_bytes and val_loss when
// measured. The file is a streaming output (core/streaming_output.h: a regular file, a FIFO
// with a reader, /dev/null, a terminal). Errors name the file.
// Thread-safety: not thread-safe; one writer per file.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace strata {

class MetricsWriter {
 public:
  // Opens `path`, truncated or (`append`: a resumed run goes on from its checkpoint's
  // step) appended to; an empty path gives a writer that writes nothing.
  static StatusOr<std::unique_ptr<MetricsWriter>> Open(const std::string& path,
                                                       bool append = false);
  ~MetricsWriter();
  Status Write(const nlohmann::json& record);

 private:
  MetricsWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  std::string path_;
  std::FILE* file_;
};

}  // namespace strata
