// The safetensors writers; see safetensors_writer.h. Each tensor is streamed from its
// producer in pieces (kPieceBytes of fp32 at most), so the writer never holds a whole tensor.
#include "models/hf/safetensors_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/atomic_file.h"
#include "core/dtype.h"
#include "models/hf/safetensors_common.h"

namespace strata {
namespace {

using safetensors_internal::kIndexName;
using safetensors_internal::kMetadataKey;
using safetensors_internal::kPieceBytes;
using safetensors_internal::kSingleName;
using safetensors_internal::Printable;
using safetensors_internal::ShapeText;

constexpr uint64_t kWritePieceElements = kPieceBytes / sizeof(float);

// A tensor to write with its checked size and place.
struct PlannedTensor {
  const StOutputTensor* tensor;
  uint64_t numel;
  uint64_t bytes;
};

Status CheckOutputTensors(const std::string& where, const std::vector<StOutputTensor>& tensors,
                          StDType dtype, std::vector<PlannedTensor>* planned) {
  std::set<std::string> names;
  for (const StOutputTensor& tensor : tensors) {
    if (tensor.name.empty() || tensor.name == kMetadataKey) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors: writing ", where, ": a tensor name may not be '", tensor.name, "'"));
    }
    if (!names.insert(tensor.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: writing ", where, ": tensor '",
                                                     tensor.name, "' is given twice"));
    }
    if (!tensor.fill) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: writing ", where, ": tensor '",
                                                     tensor.name, "' has no fill function"));
    }
    uint64_t numel = 1;
    for (const int64_t size : tensor.shape) {
      if (size < 0 || __builtin_mul_overflow(numel, static_cast<uint64_t>(size), &numel)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "safetensors: writing ", where, ": tensor '", tensor.name, "' has shape ",
            ShapeText(tensor.shape), size < 0 ? " with a negative dimension" : ", too large"));
      }
    }
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(numel, StDTypeBytes(dtype), &bytes)) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: writing ", where, ": tensor '",
                                                     tensor.name, "' is too large"));
    }
    planned->push_back({&tensor, numel, bytes});
  }
  return absl::OkStatus();
}

// The 8-byte length and the header, padded with spaces to a multiple of 8 bytes.
StatusOr<std::string> HeaderBytes(const std::string& path,
                                  const std::vector<PlannedTensor>& tensors, StDType dtype,
                                  const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const PlannedTensor& planned : tensors) {
    header[planned.tensor->name] = {{"dtype", StDTypeName(dtype)},
                                    {"shape", planned.tensor->shape},
                                    {"data_offsets", {offset, offset + planned.bytes}}};
    offset += planned.bytes;
  }
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: writing ", path,
                     ": a name or metadata string is not valid UTF-8: ", Printable(e.what())));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t length = text.size();
  std::string bytes(reinterpret_cast<const char*>(&length), 8);
  return bytes + text;
}

// Writes the checked tensors into `path`, whole or not at all.
Status WritePlannedFile(const std::string& path, const std::vector<PlannedTensor>& tensors,
                        StDType dtype, const std::map<std::string, std::string>& metadata) {
  ASSIGN_OR_RETURN(const std::string header, HeaderBytes(path, tensors, dtype, metadata));
  return Annotate(WriteFileAtomically(path, [&](int fd, const std::string& partial) -> Status {
    RETURN_IF_ERROR(WriteAllBytes(fd, header.data(), header.size(), partial));
    std::vector<float> values;
    std::vector<uint16_t> halves;
    for (const PlannedTensor& planned : tensors) {
      const StOutputTensor& tensor = *planned.tensor;
      for (uint64_t begin = 0; begin < planned.numel; begin += kWritePieceElements) {
        const uint64_t count = std::min(kWritePieceElements, planned.numel - begin);
        values.resize(count);
        RETURN_IF_ERROR(
            Annotate(tensor.fill(begin, count, values.data()),
                     absl::StrCat("writing ", path, ": tensor '", tensor.name, "' elements [",
                                  begin, ", ", begin + count, ")")));
        if (dtype == StDType::kF32) {
          RETURN_IF_ERROR(WriteAllBytes(fd, values.data(), count * sizeof(float), partial));
          continue;
        }
        halves.resize(count);
        for (uint64_t i = 0; i < count; ++i) {
          halves[i] = dtype == StDType::kBF16 ? ToBf16(values[i]).bits : FloatToHalf(values[i]);
        }
        RETURN_IF_ERROR(WriteAllBytes(fd, halves.data(), count * sizeof(uint16_t), partial));
      }
    }
    return absl::OkStatus();
  }), "safetensors");
}

// Writes `text` to `path` whole or not at all.
Status WriteTextFile(const std::string& path, const std::string& text) {
  return Annotate(WriteFileAtomically(path, text), "safetensors");
}

