// SentencePiece models through Debian's libsentencepiece (sentencepiece_model.h); see
// tokenizer.h. The processor's Encode and Decode are const and keep no state between
// calls, so one model serves every thread.
#include <xxhash.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "data/tokenizer/byte_level_bpe.h"
#include "data/tokenizer/sentencepiece_model.h"

namespace strata {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::unique_ptr<SentencePieceModel> model, std::string path)
      : model_(std::move(model)), path_(std::move(path)) {
    const std::string serialized = model_->serialized();
    const XXH128_hash_t hash = XXH3_128bits(serialized.data(), serialized.size());
    fingerprint_ = absl::StrFormat("sentencepiece-%016x%016x", hash.high64, hash.low64);
  }

  StatusOr<std::vector<uint32_t>> Encode(std::string_view text) const override {
    std::vector<int> ids;
    std::string error;
    if (!model_->Encode(text, &ids, &error)) {
      return absl::InternalError(
          absl::StrCat("SentencePiece model '", path_, "' encoding: ", error));
    }
    return std::vector<uint32_t>(ids.begin(), ids.end());
  }

  StatusOr<std::string> Decode(absl::Span<const uint32_t> ids) const override {
    std::vector<int> pieces(ids.size());
    for (size_t position = 0; position < ids.size(); ++position) {
      if (ids[position] >= static_cast<uint32_t>(vocab_size())) {
        return absl::InvalidArgumentError(absl::StrCat("id ", ids[position], " at position ",
                                                       position, " is no piece of ", Describe()));
      }
      pieces[position] = static_cast<int>(ids[position]);
    }
    std::string text;
    std::string error;
    if (!model_->Decode(pieces, &text, &error)) {
      return absl::InternalError(
          absl::StrCat("SentencePiece model '", path_, "' decoding: ", error));
    }
    return text;
  }

  int vocab_size() const override { return model_->piece_size(); }
  std::string Describe() const override {
    return absl::StrCat("SentencePiece model ", path_, " (", vocab_size(), " pieces)");
  }
  std::string Fingerprint() const override { return fingerprint_; }

 private:
  std::unique_ptr<SentencePieceModel> model_;
  std::string path_;
  std::string fingerprint_;  // of the serialized model: pieces, normalizer and trainer spec
};

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> OpenSentencePieceTokenizer(const std::string& model_path) {
  // Read here rather than by the library, for a message that says what is missing.
  ASSIGN_OR_RETURN(const std::string model,
                   ReadTokenizerFile(model_path, "SentencePiece model",
                                     ": give the path of a SentencePiece .model file (a Hugging "
                                     "Face model directory has it as tokenizer.model)"));
  std::string error;
  std::unique_ptr<SentencePieceModel> loaded = SentencePieceModel::Load(model, &error);
  if (loaded == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("SentencePiece model '", model_path, "' cannot be loaded: ", error));
  }
  return std::unique_ptr<Tokenizer>(
      std::make_unique<SentencePieceTokenizer>(std::move(loaded), model_path));
}

}  // namespace strata
