// A checkpoint opened and verified: see checkpoint_open.h.
#include "checkpoint/checkpoint_open.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_files.h"
#include "checkpoint/checkpoint_format.h"
#include "checkpoint/checkpoint_layout.h"
#include "core/input_file.h"
#include "core/logging.h"
#include "core/pread_fully.h"
#include "core/progress.h"
#include "core/run_identity.h"
#include "core/strict_json.h"
#include "data/tokenizer/training_data.h"

namespace strata {
namespace {

// An integer field of checkpoint.json, strictly (core/strict_json.h): 4.99e36 or 3.5 where
// a count belongs throws, and the caller's catch names the file (a double cast to an
// integer it does not fit is undefined behaviour; nlohmann's get<T>() would do it).
template <typename T>
T Integer(const nlohmann::json& value) {
  StatusOr<T> integer = JsonInteger<T>(value);
  if (!integer.ok()) throw std::invalid_argument(std::string(integer.status().message()));
  return *integer;
}

}  // namespace

using checkpoint_internal::CheckFile;
using checkpoint_internal::kArrayNames;
using checkpoint_internal::kFormat;
using checkpoint_internal::kGenerationConfig;
using checkpoint_internal::kMomentDTypes;
using checkpoint_internal::kOldestVersion;
using checkpoint_internal::kSourceDir;
using checkpoint_internal::kTokenizerDir;
using checkpoint_internal::kVersion;
using checkpoint_internal::LoraTargetsOf;
using checkpoint_internal::MetaChecksum;
using checkpoint_internal::ModelJson;
using checkpoint_internal::MomentSliceCopies;
using checkpoint_internal::QuantizedBlocks;
using checkpoint_internal::RankFileName;
using checkpoint_internal::ReadBytes;
using checkpoint_internal::ResolveCheckpoint;
using checkpoint_internal::RunsOver;
using checkpoint_internal::SectionsOver;
using checkpoint_internal::StoredModelKey;

namespace {

// Version 6's "world", "files" and "units" (each array's dtype, block and scale fields, and
// its shards: which rank's file holds which elements, at which offset; version 8's 8-bit
// moments with their fp32 blocks), checked so that the reader never reads outside a file or
// leaves an element uncovered. Throws on a missing field or one of the wrong type (the
// caller names the file).
Status ParseShardedArrays(const nlohmann::json& meta, const std::string& meta_path,
                          const std::string& path, int version, OpenedCheckpoint* opened) {
  auto invalid = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint: ", meta_path, ": ", what));
  };
  opened->world = Integer<int>(meta.at("world"));
  const nlohmann::json& files = meta.at("files");
  if (opened->world < 1 || files.size() != static_cast<size_t>(opened->world)) {
    return invalid(absl::StrCat("\"world\" is ", opened->world, " but it lists ", files.size(),
                                " rank files"));
  }
  for (size_t r = 0; r < files.size(); ++r) {
    const nlohmann::json& entry = files[r];
    const std::string name = entry.at("name").get<std::string>();
    if (Integer<int>(entry.at("rank")) != static_cast<int>(r) || name != RankFileName(r)) {
      return invalid(absl::StrCat("rank file ", r, " is '", name, "' of rank ",
                                  entry.at("rank").dump(), " (expected ", RankFileName(r), ")"));
    }
    opened->files.push_back({path + "/" + name, Integer<uint64_t>(entry.at("bytes")),
                             entry.at("xxh3").get<std::string>(), static_cast<int>(r),
                             entry.at("host").get<std::string>()});
  }
  for (const nlohmann::json& entry : meta.at("units")) {
    OpenedCheckpoint::Unit unit;
    unit.name = entry.at("name").get<std::string>();
    unit.elements = Integer<size_t>(entry.at("elements"));
    const nlohmann::json& arrays = entry.at("arrays");
    if (arrays.size() != 3) {
      return invalid(absl::StrCat("unit ", unit.name, " has ", arrays.size(),
                                  " arrays (expected master, exp_avg, exp_avg_sq)"));
    }
    for (int k = 0; k < 3; ++k) {
      const nlohmann::json& array = arrays[k];
      const std::string name = array.at("name").get<std::string>();
      const std::string dtype = array.at("dtype").get<std::string>();
      const uint64_t block = Integer<uint64_t>(array.at("block"));
      if (name != kArrayNames[k]) {
        return invalid(absl::StrCat("unit ", unit.name, "'s array ", k, " is '", name,
                                    "' (expected ", kArrayNames[k], ")"));
      }
      const bool f32 = dtype == "f32" && block == 0 && array.at("scales").is_null();
      const bool eight_bit = k > 0 && version >= 8 && dtype == kMomentDTypes[k] &&
                             block == kAdamStateBlock && array.at("scales") == "f32";
      if (!f32 && !eight_bit) {
        return invalid(absl::StrCat(
            "unit ", unit.name, "'s ", name, " is of dtype ", dtype, " with blocks of ", block,
            " and scales ", array.at("scales").dump(),
            "; this strata reads f32 arrays without blocks or scales",
            k > 0
                ? absl::StrCat(", and (version 8 on) 8-bit ", name, " of dtype ", kMomentDTypes[k],
                               " with blocks of ", kAdamStateBlock, " and scales \"f32\"")
                : std::string()));
      }
      QuantizedBlocks& blocks = unit.blocks[k];
      if (eight_bit) {
        // Every block of the used elements 8-bit but those "fp32_blocks" lists, as
        // [first, end) ranges in order.
        const size_t count =
            unit.elements / kAdamStateBlock + (unit.elements % kAdamStateBlock != 0);
        blocks.eight_bit = true;
        size_t last_end = 0;
        for (const nlohmann::json& range : array.at("fp32_blocks")) {
          const size_t first = Integer<size_t>(range.at(0));
          const size_t end = Integer<size_t>(range.at(1));
          if (range.size() != 2 || first < last_end || first >= end || end > count) {
            return invalid(absl::StrCat("unit ", unit.name, "'s ", name, " lists fp32 blocks ",
                                        range.dump(),
                                        " (expected ordered [first, end) ranges "
                                        "within its ",
                                        count, " blocks)"));
          }
          blocks.fp32.push_back({first, end});
          last_end = end;
        }
      }
      size_t covered = 0;
      for (const nlohmann::json& shard : array.at("shards")) {
        OpenedCheckpoint::Piece piece;
        piece.file = Integer<int>(shard.at("rank"));
        piece.begin = Integer<size_t>(shard.at("begin"));
        piece.end = Integer<size_t>(shard.at("end"));
        piece.offset = Integer<uint64_t>(shard.at("offset"));
        // An 8-bit moment's shards start on a block and end on one or at the used end.
        const bool aligned =
            !eight_bit || (piece.begin % kAdamStateBlock == 0 &&
                           (piece.end % kAdamStateBlock == 0 || piece.end == unit.elements));
        piece.bytes = eight_bit && piece.end > piece.begin
                          ? SectionsOver(blocks, {piece.begin, piece.end}).bytes()
                          : (piece.end - piece.begin) * sizeof(float);
        if (piece.file < 0 || piece.file >= opened->world || piece.begin != covered ||
            piece.end <= piece.begin || piece.end > unit.elements || !aligned ||
            piece.offset + piece.bytes > opened->files[piece.file].bytes) {
          return invalid(absl::StrCat(
              "unit ", unit.name, "'s ", name, " has a shard of rank ", piece.file, " over [",
              piece.begin, ", ", piece.end, ") at byte ", piece.offset,
              " that does not continue its cover of [0, ", unit.elements, ")",
              eight_bit ? " on blocks of 2048 elements" : "", " or lies outside its file"));
        }
        covered = piece.end;
        unit.arrays[k].push_back(piece);
      }
      if (covered != unit.elements) {
        return invalid(absl::StrCat("unit ", unit.name, "'s ", name, " covers [0, ", covered,
                                    ") of its ", unit.elements, " elements"));
      }
    }
    opened->units.push_back(std::move(unit));
  }
  // Each rank file holds its pieces and nothing else: their bytes add up to its size (an
  // 8-bit array whose fp32 blocks were changed no longer does).
  std::vector<uint64_t> listed(opened->files.size(), 0);
  for (const OpenedCheckpoint::Unit& unit : opened->units) {
    for (const auto& pieces : unit.arrays) {
      for (const OpenedCheckpoint::Piece& piece : pieces) listed[piece.file] += piece.bytes;
    }
  }
  for (size_t r = 0; r < listed.size(); ++r) {
    if (listed[r] != opened->files[r].bytes) {
      return invalid(absl::StrCat("the arrays it lists in ", RankFileName(r), " add up to ",
                                  listed[r], " bytes, the file has ", opened->files[r].bytes,
                                  " (an array's size or fp32_blocks does not match the file)"));
    }
  }
  return absl::OkStatus();
}

// checkpoint.json parsed and checked (format, version, checksum): what OpenCheckpoint
// returns, and the stored model object for LoadCheckpoint's key-by-key comparison.
struct ParsedMeta {
  OpenedCheckpoint opened;
  nlohmann::json model;
};

StatusOr<ParsedMeta> ParseCheckpoint(const std::string& where) {
  ASSIGN_OR_RETURN(const std::string path, ResolveCheckpoint(where));
  const std::string meta_path = path + "/checkpoint.json";
  ASSIGN_OR_RETURN(std::vector<char> text, ReadBytes(meta_path));
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint: ", meta_path, " is not valid JSON: ", e.what()));
  }
  ParsedMeta parsed;
  OpenedCheckpoint& opened = parsed.opened;
  opened.path = path;
  try {
    if (!meta.is_object() || meta.value("format", "") != kFormat) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint: ", meta_path, " is not a strata checkpoint (no \"format\": \"",
                       kFormat, "\")"));
    }
    const int version = meta.value("version", 0);
    if (version < kOldestVersion || version > kVersion) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint: ", meta_path,
                                                     " is of format version ", version,
                                                     "; this strata reads "
                                                     "versions ",
                                                     kOldestVersion, " to ", kVersion));
    }
    if (version >= 2) {
      const std::string stored = meta.value("checksum", "");
      const std::string computed = MetaChecksum(meta);
      if (stored != computed) {
        return absl::DataLossError(absl::StrCat(
            "checkpoint: ", meta_path, " is corrupt: its checksum is ",
            stored.empty() ? std::string("missing") : stored, ", its contents hash to ", computed));
      }
    }
    parsed.model = meta.at("model");
    ModelOptions& model = opened.model;
    auto key = [&](const std::string& name) { return StoredModelKey(parsed.model, name); };
    const std::string family = key("family").get<std::string>();
    if (family != "gpt" && family != "llama") {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint: ", meta_path, " is of model family '", family, "'"));
    }
    model.family = family == "gpt" ? ModelFamily::kGpt : ModelFamily::kLlama;
    model.layers = Integer<int>(key("layers"));
    model.heads = Integer<int>(key("heads"));
    model.kv_heads = Integer<int>(key("kv_heads"));
    model.head_dim = Integer<int>(key("head_dim"));
    model.channels = Integer<int>(key("channels"));
    model.ffn_hidden = Integer<int>(key("ffn_hidden"));
    model.vocab = Integer<int>(key("vocab"));
    model.padded_vocab = Integer<int>(key("padded_vocab"));
    model.max_seq_len = Integer<int>(key("max_seq_len"));
    if (!key("rope_theta").is_null()) {
      model.rope.theta = std::stof(key("rope_theta").get<std::string>());
      model.norm_eps = std::stof(key("norm_eps").get<std::string>());
    }
    if (const nlohmann::json scaling = key("rope_scaling"); !scaling.is_null()) {
      // The type by the option's names (RopeScalingJson writes OptionName).
      const std::string type = scaling.at("type").get<std::string>();
      const auto& names = OptionNames<RopeScaling>::kNames;
      const auto found = std::find(names.begin(), names.end(), type);
      if (found == names.end() || found == names.begin()) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint: ", meta_path, " has a rope scaling of type '", type, "'"));
      }
      model.rope.scaling = static_cast<RopeScaling>(found - names.begin());
      model.rope.factor = std::stof(scaling.at("factor").get<std::string>());
      if (model.rope.scaling == RopeScaling::kLlama3) {
        model.rope.low_freq_factor = std::stof(scaling.at("low_freq_factor").get<std::string>());
        model.rope.high_freq_factor = std::stof(scaling.at("high_freq_factor").get<std::string>());
      }
      if (model.rope.scaling == RopeScaling::kLlama3 ||
          model.rope.scaling == RopeScaling::kDynamic) {
        model.rope.original_max_seq_len = Integer<int>(scaling.at("original_max_seq_len"));
      }
    }
    model.tie_embeddings = key("tie_embeddings").get<bool>();
    model.qkv_bias = key("qkv_bias").get<bool>();
    model.qk_norm = key("qk_norm").get<bool>();
    model.sliding_window = Integer<int>(key("sliding_window"));
    opened.next_step = Integer<int>(meta.at("next_step"));
    if (meta.contains("tokenizer")) opened.tokenizer = meta.at("tokenizer").get<std::string>();
    if (meta.contains("train_steps")) opened.train_steps = Integer<int>(meta.at("train_steps"));
    if (meta.contains("tokenizer_files")) {
      for (const nlohmann::json& entry : meta.at("tokenizer_files")) {
        const std::string name = entry.at("name").get<std::string>();
        if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
          return absl::InvalidArgumentError(absl::StrCat("checkpoint: ", meta_path,
                                                         " names a tokenizer file '", name,
                                                         "' outside its tokenizer directory"));
        }
        opened.tokenizer_files.push_back({absl::StrCat(path, "/", kTokenizerDir, "/", name),
                                          entry.at("xxh3").get<std::string>()});
      }
    }
    if (meta.contains("source")) {
      const nlohmann::json& source = meta.at("source");
      opened.source = source.at("from").get<std::string>();
      std::vector<std::string> problems;
      opened.source_tokens = SpecialTokensOf(source, meta_path + ": \"source\"", &problems);
      if (!problems.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("checkpoint: ", problems.front()));
      }
      for (const nlohmann::json& entry : source.value("files", nlohmann::json::array())) {
        const std::string name = entry.at("name").get<std::string>();
        if (name != kGenerationConfig) {
          return absl::InvalidArgumentError(absl::StrCat(
              "checkpoint: ", meta_path, " names a source file '", name, "' (expected ",
              kGenerationConfig, ")"));
        }
        opened.source_files.push_back({absl::StrCat(path, "/", kSourceDir, "/", name),
                                       entry.at("xxh3").get<std::string>()});
      }
    }
    if (meta.contains("lora")) {
      const nlohmann::json& lora = meta.at("lora");
      opened.lora.rank = Integer<int>(lora.at("rank"));
      opened.lora.alpha = std::stof(lora.at("alpha").get<std::string>());
      opened.lora.targets = lora.at("targets").get<std::string>();
      const nlohmann::json& base = meta.at("base");
      opened.base.from = base.at("from").get<std::string>();
      opened.base.seed = Integer<uint64_t>(base.at("seed"));
      opened.base.xxh3 = base.at("xxh3").get<std::string>();
      ASSIGN_OR_RETURN(opened.base.dtype, ParseDType(base.at("dtype").get<std::string>()));
      if (base.contains("base_dtype")) {  // version 7 on
        ASSIGN_OR_RETURN(opened.base.base_dtype,
                         ParseBaseDType(base.at("base_dtype").get<std::string>()));
      }
    }
    opened.version = version;
    if (version < 6) {
      // One file per unit: master, exp_avg, exp_avg_sq over its used elements.
      for (const nlohmann::json& entry : meta.at("units")) {
        OpenedCheckpoint::Unit unit;
        unit.name = entry.at("name").get<std::string>();
        unit.elements = Integer<size_t>(entry.at("elements"));
        const int file = static_cast<int>(opened.files.size());
        opened.files.push_back({path + "/" + entry.at("file").get<std::string>(),
                                3 * unit.elements * sizeof(float),
                                entry.at("xxh3").get<std::string>()});
        for (int k = 0; k < 3; ++k) {
          unit.arrays[k].push_back({file, 0, unit.elements, k * unit.elements * sizeof(float),
                                    unit.elements * sizeof(float)});
        }
        opened.units.push_back(std::move(unit));
      }
    } else {
      RETURN_IF_ERROR(ParseShardedArrays(meta, meta_path, path, version, &opened));
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint: ", meta_path, " lacks a field or has one of the wrong type: ", e.what()));
  }
  return parsed;
}

}  // namespace

