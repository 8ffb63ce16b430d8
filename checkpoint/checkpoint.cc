// See checkpoint.h.
#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "collectives/agreement.h"
#include "core/files.h"
#include "core/logging.h"
#include "core/pread_fully.h"
#include "core/progress.h"
#include "data/tokenizer/tokenizer.h"
#include "models/create_model.h"

namespace strata {
namespace {

constexpr const char* kFormat = "strata-checkpoint";
// 2: checkpoint.json carries "checksum", the XXH3 of its own other fields; 1 (without it)
// still loads. 3: "units" are the trainable units only, and a LoRA run's checkpoint has
// "lora" {rank, alpha, targets} and "base" {from, seed, xxh3}. 4: "model" has
// "rope_scaling", "qkv_bias" and "sliding_window" (absent before: none, false, 0). 5:
// "model" has "head_dim" and "qk_norm" (absent before: channels / heads, false).
constexpr int kVersion = 5;
// What a rank tells the others of its share of a resume's file checks (else the index of
// the file that failed).
constexpr uint32_t kChecked = 0xffffffffu;
constexpr uint32_t kFailedBeforeFiles = 0xfffffffeu;
constexpr int kOldestVersion = 1;

Status Errno(int error, const std::string& what) {
  return ErrnoError(error, "checkpoint: " + what);
}

// The model's shape (resolved: no "0 = default" values), as checkpoint.json records it.
// rope_theta, norm_eps and the rope scaling's factors are written as text (shortest round
// trip) so that they compare exactly; rope_scaling is null for none.
nlohmann::json RopeScalingJson(const RopeSpec& rope) {
  if (rope.scaling == RopeScaling::kNone) return nullptr;
  nlohmann::json out = {{"type", OptionName(rope.scaling)}, {"factor", absl::StrCat(rope.factor)}};
  if (rope.scaling == RopeScaling::kLlama3) {
    out["low_freq_factor"] = absl::StrCat(rope.low_freq_factor);
    out["high_freq_factor"] = absl::StrCat(rope.high_freq_factor);
  }
  if (rope.scaling == RopeScaling::kLlama3 || rope.scaling == RopeScaling::kDynamic) {
    out["original_max_seq_len"] = rope.original_max_seq_len;
  }
  return out;
}

nlohmann::json ModelJson(const ModelOptions& options) {
  const ModelOptions model = ResolveModelOptions(options);
  return {{"family", OptionName(model.family)},
          {"layers", model.layers},
          {"heads", model.heads},
          {"kv_heads", model.kv_heads},
          {"head_dim", model.head_dim},
          {"channels", model.channels},
          {"ffn_hidden", model.ffn_hidden},
          {"vocab", model.vocab},
          {"padded_vocab", model.padded_vocab},
          {"max_seq_len", model.max_seq_len},
          {"rope_theta", absl::StrCat(model.rope.theta)},
          {"norm_eps", absl::StrCat(model.norm_eps)},
          {"rope_scaling", RopeScalingJson(model.rope)},
          {"qkv_bias", model.qkv_bias},
          {"qk_norm", model.qk_norm},
          {"sliding_window", model.sliding_window},
          {"tie_embeddings", model.tie_embeddings}};
}

// What a checkpoint written before a key existed stands for (only GPTs were written then):
// the key's value in a GPT of the stored shape.
nlohmann::json ModelKeyBeforeItExisted(const std::string& key, const nlohmann::json& stored) {
  if (key == "family") return "gpt";
  if (key == "kv_heads") return stored.value("heads", -1);
  if (key == "head_dim") {
    const int heads = stored.value("heads", 0);
    return heads > 0 ? stored.value("channels", -1) / heads : -1;
  }
  if (key == "ffn_hidden") return 4 * stored.value("channels", -1);
  if (key == "padded_vocab") return stored.value("vocab", -1);
  if (key == "tie_embeddings") return true;
  if (key == "qkv_bias") return false;
  if (key == "qk_norm") return false;
  if (key == "sliding_window") return 0;
  // rope_theta, norm_eps: a GPT does not use them; equal to any GPT's. rope_scaling: none.
  return nullptr;
}

// Key `key` of a checkpoint's "model" object, or what it stood for before it existed.
nlohmann::json StoredModelKey(const nlohmann::json& stored, const std::string& key) {
  return stored.contains(key) ? stored.at(key) : ModelKeyBeforeItExisted(key, stored);
}

// Writes the pieces, one after the other, to a new file at `path`, not synced (the kernel
// starts writing it back while the next unit is gathered; SyncPath at the end).
Status WriteFile(const std::string& path, const std::vector<std::pair<const char*, size_t>>& pieces) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Errno(errno, "cannot create " + path);
  for (const auto& [data, size] : pieces) {
    Status written = WriteAllBytes(fd, data, size, path);
    if (!written.ok()) {
      ::close(fd);
      return Annotate(written, "checkpoint");
    }
  }
  if (::close(fd) != 0) return Errno(errno, "closing " + path);
  return absl::OkStatus();
}

// Flushes the file (or directory) at `path` to the disk.
Status SyncFile(const std::string& path) { return Annotate(SyncPath(path), "checkpoint"); }

// The whole file into `bytes` (its capacity reused).
Status ReadBytesInto(const std::string& path, std::vector<char>* bytes) {
  return Annotate(ReadFileInto(path, bytes), "checkpoint");
}

StatusOr<std::vector<char>> ReadBytes(const std::string& path) {
  std::vector<char> bytes;
  RETURN_IF_ERROR(ReadBytesInto(path, &bytes));
  return bytes;
}

std::string Hex(uint64_t value) { return absl::StrFormat("%016x", value); }

// The directory inside a checkpoint that holds its tokenizer's files.
constexpr char kTokenizerDir[] = "tokenizer";

// Copies the files of the run's tokenizer `spec` (TokenizerFiles) into `dir`/tokenizer under
// their Hugging Face names and returns [{"name", "xxh3"}] for checkpoint.json: the
// checkpoint then samples and exports with no file outside it. A file no longer readable
// (moved while the run went on) leaves the checkpoint without a copy, said on stderr: the
// spec alone is recorded, as before strata copied.
StatusOr<nlohmann::json> CopyTokenizerFiles(const std::string& spec, const std::string& dir) {
  nlohmann::json entries = nlohmann::json::array();
  const std::vector<std::pair<std::string, std::string>> files = TokenizerFiles(spec);
  if (files.empty()) return entries;
  std::vector<std::vector<char>> contents;
  for (const auto& [source, name] : files) {
    StatusOr<std::vector<char>> bytes = ReadBytes(source);
    if (!bytes.ok()) {
      spdlog::warn(
          "checkpoint: the tokenizer's file {} is not readable ({}): the checkpoint "
          "records the tokenizer {} without a copy",
          source, std::string(bytes.status().message()), spec);
      return nlohmann::json::array();
    }
    contents.push_back(std::move(*bytes));
  }
  const std::string into = dir + "/" + kTokenizerDir;
  std::error_code error;
  std::filesystem::create_directory(into, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("checkpoint: cannot create ", into, ": ", error.message()));
  }
  for (size_t i = 0; i < files.size(); ++i) {
    const std::vector<char>& bytes = contents[i];
    RETURN_IF_ERROR(WriteFile(into + "/" + files[i].second, {{bytes.data(), bytes.size()}}));
    entries.push_back(
        {{"name", files[i].second}, {"xxh3", Hex(XXH3_64bits(bytes.data(), bytes.size()))}});
  }
  return entries;
}

