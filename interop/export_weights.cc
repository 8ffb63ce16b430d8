// See export_weights.h.
#include "interop/export_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "checkpoint/checkpoint.h"
#include "core/atomic_file.h"
#include "core/stored_layout.h"
#include "runtime/quantized_base.h"
#include "core/files.h"
#include "core/input_file.h"
#include "core/run_inputs.h"
#include "core/staged_directory.h"
#include "core/progress.h"
#include "data/tokenizer/tokenizer.h"
#include "interop/export_generation.h"
#include "interop/llmc_model.h"
#include "models/create_model.h"
#include "models/gpt/gpt.h"
#include "models/hf/hf_model.h"
#include "models/hf/safetensors.h"
#include "models/llama/llama.h"

namespace strata {
namespace {

// Writes `text` to `path` whole or not at all.
Status WriteTextFile(const std::string& path, const std::string& text) {
  return Annotate(WriteFileAtomically(path, text), "export");
}

// Copies the checkpoint's tokenizer files (its own copy, else those the recorded spec
// names) into the exported directory `dir`, each whole or not at all; returns what the
// export's line adds. A tokenizer no longer where training found it, or a copy that fails
// its hash, is said, not an error: the weights are written.
StatusOr<std::string> CopyTokenizer(const OpenedCheckpoint& checkpoint, const std::string& dir) {
  StatusOr<std::string> spec = CheckpointTokenizer(checkpoint);
  if (!spec.ok()) return absl::StrCat("; ", spec.status().message(), ": not copied");
  const std::vector<std::pair<std::string, std::string>> files = TokenizerFiles(*spec);
  if (files.empty()) return std::string();
  const std::string from = checkpoint.tokenizer_files.empty() ? "" : ", the checkpoint's copy";
  std::vector<std::string> names;
  for (const auto& [source, name] : files) {
    StatusOr<std::string> read = std::filesystem::is_regular_file(source)
                                     ? ReadInputFile(source, "tokenizer file",
                                                     kTokenizerInputLimit)
                                     : absl::NotFoundError("not a regular file");
    if (!read.ok() && read.status().code() != absl::StatusCode::kInternal) {
      return absl::StrCat("; the tokenizer the checkpoint was trained with (", checkpoint.tokenizer,
                          ") is not readable at ", source, ": not copied");
    }
    if (!read.ok()) return Annotate(read.status(), "export");
    const std::string& bytes = *read;
    RETURN_IF_ERROR(WriteTextFile(dir + "/" + name, bytes));
    names.push_back(name);
  }
  return absl::StrCat("; its tokenizer (", checkpoint.tokenizer, from,
                      "): ", absl::StrJoin(names, ", "));
}

Status CreateDirectory(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("export: cannot create the directory ", dir, ": ", error.message()));
  }
  return absl::OkStatus();
}

// Elements [begin, begin + count) of unit `unit`'s fp32 values, however they are made.
using UnitReader = std::function<Status(int unit, size_t begin, size_t count, float* out)>;

