// Loading and splitting of token streams; see tokens.h for the formats and invariants.
// File reads go through a read(2) loop that handles short reads and EINTR, so pipes and
// special files work as well as regular files. Thread-safety: the functions share no state.
#include "data/tokens.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/file_kind.h"
#include "data/default_corpus.h"

namespace strata {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "llm.c token files are little-endian; this host needs byte swaps in tokens.cc");

constexpr size_t kReadChunkBytes = size_t{1} << 20;

// Owns one file descriptor; closes it on destruction. Move-only.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads until `bytes` bytes are in `buffer` or the file ends; returns the bytes read.
// `file_offset` is where this read starts, for the error message only.
StatusOr<size_t> ReadUpTo(int fd, char* buffer, size_t bytes, int64_t file_offset,
                          const std::string& source) {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t got = ::read(fd, buffer + done, std::min(bytes - done, kReadChunkBytes));
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, absl::StrCat(source, ": read failed at byte ",
                                            file_offset + static_cast<int64_t>(done)));
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

int32_t LoadLittleEndian32(const char* bytes) {
  int32_t value;
  std::memcpy(&value, bytes, sizeof(value));
  return value;
}

// The first id >= vocab is an error naming the source, the position and the id.
Status CheckVocab(const std::vector<uint16_t>& tokens, int vocab, const std::string& source,
                  TokenFormat format) {
  if (vocab > 0xFFFF) return absl::OkStatus();  // every uint16 id fits
  for (size_t position = 0; position < tokens.size(); ++position) {
    if (tokens[position] < vocab) continue;
    const std::string where =
        format == TokenFormat::kLlmc
            ? absl::StrCat("token position ", position, " (byte offset ",
                           kLlmcHeaderBytes + 2 * static_cast<int64_t>(position), ")")
            : absl::StrCat("byte offset ", position);
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": token id ", tokens[position], " at ", where,
                     " is out of range for model.vocab = ", vocab, " (ids must be < vocab)"));
  }
  return absl::OkStatus();
}

Status CheckVocabArgument(int vocab) {
  if (vocab >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("model.vocab must be >= 1, got ", vocab));
}

StatusOr<TokenDataset> LoadLlmcFile(int fd, const char* header, size_t header_bytes,
                                    const std::string& path, const std::string& source, int vocab) {
  if (header_bytes < static_cast<size_t>(kLlmcHeaderBytes)) {
    return absl::DataLossError(
        absl::StrCat(source, ": truncated llm.c header: the file starts with the llm.c magic ",
                     kLlmcMagic, " but has only ", header_bytes, " bytes; the header alone is ",
                     kLlmcHeaderBytes, " bytes"));
  }
  const int32_t version = LoadLittleEndian32(header + 4);
  if (version != kLlmcVersion) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": unsupported llm.c version ", version,
                                                   " (header[1]); this reader knows version ",
                                                   kLlmcVersion));
  }
  const int32_t num_tokens = LoadLittleEndian32(header + 8);
  if (num_tokens < 0) {
    return absl::DataLossError(absl::StrCat(source, ": corrupt llm.c header: negative token count ",
                                            num_tokens, " (header[2])"));
  }
  if (num_tokens == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": llm.c file is empty: its header declares 0 tokens"));
  }
  const int64_t token_bytes = int64_t{2} * num_tokens;
  const int64_t expected_file_bytes = kLlmcHeaderBytes + token_bytes;
  auto tokens = std::make_shared<std::vector<uint16_t>>(static_cast<size_t>(num_tokens));
  ASSIGN_OR_RETURN(const size_t got_bytes,
                   ReadUpTo(fd, reinterpret_cast<char*>(tokens->data()),
                            static_cast<size_t>(token_bytes), kLlmcHeaderBytes, source));
  if (static_cast<int64_t>(got_bytes) < token_bytes) {
    return absl::DataLossError(
        absl::StrCat(source, ": truncated llm.c file: the header says ", num_tokens, " tokens (",
                     expected_file_bytes, " bytes) but the file holds only ", got_bytes / 2,
                     " tokens (", kLlmcHeaderBytes + static_cast<int64_t>(got_bytes), " bytes)"));
  }
  char probe;
  ASSIGN_OR_RETURN(const size_t extra_bytes, ReadUpTo(fd, &probe, 1, expected_file_bytes, source));
  if (extra_bytes > 0) {
    struct stat info;
    const std::string actual =
        ::fstat(fd, &info) == 0 && S_ISREG(info.st_mode)
            ? absl::StrCat(", the file has ", static_cast<int64_t>(info.st_size))
            : std::string(", the file has more");
    return absl::DataLossError(absl::StrCat(
        source, ": llm.c file is longer than its header says: ", num_tokens, " tokens make ",
        expected_file_bytes, " bytes", actual, " (wrong header[2] or a corrupt file)"));
  }
  RETURN_IF_ERROR(CheckVocab(*tokens, vocab, source, TokenFormat::kLlmc));
  TokenDataset dataset;
  dataset.tokens = std::move(tokens);
  dataset.format = TokenFormat::kLlmc;
  dataset.source = source;
  dataset.description = absl::StrCat("file ", path, " (llm.c format, ", num_tokens, " tokens)");
  return dataset;
}