// XXH3 of the metadata without its "checksum" field, over its compact dump (keys sorted).
std::string MetaChecksum(nlohmann::json meta) {
  meta.erase("checksum");
  const std::string text = meta.dump();
  return Hex(XXH3_64bits(text.data(), text.size()));
}

// The file at `path` has `bytes` bytes whose XXH3 is `hash` (hex), read in 16 MiB pieces.
Status CheckFile(const std::string& path, uint64_t bytes, const std::string& hash,
                 Progress* progress) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Errno(errno, "cannot open " + path);
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  std::vector<char> piece(16 << 20);
  uint64_t total = 0;
  while (in) {
    in.read(piece.data(), static_cast<std::streamsize>(piece.size()));
    const std::streamsize got = in.gcount();
    if (got <= 0) break;
    XXH3_64bits_update(state, piece.data(), static_cast<size_t>(got));
    total += static_cast<uint64_t>(got);
    if (progress != nullptr) progress->Advance(static_cast<uint64_t>(got));
  }
  const std::string found = Hex(XXH3_64bits_digest(state));
  XXH3_freeState(state);
  if (in.bad()) return Errno(errno, "reading " + path);
  if (total != bytes) {
    return absl::DataLossError(absl::StrCat("checkpoint: ", path, " has ", total,
                                            " bytes, expected ", bytes));
  }
  if (found != hash) {
    return absl::DataLossError(absl::StrCat("checkpoint: ", path, ": checksum mismatch (XXH3 ",
                                            found, ", checkpoint.json says ", hash, ")"));
  }
  return absl::OkStatus();
}

