// See import_weights.h.
#include "launch/import_weights.h"

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/progress.h"
#include "models/create_model.h"
#include "models/hf/hf_model.h"
#include "models/hf/safetensors.h"

namespace strata {
namespace {

// Tensors Hugging Face saves that are not parameters.
bool IsBuffer(const std::string& name) {
  return absl::EndsWith(name, ".attn.bias") || absl::EndsWith(name, ".attn.masked_bias") ||
         absl::EndsWith(name, "rotary_emb.inv_freq");
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// One Hugging Face tensor matched with its place in the model.
struct Piece {
  HfTensor map;
  const StTensor* file;
};

// Writes elements [begin, end) of unit `unit` into out (zero where no piece lands).
Status FillUnit(const SafetensorsSet& set, const std::vector<Piece>& pieces,
                const UnitLayout& layout, size_t begin, size_t end, float* out,
                Progress* progress) {
  std::fill(out, out + (end - begin), 0.0f);
  std::vector<float> whole;  // a transposed tensor, read whole
  for (const Piece& piece : pieces) {
    const TensorSpec& spec = layout.tensor(piece.map.tensor);
    const size_t cols = spec.shape.size() == 2 ? static_cast<size_t>(spec.shape[1]) : 1;
    const size_t rows = piece.file->numel / cols;
    const size_t dest_begin = spec.offset + static_cast<size_t>(piece.map.row_begin) * cols;
    const size_t dest_end = dest_begin + rows * cols;
    const size_t lo = std::max(begin, dest_begin), hi = std::min(end, dest_end);
    if (lo >= hi) continue;
    if (!piece.map.transposed) {
      RETURN_IF_ERROR(set.ReadFloats(*piece.file, lo - dest_begin, hi - lo, out + (lo - begin)));
      if (progress != nullptr) progress->Advance((hi - lo) * StDTypeBytes(piece.file->dtype));
      continue;
    }
    // The file holds [cols, rows] (Conv1D: [in, out]); the destination is [rows, cols].
    whole.resize(piece.file->numel);
    RETURN_IF_ERROR(set.ReadFloats(*piece.file, 0, piece.file->numel, whole.data()));
    if (progress != nullptr) progress->Advance(piece.file->bytes);
    for (size_t e = lo; e < hi; ++e) {
      const size_t row = (e - dest_begin) / cols, col = (e - dest_begin) % cols;
      out[e - begin] = whole[col * rows + row];
    }
  }
  return absl::OkStatus();
}

}  // namespace

Status ImportHfWeights(const std::string& dir, const ModelOptions& options, const Model& model,
                       Engine& engine, bool show_progress) {
  ASSIGN_OR_RETURN(const SafetensorsSet set, SafetensorsSet::OpenDirectory(dir));
  const ModelOptions resolved = ResolveModelOptions(options);
  ASSIGN_OR_RETURN(const std::vector<HfTensor> map, HfTensorMap(resolved, model.units()));

  // Everything checked before any unit is stored.
  std::vector<std::vector<Piece>> by_unit(model.units().size());
  std::vector<std::string> problems;
  std::map<std::string, bool> used;
  uint64_t total_bytes = 0;
  for (const HfTensor& entry : map) {
    const StTensor* found = set.Find(entry.name);
    std::string name = entry.name;
    for (const std::string& alias : HfNameAliases(entry.name)) {
      if (found != nullptr) break;
      found = set.Find(alias);
      name = alias;
    }
    if (found == nullptr) {
      problems.push_back(absl::StrCat("tensor ", entry.name, " ", ShapeText(entry.shape),
                                      " is missing"));
      continue;
    }
    used[found->name] = true;
    if (found->shape != entry.shape) {
      problems.push_back(absl::StrCat(found->file, ": tensor ", name, " has shape ",
                                      ShapeText(found->shape), ", the model needs ",
                                      ShapeText(entry.shape)));
      continue;
    }
    by_unit[entry.unit].push_back({entry, found});
    total_bytes += found->bytes;
  }
  for (const StTensor& tensor : set.tensors()) {
    if (!used.count(tensor.name) && !IsBuffer(tensor.name)) {
      problems.push_back(absl::StrCat(tensor.file, ": tensor ", tensor.name, " ",
                                      ShapeText(tensor.shape), " has no place in a ",
                                      OptionName(resolved.family), " model of this shape"));
    }
  }
  if (!problems.empty()) {
    std::string message = absl::StrCat("model.from=hf:", dir, ": the weights do not fit the model (",
                                       model.Describe(), "):");
    const size_t shown = std::min<size_t>(problems.size(), 20);
    for (size_t i = 0; i < shown; ++i) absl::StrAppend(&message, "\n  ", problems[i]);
    if (shown < problems.size()) {
      absl::StrAppend(&message, "\n  ... and ", problems.size() - shown, " more");
    }
    return absl::InvalidArgumentError(message);
  }

  std::optional<Progress> progress;
  if (show_progress) progress.emplace("importing " + dir, total_bytes);
  for (size_t u = 0; u < by_unit.size(); ++u) {
    const UnitLayout& layout = model.units()[u];
    RETURN_IF_ERROR(engine.LoadUnit(
        static_cast<int>(u), [&](size_t begin, size_t end, float* out) -> Status {
          return FillUnit(set, by_unit[u], layout, begin, end, out,
                          progress ? &*progress : nullptr);
        }));
  }
  if (progress) progress->Finish();
  return absl::OkStatus();
}

}  // namespace strata
