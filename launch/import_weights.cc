// See import_weights.h.
#include "launch/import_weights.h"

#include <algorithm>
#include <future>
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

// Elements [lo, hi) of the [rows, cols] transpose of `source` ([cols, rows]) into out, in
// 32 x 32 tiles where whole rows are asked for (each tile's reads and writes stay in cache:
// an element-by-element gather misses the cache on every read).
void TransposeInto(const float* source, size_t rows, size_t cols, size_t lo, size_t hi,
                   float* out) {
  constexpr size_t kTile = 32;
  auto gather = [&](size_t from, size_t to) {  // a part of one row
    const size_t row = from / cols;
    for (size_t e = from; e < to; ++e) out[e - lo] = source[(e - row * cols) * rows + row];
  };
  const size_t first_full = (lo + cols - 1) / cols, end_full = hi / cols;
  if (first_full >= end_full) {  // within one or two partial rows
    for (size_t e = lo; e < hi;) {
      const size_t row_end = std::min(hi, (e / cols + 1) * cols);
      gather(e, row_end);
      e = row_end;
    }
    return;
  }
  gather(lo, first_full * cols);
  for (size_t r0 = first_full; r0 < end_full; r0 += kTile) {
    const size_t r1 = std::min(end_full, r0 + kTile);
    for (size_t c0 = 0; c0 < cols; c0 += kTile) {
      const size_t c1 = std::min(cols, c0 + kTile);
      for (size_t r = r0; r < r1; ++r) {
        float* dst = out + (r * cols - lo);
        for (size_t c = c0; c < c1; ++c) dst[c] = source[c * rows + r];
      }
    }
  }
  gather(end_full * cols, hi);
}

}  // namespace

// One Hugging Face tensor matched with its place in the model.
struct HfWeights::Piece {
  HfTensor map;
  const StTensor* file;
};

StatusOr<HfWeights> HfWeights::Open(const std::string& dir, const ModelOptions& options,
                                    const Model& model) {
  ASSIGN_OR_RETURN(SafetensorsSet opened, SafetensorsSet::OpenDirectory(dir));
  HfWeights weights;
  weights.set_ = std::make_shared<const SafetensorsSet>(std::move(opened));
  weights.model_ = &model;
  const SafetensorsSet& set = *weights.set_;
  const ModelOptions resolved = ResolveModelOptions(options);
  ASSIGN_OR_RETURN(const std::vector<HfTensor> map, HfTensorMap(resolved, model.units()));

  auto by_unit = std::make_shared<std::vector<std::vector<Piece>>>(model.units().size());
  std::vector<std::string> problems;
  std::map<std::string, bool> used;
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
    (*by_unit)[entry.unit].push_back({entry, found});
    weights.bytes_ += found->bytes;
  }
  for (const StTensor& tensor : set.tensors()) {
    if (!used.count(tensor.name) && !IsBuffer(tensor.name)) {
      problems.push_back(absl::StrCat(tensor.file, ": tensor ", tensor.name, " ",
                                      ShapeText(tensor.shape), " has no place in a ",
                                      OptionName(resolved.family), " model of this shape"));
    }
  }
  if (!problems.empty()) {
    std::string message = absl::StrCat("model.from=hf:", dir,
                                       ": the weights do not fit the model (", model.Describe(),
                                       "):");
    const size_t shown = std::min<size_t>(problems.size(), 20);
    for (size_t i = 0; i < shown; ++i) absl::StrAppend(&message, "\n  ", problems[i]);
    if (shown < problems.size()) {
      absl::StrAppend(&message, "\n  ... and ", problems.size() - shown, " more");
    }
    return absl::InvalidArgumentError(message);
  }
  weights.by_unit_ = std::move(by_unit);
  return weights;
}

Status HfWeights::Fill(int unit, size_t begin, size_t end, float* out, Progress* progress) const {
  const SafetensorsSet& set = *set_;
  const UnitLayout& layout = model_->units()[unit];
  std::fill(out, out + (end - begin), 0.0f);
  // A transposed tensor, read whole; kept per thread (a fresh vector per call would fault
  // its pages in every time: these are the largest matrices).
  thread_local std::vector<float> whole;
  for (const Piece& piece : (*by_unit_)[unit]) {
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
    TransposeInto(whole.data(), rows, cols, lo - dest_begin, hi - dest_begin,
                  out + (lo - begin));
  }
  return absl::OkStatus();
}

Status ImportHfWeights(const std::string& dir, const ModelOptions& options, const Model& model,
                       Engine& engine, bool show_progress) {
  ASSIGN_OR_RETURN(const HfWeights weights, HfWeights::Open(dir, options, model));
  std::optional<Progress> progress;
  if (show_progress) progress.emplace("importing " + dir, weights.bytes());
  // Unit u + 1 is read on a thread of its own while unit u is stored: two buffers of one
  // unit's range each, the reads overlapped with the engine's stores.
  const int num_units = static_cast<int>(model.units().size());
  std::vector<float> buffers[2];
  auto read = [&](int unit) -> Status {
    const auto [begin, end] = engine.StoredRange(unit);
    std::vector<float>& buffer = buffers[unit % 2];
    buffer.resize(end - begin);
    return weights.Fill(unit, begin, end, buffer.data(), progress ? &*progress : nullptr);
  };
  Status status = num_units > 0 ? read(0) : absl::OkStatus();
  for (int u = 0; u < num_units && status.ok(); ++u) {
    std::future<Status> next;
    if (u + 1 < num_units) next = std::async(std::launch::async, read, u + 1);
    status = engine.StoreUnitValues(u, buffers[u % 2].data());
    if (next.valid()) {
      const Status read_status = next.get();
      if (status.ok()) status = read_status;
    }
  }
  RETURN_IF_ERROR(status);
  if (progress) progress->Finish();
  return absl::OkStatus();
}

}  // namespace strata