// The complete step-<k> directories under `dir` (with a checkpoint.json; no .partial),
// oldest first.
std::vector<std::pair<int, std::filesystem::path>> ListCheckpoints(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::pair<int, fs::path>> found;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    int step = 0;
    size_t used = 0;
    if (name.rfind("step-", 0) != 0) continue;
    try {
      step = std::stoi(name.substr(5), &used);
    } catch (const std::exception&) {
      continue;
    }
    if (used != name.size() - 5 || !fs::exists(entry.path() / "checkpoint.json")) continue;
    found.emplace_back(step, entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

// `path` itself when it holds a checkpoint.json, else its newest complete step-<k>.
StatusOr<std::string> ResolveCheckpoint(const std::string& path) {
  if (std::filesystem::exists(path + "/checkpoint.json")) return path;
  const auto found = ListCheckpoints(path);
  if (found.empty()) {
    return absl::NotFoundError(absl::StrCat("checkpoint: no checkpoint at ", path, " (neither ",
                                            path, "/checkpoint.json nor a step-<k> directory "
                                            "holding one)"));
  }
  return found.back().second.string();
}

}  // namespace

Status CheckRoomForCheckpoint(const std::string& dir, uint64_t bytes) {
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) return Errno(errno, "statvfs of " + dir);
  const uint64_t free_bytes = uint64_t{fs.f_bavail} * fs.f_frsize;
  if (bytes > free_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "checkpoint: ", dir, " has ", free_bytes, " bytes free, a checkpoint needs ", bytes,
        ": free space there or set train.checkpoint_dir elsewhere"));
  }
  return absl::OkStatus();
}

std::string LatestCheckpoint(const std::string& dir) {
  const auto found = ListCheckpoints(dir);
  return found.empty() ? std::string() : found.back().second.string();
}

uint64_t CheckpointBytes(const Model& model) {
  uint64_t bytes = 1 << 20;  // checkpoint.json and slack
  for (const UnitLayout& unit : model.units()) {
    if (unit.trainable()) bytes += 3 * unit.used_elements() * 4;
  }
  return bytes;
}

std::vector<std::string> RemovePartialCheckpoints(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> removed;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0 || name.size() < 8 ||
        name.substr(name.size() - 8) != ".partial" || !entry.is_directory(error)) {
      continue;
    }
    std::error_code removing;
    fs::remove_all(entry.path(), removing);
    if (!removing) removed.push_back(entry.path().string());
  }
  return removed;
}

// The fault suite's fault, if it is due after unit `unit` of the checkpoint of `next_step`.
Status CheckpointFaultPoint(const CheckpointFault* fault, int next_step, size_t unit) {
  if (fault == nullptr || fault->step != next_step || fault->unit != static_cast<int>(unit)) {
    return absl::OkStatus();
  }
  if (fault->action == CheckpointFault::Action::kKill) ::raise(SIGKILL);
  return Errno(ENOSPC, absl::StrCat("writing unit-", unit, ".bin"));
}

// The adapters' targets (strata names, in layout order) from the first trainable unit's
// "<target>.lora_A" tensors.
std::string LoraTargetsOf(const Model& model) {
  std::vector<std::string> targets;
  for (const UnitLayout& unit : model.units()) {
    if (!unit.trainable()) continue;
    for (const TensorSpec& tensor : unit.tensors()) {
      if (absl::EndsWith(tensor.name, ".lora_A")) {
        targets.push_back(tensor.name.substr(0, tensor.name.size() - 7));
      }
    }
    break;
  }
  return absl::StrJoin(targets, ",");
}