// Bytes that are not part of a valid UTF-8 sequence, plus NUL bytes (text has none); the
// offset of the first in *first (or -1).
int64_t CountNonText(std::string_view bytes, int64_t* first) {
  int64_t bad = 0;
  *first = -1;
  size_t i = 0;
  auto mark = [&](size_t at, size_t count) {
    if (*first < 0) *first = static_cast<int64_t>(at);
    bad += static_cast<int64_t>(count);
  };
  while (i < bytes.size()) {
    const unsigned char lead = static_cast<unsigned char>(bytes[i]);
    size_t length = 0;
    if (lead == 0) {
      mark(i, 1);
      ++i;
      continue;
    }
    if (lead < 0x80) length = 1;
    else if (lead >= 0xC2 && lead <= 0xDF) length = 2;
    else if (lead >= 0xE0 && lead <= 0xEF) length = 3;
    else if (lead >= 0xF0 && lead <= 0xF4) length = 4;
    bool valid = length > 0 && i + length <= bytes.size();
    for (size_t k = 1; valid && k < length; ++k) {
      valid = (static_cast<unsigned char>(bytes[i + k]) & 0xC0) == 0x80;
    }
    if (!valid) {
      mark(i, 1);
      ++i;
      continue;
    }
    i += length;
  }
  return bad;
}

// Refuses bytes that are not text (see data.format), naming the share and the first offset.
Status CheckLooksLikeText(std::string_view bytes, const std::string& source) {
  int64_t first = -1;
  const int64_t bad = CountNonText(bytes, &first);
  if (bad * 100 <= static_cast<int64_t>(bytes.size())) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s does not look like text: %d of %d bytes (%.1f%%) are NUL or not valid UTF-8 (the "
      "first at byte offset %d), and it is not an llm.c token file (no magic %d); set "
      "data.format=bytes to train on its raw bytes anyway",
      source, bad, bytes.size(), 100.0 * static_cast<double>(bad) / bytes.size(), first,
      kLlmcMagic));
}

// A header that is an llm.c file but for its magic: version 1 and a token count that
// matches the file's size; or the magic of an llm.c model checkpoint.
Status CheckNearMissLlmc(const char* header, size_t header_bytes, int64_t file_bytes,
                         const std::string& source) {
  if (header_bytes < 12) return absl::OkStatus();
  const int32_t magic = LoadLittleEndian32(header);
  if (magic == kLlmcModelMagic) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, " is an llm.c model checkpoint (magic ", kLlmcModelMagic,
        "), not a token file: data.path takes token files (magic ", kLlmcMagic, ") or text"));
  }
  const int32_t version = LoadLittleEndian32(header + 4);
  const int32_t count = LoadLittleEndian32(header + 8);
  if (header_bytes == static_cast<size_t>(kLlmcHeaderBytes) && version == kLlmcVersion &&
      count > 0 && file_bytes == kLlmcHeaderBytes + 2 * int64_t{count}) {
    return absl::DataLossError(absl::StrCat(
        source, " looks like an llm.c token file (header[1] = version ", version,
        ", header[2] = ", count, " tokens, which matches the file's size) but header[0] is ",
        magic, ", not the llm.c magic ", kLlmcMagic, ": the header is damaged"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* TokenFormatName(TokenFormat format) {
  switch (format) {
    case TokenFormat::kEmbeddedCorpus:
      return "embedded corpus";
    case TokenFormat::kText:
      return "text";
    case TokenFormat::kLlmc:
      return "llm.c";
  }
  return "unknown";
}

StatusOr<TokenDataset> TokensFromBytes(std::string_view bytes, TokenFormat format,
                                       std::string source, std::string description, int vocab) {
  RETURN_IF_ERROR(CheckVocabArgument(vocab));
  if (bytes.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, " is empty (0 bytes): there is nothing to train on"));
  }
  auto tokens = std::make_shared<std::vector<uint16_t>>(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    (*tokens)[i] = static_cast<unsigned char>(bytes[i]);
  }
  RETURN_IF_ERROR(CheckVocab(*tokens, vocab, source, format));
  TokenDataset dataset;
  dataset.tokens = std::move(tokens);
  dataset.format = format;
  dataset.source = std::move(source);
  dataset.description = std::move(description);
  return dataset;
}

StatusOr<TokenDataset> LoadDefaultCorpus(int vocab) {
  const std::string_view corpus = DefaultCorpus();
  return TokensFromBytes(corpus, TokenFormat::kEmbeddedCorpus, "the embedded default corpus",
                         absl::StrCat("embedded default corpus (", corpus.size(), " bytes)"),
                         vocab);
}

StatusOr<TokenDataset> LoadTokenFile(const std::string& path, int vocab, DataFormat format) {
  RETURN_IF_ERROR(CheckVocabArgument(vocab));
  const std::string source = absl::StrCat("data file '", path, "'");
  if (path.empty()) return absl::InvalidArgumentError("data file path is empty");
  // Regular files only: a FIFO or a device could block or never end. O_NONBLOCK keeps the
  // open itself from blocking on a FIFO swapped in after the stat.
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, " is ", FileKindName(info.st_mode),
        ", not a regular file (data.path): copy the data into a file first"));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(source, " not found (data.path)"));
    }
    return ErrnoError(errno, absl::StrCat(source, ": cannot open"));
  }
  FileDescriptor file(fd);
  if (::fstat(file.get(), &info) != 0 || !S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, " is not a regular file (data.path)"));
  }

  char header[kLlmcHeaderBytes];
  ASSIGN_OR_RETURN(const size_t header_bytes,
                   ReadUpTo(file.get(), header, sizeof(header), 0, source));
  if (header_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, " is empty (0 bytes): there is nothing to train on"));
  }
  if (format == DataFormat::kAuto) {
    if (header_bytes >= 4 && LoadLittleEndian32(header) == kLlmcMagic) {
      return LoadLlmcFile(file.get(), header, header_bytes, path, source, vocab);
    }
    RETURN_IF_ERROR(CheckNearMissLlmc(header, header_bytes, static_cast<int64_t>(info.st_size),
                                      source));
  }

  // Text: the bytes read so far, then the rest of the file.
  std::string bytes(header, header_bytes);
  bytes.reserve(static_cast<size_t>(info.st_size));
  std::vector<char> chunk(kReadChunkBytes);
  while (true) {
    ASSIGN_OR_RETURN(const size_t got, ReadUpTo(file.get(), chunk.data(), chunk.size(),
                                                static_cast<int64_t>(bytes.size()), source));
    bytes.append(chunk.data(), got);
    if (got < chunk.size()) break;
  }
  if (format == DataFormat::kAuto) RETURN_IF_ERROR(CheckLooksLikeText(bytes, source));
  return TokensFromBytes(
      bytes, TokenFormat::kText, source,
      absl::StrCat("file ", path, format == DataFormat::kBytes ? " (raw bytes, " : " (text, ",
                   bytes.size(), " bytes as byte-level tokens)"),
      vocab);
}

