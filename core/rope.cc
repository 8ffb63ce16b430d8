// See rope.h.
#include "core/rope.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"

namespace strata {

std::vector<float> RopeInverseFrequencies(const RopeSpec& rope, int hs) {
  const int half = hs / 2;
  std::vector<float> inv_freq(half);
  for (int i = 0; i < half; ++i) {
    // 1 / theta^(arange(0, hs, 2) / hs), each step in fp32 as transformers computes it.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(hs);
    inv_freq[i] = 1.0f / std::pow(rope.theta, exponent);
  }
  switch (rope.scaling) {
    case RopeScaling::kNone:
    case RopeScaling::kDynamic:  // within original_max_seq_len: the default frequencies
      break;
    case RopeScaling::kLinear:
      for (float& f : inv_freq) f /= rope.factor;
      break;
    case RopeScaling::kLlama3: {
      const float old_context = static_cast<float>(rope.original_max_seq_len);
      const float low_freq_wavelen = old_context / rope.low_freq_factor;
      const float high_freq_wavelen = old_context / rope.high_freq_factor;
      // fp32 pi: torch multiplies a float32 tensor by Python's pi rounded to float32.
      const float two_pi = 2.0f * static_cast<float>(M_PI);
      for (float& f : inv_freq) {
        const float wavelen = two_pi / f;
        if (wavelen > low_freq_wavelen) {
          f = f / rope.factor;
        } else if (!(wavelen < high_freq_wavelen)) {
          const float smooth = (old_context / wavelen - rope.low_freq_factor) /
                               (rope.high_freq_factor - rope.low_freq_factor);
          f = (1.0f - smooth) * f / rope.factor + smooth * f;
        }
      }
      break;
    }
  }
  return inv_freq;
}

Status CheckRopeSpec(const RopeSpec& rope) {
  if (!(rope.theta > 0.0f) || !std::isfinite(rope.theta)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.rope_theta=", rope.theta, " must be > 0"));
  }
  if (rope.scaling == RopeScaling::kNone) return absl::OkStatus();
  if (!(rope.factor > 0.0f) || !std::isfinite(rope.factor)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.rope_factor=", rope.factor, " must be > 0"));
  }
  if (rope.scaling == RopeScaling::kLinear) return absl::OkStatus();
  if (rope.original_max_seq_len < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.rope_original_max_seq_len=", rope.original_max_seq_len, " must be >= 1"));
  }
  if (rope.scaling != RopeScaling::kLlama3) return absl::OkStatus();
  if (!(rope.low_freq_factor > 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.rope_low_freq_factor=", rope.low_freq_factor, " must be > 0"));
  }
  if (!(rope.high_freq_factor > rope.low_freq_factor) || !std::isfinite(rope.high_freq_factor)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.rope_high_freq_factor=", rope.high_freq_factor,
                     " must be > model.rope_low_freq_factor (", rope.low_freq_factor, ")"));
  }
  return absl::OkStatus();
}

std::string DescribeRope(const RopeSpec& rope) {
  std::string text = absl::StrCat("theta ", rope.theta);
  if (rope.scaling == RopeScaling::kLinear) {
    absl::StrAppend(&text, ", linear scaling (factor ", rope.factor, ")");
  } else if (rope.scaling == RopeScaling::kLlama3) {
    absl::StrAppend(&text, ", llama3 scaling (factor ", rope.factor, ", low ", rope.low_freq_factor,
                    ", high ", rope.high_freq_factor, ", original ", rope.original_max_seq_len,
                    ")");
  } else if (rope.scaling == RopeScaling::kDynamic) {
    absl::StrAppend(&text, ", dynamic scaling (factor ", rope.factor, ", original ",
                    rope.original_max_seq_len, ")");
  }
  return text;
}

}  // namespace strata