BaseHasher::BaseHasher() : state_(XXH3_createState(), [](XXH3_state_s* s) { XXH3_freeState(s); }) {
  XXH3_64bits_reset(state_.get());
}

void BaseHasher::Add(const float* values, size_t count) {
  XXH3_64bits_update(state_.get(), values, count * sizeof(float));
}

std::string BaseHasher::Hex() const { return strata::Hex(XXH3_64bits_digest(state_.get())); }

StatusOr<std::string> BaseHash(Engine& engine, const Model& model) {
  BaseHasher hasher;
  const std::vector<UnitLayout>& units = model.units();
  for (size_t u = 0; u < units.size(); ++u) {
    if (units[u].trainable()) continue;
    ASSIGN_OR_RETURN(const std::vector<float> params, engine.state().ReadParams(static_cast<int>(u)));
    hasher.Add(params.data(), units[u].used_elements());
  }
  return hasher.Hex();
}

StatusOr<std::optional<CheckpointFault>> ParseCheckpointFault(const std::string& text) {
  if (text.empty()) return std::optional<CheckpointFault>();
  const size_t at = text.find('@');
  const size_t colon = text.find(':', at == std::string::npos ? 0 : at);
  CheckpointFault fault;
  const std::string action = text.substr(0, at);
  if (at == std::string::npos || colon == std::string::npos ||
      !absl::SimpleAtoi(text.substr(at + 1, colon - at - 1), &fault.step) ||
      !absl::SimpleAtoi(text.substr(colon + 1), &fault.unit) ||
      (action != "kill" && action != "enospc")) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "': expected kill|enospc@STEP:UNIT"));
  }
  fault.action = action == "kill" ? CheckpointFault::Action::kKill
                                  : CheckpointFault::Action::kEnospc;
  return std::optional<CheckpointFault>(fault);
}

