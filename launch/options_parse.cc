// Config parsing and validation; see options_parse.h. Everything is driven by one table
// (Keys()): each entry names a key, points at its field of Options and documents it; the
// field's type picks the parser. Problems are collected into a list instead of returning
// early, so one status names all of them. nlohmann exceptions are caught here and never
// leave this file. Thread-safety: the tables are immutable function-local statics.
#include "launch/options_parse.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <system_error>
#include <variant>

#include "absl/strings/str_join.h"
#include "core/memory.h"
#include "runtime/placement.h"

namespace strata {
namespace {

using Json = nlohmann::json;

// A key with a few named values: a field of one of options.h's enums (or DType), read and
// written as the index of its name in OptionNames.
struct EnumField {
  std::vector<std::string> names;
  std::function<int(const Options&)> get;
  std::function<void(Options&, int)> set;
};

template <typename E>
EnumField Enum(E* (*field)(Options&)) {
  EnumField out;
  for (const char* name : OptionNames<E>::kNames) out.names.push_back(name);
  out.get = [field](const Options& options) {
    return static_cast<int>(*field(const_cast<Options&>(options)));
  };
  out.set = [field](Options& options, int value) { *field(options) = static_cast<E>(value); };
  return out;
}

// "a, b or c".
std::string OneOf(const std::vector<std::string>& names) {
  if (names.size() == 1) return names[0];
  std::vector<std::string> head(names.begin(), names.end() - 1);
  return absl::StrCat(absl::StrJoin(head, ", "), " or ", names.back());
}

// An accessor to one field of Options; the alternative's type picks the parser.
using Field = std::variant<int* (*)(Options&), float* (*)(Options&), double* (*)(Options&),
                           uint64_t* (*)(Options&), std::string* (*)(Options&), EnumField>;

struct KeySpec {
  const char* name;  // "section.key"
  Field field;
  const char* doc;
  bool is_size;  // a uint64 byte count: "2GiB" or a number of bytes
};

// The one list of keys. Defaults are not written here: they come from Options{}.
const std::vector<KeySpec>& Keys() {
  static const auto* keys = new std::vector<KeySpec>{
      {"model.preset", +[](Options& o) { return &o.model.preset; },
       "named model size, applied before every other key; the model.* keys below override "
       "it.",
       false},
      {"model.layers", +[](Options& o) { return &o.model.layers; },
       "transformer blocks (units 1..L); >= 1.", false},
      {"model.heads", +[](Options& o) { return &o.model.heads; },
       "attention heads; >= 1 and must divide model.channels.", false},
      {"model.channels", +[](Options& o) { return &o.model.channels; }, "embedding width C; >= 1.",
       false},
      {"model.vocab", +[](Options& o) { return &o.model.vocab; },
       "vocabulary size; token ids must be < vocab; >= 1.", false},
      {"model.max_seq_len", +[](Options& o) { return &o.model.max_seq_len; },
       "rows of the position embedding; >= train.seq_len.", false},
      {"data.path", +[](Options& o) { return &o.data.path; },
       "text file (byte-level tokens) or llm.c token file; empty = the embedded corpus.", false},
      {"data.val_fraction", +[](Options& o) { return &o.data.val_fraction; },
       "tail of the tokens held out for validation; in (0, 1).", false},
      {"train.steps", +[](Options& o) { return &o.train.steps; }, "optimizer steps to run; >= 1.",
       false},
      {"train.micro_batch", +[](Options& o) { return &o.train.micro_batch; },
       "sequences per micro-batch per rank (B); >= 1.", false},
      {"train.seq_len", +[](Options& o) { return &o.train.seq_len; },
       "tokens per sequence (T); in [1, model.max_seq_len].", false},
      {"train.grad_accum", +[](Options& o) { return &o.train.grad_accum; },
       "micro-batches per optimizer step; >= 1.", false},
      {"train.dtype", Enum(+[](Options& o) { return &o.train.dtype; }),
       "compute/storage dtype of params and activations: fp32 | bf16.", false},
      {"train.lr", +[](Options& o) { return &o.train.lr; }, "peak learning rate after warmup; > 0.",
       false},
      {"train.min_lr_fraction", +[](Options& o) { return &o.train.min_lr_fraction; },
       "cosine schedule decays to lr * this; in [0, 1].", false},
      {"train.warmup_steps", +[](Options& o) { return &o.train.warmup_steps; },
       "linear warmup steps; >= 0.", false},
      {"train.weight_decay", +[](Options& o) { return &o.train.weight_decay; },
       "AdamW decay on matrices (not biases/norms); >= 0.", false},
      {"train.beta1", +[](Options& o) { return &o.train.beta1; },
       "Adam first-moment decay; in [0, 1).", false},
      {"train.beta2", +[](Options& o) { return &o.train.beta2; },
       "Adam second-moment decay; in [0, 1).", false},
      {"train.eps", +[](Options& o) { return &o.train.eps; }, "Adam epsilon; > 0.", false},
      {"train.grad_clip", +[](Options& o) { return &o.train.grad_clip; },
       "global-norm gradient clip; 0 disables; >= 0.", false},
      {"train.seed", +[](Options& o) { return &o.train.seed; },
       "seed of parameter init and batch order; unsigned 64-bit.", false},
      {"train.eval_every", +[](Options& o) { return &o.train.eval_every; },
       "validation loss every N steps; 0 = never; >= 0.", false},
      {"train.eval_batches", +[](Options& o) { return &o.train.eval_batches; },
       "micro-batches per validation; >= 1.", false},
      {"train.log_every", +[](Options& o) { return &o.train.log_every; },
       "progress line every N steps; >= 1.", false},
      {"train.recompute", Enum(+[](Options& o) { return &o.train.recompute; }),
       "activation recompute: none | blocks (each block keeps only its output and runs its "
       "forward again during the backward: less activation memory, ~1/3 more compute).",
       false},
      {"train.checkpoint_dir", +[](Options& o) { return &o.train.checkpoint_dir; },
       "directory of checkpoints (<dir>/step-<k>: fp32 master and Adam moments of every "
       "unit, independent of stage, placement and world size).", false},
      {"train.checkpoint_every", +[](Options& o) { return &o.train.checkpoint_every; },
       "write a checkpoint after every N steps (and after the last); 0 = never; >= 0.",
       false},
      {"train.checkpoint_keep", +[](Options& o) { return &o.train.checkpoint_keep; },
       "keep only the newest N checkpoints in train.checkpoint_dir; 0 = all; >= 0.", false},
      {"train.resume", +[](Options& o) { return &o.train.resume; },
       "a checkpoint (<dir>/step-<k>) to resume from, at step k, or a checkpoint_dir (its "
       "newest); \"\" = start fresh.", false},
      {"device.backend", Enum(+[](Options& o) { return &o.device.backend; }),
       "compute backend: cpu | cuda (one GPU per local rank; needs a CUDA build).", false},
      {"device.memory_limit", +[](Options& o) { return &o.device.memory_limit; },
       "device-tier capacity: bytes or a size like 512MiB, 2GiB; > 0.", true},
      {"device.threads", +[](Options& o) { return &o.device.threads; },
       "CPU kernel threads; 0 = all cores; >= 0.", false},
      {"zero.stage", +[](Options& o) { return &o.zero.stage; },
       "ZeRO stage: 0 replicated, 1 optimizer sharded, 2 + gradients, 3 + parameters.", false},
      {"zero.world", +[](Options& o) { return &o.zero.world; },
       "ranks as threads of this process; under mpirun 1 or mpirun's -np; in [1, 64].", false},
      {"zero.comm_timeout_s", +[](Options& o) { return &o.zero.comm_timeout_s; },
       "a collective waiting longer than this fails naming the missing ranks; > 0.", false},
      {"zero.prefetch_bytes", +[](Options& o) { return &o.zero.prefetch_bytes; },
       "stage 3: bytes of gathered parameters fetched ahead of need; >= 0.", true},
      {"zero.optimizer_tier", Enum(+[](Options& o) { return &o.zero.optimizer_tier; }),
       "where fp32 master + Adam moments live: device | host | nvme (host, nvme: CPU Adam, "
       "need zero.stage >= 1).",
       false},
      {"zero.grad_tier", Enum(+[](Options& o) { return &o.zero.grad_tier; }),
       "where the fp32 gradient shards are summed: device | host | nvme (host needs the "
       "optimizer on host or nvme; nvme needs it on nvme and zero.stage 2 or 3).",
       false},
      {"zero.param_tier", Enum(+[](Options& o) { return &o.zero.param_tier; }),
       "stage 3: where param shards live between uses: device | host | nvme (host needs the "
       "optimizer on host or nvme, nvme needs it on nvme).",
       false},
      {"zero.param_update", Enum(+[](Options& o) { return &o.zero.param_update; }),
       "exact | delayed: delayed runs each step's CPU Adam during the next step's forward "
       "and backward (one-step delayed parameter update of ZeRO-Offload: gradients are "
       "computed on params one update old); needs optimizer_tier=host, grad_tier=host, "
       "param_tier=device.",
       false},
      {"zero.nvme_dir", +[](Options& o) { return &o.zero.nvme_dir; },
       "directory of the swap files when a tier is nvme (O_DIRECT-capable, not tmpfs).",
       false},
      {"tiers.host_memory_limit", +[](Options& o) { return &o.tiers.host_memory_limit; },
       "host-tier capacity per rank (pinned with CUDA): a size like 16GiB; 0 = physical "
       "memory / ranks of this process.",
       true},
      {"nvme.engine", Enum(+[](Options& o) { return &o.nvme.engine; }),
       "I/O engine of the nvme tier: auto (io_uring, else pread) | io_uring | pread.", false},
      {"nvme.read_ahead_units", +[](Options& o) { return &o.nvme.read_ahead_units; },
       "param_tier=nvme: param shards read ahead of their gather (host buffers); >= 1.",
       false},
      {"nvme.optimizer_buffers", +[](Options& o) { return &o.nvme.optimizer_buffers; },
       "optimizer_tier=nvme: host buffers (each one chunk's master, m, v, grads, params) "
       "the read -> AdamW -> write-back pipeline runs through; >= 2.",
       false},
      {"nvme.grad_buffers", +[](Options& o) { return &o.nvme.grad_buffers; },
       "grad_tier=nvme: host buffer pairs (one chunk's fp32 sum + landing) the gradient sums "
       "run through; a unit of more chunks writes its early sums out; >= 2.",
       false},
      {"nvme.queue_depth", +[](Options& o) { return &o.nvme.queue_depth; },
       "I/O requests in flight per rank; in [1, 4096].", false},
      {"nvme.chunk_bytes", +[](Options& o) { return &o.nvme.chunk_bytes; },
       "grain of the nvme optimizer pipeline (fp32 bytes per state array and chunk); a "
       "multiple of 8KiB.",
       true},
  };
  return *keys;
}

struct Preset {
  const char* name;
  int layers, heads, channels, vocab, max_seq_len;
};
constexpr Preset kPresets[] = {
    {"tiny", 2, 2, 64, 256, 64},
    {"small", 4, 4, 256, 50304, 256},
    {"gpt2-124m", 12, 12, 768, 50304, 1024},
    {"gpt2-1.5b", 48, 25, 1600, 50304, 1024},  // GPT-2 XL; the GPU benchmark's big model
};

const Preset* FindPreset(const std::string& name) {
  for (const Preset& preset : kPresets) {
    if (name == preset.name) return &preset;
  }
  return nullptr;
}

std::string PresetList() {
  std::vector<std::string> names = ModelPresetNames();
  return absl::StrJoin(names, ", ");
}

const KeySpec* FindKey(const std::string& name) {
  for (const KeySpec& spec : Keys()) {
    if (name == spec.name) return &spec;
  }
  return nullptr;
}

std::string SectionOf(const std::string& name) { return name.substr(0, name.find('.')); }

std::string KeyPartOf(const std::string& name) {
  size_t dot = name.find('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

std::vector<std::string> Sections() {
  std::vector<std::string> sections;
  for (const KeySpec& spec : Keys()) {
    std::string section = SectionOf(spec.name);
    if (std::find(sections.begin(), sections.end(), section) == sections.end()) {
      sections.push_back(section);
    }
  }
  return sections;
}

bool IsSection(const std::string& name) {
  std::vector<std::string> sections = Sections();
  return std::find(sections.begin(), sections.end(), name) != sections.end();
}

// Optimal string alignment distance: edits, deletions, insertions and adjacent swaps.
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// The candidate closest to `name` if it is a plausible typo of it, else "".
std::string Closest(const std::string& name, const std::vector<std::string>& candidates) {
  size_t threshold = std::max<size_t>(1, std::min<size_t>(3, name.size() / 4));
  std::string best;
  size_t best_distance = threshold + 1;
  for (const std::string& candidate : candidates) {
    size_t distance = EditDistance(name, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

// A known key that `name` ("section.key" or a bare "key") most likely meant, or "".
std::string SuggestKey(const std::string& name) {
  // The key exists in another section (or the section was left out): suggest it there.
  std::string key_part = KeyPartOf(name);
  for (const KeySpec& spec : Keys()) {
    if (KeyPartOf(spec.name) == key_part) return spec.name;
  }
  std::vector<std::string> names = ConfigKeys();
  return Closest(name, names);
}

std::string UnknownKeyProblem(const std::string& name) {
  std::string suggestion = SuggestKey(name);
  std::string hint = suggestion.empty() ? "" : absl::StrCat(" (did you mean ", suggestion, "?)");
  std::string section = SectionOf(name);
  if (!IsSection(section)) {
    return absl::StrCat(name, ": unknown section '", section, "' (expected one of ",
                        absl::StrJoin(Sections(), ", "), ")", hint);
  }
  return absl::StrCat(name, ": unknown key", hint);
}

std::string UnknownSectionProblem(const std::string& section) {
  std::string hint;
  std::string suggestion = Closest(section, Sections());
  if (!suggestion.empty()) {
    hint = absl::StrCat(" (did you mean ", suggestion, "?)");
  } else {
    // A key written at top level instead of inside its section.
    for (const KeySpec& spec : Keys()) {
      if (KeyPartOf(spec.name) == section) {
        hint = absl::StrCat(" (did you mean ", spec.name, "? keys go inside their section: {\"",
                            SectionOf(spec.name), "\": {\"", section, "\": ...}})");
        break;
      }
    }
  }
  return absl::StrCat(section, ": unknown section (expected one of ",
                      absl::StrJoin(Sections(), ", "), ")", hint);
}

// Parses all of `text` as a number of type T (no leading '+', no whitespace).
template <typename T>
bool ParseWhole(const std::string& text, T* out) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  T value{};
  auto [ptr, error] = std::from_chars(begin, end, value);
  if (text.empty() || error != std::errc() || ptr != end) return false;
  *out = value;
  return true;
}

template <typename T>
std::string NumberText(T value) {
  char buffer[64];
  auto [ptr, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  if (error != std::errc()) return "?";
  return std::string(buffer, ptr);
}

// Sizes are written exactly, in the largest binary unit that divides them ("8GiB").
std::string SizeText(uint64_t bytes) {
  static const char* kUnits[] = {"TiB", "GiB", "MiB", "KiB"};
  for (int i = 0; i < 4; ++i) {
    uint64_t unit = 1ull << (10 * (4 - i));
    if (bytes != 0 && bytes % unit == 0) return absl::StrCat(bytes / unit, kUnits[i]);
  }
  return absl::StrCat(bytes);
}

// A JSON value for messages: its text (shortened) and its type.
std::string JsonText(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return absl::StrCat(text, " (", value.type_name(), ")");
}

constexpr const char* kIntExpected = "an integer in [-2147483648, 2147483647]";
constexpr const char* kFloatExpected = "a finite number (fp32 range)";
constexpr const char* kDoubleExpected = "a finite number";
constexpr const char* kSeedExpected = "an unsigned 64-bit integer";
constexpr const char* kSizeExpected =
    "a size: a byte count or a string like \"4096\", \"512MiB\", \"2GiB\"";

// Stores the --set text `text` into the key's field. Returns "" or the problem (no key).
std::string SetFromText(const KeySpec& spec, const std::string& text, Options& options) {
  std::string got = absl::StrCat("got '", text, "', expected ");
  if (auto* field = std::get_if<int* (*)(Options&)>(&spec.field)) {
    int value;
    if (!ParseWhole(text, &value)) return got + kIntExpected;
    *(*field)(options) = value;
  } else if (auto* field = std::get_if<float* (*)(Options&)>(&spec.field)) {
    float value;
    if (!ParseWhole(text, &value) || !std::isfinite(value)) return got + kFloatExpected;
    *(*field)(options) = value;
  } else if (auto* field = std::get_if<double* (*)(Options&)>(&spec.field)) {
    double value;
    if (!ParseWhole(text, &value) || !std::isfinite(value)) return got + kDoubleExpected;
    *(*field)(options) = value;
  } else if (auto* field = std::get_if<uint64_t* (*)(Options&)>(&spec.field)) {
    uint64_t value;
    if (spec.is_size) {
      StatusOr<uint64_t> bytes = ParseBytes(text);
      if (!bytes.ok()) return got + kSizeExpected;
      value = *bytes;
    } else if (!ParseWhole(text, &value)) {
      return got + kSeedExpected;
    }
    *(*field)(options) = value;
  } else if (auto* field = std::get_if<std::string* (*)(Options&)>(&spec.field)) {
    *(*field)(options) = text;
  } else if (auto* field = std::get_if<EnumField>(&spec.field)) {
    const auto it = std::find(field->names.begin(), field->names.end(), text);
    if (it == field->names.end()) return got + OneOf(field->names);
    field->set(options, static_cast<int>(it - field->names.begin()));
  }
  return "";
}

// Stores the JSON value into the key's field. Returns "" or the problem (no key).
std::string SetFromJson(const KeySpec& spec, const Json& value, Options& options) {
  std::string got = absl::StrCat("got ", JsonText(value), ", expected ");
  if (auto* field = std::get_if<int* (*)(Options&)>(&spec.field)) {
    if (!value.is_number_integer()) return got + kIntExpected;
    bool fits = value.is_number_unsigned()
                    ? value.get<uint64_t>() <= uint64_t{std::numeric_limits<int>::max()}
                    : value.get<int64_t>() >= std::numeric_limits<int>::min() &&
                          value.get<int64_t>() <= std::numeric_limits<int>::max();
    if (!fits) return got + kIntExpected;
    *(*field)(options) = static_cast<int>(value.get<int64_t>());
  } else if (auto* field = std::get_if<float* (*)(Options&)>(&spec.field)) {
    if (!value.is_number()) return got + kFloatExpected;
    double number = value.get<double>();
    if (!std::isfinite(number) || std::fabs(number) > std::numeric_limits<float>::max()) {
      return got + kFloatExpected;
    }
    *(*field)(options) = static_cast<float>(number);
  } else if (auto* field = std::get_if<double* (*)(Options&)>(&spec.field)) {
    if (!value.is_number() || !std::isfinite(value.get<double>())) return got + kDoubleExpected;
    *(*field)(options) = value.get<double>();
  } else if (auto* field = std::get_if<uint64_t* (*)(Options&)>(&spec.field)) {
    if (spec.is_size) {
      if (value.is_number_unsigned()) {
        *(*field)(options) = value.get<uint64_t>();
      } else if (value.is_string()) {
        StatusOr<uint64_t> bytes = ParseBytes(value.get<std::string>());
        if (!bytes.ok()) return got + kSizeExpected;
        *(*field)(options) = *bytes;
      } else {
        return got + kSizeExpected;
      }
    } else {
      if (!value.is_number_unsigned()) return got + kSeedExpected;
      *(*field)(options) = value.get<uint64_t>();
    }
  } else if (auto* field = std::get_if<std::string* (*)(Options&)>(&spec.field)) {
    if (!value.is_string()) return got + "a string";
    *(*field)(options) = value.get<std::string>();
  } else if (auto* field = std::get_if<EnumField>(&spec.field)) {
    if (!value.is_string()) return got + "a string: " + OneOf(field->names);
    return SetFromText(spec, value.get<std::string>(), options).empty()
               ? ""
               : got + OneOf(field->names);
  }
  return "";
}

// The key's value in --set syntax (shortest text that parses back to the same value).
std::string ValueText(const KeySpec& spec, const Options& options) {
  Options& mutable_options = const_cast<Options&>(options);  // accessors only read here
  if (auto* field = std::get_if<int* (*)(Options&)>(&spec.field)) {
    return NumberText(*(*field)(mutable_options));
  } else if (auto* field = std::get_if<float* (*)(Options&)>(&spec.field)) {
    return NumberText(*(*field)(mutable_options));
  } else if (auto* field = std::get_if<double* (*)(Options&)>(&spec.field)) {
    return NumberText(*(*field)(mutable_options));
  } else if (auto* field = std::get_if<uint64_t* (*)(Options&)>(&spec.field)) {
    uint64_t value = *(*field)(mutable_options);
    return spec.is_size ? SizeText(value) : NumberText(value);
  } else if (auto* field = std::get_if<std::string* (*)(Options&)>(&spec.field)) {
    return *(*field)(mutable_options);
  } else if (auto* field = std::get_if<EnumField>(&spec.field)) {
    return field->names[field->get(options)];
  }
  return "?";
}

std::string TypeName(const KeySpec& spec) {
  if (std::holds_alternative<int* (*)(Options&)>(spec.field)) return "int";
  if (std::holds_alternative<float* (*)(Options&)>(spec.field)) return "float";
  if (std::holds_alternative<double* (*)(Options&)>(spec.field)) return "float";
  if (std::holds_alternative<uint64_t* (*)(Options&)>(spec.field)) {
    return spec.is_size ? "size" : "uint64";
  }
  if (auto* field = std::get_if<EnumField>(&spec.field)) return absl::StrJoin(field->names, "|");
  return "string";
}

// Reads and parses the JSON file. On failure appends a problem naming the file and returns
// nullopt.
std::optional<Json> LoadJsonFile(const std::string& path, std::vector<std::string>* problems) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    problems->push_back(
        absl::StrCat("config file '", path, "': cannot open: ", std::strerror(errno)));
    return std::nullopt;
  }
  std::string text;
  char buffer[1 << 14];
  size_t count;
  while ((count = std::fread(buffer, 1, sizeof(buffer), file)) > 0) text.append(buffer, count);
  bool read_failed = std::ferror(file) != 0;
  int read_errno = errno;
  std::fclose(file);
  if (read_failed) {
    problems->push_back(
        absl::StrCat("config file '", path, "': cannot read: ", std::strerror(read_errno)));
    return std::nullopt;
  }
  try {
    return Json::parse(text);
  } catch (const Json::exception& error) {
    // what() is "[json.exception.parse_error.101] parse error at line L, column C: ...".
    std::string message = error.what();
    size_t bracket = message.find("] ");
    if (message.rfind("[json.exception", 0) == 0 && bracket != std::string::npos) {
      message = message.substr(bracket + 2);
    }
    problems->push_back(absl::StrCat("config file '", path, "': invalid JSON: ", message));
  } catch (const std::exception& error) {
    problems->push_back(absl::StrCat("config file '", path, "': invalid JSON: ", error.what()));
  }
  return std::nullopt;
}

// Applies every key of the parsed file except a string model.preset (applied earlier).
void ApplyJson(const Json& root, const std::string& path, Options& options,
               std::vector<std::string>* problems) {
  std::string from = absl::StrCat(" [in ", path, "]");
  if (!root.is_object()) {
    problems->push_back(absl::StrCat("config file '", path, "': got ", JsonText(root),
                                     ", expected an object of sections like "
                                     "{\"train\": {\"steps\": 10}}"));
    return;
  }
  for (const auto& [section, body] : root.items()) {
    if (!IsSection(section)) {
      problems->push_back(UnknownSectionProblem(section) + from);
      continue;
    }
    if (!body.is_object()) {
      problems->push_back(absl::StrCat(section, ": got ", JsonText(body),
                                       ", expected an object of keys like {\"key\": value}", from));
      continue;
    }
    for (const auto& [key, value] : body.items()) {
      std::string name = absl::StrCat(section, ".", key);
      const KeySpec* spec = FindKey(name);
      if (spec == nullptr) {
        problems->push_back(UnknownKeyProblem(name) + from);
        continue;
      }
      if (name == "model.preset" && value.is_string()) continue;
      std::string problem = SetFromJson(*spec, value, options);
      if (!problem.empty()) problems->push_back(absl::StrCat(name, ": ", problem, from));
    }
  }
}

struct Override {
  const KeySpec* spec;
  std::string value;
  std::string raw;  // the whole --set argument, for messages
};

// Splits "section.key=value" and finds the key; on failure appends a problem.
std::optional<Override> SplitSet(const std::string& raw, std::vector<std::string>* problems) {
  size_t equals = raw.find('=');
  if (equals == std::string::npos) {
    problems->push_back(
        absl::StrCat("--set '", raw, "': expected section.key=value (missing '=')"));
    return std::nullopt;
  }
  std::string name = raw.substr(0, equals);
  if (name.find('.') == std::string::npos) {
    std::string suggestion = SuggestKey(name);
    problems->push_back(absl::StrCat(
        "--set '", raw, "': expected section.key=value (key '", name, "' has no section",
        suggestion.empty() ? "" : absl::StrCat("; did you mean ", suggestion, "?"), ")"));
    return std::nullopt;
  }
  const KeySpec* spec = FindKey(name);
  if (spec == nullptr) {
    problems->push_back(absl::StrCat(UnknownKeyProblem(name), " [in --set ", raw, "]"));
    return std::nullopt;
  }
  return Override{spec, raw.substr(equals + 1), raw};
}

std::string FormatProblems(const std::vector<std::string>& problems) {
  return absl::StrCat("invalid configuration (", problems.size(),
                      problems.size() == 1 ? " problem" : " problems", "):\n  ",
                      absl::StrJoin(problems, "\n  "));
}

// Range and cross-field checks; each failure names the key, the value and what is expected.
void CheckOptions(const Options& options, std::vector<std::string>* problems) {
  auto expect = [problems](bool ok, const char* key, const std::string& got,
                           const std::string& expected) {
    if (!ok) problems->push_back(absl::StrCat(key, ": got ", got, ", expected ", expected));
  };
  auto at_least = [&expect](const char* key, int value, int min) {
    expect(value >= min, key, NumberText(value), absl::StrCat(">= ", min));
  };
  const ModelOptions& model = options.model;
  if (FindPreset(model.preset) == nullptr) {
    expect(false, "model.preset", absl::StrCat("'", model.preset, "'"),
           absl::StrCat("one of ", PresetList()));
  }
  at_least("model.layers", model.layers, 1);
  at_least("model.heads", model.heads, 1);
  at_least("model.channels", model.channels, 1);
  at_least("model.vocab", model.vocab, 1);
  at_least("model.max_seq_len", model.max_seq_len, 1);
  if (model.heads >= 1 && model.channels >= 1) {
    expect(model.channels % model.heads == 0, "model.channels", NumberText(model.channels),
           absl::StrCat("a multiple of model.heads (", model.heads, ")"));
  }

  const DataOptions& data = options.data;
  expect(data.val_fraction > 0 && data.val_fraction < 1, "data.val_fraction",
         NumberText(data.val_fraction), "a fraction in (0, 1)");

  const TrainOptions& train = options.train;
  at_least("train.steps", train.steps, 1);
  at_least("train.micro_batch", train.micro_batch, 1);
  at_least("train.seq_len", train.seq_len, 1);
  if (train.seq_len >= 1) {
    expect(train.seq_len <= model.max_seq_len, "train.seq_len", NumberText(train.seq_len),
           absl::StrCat("<= model.max_seq_len (", model.max_seq_len, ")"));
  }
  at_least("train.grad_accum", train.grad_accum, 1);
  expect(train.lr > 0, "train.lr", NumberText(train.lr), "> 0");
  expect(train.min_lr_fraction >= 0 && train.min_lr_fraction <= 1, "train.min_lr_fraction",
         NumberText(train.min_lr_fraction), "a fraction in [0, 1]");
  at_least("train.warmup_steps", train.warmup_steps, 0);
  expect(train.weight_decay >= 0, "train.weight_decay", NumberText(train.weight_decay), ">= 0");
  expect(train.beta1 >= 0 && train.beta1 < 1, "train.beta1", NumberText(train.beta1),
         "a value in [0, 1)");
  expect(train.beta2 >= 0 && train.beta2 < 1, "train.beta2", NumberText(train.beta2),
         "a value in [0, 1)");
  expect(train.eps > 0, "train.eps", NumberText(train.eps), "> 0");
  expect(train.grad_clip >= 0, "train.grad_clip", NumberText(train.grad_clip),
         ">= 0 (0 disables clipping)");
  at_least("train.eval_every", train.eval_every, 0);
  at_least("train.eval_batches", train.eval_batches, 1);
  at_least("train.log_every", train.log_every, 1);
  at_least("train.checkpoint_every", train.checkpoint_every, 0);
  at_least("train.checkpoint_keep", train.checkpoint_keep, 0);
  if (train.checkpoint_every > 0 && train.checkpoint_dir.empty()) {
    problems->push_back("train.checkpoint_every is set but train.checkpoint_dir is empty: set "
                        "train.checkpoint_dir to a directory");
  }

  const DeviceOptions& device = options.device;
  expect(device.memory_limit > 0, "device.memory_limit", SizeText(device.memory_limit),
         "a size > 0");
  at_least("device.threads", device.threads, 0);

  const ZeroOptions& zero = options.zero;
  expect(zero.stage >= 0 && zero.stage <= 3, "zero.stage", NumberText(zero.stage),
         "0, 1, 2 or 3");
  expect(zero.world >= 1 && zero.world <= 64, "zero.world", NumberText(zero.world),
         "a rank count in [1, 64]");
  expect(zero.comm_timeout_s > 0, "zero.comm_timeout_s", NumberText(zero.comm_timeout_s),
         "> 0 seconds");

  // Which placements can run together: the rules live with the placement's resolution.
  for (std::string& problem : PlacementProblems(options)) problems->push_back(std::move(problem));
  const NvmeOptions& nvme = options.nvme;
  at_least("nvme.read_ahead_units", nvme.read_ahead_units, 1);
  at_least("nvme.optimizer_buffers", nvme.optimizer_buffers, 2);
  at_least("nvme.grad_buffers", nvme.grad_buffers, 2);
  expect(nvme.queue_depth >= 1 && nvme.queue_depth <= 4096, "nvme.queue_depth",
         NumberText(nvme.queue_depth), "a depth in [1, 4096]");
  expect(nvme.chunk_bytes >= 8192 && nvme.chunk_bytes % 8192 == 0, "nvme.chunk_bytes",
         SizeText(nvme.chunk_bytes), "a multiple of 8 KiB (8192 bytes)");
}

}  // namespace

std::vector<std::string> ConfigKeys() {
  std::vector<std::string> names;
  for (const KeySpec& spec : Keys()) names.push_back(spec.name);
  return names;
}

std::vector<std::string> ModelPresetNames() {
  std::vector<std::string> names;
  for (const Preset& preset : kPresets) names.push_back(preset.name);
  return names;
}

StatusOr<Options> ParseOptions(const std::string& config_json_path,
                               const std::vector<std::string>& sets) {
  std::vector<std::string> problems;
  std::optional<Json> file;
  if (!config_json_path.empty()) file = LoadJsonFile(config_json_path, &problems);

  std::vector<Override> overrides;
  for (const std::string& raw : sets) {
    if (std::optional<Override> override_entry = SplitSet(raw, &problems)) {
      overrides.push_back(*override_entry);
    }
  }

  // The preset goes first, wherever it is given; a --set beats the file, the last --set wins.
  Options options;
  std::optional<std::string> preset;
  if (file && file->is_object()) {
    auto model = file->find("model");
    if (model != file->end() && model->is_object()) {
      auto preset_value = model->find("preset");
      if (preset_value != model->end() && preset_value->is_string()) {
        preset = preset_value->get<std::string>();
      }
    }
  }
  for (const Override& override_entry : overrides) {
    if (std::string(override_entry.spec->name) == "model.preset") preset = override_entry.value;
  }
  if (preset) {
    options.model.preset = *preset;  // an unknown name is reported by CheckOptions
    if (const Preset* found = FindPreset(*preset)) {
      options.model.layers = found->layers;
      options.model.heads = found->heads;
      options.model.channels = found->channels;
      options.model.vocab = found->vocab;
      options.model.max_seq_len = found->max_seq_len;
    }
  }

  if (file) {
    try {
      ApplyJson(*file, config_json_path, options, &problems);
    } catch (const std::exception& error) {  // not expected: every access is type-checked
      problems.push_back(absl::StrCat("config file '", config_json_path, "': ", error.what()));
    }
  }

  for (const Override& override_entry : overrides) {
    if (std::string(override_entry.spec->name) == "model.preset") continue;
    std::string problem = SetFromText(*override_entry.spec, override_entry.value, options);
    if (!problem.empty()) {
      problems.push_back(absl::StrCat(override_entry.spec->name, ": ", problem, " [in --set ",
                                      override_entry.raw, "]"));
    }
  }

  // Cross-field checks only make sense on the merged result.
  CheckOptions(options, &problems);
  if (!problems.empty()) return absl::InvalidArgumentError(FormatProblems(problems));
  return options;
}

Status ValidateOptions(const Options& options) {
  std::vector<std::string> problems;
  CheckOptions(options, &problems);
  if (!problems.empty()) return absl::InvalidArgumentError(FormatProblems(problems));
  return absl::OkStatus();
}

std::string DescribeKeys() {
  const Options defaults;
  std::string out =
      "strata configuration keys. Give them in a JSON file nested by section, e.g.\n"
      "  {\"model\": {\"preset\": \"tiny\"}, \"train\": {\"steps\": 10}}\n"
      "or as --set section.key=value. Order: defaults, model.preset, the file's other keys,\n"
      "then each --set in order. Unknown keys are errors.\n";
  std::string section;
  for (const KeySpec& spec : Keys()) {
    if (SectionOf(spec.name) != section) {
      section = SectionOf(spec.name);
      absl::StrAppend(&out, "\n[", section, "]\n");
    }
    std::string value = ValueText(spec, defaults);
    if (TypeName(spec) == "string") value = absl::StrCat("\"", value, "\"");
    absl::StrAppend(&out, "  ", spec.name, " (", TypeName(spec), ", default ", value, ")\n",
                    "      ", spec.doc, "\n");
    if (std::string(spec.name) == "model.preset") {
      for (const Preset& preset : kPresets) {
        absl::StrAppend(&out, "      ", preset.name, ": layers ", preset.layers, ", heads ",
                        preset.heads, ", channels ", preset.channels, ", vocab ", preset.vocab,
                        ", max_seq_len ", preset.max_seq_len, "\n");
      }
    }
  }
  return out;
}

std::string FormatResolved(const Options& options) {
  std::string out;
  for (const KeySpec& spec : Keys()) {
    absl::StrAppend(&out, spec.name, "=", ValueText(spec, options), "\n");
  }
  return out;
}

}  // namespace strata
