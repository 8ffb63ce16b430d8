// See import_weights.h.
#include "interop/import_weights.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/finite.h"
#include "core/progress.h"
#include "kernels/cpu/transpose.h"
#include "models/create_model.h"
#include "models/hf/hf_model.h"
#include "models/hf/safetensors.h"
#include "nvme/io_buffer.h"

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

// `copy`, a tensor of the file that a tied model holds twice (HfTiedCopyOf: lm_head.weight),
// against the model's own `original`: a tied model has one matrix for both, so they must be
// equal element for element (their fp32 values bit for bit; the file's dtypes may differ).
// "" when they are (or `original` is missing: said with the model's tensors), else the
// problem, naming both. Reads both in pieces of 1 Mi elements.
std::string TiedCopyProblem(const SafetensorsSet& set, const StTensor& copy,
                            const std::string& original) {
  const StTensor* found = set.Find(original);
  for (const std::string& alias : HfNameAliases(original)) {
    if (found == nullptr) found = set.Find(alias);
  }
  if (found == nullptr) return "";
  const std::string both = absl::StrCat("tensor ", copy.name, " ", ShapeText(copy.shape),
                                        " beside ", found->name, " ", ShapeText(found->shape));
  const std::string why =
      "the model ties its LM head to the token embedding (one matrix for both), so a file "
      "holding both must hold them equal";
  if (copy.shape != found->shape) return absl::StrCat(copy.file, ": ", both, ": ", why);
  constexpr uint64_t kPiece = uint64_t{1} << 20;
  std::vector<float> a(std::min(kPiece, copy.numel)), b(a.size());
  for (uint64_t begin = 0; begin < copy.numel; begin += kPiece) {
    const uint64_t count = std::min(kPiece, copy.numel - begin);
    for (const Status& read : {set.ReadFloats(copy, begin, count, a.data()),
                               set.ReadFloats(*found, begin, count, b.data())}) {
      if (!read.ok()) return std::string(read.message());
    }
    if (std::memcmp(a.data(), b.data(), count * sizeof(float)) == 0) continue;
    uint64_t i = 0;
    while (std::memcmp(&a[i], &b[i], sizeof(float)) == 0) ++i;
    return absl::StrCat(copy.file, ": ", both, " differs from it (element ", begin + i, ": ",
                        a[i], " against ", b[i], "): ", why);
  }
  return "";
}

// Bytes one task of Fill reads: large enough for a disk's sequential rate, small enough
// that a unit splits across every core.
constexpr size_t kTaskBytes = size_t{4} << 20;
// Bytes of a transposed tensor's band of file rows, one task: smaller than a plain task, so
// that a thread transposing one band keeps it short and its next read goes out soon (4 MiB
// bands held GPT-2's reading to 0.77-0.86 of the disk, 1 MiB ones 0.96-1.25).
constexpr size_t kBandBytes = size_t{1} << 20;
// Reads in flight: at least 4 even on few cores (a thread waiting on the disk needs no
// core, and a disk reaches its rate only with several requests queued).
// Alignment of O_DIRECT reads, which a bounce buffer may need on either side of a task.
constexpr size_t kBounceAlign = 4096;
int ReaderThreads() {
  return static_cast<int>(std::max(4u, std::thread::hardware_concurrency()));
}

// Destination elements [lo, hi) of a [rows, cols] matrix whose transpose ([cols, rows]) is
// in the file: the part in columns [c0, c1), from `source` = the file's rows [c0, c1).
// Whole rows through the tiled transpose; a partial first or last row (a stage-3 shard's
// edge) element by element. `source`: fp32, or bf16 widened on the way.
template <typename T>
void ScatterColumns(const T* source, size_t rows, size_t cols, size_t c0, size_t c1, size_t lo,
                    size_t hi, float* out) {
  auto part_of_row = [&](size_t r) {
    const size_t row = r * cols;
    const size_t from = std::max(c0, lo > row ? lo - row : 0), to = std::min(c1, hi - row);
    for (size_t c = from; c < to; ++c) out[row + c - lo] = Load(source + (c - c0) * rows + r);
  };
  const size_t full_begin = (lo + cols - 1) / cols, full_end = hi / cols;
  if (full_begin > full_end) {  // [lo, hi) inside one row
    part_of_row(lo / cols);
    return;
  }
  if (lo < full_begin * cols) part_of_row(lo / cols);
  if (full_end * cols < hi) part_of_row(full_end);
  cpu::Transpose(source + full_begin, rows, c1 - c0, full_end - full_begin,
                 out + (full_begin * cols + c0 - lo), cols);
}

