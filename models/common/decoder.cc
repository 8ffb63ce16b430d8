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

void DecoderBase::BuildStages() {
  stages_.clear();
  stages_.push_back({"embed", {0}});
  for (int l = 0; l < layers_; ++l) {
    std::vector<int> units = {l + 1};
    if (lora_.active()) units.push_back(lora_.unit(l));
    stages_.push_back({"block " + std::to_string(l), units});
  }
  stages_.push_back({"final_norm", {layers_ + 1}});
  stages_.push_back({"lm_head", {head_unit_}});
}

Status DecoderBase::Forward(int stage, const StepContext& ctx) {
  RETURN_IF_ERROR(CheckShape(ctx));
  if (stage == 0) return EmbedForward(ctx);
  if (stage <= layers_) return BlockForward(stage, ctx, /*output=*/true);
  if (stage == layers_ + 1) return FinalNormForward(ctx);
  return LmHeadForward(ctx);
}

Status DecoderBase::Backward(int stage, const StepContext& ctx) {
  RETURN_IF_ERROR(CheckShape(ctx));
  const size_t btc_bytes =
      static_cast<size_t>(ctx.batch) * ctx.seq_len * channels_ * DTypeBytes(dtype_);
  if (stage == layers_ + 2) return LmHeadBackward(ctx);
  if (stage == layers_ + 1) {  // the final norm starts the residual gradient
    RETURN_IF_ERROR(ctx.device->MemsetAsync(dres_.data(), 0, btc_bytes, *ctx.stream));
    return FinalNormBackward(ctx);
  }
  if (stage >= 1) {
    // Recompute: the block's inside again from its input (kept), with the same params and
    // kernels, so the same values as the first forward's.
    if (recompute_) RETURN_IF_ERROR(BlockForward(stage, ctx, /*output=*/false));
    return BlockBackward(stage, ctx);
  }
  return EmbedBackward(ctx);
}

Status DecoderBase::LmHeadForward(const StepContext& ctx) {
  const int N = ctx.batch * ctx.seq_len;
  RETURN_IF_ERROR(ctx.ops->MatmulForward(*ctx.stream, logits_.data(), lnf_.data(),
                                         HeadWeight(ctx), nullptr,
                                         N, channels_, padded_vocab_));
  return ctx.ops->SoftmaxCrossEntropy(*ctx.stream, losses_.as<float>(), logits_.data(),
                                      ctx.targets, N, vocab_, padded_vocab_, ctx.dloss);
}

Status DecoderBase::LmHeadBackward(const StepContext& ctx) {
  // The logits already hold dloss * dlogits (SoftmaxCrossEntropy wrote them).
  const int N = ctx.batch * ctx.seq_len;
  const size_t btc_bytes = static_cast<size_t>(N) * channels_ * DTypeBytes(dtype_);
  RETURN_IF_ERROR(ctx.device->MemsetAsync(dbtc_.data(), 0, btc_bytes, *ctx.stream));
  void* dhead = Grad(ctx.grads[head_unit_], head_unit_, head_tensor_);
  return ctx.ops->MatmulBackward(*ctx.stream, dbtc_.data(), dhead, nullptr, logits_.data(),
                                 lnf_.data(), HeadWeight(ctx), N, channels_, padded_vocab_);
}

}  // namespace strata
