// See export_weights.h.
#include "launch/export_weights.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/progress.h"
#include "launch/checkpoint.h"
#include "launch/llmc_model.h"
#include "core/atomic_file.h"
#include "models/create_model.h"
#include "models/hf/hf_model.h"
#include "models/hf/safetensors.h"

namespace strata {
namespace {

// Writes `text` to `path` whole or not at all.
Status WriteTextFile(const std::string& path, const std::string& text) {
  return Annotate(WriteFileAtomically(path, text), "export");
}

StatusOr<std::string> ExportHf(const OpenedCheckpoint& checkpoint, const std::string& dir,
                               const ExportRequest& request) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("export: cannot create the directory ", dir, ": ", error.message()));
  }
  ASSIGN_OR_RETURN(auto model, CreateModel(checkpoint.model, Recompute::kNone, DType::kF32));
  ASSIGN_OR_RETURN(const std::vector<HfTensor> map,
                   HfTensorMap(checkpoint.model, model->units()));
  uint64_t total = 0;
  for (const HfTensor& entry : map) {
    uint64_t numel = 1;
    for (int64_t d : entry.shape) numel *= static_cast<uint64_t>(d);
    total += numel * 4;
  }
  auto progress = request.show_progress
                      ? std::make_shared<Progress>(absl::StrCat("exporting to ", dir), total)
                      : nullptr;
  std::vector<StOutputTensor> tensors;
  for (const HfTensor& entry : map) {
    const TensorSpec& spec = model->units()[entry.unit].tensor(entry.tensor);
    const size_t cols = spec.shape.size() == 2 ? static_cast<size_t>(spec.shape[1]) : 1;
    const size_t base = spec.offset + static_cast<size_t>(entry.row_begin) * cols;
    // A transposed (Conv1D) tensor is read whole once and kept for its pieces.
    auto whole = std::make_shared<std::vector<float>>();
    tensors.push_back(
        {entry.name, entry.shape,
         [&checkpoint, entry, cols, base, whole, progress](uint64_t begin, uint64_t count,
                                                            float* out) -> Status {
           if (progress) progress->Advance(count * 4);
           if (!entry.transposed) {
             return ReadCheckpointMaster(checkpoint, entry.unit, base + begin, count, out);
           }
           // The file is [in, out] = [cols, rows] of strata's [rows, cols].
           const size_t rows = static_cast<size_t>(entry.shape[1]);
           if (whole->empty()) {
             whole->resize(rows * cols);
             RETURN_IF_ERROR(
                 ReadCheckpointMaster(checkpoint, entry.unit, base, rows * cols, whole->data()));
           }
           for (uint64_t k = 0; k < count; ++k) {
             const uint64_t flat = begin + k, in = flat / rows, o = flat % rows;
             out[k] = (*whole)[o * cols + in];
           }
           if (begin + count == rows * cols) std::vector<float>().swap(*whole);
           return absl::OkStatus();
         }});
  }
  const StDType dtype = request.dtype == DType::kBF16 ? StDType::kBF16 : StDType::kF32;
  ASSIGN_OR_RETURN(const std::vector<std::string> files,
                   WriteSafetensorsDirectory(dir, tensors, dtype, request.max_shard_bytes,
                                             {{"format", "pt"}}));
  RETURN_IF_ERROR(WriteTextFile(
      dir + "/config.json",
      HfConfigJson(checkpoint.model, request.dtype == DType::kBF16 ? "bfloat16" : "float32")));
  if (progress) progress->Finish();
  return absl::StrCat("exported ", checkpoint.path, " (", model->Describe(), ") to ", dir, ": ",
                      files.size(), files.size() == 1 ? " safetensors file" : " safetensors shards",
                      " in ", StDTypeName(dtype), " and config.json");
}

}  // namespace

StatusOr<std::string> ExportWeights(const ExportRequest& request) {
  ASSIGN_OR_RETURN(const OpenedCheckpoint checkpoint, OpenCheckpoint(request.from));
  RETURN_IF_ERROR(VerifyCheckpointFiles(checkpoint, request.show_progress));
  if (absl::StartsWith(request.to, "hf:") && request.to.size() > 3) {
    return ExportHf(checkpoint, request.to.substr(3), request);
  }
  if (absl::StartsWith(request.to, "llmc:") && request.to.size() > 5) {
    if (request.dtype != DType::kF32) {
      return absl::InvalidArgumentError(
          "export: --to llmc: writes llm.c's fp32 checkpoint (version 3); leave out --dtype");
    }
    return ExportLlmc(checkpoint, request.to.substr(5));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "export: --to '", request.to, "': expected hf:DIR (Hugging Face) or llmc:FILE (llm.c)"));
}

}  // namespace strata