StatusOr<std::string> SaveCheckpoint(Engine& engine, const Model& model, const Options& options,
                                     int next_step, bool write, const LoraBase* base,
                                     const std::string& tokenizer,
                                     const CheckpointFault* fault) {
  namespace fs = std::filesystem;
  const fs::path dir = options.train.checkpoint_dir;
  const fs::path final_dir = dir / absl::StrCat("step-", next_step);
  const fs::path partial = dir / absl::StrCat("step-", next_step, ".partial");
  std::error_code error;
  // A checkpoint that fails half-way (a full disk, an I/O error) leaves nothing behind.
  struct PartialGuard {
    fs::path path;
    bool armed = false;
    ~PartialGuard() {
      std::error_code ignored;
      if (armed) fs::remove_all(path, ignored);
    }
  } guard{partial};
  if (write) {
    fs::create_directories(dir, error);
    if (error) return absl::InternalError(absl::StrCat("checkpoint: cannot create ",
                                                       dir.string(), ": ", error.message()));
    // Room for every unit's three fp32 arrays before anything is written (a leftover
    // partial directory of the same step goes first).
    fs::remove_all(partial, error);
    uint64_t tokenizer_bytes = 0;  // the copy of its files
    for (const auto& file : TokenizerFiles(tokenizer)) {
      const uintmax_t size = fs::file_size(file.first, error);
      if (!error) tokenizer_bytes += size;  // else said when the copy is tried
    }
    RETURN_IF_ERROR(CheckRoomForCheckpoint(dir.string(), CheckpointBytes(model) + tokenizer_bytes));
    fs::create_directory(partial, error);
    if (error) return absl::InternalError(absl::StrCat("checkpoint: cannot create ",
                                                       partial.string(), ": ", error.message()));
    guard.armed = true;
  }
  nlohmann::json meta = {{"format", kFormat},
                         {"version", kVersion},
                         {"next_step", next_step},
                         {"model", ModelJson(options.model)},
                         {"units", nlohmann::json::array()}};
  if (!tokenizer.empty()) meta["tokenizer"] = tokenizer;
  if (write && !tokenizer.empty()) {
    ASSIGN_OR_RETURN(nlohmann::json copied, CopyTokenizerFiles(tokenizer, partial.string()));
    if (!copied.empty()) meta["tokenizer_files"] = std::move(copied);
  }
  if (options.lora.enabled()) {
    if (base == nullptr) return absl::InternalError("checkpoint: a LoRA run without its base");
    meta["lora"] = {{"rank", options.lora.rank},
                    {"alpha", absl::StrCat(options.lora.alpha)},
                    {"targets", LoraTargetsOf(model)}};
    meta["base"] = {{"from", base->from},
                    {"seed", base->seed},
                    {"dtype", DTypeName(base->dtype)},
                    {"xxh3", base->xxh3}};
  }
  const std::vector<UnitLayout>& units = model.units();
  std::optional<Progress> progress;
  if (write) progress.emplace(absl::StrCat("checkpoint step-", next_step), CheckpointBytes(model));
  UnitOptimizerState state;  // reused from unit to unit
  for (size_t u = 0; u < units.size(); ++u) {
    if (!units[u].trainable()) continue;  // a LoRA base: referred to by its hash
    // Collective: every rank reads (gathers) the unit; rank 0 writes it.
    RETURN_IF_ERROR(engine.state().ReadOptimizerState(static_cast<int>(u), &state));
    if (!write) continue;
    const size_t n = units[u].used_elements();
    std::vector<std::pair<const char*, size_t>> pieces;
    XXH3_state_t* hash = XXH3_createState();
    XXH3_64bits_reset(hash);
    for (const std::vector<float>* array : {&state.master, &state.exp_avg, &state.exp_avg_sq}) {
      pieces.push_back({reinterpret_cast<const char*>(array->data()), n * sizeof(float)});
      XXH3_64bits_update(hash, array->data(), n * sizeof(float));
    }
    const std::string digest = Hex(XXH3_64bits_digest(hash));
    XXH3_freeState(hash);
    const std::string file = absl::StrCat("unit-", u, ".bin");
    RETURN_IF_ERROR(WriteFile((partial / file).string(), pieces));
    RETURN_IF_ERROR(CheckpointFaultPoint(fault, next_step, u));
    progress->Advance(3 * n * sizeof(float));
    meta["units"].push_back(
        {{"name", units[u].name()}, {"elements", n}, {"file", file}, {"xxh3", digest}});
  }
  if (!write) return final_dir.string();
  meta["checksum"] = MetaChecksum(meta);
  const std::string text = meta.dump(2) + "\n";
  RETURN_IF_ERROR(
      WriteFile((partial / "checkpoint.json").string(), {{text.data(), text.size()}}));
  // Every file (and the tokenizer's directory) on the disk before the rename makes the
  // checkpoint visible.
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(partial, error)) {
    RETURN_IF_ERROR(SyncFile(entry.path().string()));
  }
  if (error) return absl::InternalError(absl::StrCat("checkpoint: cannot list ",
                                                     partial.string(), ": ", error.message()));
  RETURN_IF_ERROR(SyncFile(partial.string()));  // its entries
  fs::remove_all(final_dir, error);
  if (error) return absl::InternalError(absl::StrCat("checkpoint: cannot replace ",
                                                     final_dir.string(), ": ", error.message()));
  fs::rename(partial, final_dir, error);
  if (error) return absl::InternalError(absl::StrCat("checkpoint: cannot rename ",
                                                     partial.string(), ": ", error.message()));
  guard.armed = false;
  // The rename itself is durable once the directory is synced (best effort: the
  // checkpoint is complete either way).
  SyncFile(dir.string()).IgnoreError();
  const int keep = options.train.checkpoint_keep;
  if (keep > 0) {
    const auto found = ListCheckpoints(dir.string());
    for (size_t i = 0; i + keep < found.size(); ++i) {
      if (found[i].second == final_dir) continue;
      fs::remove_all(found[i].second, error);
      if (error) return absl::InternalError(absl::StrCat("checkpoint: cannot remove ",
                                                         found[i].second.string(), ": ",
                                                         error.message()));
    }
  }
  return final_dir.string();
}

