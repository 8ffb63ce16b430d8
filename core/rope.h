// How a model's rotary position embedding turns its (x_i, x_{i+hs/2}) pairs: the base theta
// and an optional scaling of the frequencies for contexts longer than the model was trained
// on, as Hugging Face's `rope_scaling` (modeling_rope_utils) defines it:
//   none:   inv_freq_i = 1 / theta^(2i/hs)
//   linear: inv_freq_i / factor (positions interpolated)
//   llama3: (Llama 3.1, 3.2) by wavelength w_i = 2 pi / inv_freq_i, with
//           L = original_max_seq_len: w_i < L / high_freq_factor keeps inv_freq_i;
//           w_i > L / low_freq_factor divides it by factor; between, the mix
//           (1 - s) inv_freq_i / factor + s inv_freq_i, s = (L / w_i - low) / (high - low).
//   dynamic: (dynamic NTK) inv_freq_i unchanged for sequences within L =
//           original_max_seq_len (config.json's max_position_embeddings); beyond it
//           Hugging Face raises the base with the length, which strata does not: the
//           model's max_seq_len is held to L instead (config/option_checks.cc).
// Scalings that change the attention's scale (YaRN, LongRoPE) are not here: importing a
// model that uses one is refused.
// RopeInverseFrequencies computes in fp32 in Hugging Face's order of operations, so that
// every backend (CPU tables, the CUDA kernel's constant table) turns by the same angles.
// Thread-safety: plain values and pure functions.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace strata {

// model.rope_scaling.
enum class RopeScaling { kNone, kLinear, kLlama3, kDynamic };

struct RopeSpec {
  float theta = 10000.0f;                    // model.rope_theta
  RopeScaling scaling = RopeScaling::kNone;  // model.rope_scaling
  float factor = 8.0f;                       // model.rope_factor (linear, llama3, dynamic)
  float low_freq_factor = 1.0f;              // model.rope_low_freq_factor (llama3)
  float high_freq_factor = 4.0f;             // model.rope_high_freq_factor (llama3)
  int original_max_seq_len = 8192;           // model.rope_original_max_seq_len (llama3, dynamic)

  bool operator==(const RopeSpec& other) const {
    return theta == other.theta && scaling == other.scaling && factor == other.factor &&
           low_freq_factor == other.low_freq_factor && high_freq_factor == other.high_freq_factor &&
           original_max_seq_len == other.original_max_seq_len;
  }
};

// The hs / 2 inverse frequencies of a head of size hs (even, > 0).
std::vector<float> RopeInverseFrequencies(const RopeSpec& rope, int hs);

// InvalidArgument naming the first field out of range (the config keys' names):
// theta > 0; for a scaling, factor > 0; for llama3 also 0 < low_freq_factor <
// high_freq_factor; for llama3 and dynamic original_max_seq_len >= 1. Fields a scaling does
// not use are not checked.
Status CheckRopeSpec(const RopeSpec& rope);

// "theta 10000" or "theta 500000, llama3 scaling (factor 32, low 1, high 4, original 8192)"
// or "theta 10000, dynamic scaling (factor 2, original 4096)".
std::string DescribeRope(const RopeSpec& rope);

}  // namespace strata