// model-DDDDD-of-DDDDD.safetensors, the shard names this writer (and transformers) uses.
bool IsShardName(const std::string& name) {
  const std::string prefix = "model-";
  const std::string suffix = ".safetensors";
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const std::string middle =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  const size_t of = middle.find("-of-");
  if (of == std::string::npos || of == 0 || of + 4 == middle.size()) return false;
  const std::string digits = middle.substr(0, of) + middle.substr(of + 4);
  return std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

Status RemoveIfPresent(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoError(errno, "safetensors: removing stale " + path);
  }
  return absl::OkStatus();
}

// The checked tensors split into shards in the given order, each closed before the next
// tensor would take it past `max_shard_bytes` (a larger tensor gets a shard of its own).
struct ShardPlan {
  std::vector<std::vector<PlannedTensor>> shards;
  uint64_t total_bytes = 0;
};

ShardPlan PlanShards(const std::vector<PlannedTensor>& planned, uint64_t max_shard_bytes) {
  ShardPlan plan;
  plan.shards.resize(1);
  uint64_t shard_bytes = 0;
  for (const PlannedTensor& tensor : planned) {
    if (!plan.shards.back().empty() && shard_bytes + tensor.bytes > max_shard_bytes) {
      plan.shards.emplace_back();
      shard_bytes = 0;
    }
    plan.shards.back().push_back(tensor);
    shard_bytes += tensor.bytes;
    plan.total_bytes += tensor.bytes;
  }
  return plan;
}

// Removes the files of `dir` whose names `stale` accepts.
Status RemoveStaleFiles(const std::string& dir,
                        const std::function<bool(const std::string& name)>& stale) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (stale(name)) RETURN_IF_ERROR(RemoveIfPresent(entry.path().string()));
  }
  if (error) {
    return absl::InternalError(
        absl::StrCat("safetensors: cannot list ", dir, ": ", error.message()));
  }
  return absl::OkStatus();
}

// Writes the shards of `plan` into `dir`, removes the files of an earlier set they do not
// replace, then writes the index at `index_path`. Returns the paths written, index last.
StatusOr<std::vector<std::string>> WriteShards(const std::string& dir,
                                               const std::string& index_path,
                                               const ShardPlan& plan, StDType dtype,
                                               const std::map<std::string, std::string>& metadata) {
  std::vector<std::string> written;
  std::set<std::string> written_names;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t s = 0; s < plan.shards.size(); ++s) {
    const std::string name =
        absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, plan.shards.size());
    const std::string path = dir + "/" + name;
    RETURN_IF_ERROR(WritePlannedFile(path, plan.shards[s], dtype, metadata));
    for (const PlannedTensor& tensor : plan.shards[s]) weight_map[tensor.tensor->name] = name;
    written.push_back(path);
    written_names.insert(name);
  }
  // Stale files go before the index appears, so the index never sits beside them.
  RETURN_IF_ERROR(RemoveStaleFiles(dir, [&](const std::string& name) {
    return (name == kSingleName || IsShardName(name)) && written_names.count(name) == 0;
  }));
  const nlohmann::json index = {{"metadata", {{"total_size", plan.total_bytes}}},
                                {"weight_map", weight_map}};
  RETURN_IF_ERROR(WriteTextFile(index_path, index.dump(2) + "\n"));
  written.push_back(index_path);
  return written;
}

}  // namespace

Status WriteSafetensors(const std::string& path, const std::vector<StOutputTensor>& tensors,
                        StDType dtype, const std::map<std::string, std::string>& metadata) {
  std::vector<PlannedTensor> planned;
  RETURN_IF_ERROR(CheckOutputTensors(path, tensors, dtype, &planned));
  return WritePlannedFile(path, planned, dtype, metadata);
}

StatusOr<std::vector<std::string>> WriteSafetensorsDirectory(
    const std::string& dir, const std::vector<StOutputTensor>& tensors, StDType dtype,
    uint64_t max_shard_bytes, const std::map<std::string, std::string>& metadata) {
  if (max_shard_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: writing ", dir, ": max_shard_bytes must be positive"));
  }
  std::vector<PlannedTensor> planned;
  RETURN_IF_ERROR(CheckOutputTensors(dir, tensors, dtype, &planned));
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("safetensors: cannot create ", dir, ": ", error.message()));
  }
  const std::string index_path = dir + "/" + kIndexName;
  // Gone first: a failure below must not leave an index that names half-written shards.
  RETURN_IF_ERROR(RemoveIfPresent(index_path));

  const ShardPlan plan = PlanShards(planned, max_shard_bytes);
  std::vector<std::string> written;
  if (plan.total_bytes <= max_shard_bytes) {
    const std::string path = dir + "/" + kSingleName;
    RETURN_IF_ERROR(WritePlannedFile(path, planned, dtype, metadata));
    written.push_back(path);
    // model.safetensors alone: shards of an earlier, larger export are stale.
    RETURN_IF_ERROR(RemoveStaleFiles(dir, IsShardName));
  } else {
    ASSIGN_OR_RETURN(written, WriteShards(dir, index_path, plan, dtype, metadata));
  }
  Annotate(SyncPath(dir), "safetensors").IgnoreError();  // the renames durable (best effort)
  return written;
}

}  // namespace strata