StatusOr<OpenedCheckpoint> OpenCheckpoint(const std::string& where) {
  ASSIGN_OR_RETURN(ParsedMeta parsed, ParseCheckpoint(where));
  return std::move(parsed.opened);
}

namespace {

// File `index` of the checkpoint against its size and XXH3; a missing one is kNotFound
// naming it, and for a rank's file, the rank and host that wrote it and this host.
Status CheckCheckpointFile(const OpenedCheckpoint& checkpoint, int index, Progress* progress) {
  const OpenedCheckpoint::File& file = checkpoint.files[index];
  std::error_code error;
  if (!std::filesystem::exists(file.path, error)) {
    if (file.rank < 0) {
      return absl::NotFoundError(absl::StrCat("checkpoint: ", file.path, " is missing"));
    }
    return absl::NotFoundError(absl::StrCat(
        "checkpoint: ", file.path, " is missing on host ", HostName(), " (written by rank ",
        file.rank, " on host ", file.host,
        "): with node-local checkpoint directories each node holds only its own ranks' files; "
        "copy the file here, resume with the ranks on the hosts that wrote them, or gather the "
        "checkpoint into one directory (strata checkpoint consolidate)"));
  }
  return CheckFile(file.path, file.bytes, file.hash, progress);
}

}  // namespace