namespace {

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
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint: ", meta_path, " is of format version ", version, "; this strata reads "
          "versions ", kOldestVersion, " to ", kVersion));
    }
    if (version >= 2) {
      const std::string stored = meta.value("checksum", "");
      const std::string computed = MetaChecksum(meta);
      if (stored != computed) {
        return absl::DataLossError(absl::StrCat(
            "checkpoint: ", meta_path, " is corrupt: its checksum is ",
            stored.empty() ? std::string("missing") : stored, ", its contents hash to ",
            computed));
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
    model.layers = key("layers").get<int>();
    model.heads = key("heads").get<int>();
    model.kv_heads = key("kv_heads").get<int>();
    model.head_dim = key("head_dim").get<int>();
    model.channels = key("channels").get<int>();
    model.ffn_hidden = key("ffn_hidden").get<int>();
    model.vocab = key("vocab").get<int>();
    model.padded_vocab = key("padded_vocab").get<int>();
    model.max_seq_len = key("max_seq_len").get<int>();
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
        model.rope.original_max_seq_len = scaling.at("original_max_seq_len").get<int>();
      }
    }
    model.tie_embeddings = key("tie_embeddings").get<bool>();
    model.qkv_bias = key("qkv_bias").get<bool>();
    model.qk_norm = key("qk_norm").get<bool>();
    model.sliding_window = key("sliding_window").get<int>();
    opened.next_step = meta.at("next_step").get<int>();
    if (meta.contains("tokenizer")) opened.tokenizer = meta.at("tokenizer").get<std::string>();
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
    if (meta.contains("lora")) {
      const nlohmann::json& lora = meta.at("lora");
      opened.lora.rank = lora.at("rank").get<int>();
      opened.lora.alpha = std::stof(lora.at("alpha").get<std::string>());
      opened.lora.targets = lora.at("targets").get<std::string>();
      const nlohmann::json& base = meta.at("base");
      opened.base.from = base.at("from").get<std::string>();
      opened.base.seed = base.at("seed").get<uint64_t>();
      opened.base.xxh3 = base.at("xxh3").get<std::string>();
      ASSIGN_OR_RETURN(opened.base.dtype, ParseDType(base.at("dtype").get<std::string>()));
    }
    for (const nlohmann::json& entry : meta.at("units")) {
      opened.units.push_back({entry.at("name").get<std::string>(),
                              path + "/" + entry.at("file").get<std::string>(),
                              entry.at("elements").get<size_t>(),
                              entry.at("xxh3").get<std::string>()});
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint: ", meta_path, " lacks a field or has one of the wrong type: ",
                     e.what()));
  }
  return parsed;
}

}  // namespace

StatusOr<OpenedCheckpoint> OpenCheckpoint(const std::string& where) {
  ASSIGN_OR_RETURN(ParsedMeta parsed, ParseCheckpoint(where));
  return std::move(parsed.opened);
}

StatusOr<std::string> CheckpointTokenizer(const OpenedCheckpoint& checkpoint) {
  if (checkpoint.tokenizer_files.empty()) return checkpoint.tokenizer;
  for (const auto& [file, hash] : checkpoint.tokenizer_files) {
    ASSIGN_OR_RETURN(const std::vector<char> bytes, ReadBytes(file));
    const std::string found = Hex(XXH3_64bits(bytes.data(), bytes.size()));
    if (found != hash) {
      return absl::DataLossError(absl::StrCat("checkpoint: the tokenizer file ", file, " has XXH3 ",
                                              found, ", checkpoint.json says ", hash,
                                              " (corrupt or replaced)"));
    }
  }
  return absl::StrCat("hf:", checkpoint.path, "/", kTokenizerDir);
}

Status VerifyCheckpointFiles(const OpenedCheckpoint& checkpoint, bool show_progress, int rank,
                             int world, int* failed) {
  const size_t count = checkpoint.units.size();
  uint64_t checkpoint_bytes = 0;
  for (size_t i = rank; i < count; i += world) {
    checkpoint_bytes += 3 * checkpoint.units[i].elements * 4;
  }
  std::optional<Progress> verifying;
  if (show_progress) {
    verifying.emplace(absl::StrCat("verifying ", checkpoint.path,
                                   world > 1 ? absl::StrCat(" (1/", world, " of its files)") : ""),
                      checkpoint_bytes);
  }
  for (size_t i = rank; i < count; i += world) {
    const OpenedCheckpoint::Unit& unit = checkpoint.units[i];
    Status status =
        CheckFile(unit.file, 3 * unit.elements * 4, unit.hash, verifying ? &*verifying : nullptr);
    if (!status.ok()) {
      if (failed != nullptr) *failed = static_cast<int>(i);
      return status;
    }
  }
  return absl::OkStatus();
}

