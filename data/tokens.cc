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
#include <limits>
#include <utility>

#include "core/file_kind.h"
#include "core/input_file.h"
#include "data/default_corpus.h"

namespace strata {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "token files are little-endian; this host needs byte swaps in tokens.cc");

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

// header[index] of a header of which at least 4 * (index + 1) bytes were read.
int32_t HeaderField(const char* header, int index) {
  return LoadLittleEndian32(header + 4 * index);
}

// One token file format: what identifies it, the width of its tokens, its name in messages.
struct HeaderKind {
  TokenFormat format;
  int32_t magic;
  int32_t version;
  int bytes_per_token;  // 2 or 4; 0: header[3] says (strata)
  const char* name;     // "truncated <name> header", "<name> file is empty", ...
  const char* a_file;   // "looks like <a_file>"
};

// strata first: CheckNearMissHeader takes the first kind that matches, and a strata near
// miss is the narrower one (header[3] in {2, 4}, where llm.c writes 0).
constexpr HeaderKind kHeaderKinds[] = {
    {TokenFormat::kStrata, kStrataTokensMagic, kStrataTokensVersion, 0, "strata token",
     "a strata token file"},
    {TokenFormat::kLlmc, kLlmcMagic, kLlmcVersion, 2, "llm.c", "an llm.c token file"},
    {TokenFormat::kLlmcLlama3, kLlmcLlama3Magic, kLlmcLlama3Version, 4, "llm.c Llama 3",
     "an llm.c Llama 3 token file"},
};

// The strata header's fields beyond llm.c's three.
constexpr int kStrataWidthField = 3;
constexpr int kStrataVocabField = 4;
constexpr int kStrataFirstReservedField = 5;

const HeaderKind* FindHeaderKind(int32_t magic) {
  for (const HeaderKind& kind : kHeaderKinds) {
    if (kind.magic == magic) return &kind;
  }
  return nullptr;
}

// What a valid header says about the tokens that follow it.
struct TokenFileHeader {
  int32_t num_tokens = 0;
  int bytes_per_token = 0;
  int32_t vocab = 0;  // strata header[4]; 0 = unknown (and always for llm.c)
};

// Where a token sits, for messages: "token position 37 (byte offset 1098)" in a token file,
// "byte offset 37" in byte-level text.
std::string TokenPlace(size_t position, int file_bytes_per_token) {
  if (file_bytes_per_token == 0) return absl::StrCat("byte offset ", position);
  return absl::StrCat("token position ", position, " (byte offset ",
                      kTokenHeaderBytes + int64_t{file_bytes_per_token} *
                                              static_cast<int64_t>(position),
                      ")");
}

// The first id >= limit is an error naming the source, the place and the id; `range` says
// which limit it broke. file_bytes_per_token: 0 for byte-level tokens.
template <typename Id>
Status CheckIds(const std::vector<Id>& ids, int64_t limit, const std::string& range,
                const std::string& source, int file_bytes_per_token) {
  if (limit > static_cast<int64_t>(std::numeric_limits<Id>::max())) return absl::OkStatus();
  for (size_t position = 0; position < ids.size(); ++position) {
    if (ids[position] < limit) continue;
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": token id ", ids[position], " at ",
                     TokenPlace(position, file_bytes_per_token), " is out of range for ", range));
  }
  return absl::OkStatus();
}

template <typename Id>
Status CheckVocab(const std::vector<Id>& ids, int vocab, const std::string& source,
                  int file_bytes_per_token) {
  return CheckIds(ids, vocab, absl::StrCat("model.vocab = ", vocab, " (ids must be < vocab)"),
                  source, file_bytes_per_token);
}

Status CheckVocabArgument(int vocab) {
  if (vocab >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("model.vocab must be >= 1, got ", vocab));
}

