// SentencePieceModel; see sentencepiece_model.h. No abseil header may be included here.
#include "data/tokenizer/sentencepiece_model.h"

#include <sentencepiece_processor.h>

#include <exception>
#include <string>

namespace strata {

SentencePieceModel::SentencePieceModel()
    : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}

SentencePieceModel::~SentencePieceModel() = default;

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(const std::string& serialized,
                                                             std::string* error) {
  std::unique_ptr<SentencePieceModel> model(new SentencePieceModel());
  // The library throws from its trie builder on some models (a zero-length piece:
  // Darts' "zero-length key"): an error like its Status, never terminate().
  try {
    const sentencepiece::util::Status status =
        model->processor_->LoadFromSerializedProto(serialized);
    if (!status.ok()) {
      *error = status.ToString();
      return nullptr;
    }
  } catch (const std::exception& thrown) {
    *error = std::string("libsentencepiece refused it: ") + thrown.what();
    return nullptr;
  }
  return model;
}

bool SentencePieceModel::Encode(std::string_view text, std::vector<int>* ids,
                                std::string* error) const {
  const sentencepiece::util::Status status = processor_->Encode(text, ids);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

bool SentencePieceModel::Decode(const std::vector<int>& ids, std::string* text,
                                std::string* error) const {
  const sentencepiece::util::Status status = processor_->Decode(ids, text);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

int SentencePieceModel::piece_size() const { return processor_->GetPieceSize(); }

std::string SentencePieceModel::serialized() const { return processor_->serialized_model_proto(); }

}  // namespace strata
