// strata's byte level: every byte is one id (0..255); see tokenizer.h.
#include "absl/strings/str_cat.h"
#include "data/tokenizer/tokenizer.h"

namespace strata {
namespace {

class BytesTokenizer final : public Tokenizer {
 public:
  StatusOr<std::vector<uint32_t>> Encode(std::string_view text) const override {
    std::vector<uint32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  StatusOr<std::string> Decode(absl::Span<const uint32_t> ids) const override {
    std::string text(ids.size(), '\0');
    for (size_t position = 0; position < ids.size(); ++position) {
      if (ids[position] > 255) {
        return absl::InvalidArgumentError(absl::StrCat("id ", ids[position], " at position ",
                                                       position, " is no byte (bytes are 0..255)"));
      }
      text[position] = static_cast<char>(ids[position]);
    }
    return text;
  }
  int vocab_size() const override { return 256; }
  std::string Describe() const override { return "bytes (every byte is one id, 256 ids)"; }
  std::string Fingerprint() const override { return "bytes-v1"; }
};

}  // namespace

std::unique_ptr<Tokenizer> OpenBytesTokenizer() { return std::make_unique<BytesTokenizer>(); }

}  // namespace strata