// Checks a header of `kind` (its magic already matched): its size, version and count, and
// for strata its width, vocabulary and reserved fields, then the vocabulary against vocab.
StatusOr<TokenFileHeader> ParseHeader(const HeaderKind& kind, const char* header,
                                      size_t header_bytes, int vocab, const std::string& source) {
  if (header_bytes < static_cast<size_t>(kTokenHeaderBytes)) {
    return absl::DataLossError(absl::StrCat(
        source, ": truncated ", kind.name, " header: the file starts with the ", kind.name,
        " magic ", kind.magic, " but has only ", header_bytes, " bytes; the header alone is ",
        kTokenHeaderBytes, " bytes"));
  }
  const int32_t version = HeaderField(header, 1);
  if (version != kind.version) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": unsupported ", kind.name,
                                                   " version ", version,
                                                   " (header[1]); this reader knows version ",
                                                   kind.version));
  }
  TokenFileHeader parsed;
  parsed.num_tokens = HeaderField(header, 2);
  if (parsed.num_tokens < 0) {
    return absl::DataLossError(absl::StrCat(source, ": corrupt ", kind.name,
                                            " header: negative token count ", parsed.num_tokens,
                                            " (header[2])"));
  }
  if (parsed.num_tokens == 0) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", kind.name,
                                                   " file is empty: its header declares 0 tokens"));
  }
  parsed.bytes_per_token = kind.bytes_per_token;
  if (kind.format != TokenFormat::kStrata) return parsed;

  parsed.bytes_per_token = HeaderField(header, kStrataWidthField);
  if (parsed.bytes_per_token != 2 && parsed.bytes_per_token != 4) {
    return absl::DataLossError(absl::StrCat(
        source, ": corrupt strata token header: header[3] says ", parsed.bytes_per_token,
        " bytes per token; version ", kind.version, " files hold 2- or 4-byte tokens"));
  }
  parsed.vocab = HeaderField(header, kStrataVocabField);
  if (parsed.vocab < 0) {
    return absl::DataLossError(absl::StrCat(source,
                                            ": corrupt strata token header: negative vocabulary ",
                                            parsed.vocab, " (header[4])"));
  }
  for (int field = kStrataFirstReservedField; field < kTokenHeaderInts; ++field) {
    const int32_t value = HeaderField(header, field);
    if (value == 0) continue;
    return absl::DataLossError(absl::StrCat(
        source, ": corrupt strata token header: header[", field, "] is ", value,
        "; header[5..255] are reserved and 0 in version ", kind.version));
  }
  if (parsed.vocab > vocab) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": its tokens were made for a vocabulary of ", parsed.vocab,
        " (header[4]), larger than model.vocab = ", vocab, "; set model.vocab to ", parsed.vocab,
        " (or a model.preset with that vocabulary)"));
  }
  return parsed;
}