StatusOr<TokenDataset> LoadTokens(const DataOptions& options, int vocab) {
  if (options.path.empty()) return LoadDefaultCorpus(vocab);
  return LoadTokenFile(options.path, vocab, options.format);
}

StatusOr<TokenSplits> SplitTokens(const TokenDataset& dataset, double val_fraction, int seq_len) {
  if (dataset.num_tokens() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot split ", dataset.source.empty() ? "a dataset" : dataset.source,
                     ": it holds no tokens"));
  }
  if (seq_len < 1) {
    return absl::InvalidArgumentError(absl::StrCat("train.seq_len must be >= 1, got ", seq_len));
  }
  if (!(val_fraction >= 0.0 && val_fraction < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.val_fraction must be in [0, 1), got ", val_fraction));
  }
  const int64_t window_tokens = int64_t{seq_len} + 1;  // a sequence plus its last target
  const int64_t total_tokens = dataset.num_tokens();
  if (total_tokens < window_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat(dataset.source, ": too few tokens for one sequence: it holds ", total_tokens,
                     " tokens, a sequence of train.seq_len = ", seq_len, " needs ", window_tokens,
                     " (the sequence plus one target)"));
  }
  const int64_t val_tokens =
      static_cast<int64_t>(std::floor(static_cast<double>(total_tokens) * val_fraction));
  const int64_t train_tokens = total_tokens - val_tokens;
  if (val_fraction > 0.0 && val_tokens < window_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        dataset.source, ": the validation split (the last data.val_fraction = ", val_fraction,
        " of ", total_tokens, " tokens) holds ", val_tokens,
        " tokens, fewer than one sequence of train.seq_len + 1 = ", window_tokens,
        "; raise data.val_fraction, lower train.seq_len, or use more data"));
  }
  if (train_tokens < window_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat(dataset.source, ": the train split (the first ", train_tokens, " of ",
                     total_tokens, " tokens, data.val_fraction = ", val_fraction,
                     ") is shorter than one sequence of train.seq_len + 1 = ", window_tokens,
                     "; lower data.val_fraction or train.seq_len, or use more data"));
  }
  TokenSplits splits;
  splits.train.tokens = dataset.tokens;
  splits.train.begin = 0;
  splits.train.end = train_tokens;
  splits.train.name = "train";
  splits.train.source = dataset.source;
  splits.validation.tokens = dataset.tokens;
  splits.validation.begin = train_tokens;
  splits.validation.end = total_tokens;
  splits.validation.name = "validation";
  splits.validation.source = dataset.source;
  return splits;
}

}  // namespace strata