// `model_options`' model (a model of it without LoRA: `model`) as a Hugging Face directory
// with each unit's values from `read`, and `generation`'s ids in config.json and its
// generation_config.json. Returns the safetensors files written.
StatusOr<std::vector<std::string>> WriteHfDirectory(const ModelOptions& model_options,
                                                    const Model& model, const UnitReader& read,
                                                    const std::string& dir,
                                                    const ExportRequest& request,
                                                    const ExportedGeneration& generation) {
  RETURN_IF_ERROR(CreateDirectory(dir));
  ASSIGN_OR_RETURN(const std::vector<HfTensor> map, HfTensorMap(model_options, model.units()));
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
    const TensorSpec& spec = model.units()[entry.unit].tensor(entry.tensor);
    const size_t cols = spec.shape.size() == 2 ? static_cast<size_t>(spec.shape[1]) : 1;
    const size_t base = spec.offset + static_cast<size_t>(entry.row_begin) * cols;
    // A transposed (Conv1D) tensor is read whole once and kept for its pieces.
    auto whole = std::make_shared<std::vector<float>>();
    tensors.push_back({entry.name, entry.shape,
                       [read, entry, cols, base, whole, progress](uint64_t begin, uint64_t count,
                                                                  float* out) -> Status {
                         if (progress) progress->Advance(count * 4);
                         if (!entry.transposed) return read(entry.unit, base + begin, count, out);
                         // The file is [in, out] = [cols, rows] of strata's [rows, cols].
                         const size_t rows = static_cast<size_t>(entry.shape[1]);
                         if (whole->empty()) {
                           whole->resize(rows * cols);
                           RETURN_IF_ERROR(read(entry.unit, base, rows * cols, whole->data()));
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
  ASSIGN_OR_RETURN(
      std::vector<std::string> files,
      WriteSafetensorsDirectory(dir, tensors, dtype, request.max_shard_bytes, {{"format", "pt"}}));
  RETURN_IF_ERROR(WriteTextFile(
      dir + "/config.json",
      HfConfigJson(model_options, request.dtype == DType::kBF16 ? "bfloat16" : "float32",
                   generation.tokens)));
  if (generation.generation_config) {
    RETURN_IF_ERROR(WriteTextFile(dir + "/generation_config.json", *generation.generation_config));
  }
  if (progress) progress->Finish();
  return files;
}

std::string FilesWritten(const std::vector<std::string>& files, DType dtype) {
  return absl::StrCat(files.size(), files.size() == 1 ? " safetensors file" : " safetensors shards",
                      " in ", StDTypeName(dtype == DType::kBF16 ? StDType::kBF16 : StDType::kF32),
                      " and config.json");
}

StatusOr<std::string> ExportHf(const OpenedCheckpoint& checkpoint, const std::string& dir,
                               const ExportRequest& request) {
  ASSIGN_OR_RETURN(auto model, CreateModel(checkpoint.model, Recompute::kNone, DType::kF32));
  const UnitReader read = [&checkpoint](int unit, size_t begin, size_t count, float* out) {
    return ReadCheckpointMaster(checkpoint, unit, begin, count, out);
  };
  const ExportedGeneration generation = GenerationOfCheckpoint(checkpoint);
  ASSIGN_OR_RETURN(const std::vector<std::string> files,
                   WriteHfDirectory(checkpoint.model, *model, read, dir, request, generation));
  return absl::StrCat("exported ", checkpoint.path, " (", model->Describe(), ") to ", dir, ": ",
                      FilesWritten(files, request.dtype), generation.Describe());
}

// The projections of a block that may take an adapter, for the (resolved) model.
std::vector<LoraTargetSpec> LoraSpecsOf(const ModelOptions& model) {
  if (model.family == ModelFamily::kLlama) return LlamaLoraTargets(LlamaConfigOf(model));
  GptConfig config;
  config.heads = model.heads;
  config.channels = model.channels;
  return GptLoraTargets(config);
}

// One adapter of a LoRA checkpoint: block `layer`'s target `spec`.
struct Adapter {
  int layer = 0;
  LoraTargetSpec spec;
  std::string module;  // Hugging Face's module path, e.g. "model.layers.0.mlp.up_proj"
  size_t a_offset = 0, b_offset = 0;  // of lora_A and lora_B in checkpoint unit `layer`
};

// Every adapter of the checkpoint, block by block, each block's in the checkpoint's target
// order. `lora_model`: made with CheckpointLoraOptions, its adapter units checked.
StatusOr<std::vector<Adapter>> AdaptersOf(const OpenedCheckpoint& checkpoint,
                                          const Model& lora_model, int first_adapter_unit) {
  const std::vector<LoraTargetSpec> specs = LoraSpecsOf(checkpoint.model);
  std::vector<Adapter> adapters;
  for (int layer = 0; layer < checkpoint.model.layers; ++layer) {
    const UnitLayout& unit = lora_model.units()[first_adapter_unit + layer];
    auto offset_of = [&unit](const std::string& name,
                             const std::vector<int>& shape) -> StatusOr<size_t> {
      for (const TensorSpec& tensor : unit.tensors()) {
        if (tensor.name == name && tensor.shape == shape) return tensor.offset;
      }
      return absl::InternalError(absl::StrCat("export: unit '", unit.name(), "' has no ", name,
                                              " of shape [", absl::StrJoin(shape, ", "), "]"));
    };
    for (absl::string_view name : absl::StrSplit(checkpoint.lora.targets, ',')) {
      const auto spec = std::find_if(specs.begin(), specs.end(),
                                     [&](const LoraTargetSpec& s) { return s.name == name; });
      if (spec == specs.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("export: ", checkpoint.path, " names an adapter target '", name,
                         "' that a ", OptionName(checkpoint.model.family), " model does not have"));
      }
      Adapter adapter;
      adapter.layer = layer;
      adapter.spec = *spec;
      adapter.module = absl::StrCat(
          checkpoint.model.family == ModelFamily::kGpt ? "transformer.h." : "model.layers.", layer,
          ".", spec->hf_module);
      const int rank = checkpoint.lora.rank;
      ASSIGN_OR_RETURN(adapter.a_offset, offset_of(spec->name + ".lora_A", {rank, spec->in}));
      ASSIGN_OR_RETURN(adapter.b_offset, offset_of(spec->name + ".lora_B", {spec->n, rank}));
      adapters.push_back(std::move(adapter));
    }
  }
  return adapters;
}

StatusOr<std::string> ExportPeft(const OpenedCheckpoint& checkpoint, const std::string& dir,
                                 const ExportRequest& request) {
  ASSIGN_OR_RETURN(auto lora_model, CreateModel(checkpoint.model, Recompute::kNone, DType::kF32,
                                                CheckpointLoraOptions(checkpoint)));
  ASSIGN_OR_RETURN(const int first, CheckAdapterUnits(checkpoint, *lora_model));
  ASSIGN_OR_RETURN(const std::vector<Adapter> adapters, AdaptersOf(checkpoint, *lora_model, first));
  RETURN_IF_ERROR(CreateDirectory(dir));
  const int rank = checkpoint.lora.rank;
  // PEFT's names: its wrapper's "base_model.model." before the module path; lora_A [r, in]
  // and lora_B [out, r] as nn.Linear weights, which strata's A and B are, GPT-2's Conv1D
  // included (PEFT's fan_in_fan_out transposes the base weight, not the adapters).
  std::vector<StOutputTensor> tensors;
  std::vector<std::string> modules;
  for (const Adapter& adapter : adapters) {
    const std::string prefix = "base_model.model." + adapter.module;
    for (const bool b : {false, true}) {
      const size_t offset = b ? adapter.b_offset : adapter.a_offset;
      const int layer = adapter.layer;
      tensors.push_back({absl::StrCat(prefix, b ? ".lora_B.weight" : ".lora_A.weight"),
                         b ? std::vector<int64_t>{adapter.spec.n, rank}
                           : std::vector<int64_t>{rank, adapter.spec.in},
                         [&checkpoint, layer, offset](uint64_t begin, uint64_t count, float* out) {
                           return ReadCheckpointMaster(checkpoint, layer, offset + begin, count,
                                                       out);
                         }});
    }
    if (std::find(modules.begin(), modules.end(), adapter.spec.hf_module) == modules.end()) {
      modules.push_back(adapter.spec.hf_module);
    }
  }
  const StDType dtype = request.dtype == DType::kBF16 ? StDType::kBF16 : StDType::kF32;
  RETURN_IF_ERROR(
      WriteSafetensors(dir + "/adapter_model.safetensors", tensors, dtype, {{"format", "pt"}}));
  // PEFT's LoraConfig keys (adapter_config.json). alpha as the checkpoint wrote it: an
  // integer where it is one (PEFT's type), else its shortest decimal.
  const double alpha = std::stod(absl::StrCat(checkpoint.lora.alpha));
  nlohmann::json config = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"r", rank},
      {"lora_dropout", 0.0},
      {"target_modules", modules},
      {"bias", "none"},
      {"fan_in_fan_out", checkpoint.model.family == ModelFamily::kGpt},
      {"inference_mode", true},
      {"base_model_name_or_path",
       absl::StartsWith(checkpoint.base.from, "hf:") ? checkpoint.base.from.substr(3) : ""},
      {"modules_to_save", nullptr},
      {"init_lora_weights", true},
      {"use_rslora", false}};
  if (alpha == std::floor(alpha) && std::fabs(alpha) < 1e15) {
    config["lora_alpha"] = static_cast<int64_t>(alpha);
  } else {
    config["lora_alpha"] = alpha;
  }
  RETURN_IF_ERROR(WriteTextFile(dir + "/adapter_config.json", config.dump(2) + "\n"));
  return absl::StrCat("exported ", checkpoint.path, " (LoRA adapters of rank ", rank, " on ",
                      modules.size(), " modules of ", checkpoint.model.layers, " blocks) to ", dir,
                      ": adapter_model.safetensors in ", StDTypeName(dtype),
                      " and adapter_config.json (PEFT)",
                      checkpoint.base.base_dtype == BaseDType::kTrain
                          ? ""
                          : absl::StrCat("; trained on the base stored as ",
                                         BaseDTypeName(checkpoint.base.base_dtype),
                                         ", they apply to the original base (as QLoRA's do)"));
}

// A model's units with the adapters merged in, one unit at a time: the unit a read asks for
// is made whole (base values, then W[col:col+n, :] += scale B A of each of its adapters)
// and kept for the reads after it (the exporter asks in unit order).
class MergedUnits {
 public:
  // Where an adapter merges: the base unit and the element offset of its weight's row 0.
  struct Merge {
    Adapter adapter;
    int unit = 0;
    size_t weight_offset = 0;
  };
  MergedUnits(const OpenedCheckpoint& checkpoint, const LoraBaseReader& base,
              std::vector<Merge> merges)
      : checkpoint_(checkpoint), base_(base), merges_(std::move(merges)) {}

  Status Read(int unit, size_t begin, size_t count, float* out) {
    if (unit != cached_unit_) {
      cached_unit_ = -1;
      RETURN_IF_ERROR(base_.Read(unit, &values_));
      for (const Merge& merge : merges_) {
        if (merge.unit == unit) RETURN_IF_ERROR(Apply(merge));
      }
      cached_unit_ = unit;
    }
    if (begin + count > values_.size()) {
      return absl::InternalError(absl::StrCat("export: unit ", unit, " has ", values_.size(),
                                              " elements, asked for [", begin, ", ", begin + count,
                                              ")"));
    }
    std::copy(values_.begin() + begin, values_.begin() + begin + count, out);
    return absl::OkStatus();
  }

 private:
  // W[col + i, j] += scale * sum_k B[i, k] A[k, j]: the sum in double, one row of W at a
  // time, rounded once to fp32 when added.
  Status Apply(const Merge& merge) {
    const Adapter& adapter = merge.adapter;
    const size_t rank = static_cast<size_t>(checkpoint_.lora.rank);
    const size_t in = static_cast<size_t>(adapter.spec.in), n = static_cast<size_t>(adapter.spec.n);
    std::vector<float> a(rank * in), b(n * rank);
    RETURN_IF_ERROR(
        ReadCheckpointMaster(checkpoint_, adapter.layer, adapter.a_offset, a.size(), a.data()));
    RETURN_IF_ERROR(
        ReadCheckpointMaster(checkpoint_, adapter.layer, adapter.b_offset, b.size(), b.data()));
    // The scale the model's forward uses (models/common/lora.h).
    const double scale = checkpoint_.lora.alpha / static_cast<float>(checkpoint_.lora.rank);
    std::vector<double> row(in);
    for (size_t i = 0; i < n; ++i) {
      std::fill(row.begin(), row.end(), 0.0);
      for (size_t k = 0; k < rank; ++k) {
        const double bik = b[i * rank + k];
        const float* a_row = a.data() + k * in;
        for (size_t j = 0; j < in; ++j) row[j] += bik * a_row[j];
      }
      float* w =
          values_.data() + merge.weight_offset + (static_cast<size_t>(adapter.spec.col) + i) * in;
      for (size_t j = 0; j < in; ++j) {
        w[j] = static_cast<float>(static_cast<double>(w[j]) + scale * row[j]);
      }
    }
    return absl::OkStatus();
  }

  const OpenedCheckpoint& checkpoint_;
  const LoraBaseReader& base_;
  const std::vector<Merge> merges_;
  int cached_unit_ = -1;
  std::vector<float> values_;
};

StatusOr<std::string> ExportMerged(const OpenedCheckpoint& checkpoint, const std::string& dir,
                                   const ExportRequest& request) {
  ASSIGN_OR_RETURN(auto lora_model, CreateModel(checkpoint.model, Recompute::kNone, DType::kF32,
                                                CheckpointLoraOptions(checkpoint)));
  ASSIGN_OR_RETURN(const int first, CheckAdapterUnits(checkpoint, *lora_model));
  ASSIGN_OR_RETURN(const std::vector<Adapter> adapters, AdaptersOf(checkpoint, *lora_model, first));
  // The merged model is the base model: no adapter units.
  ASSIGN_OR_RETURN(auto model, CreateModel(checkpoint.model, Recompute::kNone, DType::kF32));
  ASSIGN_OR_RETURN(const LoraBaseReader base, LoraBaseReader::Open(checkpoint, *model, "export"));

  // Each adapter's weight, found as Hugging Face names it ("<module>.weight").
  ASSIGN_OR_RETURN(const std::vector<HfTensor> map, HfTensorMap(checkpoint.model, model->units()));
  std::vector<MergedUnits::Merge> merges;
  for (const Adapter& adapter : adapters) {
    const std::string weight = adapter.module + ".weight";
    const auto entry =
        std::find_if(map.begin(), map.end(), [&](const HfTensor& e) { return e.name == weight; });
    const TensorSpec* tensor =
        entry == map.end() ? nullptr : &model->units()[entry->unit].tensor(entry->tensor);
    if (tensor == nullptr || entry->row_begin != adapter.spec.col ||
        tensor->shape != std::vector<int>{adapter.spec.out_cols, adapter.spec.in}) {
      return absl::InternalError(absl::StrCat("export: no base weight ", weight, " of ",
                                              adapter.spec.out_cols, " x ", adapter.spec.in,
                                              " for the adapter of ", adapter.spec.name));
    }
    merges.push_back({adapter, entry->unit, tensor->offset});
  }

  // The base as training used it, checked against the checkpoint before anything is
  // written: one pass over it (one unit in memory), then another to write.
  {
    const uint64_t base_bytes = [&] {
      uint64_t bytes = 0;
      for (int u : base.units()) bytes += model->units()[u].used_elements() * 4;
      return bytes;
    }();
    std::optional<Progress> checking;
    if (request.show_progress) {
      checking.emplace(absl::StrCat("checking the base (", base.Describe(), ")"), base_bytes);
    }
    BaseHasher hasher;
    std::vector<float> values;
    for (int u : base.units()) {
      RETURN_IF_ERROR(base.Read(u, &values, &hasher));
      if (checking) checking->Advance(values.size() * 4);
    }
    RETURN_IF_ERROR(CheckLoraBaseHash(checkpoint, base, hasher.Hex(), "export"));
  }

  auto merged = std::make_shared<MergedUnits>(checkpoint, base, std::move(merges));
  const UnitReader read = [merged](int unit, size_t begin, size_t count, float* out) {
    return merged->Read(unit, begin, count, out);
  };
  const ExportedGeneration generation = GenerationOfCheckpoint(checkpoint);
  ASSIGN_OR_RETURN(const std::vector<std::string> files,
                   WriteHfDirectory(checkpoint.model, *model, read, dir, request, generation));
  // A quantized base is merged as training computed with it: dequantized (then the
  // adapters added in fp32, written in --dtype).
  const std::string dequantized =
      base.base_dtype() == BaseDType::kTrain
          ? std::string()
          : absl::StrCat(" dequantized from ", BaseDTypeName(base.base_dtype()));
  return absl::StrCat("exported ", checkpoint.path, " merged: ", base.Describe(), dequantized,
                      " (", model->Describe(), ") + LoRA adapters (rank ", checkpoint.lora.rank,
                      ", alpha ", checkpoint.lora.alpha, ") on ", adapters.size(),
                      " projections, to ", dir, ": ", FilesWritten(files, request.dtype),
                      generation.Describe());
}

}  // namespace

