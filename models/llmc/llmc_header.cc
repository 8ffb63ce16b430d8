// See llmc_header.h.
#include "models/llmc/llmc_header.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/input_file.h"
#include "core/pread_fully.h"

namespace strata {
namespace {

// strata's own token files and llm.c's, named when given as a model by mistake.
constexpr int32_t kTokenFileMagics[] = {kLlmcMagic, kLlmcLlama3Magic, kStrataTokensMagic};

}  // namespace

StatusOr<ModelOptions> ReadLlmcHeader(const std::string& path) {
  StatusOr<InputFile> file = InputFile::Open(path, "model.from=llmc:");
  if (!file.ok() && absl::IsNotFound(file.status())) {
    return absl::NotFoundError(absl::StrCat("model.from=llmc:", path, ": cannot open: ",
                                            std::strerror(ENOENT)));
  }
  RETURN_IF_ERROR(file.status());
  int32_t header[kLlmcHeaderInts] = {};
  if (file->size() < kLlmcHeaderBytes) {
    return absl::DataLossError(absl::StrCat(path, " is ", file->size(),
                                            " bytes, shorter than llm.c's 1024-byte header"));
  }
  RETURN_IF_ERROR(PreadFully(file->fd(), header, kLlmcHeaderBytes, 0, path));
  if (header[0] != kLlmcModelMagic) {
    for (int32_t magic : kTokenFileMagics) {
      if (header[0] == magic) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, " is a token file (magic ", magic, "), not an llm.c model: give it as "
            "data.path"));
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(path, ": header[0] is ", header[0],
                                                   ", not llm.c's model magic ", kLlmcModelMagic));
  }
  if (header[1] != kLlmcModelVersionFp32) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": llm.c model version ", header[1], "; strata reads version 3 (fp32)",
        header[1] == 5 ? " (version 5 is llm.c's bf16 file: export it as fp32)" : ""));
  }
  ModelOptions model;
  model.preset = "llmc:" + path;
  model.family = ModelFamily::kGpt;
  model.max_seq_len = header[2];
  model.vocab = header[3];
  model.layers = header[4];
  model.heads = header[5];
  model.channels = header[6];
  model.padded_vocab = header[7];
  const char* names[] = {"max_seq_len", "vocab", "layers", "heads", "channels", "padded_vocab"};
  for (int i = 0; i < 6; ++i) {
    if (header[2 + i] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": header[", 2 + i, "] (", names[i], ") is ", header[2 + i]));
    }
  }
  if (model.padded_vocab < model.vocab || model.channels % model.heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": inconsistent header: vocab ", model.vocab, ", padded vocab ",
        model.padded_vocab, ", channels ", model.channels, ", heads ", model.heads));
  }
  // The parameter count from the shape, against the file's size. In 128 bits: with fields
  // up to 2^31 the count reaches 2^97, and a sum that wraps could match a file's size.
  using Wide = unsigned __int128;
  const Wide C = static_cast<Wide>(model.channels), L = static_cast<Wide>(model.layers);
  const Wide params =
      (static_cast<Wide>(model.padded_vocab) + static_cast<Wide>(model.max_seq_len)) * C +
      L * (12 * C * C + 13 * C) + 2 * C;
  const Wide file_bytes = static_cast<Wide>(kLlmcHeaderBytes) + params * 4;
  if (static_cast<Wide>(file->size()) != file_bytes) {
    auto text = [](Wide value) {  // absl::StrCat takes no __int128
      std::string digits;
      do {
        digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(value % 10)));
        value /= 10;
      } while (value != 0);
      return digits;
    };
    return absl::DataLossError(absl::StrCat(path, " is ", file->size(), " bytes; its header's model has ",
                                            text(params), " fp32 parameters, ", text(file_bytes),
                                            " bytes with the header"));
  }
  return model;
}

}  // namespace strata