// Reads the header's tokens that follow it at the file's width, refusing a file shorter or
// longer than the header says, and checks the ids.
template <typename Id>
StatusOr<std::shared_ptr<const TokenIds>> ReadTokens(int fd, const HeaderKind& kind,
                                                     const TokenFileHeader& header, int vocab,
                                                     const std::string& source) {
  static_assert(sizeof(Id) == 2 || sizeof(Id) == 4, "2- or 4-byte tokens");
  const int64_t num_tokens = header.num_tokens;
  const int64_t token_bytes = int64_t{sizeof(Id)} * num_tokens;
  const int64_t expected_file_bytes = kTokenHeaderBytes + token_bytes;
  // The header's count against the file's size before any memory is taken for it: a 1 KiB
  // file whose header says 2^31 tokens would otherwise allocate (and zero) 8 GiB first.
  struct stat info;
  const bool short_file = ::fstat(fd, &info) == 0 && S_ISREG(info.st_mode) &&
                          info.st_size < expected_file_bytes;
  std::vector<Id> ids;
  size_t got_bytes = 0;
  if (short_file) {
    got_bytes = static_cast<size_t>(std::max<int64_t>(0, info.st_size - kTokenHeaderBytes));
  } else {
    ids.resize(static_cast<size_t>(num_tokens));
    ASSIGN_OR_RETURN(got_bytes, ReadUpTo(fd, reinterpret_cast<char*>(ids.data()),
                                         static_cast<size_t>(token_bytes), kTokenHeaderBytes,
                                         source));
  }
  if (static_cast<int64_t>(got_bytes) < token_bytes) {
    return absl::DataLossError(absl::StrCat(
        source, ": truncated ", kind.name, " file: the header says ", num_tokens, " tokens (",
        expected_file_bytes, " bytes) but the file holds only ", got_bytes / sizeof(Id),
        " tokens (", kTokenHeaderBytes + static_cast<int64_t>(got_bytes), " bytes)"));
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
        source, ": ", kind.name, " file is longer than its header says: ", num_tokens,
        " tokens make ", expected_file_bytes, " bytes", actual,
        " (wrong header[2] or a corrupt file)"));
  }
  // The header's vocabulary (at most model.vocab by now) is the tighter limit: an id at or
  // above it is a corrupt file, whatever the model.
  if (header.vocab > 0) {
    RETURN_IF_ERROR(CheckIds(ids, header.vocab,
                             absl::StrCat("the vocabulary of ", header.vocab,
                                          " its header[4] says the tokens were made for (the "
                                          "file is corrupt)"),
                             source, sizeof(Id)));
  } else {
    RETURN_IF_ERROR(CheckVocab(ids, vocab, source, sizeof(Id)));
  }
  return std::shared_ptr<const TokenIds>(std::make_shared<TokenIds>(std::move(ids)));
}

StatusOr<TokenDataset> LoadHeaderFile(int fd, const HeaderKind& kind, const char* header,
                                      size_t header_bytes, const std::string& path,
                                      const std::string& source, int vocab) {
  ASSIGN_OR_RETURN(const TokenFileHeader parsed,
                   ParseHeader(kind, header, header_bytes, vocab, source));
  TokenDataset dataset;
  if (parsed.bytes_per_token == 2) {
    ASSIGN_OR_RETURN(dataset.tokens, ReadTokens<uint16_t>(fd, kind, parsed, vocab, source));
  } else {
    ASSIGN_OR_RETURN(dataset.tokens, ReadTokens<uint32_t>(fd, kind, parsed, vocab, source));
  }
  dataset.format = kind.format;
  dataset.source = source;
  if (kind.format == TokenFormat::kStrata) {
    dataset.description = absl::StrCat(
        "file ", path, " (strata format, ", parsed.num_tokens, " tokens of ",
        parsed.bytes_per_token, " bytes",
        parsed.vocab > 0 ? absl::StrCat(", vocabulary ", parsed.vocab) : std::string(), ")");
  } else {
    dataset.description = absl::StrCat("file ", path, " (", TokenFormatName(kind.format),
                                       " format, ", parsed.num_tokens, " tokens)");
  }
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
      "first at byte offset %d), and it is not a token file (no llm.c magic %d or %d, no "
      "strata magic %d); set data.format=bytes to train on its raw bytes anyway",
      source, bad, bytes.size(), 100.0 * static_cast<double>(bad) / bytes.size(), first,
      kLlmcMagic, kLlmcLlama3Magic, kStrataTokensMagic));
}