namespace {

// Elements [begin, begin + count) of array `array` (0 master, 1 exp_avg, 2 exp_avg_sq) of a
// unit file (pread).
Status ReadUnitArray(const OpenedCheckpoint::Unit& entry, int array, size_t begin, size_t count,
                     float* out) {
  if (begin + count > entry.elements) {
    return absl::OutOfRangeError(absl::StrCat("checkpoint: ", entry.file, " has ",
                                              entry.elements, " elements, asked for [", begin,
                                              ", ", begin + count, ")"));
  }
  const int fd = ::open(entry.file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno(errno, "cannot open " + entry.file);
  Status read =
      PreadFully(fd, out, count * sizeof(float), (array * entry.elements + begin) * sizeof(float),
                 "checkpoint: " + entry.file);
  ::close(fd);
  return read;
}

}  // namespace

Status ReadCheckpointMaster(const OpenedCheckpoint& checkpoint, int unit, size_t begin,
                            size_t count, float* out) {
  return ReadUnitArray(checkpoint.units[unit], 0, begin, count, out);
}

namespace {

// The checkpoint at `where` checked against the run (model shape, LoRA and its base, units,
// the step), before its files are.
StatusOr<ParsedMeta> OpenForRun(const Model& model, const Options& options,
                                const std::string& where, const LoraBase* base) {
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
                             " but lora.rank=", options.lora.rank, ": set lora.rank=",
                             stored.rank));
    }
    if (stored.rank > 0) {
      if (absl::StrCat(stored.alpha) != absl::StrCat(options.lora.alpha)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint: ", path, " has lora.alpha=", stored.alpha, " but lora.alpha=",
            options.lora.alpha, ": set lora.alpha to match"));
      }
      if (stored.targets != LoraTargetsOf(model)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint: ", path, " has adapters on ", stored.targets, " but lora.targets gives ",
            LoraTargetsOf(model), ": set lora.targets=", stored.targets));
      }
      if (base == nullptr || base->xxh3 != parsed.opened.base.xxh3) {
        const LoraBase& was = parsed.opened.base;
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint: ", path, " holds adapters of another base model (trained on ",
            was.from.empty() ? absl::StrCat("random weights of seed ", was.seed) : was.from,
            ", params XXH3 ", was.xxh3, "; this run's base: ",
            base == nullptr ? std::string("none")
                            : (base->from.empty() ? absl::StrCat("random weights of seed ",
                                                                 base->seed)
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
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint: ", path, " is of a model with ", key, "=", text(stored), " but model.",
            key, "=", text(value), ": set model.", key, " to match"));
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
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint: ", path, " resumes at step ", next_step, " but train.steps is ",
        options.train.steps, ": raise train.steps"));
  }
  return parsed;
}

}  // namespace

