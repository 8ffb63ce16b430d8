// One safetensors file's header, parsed and checked; see safetensors_header.h. Opening reads
// the 8-byte length and the header only, never the data.
#include "models/hf/safetensors_header.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/pread_fully.h"

namespace strata {
namespace safetensors_internal {
namespace {

// The dtype named in a header entry.
StatusOr<StDType> ParseDTypeEntry(const std::string& file, const std::string& name,
                                  const nlohmann::json& value) {
  if (!value.is_string()) {
    return InvalidTensor(file, name, absl::StrCat("\"dtype\" is not a string: ", value.dump()));
  }
  const std::string text = value.get<std::string>();
  for (const StDType dtype : {StDType::kF32, StDType::kBF16, StDType::kF16}) {
    if (text == StDTypeName(dtype)) return dtype;
  }
  static const std::set<std::string>* const kOtherDtypes = new std::set<std::string>{
      "BOOL", "U8",  "I8", "I16",     "U16",     "I32",     "U32",     "I64",    "U64",
      "F64",  "C64", "F4", "F6_E2M3", "F6_E3M2", "F8_E4M3", "F8_E5M2", "F8_E8M0"};
  if (kOtherDtypes->count(text) != 0) {
    return InvalidTensor(file, name,
                         absl::StrCat("dtype ", text, " is not supported: F32, BF16, F16 are"));
  }
  return InvalidTensor(
      file, name,
      absl::StrCat("unknown dtype '", Printable(text), "' (supported: F32, BF16, F16)"));
}

// The shape of a header entry, and its element count.
Status ParseShapeEntry(const std::string& file, const std::string& name,
                       const nlohmann::json& value, std::vector<int64_t>* shape, uint64_t* numel) {
  if (!value.is_array()) {
    return InvalidTensor(file, name, absl::StrCat("\"shape\" is not an array: ", value.dump()));
  }
  shape->clear();
  *numel = 1;
  for (const nlohmann::json& dim : value) {
    if (!dim.is_number_integer()) {
      return InvalidTensor(file, name,
                           absl::StrCat("\"shape\" ", value.dump(), " holds a non-integer"));
    }
    if (dim.is_number_unsigned()) {
      if (dim.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return InvalidTensor(file, name, absl::StrCat("shape ", value.dump(), " is too large"));
      }
    } else if (dim.get<int64_t>() < 0) {
      return InvalidTensor(file, name, absl::StrCat("negative dimension in shape ", value.dump()));
    }
    const auto size = dim.get<int64_t>();
    shape->push_back(size);
    if (__builtin_mul_overflow(*numel, static_cast<uint64_t>(size), numel)) {
      return InvalidTensor(file, name, absl::StrCat("shape ", value.dump(), " is too large"));
    }
  }
  return absl::OkStatus();
}

// The [begin, end) of a header entry's data_offsets.
Status ParseOffsetsEntry(const std::string& file, const std::string& name,
                         const nlohmann::json& value, uint64_t* begin, uint64_t* end) {
  if (!value.is_array() || value.size() != 2 || !value[0].is_number_unsigned() ||
      !value[1].is_number_unsigned()) {
    return InvalidTensor(
        file, name,
        absl::StrCat("\"data_offsets\" is not two non-negative integers: ", value.dump()));
  }
  *begin = value[0].get<uint64_t>();
  *end = value[1].get<uint64_t>();
  if (*end < *begin) {
    return InvalidTensor(file, name,
                         absl::StrCat("data_offsets ", value.dump(), " end before they begin"));
  }
  return absl::OkStatus();
}

// A tensor's range in the data section, for the layout checks.
struct DataRange {
  uint64_t begin;
  uint64_t end;
  const std::string* name;
};

// Every byte of the data section in exactly one tensor: sorted by begin, each range starts
// where the previous ended and the last ends at the section's end.
Status CheckLayout(const std::string& file, std::vector<DataRange> ranges, uint64_t data_bytes) {
  std::sort(ranges.begin(), ranges.end(), [](const DataRange& a, const DataRange& b) {
    return std::tie(a.begin, a.end, *a.name) < std::tie(b.begin, b.end, *b.name);
  });
  uint64_t covered = 0;
  const std::string* previous = nullptr;
  for (const DataRange& range : ranges) {
    if (range.begin < covered) {
      return InvalidFile(file, absl::StrCat("tensors '", *previous, "' and '", *range.name,
                                            "' overlap (the second's data_offsets begin at ",
                                            range.begin, ", the first's end at ", covered, ")"));
    }
    if (range.begin > covered) {
      return InvalidFile(
          file, absl::StrCat("bytes [", covered, ", ", range.begin,
                             ") of the data section belong to no tensor (a gap ",
                             previous == nullptr ? "before '"
                                                 : absl::StrCat("between '", *previous, "' and '"),
                             *range.name, "'); the format requires the data to be fully indexed"));
    }
    covered = range.end;
    previous = range.name;
  }
  if (covered != data_bytes) {
    return InvalidFile(
        file, absl::StrCat(data_bytes - covered, " bytes after the last tensor",
                           previous == nullptr
                               ? " (the header lists none)"
                               : absl::StrCat(" ('", *previous, "' ends at ", covered, ")"),
                           " in a data section of ", data_bytes,
                           " bytes; the format requires the data to be fully indexed"));
  }
  return absl::OkStatus();
}

// Where the data section lies in a file of `file_bytes` bytes: [start, start + bytes).
struct DataSection {
  uint64_t start;
  uint64_t bytes;
  uint64_t file_bytes;
};

// The header's text after the 8-byte length, which is checked against the limit and the
// file's size first.
StatusOr<std::string> ReadHeaderText(const std::string& path, int fd, uint64_t file_bytes) {
  if (file_bytes < 8) {
    return LostFile(path, absl::StrCat("has ", file_bytes,
                                       " bytes, fewer than the 8 of the header length (truncated, "
                                       "or not a safetensors file)"));
  }
  uint64_t header_bytes = 0;
  RETURN_IF_ERROR(
      PreadFully(fd, &header_bytes, 8, 0, absl::StrCat("safetensors: ", path, ": header length")));
  if (header_bytes > kMaxHeaderBytes) {
    return InvalidFile(
        path, absl::StrCat("header length ", header_bytes, " is larger than the limit of 100 MiB (",
                           kMaxHeaderBytes, " bytes): not a safetensors file?"));
  }
  if (header_bytes > file_bytes - 8) {
    return LostFile(
        path, absl::StrCat("header length ", header_bytes, " is larger than the ", file_bytes - 8,
                           " bytes after it: the file is truncated (or not a "
                           "safetensors file)"));
  }
  std::string header(header_bytes, '\0');
  RETURN_IF_ERROR(PreadFully(fd, header.data(), header_bytes, 8,
                             absl::StrCat("safetensors: ", path, ": header")));
  return header;
}

// The header's text as a JSON object, parsed strictly (a tensor name twice is an error).
StatusOr<nlohmann::json> ParseHeaderJson(const std::string& path, const std::string& header) {
  nlohmann::json json;
  std::string duplicate;
  const std::string problem = ParseJsonStrict(header, &json, &duplicate);
  if (!duplicate.empty()) {
    return InvalidFile(path,
                       absl::StrCat("tensor name '", duplicate, "' appears twice in the header"));
  }
  if (!problem.empty()) return InvalidFile(path, absl::StrCat("header ", problem));
  if (!json.is_object()) {
    return InvalidFile(path, absl::StrCat("header is not a JSON object but a ", json.type_name()));
  }
  return json;
}

// The "__metadata__" entry's strings, added to *metadata.
Status ParseMetadataEntry(const std::string& path, const nlohmann::json& entry,
                          std::map<std::string, std::string>* metadata) {
  if (!entry.is_object()) {
    return InvalidFile(path, "\"__metadata__\" is not an object of strings");
  }
  for (const auto& [key, value] : entry.items()) {
    if (!value.is_string()) {
      return InvalidFile(path, absl::StrCat("\"__metadata__\" value of '", key,
                                            "' is not a string: ", value.dump()));
    }
    (*metadata)[key] = value.get<std::string>();
  }
  return absl::OkStatus();
}

// The data_offsets [begin, end) of `tensor` (its dtype and shape parsed) against its size and
// the data section; sets its bytes and absolute offset.
Status PlaceTensor(const std::string& path, uint64_t begin, uint64_t end, const DataSection& data,
                   StTensor* tensor) {
  const std::string& name = tensor->name;
  const uint64_t element_bytes = StDTypeBytes(tensor->dtype);
  if (__builtin_mul_overflow(tensor->numel, element_bytes, &tensor->bytes) ||
      end - begin != tensor->bytes) {
    return InvalidTensor(
        path, name,
        absl::StrCat("data_offsets [", begin, ", ", end, "] hold ", end - begin,
                     " bytes, but shape ", ShapeText(tensor->shape), " of ",
                     StDTypeName(tensor->dtype), " needs ", tensor->numel, " * ", element_bytes,
                     tensor->numel > std::numeric_limits<uint64_t>::max() / element_bytes
                         ? " (overflows)"
                         : absl::StrCat(" = ", tensor->numel * element_bytes)));
  }
  if (end > data.bytes) {
    return absl::DataLossError(absl::StrCat(
        "safetensors: ", path, ": tensor '", name, "': data_offsets [", begin, ", ", end,
        "] end beyond the data section of ", data.bytes, " bytes: the file is truncated (it has ",
        data.file_bytes, " bytes, this tensor needs ", data.start + end, ")"));
  }
  tensor->offset = data.start + begin;
  return absl::OkStatus();
}

// One tensor's header entry, checked on its own and against the data section.
StatusOr<StTensor> ParseTensorEntry(const std::string& path, const std::string& name,
                                    const nlohmann::json& entry, const DataSection& data) {
  if (!entry.is_object()) {
    return InvalidTensor(path, name, absl::StrCat("entry is not an object: ", entry.dump()));
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(key)) {
      return InvalidTensor(path, name, absl::StrCat("entry lacks \"", key, "\""));
    }
  }
  StTensor tensor;
  tensor.name = name;
  tensor.file = path;
  ASSIGN_OR_RETURN(tensor.dtype, ParseDTypeEntry(path, name, entry["dtype"]));
  RETURN_IF_ERROR(ParseShapeEntry(path, name, entry["shape"], &tensor.shape, &tensor.numel));
  uint64_t begin = 0;
  uint64_t end = 0;
  RETURN_IF_ERROR(ParseOffsetsEntry(path, name, entry["data_offsets"], &begin, &end));
  RETURN_IF_ERROR(PlaceTensor(path, begin, end, data, &tensor));
  return tensor;
}

// The tensors' ranges relative to the data section; they point into `tensors`, which must
// not change while they are used.
std::vector<DataRange> RangesOf(const std::vector<StTensor>& tensors, const DataSection& data) {
  std::vector<DataRange> ranges;
  ranges.reserve(tensors.size());
  for (const StTensor& tensor : tensors) {
    ranges.push_back(
        {tensor.offset - data.start, tensor.offset - data.start + tensor.bytes, &tensor.name});
  }
  return ranges;
}

}  // namespace

StatusOr<ParsedFile> ParseFile(const std::string& path) {
  ASSIGN_OR_RETURN(auto opened, OpenRegular(path));
  ParsedFile parsed;
  parsed.fd = std::move(opened.first);
  const uint64_t file_bytes = opened.second;
  ASSIGN_OR_RETURN(const std::string header, ReadHeaderText(path, parsed.fd.get(), file_bytes));
  ASSIGN_OR_RETURN(const nlohmann::json json, ParseHeaderJson(path, header));
  const uint64_t data_start = 8 + header.size();
  const DataSection data{data_start, file_bytes - data_start, file_bytes};
  for (const auto& [name, entry] : json.items()) {
    if (name == kMetadataKey) {
      RETURN_IF_ERROR(ParseMetadataEntry(path, entry, &parsed.metadata));
      continue;
    }
    ASSIGN_OR_RETURN(StTensor tensor, ParseTensorEntry(path, name, entry, data));
    parsed.tensors.push_back(std::move(tensor));
  }
  // The ranges point into parsed.tensors, whose size is final now.
  RETURN_IF_ERROR(CheckLayout(path, RangesOf(parsed.tensors, data), data.bytes));
  return parsed;
}

}  // namespace safetensors_internal
}  // namespace strata