// The error for a value of a weights file that is not finite: the file, the tensor, the
// element (flat and per dimension, in the file's layout) and the value.
Status NonFiniteWeight(const std::string& file, const std::string& tensor,
                       const std::vector<int64_t>& shape, uint64_t element, float value) {
  std::vector<int64_t> index(shape.size());
  uint64_t rest = element;
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = static_cast<int64_t>(rest % static_cast<uint64_t>(shape[d]));
    rest /= static_cast<uint64_t>(shape[d]);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "safetensors: ", file, ": tensor '", tensor, "' ", ShapeText(shape), ": element ", element,
      " ", ShapeText(index), " is ", NonFiniteName(value),
      ": weights must be finite (a model saved after its training diverged?); strata refuses "
      "it rather than train or sample on NaN"));
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
    if (used.count(tensor.name) || IsBuffer(tensor.name)) continue;
    if (const std::string original = HfTiedCopyOf(resolved, tensor.name); !original.empty()) {
      std::string problem = TiedCopyProblem(set, tensor, original);
      if (!problem.empty()) problems.push_back(std::move(problem));
    } else {
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

bool HfWeights::RawBf16(int unit) const {
  for (const Piece& piece : (*by_unit_)[unit]) {
    if (piece.file->dtype != StDType::kBF16 || piece.map.transposed) return false;
  }
  return true;
}

Status HfWeights::Fill(int unit, size_t begin, size_t end, float* out, Progress* progress,
                       bf16* params) const {
  if (params != nullptr ? !RawBf16(unit) : out == nullptr) {
    return absl::InternalError(
        absl::StrCat("HfWeights::Fill: unit ", unit, ": ",
                     params != nullptr ? "not all bf16 in place" : "nowhere to write"));
  }
  const SafetensorsSet& set = *set_;
  const UnitLayout& layout = model_->units()[unit];
  // The work as tasks of about kTaskBytes, run on every core: a plain tensor's part in
  // element ranges; a transposed one's in bands of its file rows (each band read once and
  // scattered into its destination columns).
  struct Task {
    const Piece* piece;
    size_t dest_begin;  // the tensor's first element in the unit
    size_t lo, hi;      // destination elements of the tensor (relative to dest_begin)
    size_t c0, c1;      // transposed: the file's rows [c0, c1)
  };
  std::vector<Task> tasks;
  std::vector<std::pair<size_t, size_t>> covered;  // unit elements the tensors fill
  uint64_t bytes = 0;
  for (const Piece& piece : (*by_unit_)[unit]) {
    const TensorSpec& spec = layout.tensor(piece.map.tensor);
    const size_t cols = spec.shape.size() == 2 ? static_cast<size_t>(spec.shape[1]) : 1;
    const size_t rows = piece.file->numel / cols;
    const size_t dest_begin = spec.offset + static_cast<size_t>(piece.map.row_begin) * cols;
    const size_t lo = std::max(begin, dest_begin), hi = std::min(end, dest_begin + rows * cols);
    if (lo >= hi) continue;
    covered.emplace_back(lo, hi);
    const size_t element_bytes = StDTypeBytes(piece.file->dtype);
    if (!piece.map.transposed) {
      const size_t step = std::max<size_t>(1, kTaskBytes / element_bytes);
      for (size_t e = lo; e < hi; e += step) {
        tasks.push_back({&piece, dest_begin, e - dest_begin, std::min(hi, e + step) - dest_begin,
                         0, 0});
      }
      bytes += (hi - lo) * element_bytes;
      continue;
    }
    // The file holds [cols, rows] (Conv1D: [in, out]); the destination is [rows, cols].
    const size_t band = std::max<size_t>(1, kBandBytes / (rows * element_bytes));
    for (size_t c = 0; c < cols; c += band) {
      tasks.push_back({&piece, dest_begin, lo - dest_begin, hi - dest_begin, c,
                       std::min(cols, c + band)});
    }
    bytes += piece.file->bytes;
  }
  // Zero where no tensor lands (gaps, padding, padded vocabulary rows); tensors never overlap.
  std::sort(covered.begin(), covered.end());
  size_t next = begin;
  auto zero = [&](size_t lo, size_t hi) {
    if (out != nullptr) std::fill(out + (lo - begin), out + (hi - begin), 0.0f);
    if (params != nullptr) std::fill(params + (lo - begin), params + (hi - begin), bf16{0});
  };
  for (const auto& [lo, hi] : covered) {
    zero(next, lo);
    next = hi;
  }
  zero(next, end);

  std::vector<Status> failures(tasks.size());
  // Each task's first value that is not finite (its index in the file's tensor, in the
  // file's layout) and what it is; kFinite where none. Checked as the values are read.
  constexpr uint64_t kFinite = ~uint64_t{0};
  std::vector<uint64_t> bad_index(tasks.size(), kFinite);
  std::vector<float> bad_value(tasks.size(), 0.0f);
#pragma omp parallel for schedule(dynamic, 1) num_threads(ReaderThreads()) if (tasks.size() > 1)
  for (size_t t = 0; t < tasks.size(); ++t) {
    const Task& task = tasks[t];
    const StTensor& file = *task.piece->file;
    const size_t at = task.dest_begin - begin + task.lo;  // of the task's first element
    const size_t count = task.hi - task.lo;
    if (params != nullptr) {
      failures[t] = set.ReadBf16(file, task.lo, count, params + at,
                                 out != nullptr ? out + at : nullptr);
      if (const size_t i = FirstNonFinite(params + at, count); failures[t].ok() && i < count) {
        bad_index[t] = task.lo + i;
        bad_value[t] = ToFloat(params[at + i]);
      }
      continue;
    }
    float* dest = out + (task.dest_begin - begin);
    if (task.c1 == 0) {
      failures[t] = set.ReadFloats(file, task.lo, count, dest + task.lo);
      if (const size_t i = FirstNonFinite(dest + task.lo, count); failures[t].ok() && i < count) {
        bad_index[t] = task.lo + i;
        bad_value[t] = dest[task.lo + i];
      }
      continue;
    }
    const TensorSpec& spec = layout.tensor(task.piece->map.tensor);
    const size_t cols = static_cast<size_t>(spec.shape[1]), rows = file.numel / cols;
    // Scattered from where the read put the file's rows (no copy between; bf16 widened in
    // the transpose's registers).
    const uint64_t first = task.c0 * rows, band_count = (task.c1 - task.c0) * rows;
    // The band's first value that is not finite among those this range takes (a stage-3
    // shard's edge leaves some to other ranks), in the file's order.
    auto check_band = [&](const auto* values) {
      for (uint64_t j = 0; j < band_count; ++j) {
        j += FirstNonFinite(values + j, band_count - j);
        if (j == band_count) return;
        const uint64_t dest_element = (j % rows) * cols + task.c0 + j / rows;
        if (dest_element >= task.lo && dest_element < task.hi) {
          bad_index[t] = first + j;
          bad_value[t] = Load(values + j);
          return;
        }
      }
    };
    if (file.dtype == StDType::kBF16) {
      StatusOr<const bf16*> band = set.ReadBf16View(file, first, band_count);
      failures[t] = band.status();
      if (band.ok()) {
        ScatterColumns(*band, rows, cols, task.c0, task.c1, task.lo, task.hi, dest + task.lo);
        check_band(*band);
      }
      continue;
    }
    StatusOr<const float*> band = set.ReadFloatsView(file, first, band_count);
    failures[t] = band.status();
    if (band.ok()) {
      ScatterColumns(*band, rows, cols, task.c0, task.c1, task.lo, task.hi, dest + task.lo);
      check_band(*band);
    }
  }
  for (const Status& failure : failures) RETURN_IF_ERROR(failure);
  // The tasks run in tensor order and, within a tensor, in the file's order: the first one
  // holding a value that is not finite holds the tensor's first in this range.
  for (size_t t = 0; t < tasks.size(); ++t) {
    if (bad_index[t] == kFinite) continue;
    const StTensor& file = *tasks[t].piece->file;
    return NonFiniteWeight(file.file, file.name, file.shape, bad_index[t], bad_value[t]);
  }
  if (progress != nullptr) progress->Advance(bytes);
  return absl::OkStatus();
}

UnitImportRoute RouteUnit(const HfWeights& weights, const Engine& engine, const Model& model,
                          int unit) {
  UnitImportRoute route;
  route.master_straight = engine.state().WriteTargets(unit).master_straight;
  route.raw_params = weights.RawBf16(unit) && engine.state().WriteTargets(unit).takes_bf16_params;
  route.params_straight = route.raw_params && engine.state().WriteTargets(unit).params_straight;
  route.bf16_buffer = route.raw_params && !route.params_straight;
  // A unit without optimizer state (frozen) needs no fp32 values once its params are in.
  const bool needs_values = !route.raw_params || model.units()[unit].trainable();
  route.fp32_buffer = !route.master_straight && needs_values;
  return route;
}

uint64_t ImportPlan::HostBytes() const {
  return 2 * (largest_fp32 * sizeof(float) + largest_bf16 * sizeof(bf16)) +
         static_cast<uint64_t>(reader_threads) * (kTaskBytes + 2 * kBounceAlign);
}

ImportPlan PlanImport(const HfWeights& weights, const Engine& engine, const Model& model) {
  ImportPlan plan;
  for (const int unit : BaseUnits(model)) {
    (engine.state().Packed(unit) ? plan.packed : plan.units).push_back(unit);
  }
  plan.reader_threads = ReaderThreads();
  for (const int unit : plan.units) {
    const auto [begin, end] = engine.state().StoredRange(unit);
    plan.routes.push_back(RouteUnit(weights, engine, model, unit));
    if (plan.routes.back().fp32_buffer)
      plan.largest_fp32 = std::max(plan.largest_fp32, end - begin);
    if (plan.routes.back().bf16_buffer)
      plan.largest_bf16 = std::max(plan.largest_bf16, end - begin);
  }
  return plan;
}

Status ImportHfWeights(const std::string& dir, const ModelOptions& options, const Model& model,
                       Engine& engine, bool show_progress) {
  ASSIGN_OR_RETURN(const HfWeights weights, HfWeights::Open(dir, options, model));
  std::optional<Progress> progress;
  if (show_progress) progress.emplace("importing " + dir, weights.bytes());
  // One reader thread fills unit u + 1 while unit u is stored, the reads overlapped with
  // the engine's stores. Each unit's values land straight in its fp32 master where the
  // engine allows (EngineState::WriteTargets: master), else in one of two buffers of one unit's range.
  // A unit all bf16 in its files, in a bf16 engine, has the files' bits copied into its
  // params as they are read: straight where the host can write them
  // (EngineState::WriteTargets: params), else into two buffers of their own that the engine puts
  // in their home as they are (params on NVMe or on a GPU): no cast in the store, nor fp32
  // values at all for a frozen unit (a LoRA model's base).
  // The thread lives for the whole import (its readers' bounce buffers stay faulted in).
  // A LoRA model's adapters are not in the files: its base (the frozen units) alone.
  RETURN_IF_ERROR(engine.Finish());  // nothing in flight touches a target
  const ImportPlan plan = PlanImport(weights, engine, model);
  const std::vector<int>& todo = plan.units;
  const std::vector<UnitImportRoute>& routes = plan.routes;
  const int num_units = static_cast<int>(todo.size());
  // On 2 MiB pages (fewer faults; O_DIRECT into them is faster), not zeroed: Fill writes
  // every element. Pages are committed as units touch them.
  nvme::IoBufferOptions unpopulated;
  unpopulated.populate = false;
  nvme::IoBuffer buffers[2], raw_buffers[2];
  for (int i = 0; i < 2; ++i) {
    if (plan.largest_fp32 > 0) {
      ASSIGN_OR_RETURN(buffers[i],
                       nvme::IoBuffer::Allocate(plan.largest_fp32 * sizeof(float), unpopulated));
    }
    if (plan.largest_bf16 > 0) {
      ASSIGN_OR_RETURN(raw_buffers[i],
                       nvme::IoBuffer::Allocate(plan.largest_bf16 * sizeof(bf16), unpopulated));
    }
  }
  // Each unit's destinations: its state itself, or one of the buffers.
  std::vector<float*> values_at(num_units, nullptr);
  std::vector<bf16*> params_at(num_units, nullptr);
  for (int u = 0; u < num_units; ++u) {
    const UnitImportRoute& route = routes[u];
    values_at[u] = route.master_straight ? engine.state().WriteTargets(todo[u]).master
                   : route.fp32_buffer   ? reinterpret_cast<float*>(buffers[u % 2].data())
                                         : nullptr;
    params_at[u] = route.params_straight ? engine.state().WriteTargets(todo[u]).params
                   : route.bf16_buffer   ? reinterpret_cast<bf16*>(raw_buffers[u % 2].data())
                                         : nullptr;
    if ((route.master_straight && values_at[u] == nullptr) ||
        (route.params_straight && params_at[u] == nullptr)) {
      return absl::InternalError(
          absl::StrCat("import: unit ", todo[u], " has no state the host can write (a dry run?)"));
    }
  }
  std::vector<Status> read_status(num_units);
  std::mutex mutex;
  std::condition_variable changed;
  int filled = 0, stored = 0;  // units read so far; units stored so far
  bool stop = false;
  std::thread reader([&] {
    for (int u = 0; u < num_units; ++u) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        // A unit read into a buffer waits until the buffer's previous unit is stored; one
        // read into its master need not wait.
        changed.wait(lock, [&] {
          return stop || (!routes[u].fp32_buffer && !routes[u].bf16_buffer) || u - stored < 2;
        });
        if (stop) return;
      }
      const auto [begin, end] = engine.state().StoredRange(todo[u]);
      read_status[u] = weights.Fill(todo[u], begin, end, values_at[u],
                                    progress ? &*progress : nullptr, params_at[u]);
      std::lock_guard<std::mutex> lock(mutex);
      filled = u + 1;
      changed.notify_all();
      if (!read_status[u].ok()) return;
    }
  });
  Status status;
  for (int u = 0; u < num_units && status.ok(); ++u) {
    {
      std::unique_lock<std::mutex> lock(mutex);
      changed.wait(lock, [&] { return filled > u; });
    }
    status = read_status[u];
    if (status.ok()) {
      status = engine.state().WriteStoredValues(todo[u], values_at[u], params_at[u]);
    }
    std::lock_guard<std::mutex> lock(mutex);
    stored = u + 1;
    stop = !status.ok();
    changed.notify_all();
  }
  reader.join();
  RETURN_IF_ERROR(status);
  for (const int unit : plan.packed) {
    RETURN_IF_ERROR(engine.state().WriteUnit(unit, [&](size_t begin, size_t end, float* out) {
      return weights.Fill(unit, begin, end, out, progress ? &*progress : nullptr);
    }));
  }
  if (progress) progress->Finish();
  return absl::OkStatus();
}

}  // namespace strata