Status VerifyCheckpointFileList(const OpenedCheckpoint& checkpoint, const std::vector<int>& files,
                                bool show_progress, int* failed) {
  uint64_t bytes = 0;
  for (const int i : files) bytes += checkpoint.files[i].bytes;
  std::optional<Progress> verifying;
  if (show_progress) {
    const bool all = files.size() == checkpoint.files.size();
    verifying.emplace(absl::StrCat("verifying ", checkpoint.path,
                                   all ? std::string()
                                       : absl::StrCat(" (", files.size(), " of its ",
                                                      checkpoint.files.size(), " files)")),
                      bytes);
  }
  for (const int i : files) {
    Status status = CheckCheckpointFile(checkpoint, i, verifying ? &*verifying : nullptr);
    if (!status.ok()) {
      if (failed != nullptr) *failed = i;
      return status;
    }
  }
  return absl::OkStatus();
}

Status VerifyCheckpointFiles(const OpenedCheckpoint& checkpoint, bool show_progress, int rank,
                             int world, int* failed) {
  std::vector<int> files;
  for (size_t i = rank; i < checkpoint.files.size(); i += world) {
    files.push_back(static_cast<int>(i));
  }
  return VerifyCheckpointFileList(checkpoint, files, show_progress, failed);
}

std::vector<int> CheckpointFilesFor(const OpenedCheckpoint& checkpoint, int unit, size_t begin,
                                    size_t end) {
  std::vector<int> files;
  for (const auto& pieces : checkpoint.units[unit].arrays) {
    for (const OpenedCheckpoint::Piece& piece : pieces) {
      if (piece.begin < end && begin < piece.end) files.push_back(piece.file);
    }
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

namespace {

// `count` bytes at `offset` of the file of `piece`, pread into `out`.
Status PreadPiece(const OpenedCheckpoint& checkpoint, const OpenedCheckpoint::Piece& piece,
                  uint64_t offset, uint64_t count, void* out) {
  const OpenedCheckpoint::File& file = checkpoint.files[piece.file];
  if (!std::filesystem::exists(file.path)) {
    RETURN_IF_ERROR(CheckCheckpointFile(checkpoint, piece.file, nullptr));
  }
  ASSIGN_OR_RETURN(const InputFile in, InputFile::Open(file.path, "checkpoint: file"));
  return PreadFully(in.fd(), out, count, piece.offset + offset, "checkpoint: " + file.path);
}

Status CheckRange(const OpenedCheckpoint& checkpoint, int unit, size_t begin, size_t end) {
  const OpenedCheckpoint::Unit& entry = checkpoint.units[unit];
  if (end > entry.elements || end < begin) {
    return absl::OutOfRangeError(absl::StrCat("checkpoint: ", checkpoint.path, ": unit ",
                                              entry.name, " has ", entry.elements,
                                              " elements, asked for [", begin, ", ", end, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t CheckpointMoment8BitBytes(const OpenedCheckpoint& checkpoint, int unit, int array,
                                   size_t begin, size_t end) {
  return SectionsOver(checkpoint.units[unit].blocks[array], {begin, end}).bytes();
}

Status ReadCheckpointMoment8Bit(const OpenedCheckpoint& checkpoint, int unit, int array,
                                size_t begin, size_t end, uint8_t* out) {
  const OpenedCheckpoint::Unit& entry = checkpoint.units[unit];
  RETURN_IF_ERROR(CheckRange(checkpoint, unit, begin, end));
  if (!entry.eight_bit(array)) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint: ", checkpoint.path, ": unit ",
                                                      entry.name, "'s ", kArrayNames[array],
                                                      " is fp32, not 8-bit"));
  }
  if (begin % kAdamStateBlock != 0 || (end % kAdamStateBlock != 0 && end != entry.elements)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint: unit ", entry.name, "'s ", kArrayNames[array], ": [", begin, ", ",
                     end, ") is not on blocks of ", kAdamStateBlock, " elements"));
  }
  const QuantizedBlocks& blocks = entry.blocks[array];
  for (const OpenedCheckpoint::Piece& piece : entry.arrays[array]) {
    const size_t from = std::max(begin, piece.begin), to = std::min(end, piece.end);
    if (from >= to) continue;
    for (const checkpoint_internal::ByteCopy& copy :
         MomentSliceCopies(blocks, {piece.begin, piece.end}, {begin, end}, {from, to})) {
      if (copy.bytes == 0) continue;
      RETURN_IF_ERROR(PreadPiece(checkpoint, piece, copy.from, copy.bytes, out + copy.to));
    }
  }
  return absl::OkStatus();
}

Status ReadCheckpointArray(const OpenedCheckpoint& checkpoint, int unit, int array, size_t begin,
                           size_t count, float* out) {
  const OpenedCheckpoint::Unit& entry = checkpoint.units[unit];
  const size_t end = begin + count;
  RETURN_IF_ERROR(CheckRange(checkpoint, unit, begin, end));
  if (entry.eight_bit(array)) {
    // The blocks the range touches, read whole and dequantized.
    if (count == 0) return absl::OkStatus();
    const size_t first = begin / kAdamStateBlock * kAdamStateBlock;
    const size_t last =
        std::min(entry.elements, (end + kAdamStateBlock - 1) / kAdamStateBlock * kAdamStateBlock);
    std::vector<uint8_t> stored(CheckpointMoment8BitBytes(checkpoint, unit, array, first, last));
    RETURN_IF_ERROR(ReadCheckpointMoment8Bit(checkpoint, unit, array, first, last, stored.data()));
    std::vector<float> values(last - first);
    MomentToFp32(RunsOver(entry.blocks[array], {first, last}), /*is_signed=*/array == 1,
                 stored.data(), values.data());
    std::copy(values.begin() + (begin - first), values.begin() + (end - first), out);
    return absl::OkStatus();
  }
  for (const OpenedCheckpoint::Piece& piece : entry.arrays[array]) {
    const size_t from = std::max(begin, piece.begin), to = std::min(end, piece.end);
    if (from >= to) continue;
    RETURN_IF_ERROR(PreadPiece(checkpoint, piece, (from - piece.begin) * sizeof(float),
                               (to - from) * sizeof(float), out + (from - begin)));
  }
  return absl::OkStatus();
}

Status ReadCheckpointMaster(const OpenedCheckpoint& checkpoint, int unit, size_t begin,
                            size_t count, float* out) {
  return ReadCheckpointArray(checkpoint, unit, 0, begin, count, out);
}

StatusOr<OpenedCheckpoint> OpenCheckpointForRun(const Model& model, const Options& options,
                                                const std::string& where, const LoraBase* base,
                                                bool say) {
  ASSIGN_OR_RETURN(ParsedMeta parsed, ParseCheckpoint(where));
  const std::string& path = parsed.opened.path;
  // The units a checkpoint holds: the trainable ones (a LoRA run's adapters).
  std::vector<int> trainable;
  for (size_t u = 0; u < model.units().size(); ++u) {
    if (model.units()[u].trainable()) trainable.push_back(static_cast<int>(u));
  }
  std::vector<UnitLayout> units;
  for (int u : trainable) units.push_back(model.units()[u]);
  {
    const LoraOptions& stored = parsed.opened.lora;
    if (stored.rank != options.lora.rank) {
      return absl::InvalidArgumentError(
          stored.rank == 0
              ? absl::StrCat("checkpoint: ", path, " is of full training (no LoRA) but lora.rank=",
                             options.lora.rank, ": set lora.rank=0")
              : absl::StrCat("checkpoint: ", path, " holds LoRA adapters of rank ", stored.rank,
                             " but lora.rank=", options.lora.rank,
                             ": set lora.rank=", stored.rank));
    }
    if (stored.rank > 0) {
      if (absl::StrCat(stored.alpha) != absl::StrCat(options.lora.alpha)) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint: ", path, " has lora.alpha=", stored.alpha,
                         " but lora.alpha=", options.lora.alpha, ": set lora.alpha to match"));
      }
      if (stored.targets != LoraTargetsOf(model)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint: ", path, " has adapters on ", stored.targets, " but lora.targets gives ",
            LoraTargetsOf(model), ": set lora.targets=", stored.targets));
      }
      if (parsed.opened.base.base_dtype != options.lora.base_dtype) {
        const char* was = BaseDTypeName(parsed.opened.base.base_dtype);
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint: ", path, " holds adapters trained on a base stored as ", was,
            " but lora.base_dtype=", BaseDTypeName(options.lora.base_dtype),
            " (the adapters fit the base they were trained on): set lora.base_dtype=", was));
      }
      if (base == nullptr || base->xxh3 != parsed.opened.base.xxh3) {
        const LoraBase& was = parsed.opened.base;
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint: ", path, " holds adapters of another base model (trained on ",
            was.from.empty() ? absl::StrCat("random weights of seed ", was.seed) : was.from,
            ", params XXH3 ", was.xxh3, "; this run's base: ",
            base == nullptr
                ? std::string("none")
                : (base->from.empty() ? absl::StrCat("random weights of seed ", base->seed)
                                      : base->from),
            ", XXH3 ", base == nullptr ? "-" : base->xxh3,
            "): set model.from (or train.seed) to the checkpoint's base"));
      }
    }
  }
  const std::vector<OpenedCheckpoint::Unit>& files = parsed.opened.units;
  const int next_step = parsed.opened.next_step;
  {
    const nlohmann::json expected = ModelJson(options.model);
    for (const auto& [key, value] : expected.items()) {
      const nlohmann::json stored = StoredModelKey(parsed.model, key);
      if (stored.is_null() && options.model.family == ModelFamily::kGpt) continue;
      if (stored != value) {
        auto text = [](const nlohmann::json& v) {
          return v.is_string() ? v.get<std::string>() : v.dump();
        };
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint: ", path, " is of a model with ", key, "=", text(stored),
                         " but model.", key, "=", text(value), ": set model.", key, " to match"));
      }
    }
    if (files.size() != units.size()) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint: ", path, " has ", files.size(),
                                                     " units, the model ", units.size()));
    }
    for (size_t u = 0; u < units.size(); ++u) {
      const OpenedCheckpoint::Unit& entry = files[u];
      if (entry.name != units[u].name() || entry.elements != units[u].used_elements()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint: ", path, ": unit ", u, " is ", entry.name, " of ", entry.elements,
            " elements, the model's ", units[u].name(), " of ", units[u].used_elements()));
      }
    }
  }
  if (next_step < 0 || next_step >= options.train.steps) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint: ", path, " resumes at step ",
                                                   next_step, " but train.steps is ",
                                                   options.train.steps, ": raise train.steps"));
  }
  const OpenedCheckpoint& opened = parsed.opened;
  if (say && opened.train_steps > 0 && opened.train_steps != options.train.steps) {
    spdlog::warn(
        "resuming {}: its run had train.steps={}, this one has {}: the learning-rate schedule "
        "(warmup, then decay to the last step) differs from step {} on",
        path, opened.train_steps, options.train.steps, next_step + 1);
  }
  const std::string tokenizer = say ? TrainingTokenizer(options) : std::string();
  if (say && !opened.tokenizer.empty() && !tokenizer.empty() && opened.tokenizer != tokenizer) {
    spdlog::warn(
        "resuming {}: its text went through the tokenizer {}, this run's goes through {}: the "
        "model continues on other token ids (the same tokenizer at two paths is fine)",
        path, opened.tokenizer, tokenizer);
  }
  return std::move(parsed.opened);
}

}  // namespace strata