// A header that is a token file of one of the formats but for its magic: its version (and
// for strata its width) and a token count that matches the file's size; or the magic of an
// llm.c model checkpoint.
Status CheckNearMissHeader(const char* header, size_t header_bytes, int64_t file_bytes,
                           const std::string& source) {
  if (header_bytes < 12) return absl::OkStatus();
  const int32_t magic = HeaderField(header, 0);
  if (magic == kLlmcModelMagic) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, " is an llm.c model checkpoint (magic ", kLlmcModelMagic,
        "), not a token file: data.path takes token files (llm.c magic ", kLlmcMagic, " or ",
        kLlmcLlama3Magic, ", strata magic ", kStrataTokensMagic, ") or text"));
  }
  if (header_bytes != static_cast<size_t>(kTokenHeaderBytes)) return absl::OkStatus();
  const int32_t version = HeaderField(header, 1);
  const int32_t count = HeaderField(header, 2);
  if (count <= 0) return absl::OkStatus();
  for (const HeaderKind& kind : kHeaderKinds) {
    const bool strata = kind.format == TokenFormat::kStrata;
    const int width = strata ? HeaderField(header, kStrataWidthField) : kind.bytes_per_token;
    if (version != kind.version || (width != 2 && width != 4) ||
        file_bytes != kTokenHeaderBytes + int64_t{width} * count) {
      continue;
    }
    return absl::DataLossError(absl::StrCat(
        source, " looks like ", kind.a_file, " (header[1] = version ", version, ", header[2] = ",
        count, " tokens",
        strata ? absl::StrCat(" of header[3] = ", width, " bytes") : std::string(),
        ", which matches the file's size) but header[0] is ", magic, ", not the ", kind.name,
        " magic ", kind.magic, ": the header is damaged"));
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
    case TokenFormat::kLlmcLlama3:
      return "llm.c Llama 3";
    case TokenFormat::kStrata:
      return "strata";
  }
  return "unknown";
}

void TokenIds::CopyToInt32(int64_t begin, int64_t count, int32_t* out) const {
  if (is_wide_) {
    const uint32_t* ids = wide_.data() + begin;
    for (int64_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(ids[i]);
  } else {
    const uint16_t* ids = narrow_.data() + begin;
    for (int64_t i = 0; i < count; ++i) out[i] = ids[i];
  }
}

std::vector<uint32_t> TokenIds::ToVector() const {
  if (is_wide_) return wide_;
  return std::vector<uint32_t>(narrow_.begin(), narrow_.end());
}

StatusOr<TokenDataset> TokensFromBytes(std::string_view bytes, TokenFormat format,
                                       std::string source, std::string description, int vocab) {
  RETURN_IF_ERROR(CheckVocabArgument(vocab));
  if (bytes.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, " is empty (0 bytes): there is nothing to train on"));
  }
  std::vector<uint16_t> ids(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) ids[i] = static_cast<unsigned char>(bytes[i]);
  RETURN_IF_ERROR(CheckVocab(ids, vocab, source, /*file_bytes_per_token=*/0));
  TokenDataset dataset;
  dataset.tokens = std::make_shared<const TokenIds>(std::move(ids));
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
  // Regular files only, opened without blocking (core/input_file.h): a FIFO or a device
  // could block or never end.
  StatusOr<InputFile> opened = InputFile::Open(path, "data file (data.path)");
  if (!opened.ok()) {
    if (absl::IsNotFound(opened.status())) {
      return absl::NotFoundError(absl::StrCat(source, " not found (data.path)"));
    }
    return opened.status();
  }
  FileDescriptor file(opened->Release());
  struct stat info {};
  if (::fstat(file.get(), &info) != 0) return ErrnoError(errno, "stat of " + source);

  char header[kTokenHeaderBytes];
  ASSIGN_OR_RETURN(const size_t header_bytes,
                   ReadUpTo(file.get(), header, sizeof(header), 0, source));
  if (header_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, " is empty (0 bytes): there is nothing to train on"));
  }
  if (format == DataFormat::kAuto) {
    const HeaderKind* kind = header_bytes >= 4 ? FindHeaderKind(HeaderField(header, 0)) : nullptr;
    if (kind != nullptr) {
      return LoadHeaderFile(file.get(), *kind, header, header_bytes, path, source, vocab);
    }
    RETURN_IF_ERROR(CheckNearMissHeader(header, header_bytes, static_cast<int64_t>(info.st_size),
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