StatusOr<LoraBaseReader> LoraBaseReader::Open(const OpenedCheckpoint& checkpoint,
                                              const Model& model, const std::string& who) {
  if (!checkpoint.lora.enabled()) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": ", checkpoint.path, " holds no LoRA adapters (full training)"));
  }
  LoraBaseReader reader;
  reader.model_ = &model;
  reader.units_ = BaseUnits(model);
  reader.seed_ = checkpoint.base.seed;
  reader.dtype_ = checkpoint.base.dtype;
  reader.base_dtype_ = checkpoint.base.base_dtype;
  reader.from_ = checkpoint.base.from;
  const std::string& from = checkpoint.base.from;
  if (absl::StartsWith(from, "hf:")) {
    StatusOr<HfWeights> weights = HfWeights::Open(from.substr(3), checkpoint.model, model);
    if (!weights.ok()) {
      return Annotate(weights.status(),
                      absl::StrCat(who, ": the base of ", checkpoint.path, " (", from, ")"));
    }
    reader.weights_.emplace(std::move(*weights));
  } else if (!from.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": ", checkpoint.path, " holds LoRA adapters trained on model.from=", from,
        "; strata re-reads a base only from a Hugging Face directory (hf:DIR) or a random "
        "init: export the adapters alone with --to peft:DIR, or train them on an hf: base"));
  }
  return reader;
}

