// A thin owner of libsentencepiece's processor with a std-only interface. Debian's
// sentencepiece_processor.h declares `namespace absl { using std::string_view; }`, which
// clashes with Debian's abseil (built with its own absl::string_view class), so the
// library's header is included by sentencepiece_model.cc alone, a file that includes no
// abseil header. Internal to data/tokenizer.
// Thread-safety: Encode and Decode are const and may run on many threads at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}  // namespace sentencepiece

namespace strata {

class SentencePieceModel {
 public:
  // Loads a serialized model (a .model file's bytes); null with *error set on failure.
  static std::unique_ptr<SentencePieceModel> Load(const std::string& serialized,
                                                  std::string* error);
  ~SentencePieceModel();

  // false with *error set on failure.
  bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const;
  bool Decode(const std::vector<int>& ids, std::string* text, std::string* error) const;
  int piece_size() const;
  // The model as the processor holds it (pieces, normalizer and trainer specs).
  std::string serialized() const;

 private:
  SentencePieceModel();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};

}  // namespace strata
