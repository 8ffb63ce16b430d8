// See llmc_model.h.
#include "interop/llmc_model.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/input_file.h"
#include "absl/strings/str_join.h"
#include "core/finite.h"
#include "core/atomic_file.h"
#include "core/pread_fully.h"
#include "core/progress.h"
#include "models/create_model.h"
#include "models/llmc/llmc_header.h"

namespace strata {
namespace {

// One strata tensor and where its values sit in the file (elements after the header).
struct LlmcTensor {
  int unit, tensor;
  size_t file_offset, numel;
};

// strata's GPT tensor names in llm.c's order; per-layer ones repeat for every block.
const char* const kBlockOrder[] = {"ln1.weight",      "ln1.bias",       "attn.qkv.weight",
                                   "attn.qkv.bias",   "attn.proj.weight", "attn.proj.bias",
                                   "ln2.weight",      "ln2.bias",       "mlp.fc.weight",
                                   "mlp.fc.bias",     "mlp.proj.weight", "mlp.proj.bias"};

int IndexOf(const UnitLayout& unit, const std::string& name) {
  for (size_t t = 0; t < unit.tensors().size(); ++t) {
    if (unit.tensor(static_cast<int>(t)).name == name) return static_cast<int>(t);
  }
  return -1;
}

StatusOr<std::vector<LlmcTensor>> LlmcTensorMap(const std::vector<UnitLayout>& units) {
  const int L = static_cast<int>(units.size()) - 2;
  std::vector<LlmcTensor> map;
  size_t offset = 0;
  auto add = [&](int unit, const std::string& name) -> Status {
    const int t = IndexOf(units[unit], name);
    if (t < 0) {
      return absl::InternalError(absl::StrCat("llm.c: unit ", units[unit].name(), " has no ", name));
    }
    const size_t numel = units[unit].tensor(t).numel;
    map.push_back({unit, t, offset, numel});
    offset += numel;
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(add(0, "wte"));
  RETURN_IF_ERROR(add(0, "wpe"));
  for (const char* name : kBlockOrder) {
    for (int l = 0; l < L; ++l) RETURN_IF_ERROR(add(l + 1, name));
  }
  RETURN_IF_ERROR(add(L + 1, "lnf.weight"));
  RETURN_IF_ERROR(add(L + 1, "lnf.bias"));
  return map;
}

std::string ShapeText(const std::vector<int>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

Status ImportLlmcWeights(const std::string& path, const ModelOptions& options,
                         const Model& model, Engine& engine, bool show_progress) {
  ASSIGN_OR_RETURN(const ModelOptions stored, ReadLlmcHeader(path));
  const ModelOptions want = ResolveModelOptions(options);
  if (stored.layers != want.layers || stored.heads != want.heads ||
      stored.channels != want.channels || stored.vocab != want.vocab ||
      stored.padded_vocab != want.padded_vocab || stored.max_seq_len != want.max_seq_len ||
      want.family != ModelFamily::kGpt) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.from=llmc:", path, " holds a GPT L", stored.layers, " H", stored.heads, " C",
        stored.channels, " V", stored.vocab, " (padded ", stored.padded_vocab, ") T",
        stored.max_seq_len, "; the model is ", model.Describe(),
        ": leave the model.* keys to the file"));
  }
  ASSIGN_OR_RETURN(const std::vector<LlmcTensor> map, LlmcTensorMap(model.units()));
  ASSIGN_OR_RETURN(InputFile file, InputFile::Open(path, "model.from=llmc:"));
  const int fd = file.Release();
  std::optional<Progress> progress;
  if (show_progress) progress.emplace("importing " + path, 0);
  Status status = absl::OkStatus();
  for (const int base_unit : BaseUnits(model)) {  // a LoRA model's adapters are not in it
    if (!status.ok()) break;
    const size_t u = static_cast<size_t>(base_unit);
    const UnitLayout& layout = model.units()[u];
    status = engine.state().WriteUnit(static_cast<int>(u), [&](size_t begin, size_t end, float* out) {
      std::fill(out, out + (end - begin), 0.0f);
      for (const LlmcTensor& piece : map) {
        if (piece.unit != static_cast<int>(u)) continue;
        const size_t dest = layout.tensor(piece.tensor).offset;
        const size_t lo = std::max(begin, dest), hi = std::min(end, dest + piece.numel);
        if (lo >= hi) continue;
        const uint64_t file_byte = kLlmcHeaderBytes + (piece.file_offset + lo - dest) * 4;
        RETURN_IF_ERROR(PreadFully(fd, out + (lo - begin), (hi - lo) * 4, file_byte, path));
        // Finite values only: NaN weights would train to a NaN loss (blamed on the learning
        // rate) and sample nothing but NaN logits.
        if (const size_t i = FirstNonFinite(out + (lo - begin), hi - lo); i < hi - lo) {
          const TensorSpec& spec = layout.tensor(piece.tensor);
          return absl::InvalidArgumentError(absl::StrCat(
              "model.from=llmc:", path, ": ", layout.name(), " tensor '", spec.name, "' ",
              ShapeText(spec.shape), ": element ", lo - dest + i, " (byte offset ",
              file_byte + i * 4, ") is ", NonFiniteName(out[lo - begin + i]),
              ": weights must be finite (a model saved after its training diverged?)"));
        }
        if (progress) progress->Advance((hi - lo) * 4);
      }
      return absl::OkStatus();
    });
  }
  ::close(fd);
  if (progress) progress->Finish();
  return status;
}

StatusOr<std::string> ExportLlmc(const OpenedCheckpoint& checkpoint, const std::string& path) {
  const ModelOptions& m = checkpoint.model;
  if (m.family != ModelFamily::kGpt) {
    return absl::InvalidArgumentError(absl::StrCat(
        "export: ", checkpoint.path, " is a ", OptionName(m.family),
        " model; llm.c's checkpoint format holds GPT-2 only (use --to hf:DIR)"));
  }
  ASSIGN_OR_RETURN(auto model, CreateModel(m, Recompute::kNone, DType::kF32));
  ASSIGN_OR_RETURN(const std::vector<LlmcTensor> map, LlmcTensorMap(model->units()));
  int32_t header[kLlmcHeaderInts] = {};
  header[0] = kLlmcModelMagic;
  header[1] = kLlmcModelVersionFp32;
  header[2] = m.max_seq_len;
  header[3] = m.vocab;
  header[4] = m.layers;
  header[5] = m.heads;
  header[6] = m.channels;
  header[7] = m.padded_vocab;
  uint64_t params = 0;
  RETURN_IF_ERROR(Annotate(
      WriteFileAtomically(path, [&](int fd, const std::string& partial) -> Status {
        RETURN_IF_ERROR(WriteAllBytes(fd, header, sizeof(header), partial));
        std::vector<float> values;
        for (const LlmcTensor& piece : map) {
          values.resize(piece.numel);
          RETURN_IF_ERROR(ReadCheckpointMaster(
              checkpoint, piece.unit, model->units()[piece.unit].tensor(piece.tensor).offset,
              piece.numel, values.data()));
          RETURN_IF_ERROR(WriteAllBytes(fd, values.data(), values.size() * 4, partial));
          params += piece.numel;
        }
        return absl::OkStatus();
      }),
      "export"));
  return absl::StrCat("exported ", checkpoint.path, " (", model->Describe(), ") to ", path,
                      ": llm.c version 3, ", params, " fp32 parameters");
}

}  // namespace strata