Status LoraBaseReader::Read(int unit, std::vector<float>* values, BaseHasher* hasher) const {
  const UnitLayout& layout = model_->units()[unit];
  values->assign(layout.used_elements(), 0.0f);
  if (weights_) {
    RETURN_IF_ERROR(weights_->Fill(unit, 0, values->size(), values->data(), nullptr));
  } else {
    model_->InitUnit(unit, seed_, values->data());
  }
  // A quantized base: the unit's stored bytes made as training made them, then its values
  // dequantized from them.
  UnitLayout frozen = layout;
  frozen.set_trainable(false);
  const StoredUnit stored = StoredUnit::Of(frozen, base_dtype_, dtype_);
  if (stored.packed()) {
    std::vector<uint8_t> bytes(stored.bytes());
    const std::vector<float>& raw = *values;
    RETURN_IF_ERROR(PackRange(stored, layout,
                              [&raw](size_t begin, size_t end, float* out) {
                                std::copy(raw.begin() + begin, raw.begin() + end, out);
                                return absl::OkStatus();
                              },
                              0, bytes.size(), bytes.data()));
    if (hasher != nullptr) hasher->AddBytes(bytes.data(), bytes.size());
    return UnpackUnit(stored, layout, bytes.data(), values->data());
  }
  // Training held the base in its compute dtype only (a frozen unit has no fp32 master).
  if (dtype_ == DType::kBF16) {
    for (float& v : *values) v = ToFloat(ToBf16(v));
  }
  if (hasher != nullptr) hasher->Add(*values);
  return absl::OkStatus();
}

