// The one way strata opens a file a user hands it (a config, a model's config.json, a
// safetensors shard or index, tokenizer files, a hardware file, report inputs, token text,
// a checkpoint's files): it must be a regular file (a directory, FIFO, device or socket is
// refused naming the path and what it is), it is opened without blocking (a FIFO without a
// writer cannot hang the run), it is no larger than the bound its reader gives (so
// /dev/zero or a runaway file cannot grow memory without end), and it is noted as an input
// of the run (core/run_inputs.h), so that no output is written over it.
// Errors name the path, the input's role (`what`) and the problem; a missing file is
// kNotFound.
// Thread-safety: pure functions of the filesystem (and the run-input registry).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/status.h"

namespace strata {

// Bounds for whole-file readers. JSON documents strata reads (config files, config.json,
// checkpoint.json, hardware files, safetensors indexes): 64 MiB. Tokenizer files
// (tokenizer.json, tokenizer.model, encoder.json, vocab.bpe; the largest published are
// ~20 MB): 1 GiB. Readers of data without a natural bound pass kNoInputLimit.
inline constexpr uint64_t kJsonInputLimit = 64ull << 20;
inline constexpr uint64_t kTokenizerInputLimit = 1ull << 30;
inline constexpr uint64_t kNoInputLimit = std::numeric_limits<uint64_t>::max();

// An open input: its descriptor (closed by the destructor) and size. Move-only.
class InputFile {
 public:
  InputFile() = default;
  InputFile(InputFile&& other) noexcept : fd_(other.fd_), size_(other.size_) { other.fd_ = -1; }
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  // Opens `path` as `what` ("--hardware file"), read-only, close-on-exec.
  static StatusOr<InputFile> Open(const std::string& path, const std::string& what,
                                  uint64_t max_bytes = kNoInputLimit);

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }
  // Gives up ownership of the descriptor (the caller closes it).
  int Release();

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole input at `path` (InputFile::Open's checks, then read to its size).
StatusOr<std::string> ReadInputFile(const std::string& path, const std::string& what,
                                    uint64_t max_bytes);
Status ReadInputFileInto(const std::string& path, const std::string& what, uint64_t max_bytes,
                         std::string* bytes);
Status ReadInputFileInto(const std::string& path, const std::string& what, uint64_t max_bytes,
                         std::vector<char>* bytes);

}  // namespace strata
