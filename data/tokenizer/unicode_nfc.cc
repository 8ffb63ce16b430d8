#include "data/tokenizer/unicode_nfc.h"

#include <unicode/bytestream.h>
#include <unicode/errorcode.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/utypes.h>

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

StatusOr<const icu::Normalizer2*> Nfc() {
  UErrorCode error = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(error);
  if (U_FAILURE(error) || nfc == nullptr) {
    return absl::InternalError(
        absl::StrCat("ICU's NFC normalizer is unavailable: ", u_errorName(error)));
  }
  return nfc;
}

icu::StringPiece Piece(std::string_view text) {
  return icu::StringPiece(text.data(), static_cast<int32_t>(text.size()));
}

}  // namespace

StatusOr<bool> IsNfc(std::string_view text) {
  ASSIGN_OR_RETURN(const icu::Normalizer2* nfc, Nfc());
  UErrorCode error = U_ZERO_ERROR;
  const bool normalized = nfc->isNormalizedUTF8(Piece(text), error);
  if (U_FAILURE(error)) {
    return absl::InternalError(absl::StrCat("ICU NFC check failed: ", u_errorName(error)));
  }
  return normalized;
}

StatusOr<std::string> ToNfc(std::string_view text) {
  ASSIGN_OR_RETURN(const icu::Normalizer2* nfc, Nfc());
  UErrorCode error = U_ZERO_ERROR;
  // The common case (ASCII, most text) is already NFC: no copy through the sink.
  if (nfc->isNormalizedUTF8(Piece(text), error) && U_SUCCESS(error)) return std::string(text);
  error = U_ZERO_ERROR;
  std::string normalized;
  normalized.reserve(text.size());
  icu::StringByteSink<std::string> sink(&normalized);
  nfc->normalizeUTF8(0, Piece(text), sink, nullptr, error);
  if (U_FAILURE(error)) {
    return absl::InternalError(absl::StrCat("ICU NFC normalization failed: ", u_errorName(error)));
  }
  return normalized;
}

}  // namespace strata