std::string LoraBaseReader::Describe() const {
  return from_.empty() ? absl::StrCat("random weights of seed ", seed_) : from_;
}

Status CheckLoraBaseHash(const OpenedCheckpoint& checkpoint, const LoraBaseReader& base,
                         const std::string& computed, const std::string& who) {
  if (computed == checkpoint.base.xxh3) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      who, ": the base of ", checkpoint.path, " has changed: its adapters were trained on ",
      base.Describe(), " in ", DTypeName(checkpoint.base.dtype), " whose params hashed to XXH3 ",
      checkpoint.base.xxh3, ", and it now hashes to ", computed,
      "; the adapters fit only their own base: restore it"));
}

LoraOptions CheckpointLoraOptions(const OpenedCheckpoint& checkpoint) {
  LoraOptions lora;
  lora.rank = checkpoint.lora.rank;
  lora.alpha = checkpoint.lora.alpha;
  lora.targets = checkpoint.lora.targets;
  return lora;
}

StatusOr<int> CheckAdapterUnits(const OpenedCheckpoint& checkpoint, const Model& model) {
  const std::vector<UnitLayout>& units = model.units();
  const int first = static_cast<int>(BaseUnits(model).size());
  const size_t adapters = units.size() - static_cast<size_t>(first);
  if (checkpoint.units.size() != adapters) {
    return absl::InvalidArgumentError(
        absl::StrCat(checkpoint.path, " has ", checkpoint.units.size(),
                     " units, a model of its shape with ", "its adapters ", adapters));
  }
  for (size_t k = 0; k < adapters; ++k) {
    const UnitLayout& unit = units[first + k];
    const OpenedCheckpoint::Unit& entry = checkpoint.units[k];
    if (entry.name != unit.name() || entry.elements != unit.used_elements()) {
      return absl::InvalidArgumentError(
          absl::StrCat(checkpoint.path, ": unit ", k, " is ", entry.name, " of ", entry.elements,
                       " elements, the model's ", unit.name(), " of ", unit.used_elements()));
    }
  }
  return first;
}

