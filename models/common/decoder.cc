// See decoder.h.
#include "models/common/decoder.h"

#include <algorithm>
#include <cmath>

namespace strata {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A standard normal that depends only on (key, index): Box-Muller on two hashed uniforms.
float HashNormal(uint64_t key, uint64_t index) {
  uint64_t a = SplitMix64(key ^ SplitMix64(2 * index));
  uint64_t b = SplitMix64(key ^ SplitMix64(2 * index + 1));
  double u1 = (static_cast<double>(a >> 11) + 0.5) * 0x1.0p-53;
  double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

}  // namespace

void DecoderBase::InitUnit(int unit, uint64_t seed, float* values) const {
  const UnitLayout& layout = units_[unit];
  for (size_t t = 0; t < layout.tensors().size(); ++t) {
    const TensorSpec& spec = layout.tensor(t);
    float* out = values + spec.offset;
    const uint64_t key = SplitMix64(seed ^ SplitMix64((static_cast<uint64_t>(unit) << 20) + t));
    switch (spec.init) {
      case InitKind::kZeros:
        std::fill(out, out + spec.numel, 0.0f);
        break;
      case InitKind::kOnes:
        std::fill(out, out + spec.numel, 1.0f);
        break;
      case InitKind::kNormal: {
        // Each value a function of its index alone: the same on any number of threads.
        const int64_t n = static_cast<int64_t>(spec.numel);
        const float std_dev = spec.init_std;
#pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; ++i) out[i] = std_dev * HashNormal(key, i);
        break;
      }
    }
  }
  for (const auto& [padded_unit, tensor] : PaddedVocabTensors()) {
    if (padded_unit != unit) continue;
    const TensorSpec& spec = layout.tensor(tensor);
    std::fill(values + spec.offset + static_cast<size_t>(vocab_) * channels_,
              values + spec.offset + static_cast<size_t>(padded_vocab_) * channels_, 0.0f);
  }
}

Status DecoderBase::CheckShape(const StepContext& ctx) const {
  if (ctx.batch != batch_ || ctx.seq_len != seq_len_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "micro-batch [%d,%d] does not match the prepared activations [%d,%d]", ctx.batch,
        ctx.seq_len, batch_, seq_len_));
  }
  return absl::OkStatus();
}

std::vector<std::pair<size_t, size_t>> DecoderBase::TokenRowRanges(
    int unit, int tensor, const int32_t* inputs, int batch, int seq_len,
    std::pair<size_t, size_t> extra) const {
  const size_t C = channels_;
  std::vector<int32_t> rows(inputs, inputs + static_cast<size_t>(batch) * seq_len);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  std::vector<std::pair<size_t, size_t>> ranges;
  const size_t base = units_[unit].tensor(tensor).offset;
  auto append = [&ranges](size_t begin, size_t end) {
    if (!ranges.empty() && ranges.back().second == begin) {
      ranges.back().second = end;
    } else {
      ranges.push_back({begin, end});
    }
  };
  for (int32_t row : rows) {
    const size_t begin = base + static_cast<size_t>(row) * C;
    append(begin, begin + C);
  }
  if (extra.second > extra.first) append(extra.first, extra.second);
  return ranges;
}

StatusOr<Buffer> DecoderBase::Activation(Device& device, size_t elements, DType type,
                                         const std::string& what) {
  return device.Allocate(Tier::kDevice, StateKind::kActivations, elements * DTypeBytes(type),
                         "activation " + what);
}

size_t DecoderBase::num_params() const {
  size_t params = 0;
  for (const UnitLayout& u : units_) params += u.num_params();
  return params;
}

void CheckDecoderShape(int layers, int heads, int channels, int vocab, int padded_vocab,
                       int max_seq_len, std::vector<std::string>* problems, bool own_head_dim) {
  if (layers < 1) problems->push_back("model.layers must be >= 1");
  if (heads < 1) problems->push_back("model.heads must be >= 1");
  if (channels < 1) problems->push_back("model.channels must be >= 1");
  if (vocab < 1) problems->push_back("model.vocab must be >= 1");
  if (padded_vocab < vocab) {
    problems->push_back(absl::StrFormat("model.padded_vocab (%d) must be >= model.vocab (%d)",
                                        padded_vocab, vocab));
  }
  if (max_seq_len < 1) problems->push_back("model.max_seq_len must be >= 1");
  if (!own_head_dim && heads >= 1 && channels % heads != 0) {
    problems->push_back(absl::StrFormat(
        "model.channels (%d) must be divisible by model.heads (%d)", channels, heads));
  }
}

Status ConfigProblems(const std::string& what, const std::vector<std::string>& problems) {
  if (problems.empty()) return absl::OkStatus();
  std::string message = absl::StrCat("invalid ", what, " configuration:");
  for (const auto& p : problems) absl::StrAppend(&message, "\n  ", p);
  return absl::InvalidArgumentError(message);
}

std::string VocabText(int vocab, int padded_vocab) {
  return padded_vocab == vocab ? absl::StrCat(vocab)
                               : absl::StrCat(vocab, " (padded ", padded_vocab, ")");
}

int DefaultPaddedVocab(int vocab) { return (vocab + 63) / 64 * 64; }

}  // namespace strata