StatusOr<LoadedCheckpoint> LoadCheckpoint(Engine& engine, const Model& model,
                                          const Options& options, const std::string& where,
                                          bool show_progress, const LoraBase* base,
                                          Communicator* agree) {
  // Every check before any state changes: the metadata against the run, then the files
  // (streamed: host memory holds one unit, whatever the model), each rank its share, and
  // every rank learns whether any failed.
  const int world = agree != nullptr ? agree->world_size() : 1;
  const int rank = agree != nullptr ? agree->rank() : 0;
  StatusOr<ParsedMeta> opened = OpenForRun(model, options, where, base);
  int failed_file = -1;
  Status checked = opened.status();
  if (checked.ok()) {
    checked = VerifyCheckpointFiles(opened->opened, show_progress, rank, world, &failed_file);
  }
  if (world > 1) {
    const uint32_t code = checked.ok()       ? kChecked
                          : failed_file >= 0 ? static_cast<uint32_t>(failed_file)
                                             : kFailedBeforeFiles;
    ASSIGN_OR_RETURN(const std::vector<uint32_t> codes, AgreeOnOutcomes(*agree, code));
    RETURN_IF_ERROR(checked);  // this rank's own error
    for (int r = 0; r < world; ++r) {
      if (codes[r] == kChecked) continue;
      if (codes[r] == kFailedBeforeFiles || codes[r] >= opened->opened.units.size()) {
        return absl::FailedPreconditionError(absl::StrCat("checkpoint: rank ", r, " could not use ",
                                                          opened->opened.path,
                                                          " (its own error says why)"));
      }
      // The same error as that rank's, from this rank's own look at the file.
      const OpenedCheckpoint::Unit& file = opened->opened.units[codes[r]];
      RETURN_IF_ERROR(CheckFile(file.file, 3 * file.elements * 4, file.hash, nullptr));
      return absl::DataLossError(absl::StrCat("checkpoint: ", file.file,
                                              " failed its check on rank ", r, " but not on rank ",
                                              rank, ": do the ranks see different files?"));
    }
  }
  RETURN_IF_ERROR(checked);
  ParsedMeta& parsed = *opened;
  const std::string& path = parsed.opened.path;
  std::vector<int> trainable;
  for (size_t u = 0; u < model.units().size(); ++u) {
    if (model.units()[u].trainable()) trainable.push_back(static_cast<int>(u));
  }
  const std::vector<OpenedCheckpoint::Unit>& files = parsed.opened.units;
  const int next_step = parsed.opened.next_step;
  uint64_t checkpoint_bytes = 0;
  for (const OpenedCheckpoint::Unit& file : files) checkpoint_bytes += 3 * file.elements * 4;
  std::optional<Progress> loading;
  if (show_progress) loading.emplace(absl::StrCat("resuming from ", path), checkpoint_bytes);
  // Buffers reused from unit to unit: fresh pages per unit cost more than the copies.
  std::vector<char> bytes;
  UnitOptimizerState state;
  for (size_t u = 0; u < files.size(); ++u) {
    const size_t n = files[u].elements;
    const auto [begin, end] = engine.state().StoredRange(trainable[u]);
    if (begin > 0 || end < n) {
      // This rank stores a shard (stage 3 on several ranks): only its part of each array
      // is read, zero past the used elements.
      const size_t part = end - begin, used = begin < n ? std::min(end, n) - begin : 0;
      std::vector<float>* arrays[] = {&state.master, &state.exp_avg, &state.exp_avg_sq};
      for (int k = 0; k < 3; ++k) {
        arrays[k]->assign(part, 0.0f);
        if (used > 0) RETURN_IF_ERROR(ReadUnitArray(files[u], k, begin, used, arrays[k]->data()));
      }
      RETURN_IF_ERROR(engine.state().WriteStoredState(trainable[u], state.master.data(),
                                              state.exp_avg.data(), state.exp_avg_sq.data()));
      if (loading) loading->Advance(3 * n * sizeof(float));
      continue;
    }
    RETURN_IF_ERROR(ReadBytesInto(files[u].file, &bytes));
    if (bytes.size() != 3 * n * sizeof(float) ||
        Hex(XXH3_64bits(bytes.data(), bytes.size())) != files[u].hash) {
      return absl::DataLossError(absl::StrCat("checkpoint: ", files[u].file, " changed while "
                                              "it was being loaded"));
    }
    size_t offset = 0;
    const size_t padded = engine.state().PaddedElements(trainable[u]);
    for (std::vector<float>* array : {&state.master, &state.exp_avg, &state.exp_avg_sq}) {
      array->resize(padded);
      std::memcpy(array->data(), bytes.data() + offset, n * sizeof(float));
      std::fill(array->begin() + static_cast<ptrdiff_t>(n), array->end(), 0.0f);
      offset += n * sizeof(float);
    }
    RETURN_IF_ERROR(engine.state().WriteOptimizerState(trainable[u], state));
    if (loading) loading->Advance(bytes.size());
  }
  return LoadedCheckpoint{next_step, path};
}

}  // namespace strata