// The checkpoint, and the directories its run read its model from (checkpoint.source, a
// LoRA base), noted as inputs of this export (core/run_inputs.h).
Status NoteExportInputs(const OpenedCheckpoint& checkpoint) {
  RETURN_IF_ERROR(NoteRunInputPath(checkpoint.path, "the checkpoint"));
  for (const auto& [from, what] :
       {std::pair<std::string, std::string>{checkpoint.source,
                                            "the weights the checkpoint was trained from"},
        {checkpoint.base.from, "the LoRA checkpoint's base"}}) {
    if (absl::StartsWith(from, "hf:")) RETURN_IF_ERROR(NoteRunInputPath(from.substr(3), what));
  }
  return absl::OkStatus();
}

StatusOr<std::string> ExportWeights(const ExportRequest& request) {
  ASSIGN_OR_RETURN(const OpenedCheckpoint checkpoint, OpenCheckpoint(request.from));
  auto destination = [&request](const std::string& scheme) {
    return absl::StartsWith(request.to, scheme) && request.to.size() > scheme.size();
  };
  const bool hf = destination("hf:"), llmc = destination("llmc:"), peft = destination("peft:");
  if (!hf && !llmc && !peft) {
    return absl::InvalidArgumentError(
        absl::StrCat("export: --to '", request.to,
                     "': expected hf:DIR (Hugging Face), llmc:FILE (llm.c) or, for LoRA "
                     "adapters, peft:DIR (PEFT)"));
  }
  // The destination must fit the checkpoint before any file is read.
  const bool lora = checkpoint.lora.enabled();
  if (!lora && (peft || request.merge_lora)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "export: ", checkpoint.path,
        " is of full training (no LoRA adapters): ", peft ? "--to peft:DIR" : "--merge-lora",
        " applies to LoRA checkpoints; export it with --to hf:DIR or llmc:FILE"));
  }
  if (request.merge_lora && !hf) {
    return absl::InvalidArgumentError(
        "export: --merge-lora writes the merged model as a Hugging Face directory: use "
        "--to hf:DIR (peft:DIR holds the adapters alone)");
  }
  if (lora && !peft && !request.merge_lora) {
    return absl::InvalidArgumentError(absl::StrCat(
        "export: ", checkpoint.path, " holds LoRA adapters (rank ", checkpoint.lora.rank,
        ") without their base: use --to peft:DIR for the adapters in PEFT's format, or "
        "--merge-lora with --to hf:DIR for the base with the adapters merged in"));
  }
  if (llmc && request.dtype != DType::kF32) {
    return absl::InvalidArgumentError(
        "export: --to llmc: writes llm.c's fp32 checkpoint (version 3); leave out --dtype");
  }
  // What the export reads, and what its training read, are inputs: no output goes over
  // them (the weights the checkpoint was trained from, a LoRA checkpoint's base).
  RETURN_IF_ERROR(NoteExportInputs(checkpoint));
  if (llmc) {
    RETURN_IF_ERROR(CheckWholeFileOutput(request.to.substr(5), "export: --to llmc: file"));
  }
  RETURN_IF_ERROR(VerifyCheckpointFiles(checkpoint, request.show_progress));
  if (llmc) return ExportLlmc(checkpoint, request.to.substr(5));
  // A directory output is staged (core/staged_directory.h): it changes only once every
  // file is written, so a failure or a signal part-way leaves it as it was.
  const std::string dir = request.to.substr(peft ? 5 : 3);
  ASSIGN_OR_RETURN(std::unique_ptr<StagedDirectory> staged,
                   StagedDirectory::Begin(dir, peft ? "export: --to peft: directory"
                                                    : "export: --to hf: directory"));
  const std::string& stage = staged->path();
  std::string written;
  if (peft) {
    ASSIGN_OR_RETURN(written, ExportPeft(checkpoint, stage, request));
  } else {
    ASSIGN_OR_RETURN(written, request.merge_lora ? ExportMerged(checkpoint, stage, request)
                                                 : ExportHf(checkpoint, stage, request));
    ASSIGN_OR_RETURN(const std::string tokenizer, CopyTokenizer(checkpoint, stage));
    written += tokenizer;
  }
  RETURN_IF_ERROR(staged->Commit().status());
  return absl::StrReplaceAll(written, {{stage, dir}});
}

}  // namespace strata
