// The stored form of 8-bit Adam moments; see state_blocks.h.
#include "tiers/state_blocks.h"

#include <cstring>

#include "kernels/cpu/adam8bit.h"

namespace strata {

MomentSections SectionsOf(const std::vector<StateRun>& runs) {
  MomentSections sections;
  for (const StateRun& run : runs) {
    const size_t n = run.end - run.begin;
    if (run.quantized) {
      sections.codes += n;
      sections.blocks += (n + kAdamStateBlock - 1) / kAdamStateBlock;
    } else {
      sections.fp32 += n;
    }
  }
  return sections;
}

void MomentToFp32(const std::vector<StateRun>& runs, bool is_signed, const uint8_t* stored,
                  float* values) {
  if (runs.empty()) return;
  const MomentSections sections = SectionsOf(runs);
  const size_t origin = runs.front().begin;
  for (const StateRun& run : runs) {
    const size_t n = run.end - run.begin;
    float* to = values + (run.begin - origin);
    if (run.quantized) {
      std::vector<float> absmax((n + kAdamStateBlock - 1) / kAdamStateBlock);
      std::memcpy(absmax.data(),
                  stored + sections.absmax_offset() + run.slot / kAdamStateBlock * 4,
                  absmax.size() * 4);
      cpu::DequantizeMoments(stored + sections.codes_offset() + run.slot, absmax.data(), n,
                             is_signed, to);
    } else {
      std::memcpy(to, stored + run.slot * 4, n * 4);
    }
  }
}

void MomentFromFp32(const std::vector<StateRun>& runs, bool is_signed, const float* values,
                    uint8_t* stored) {
  if (runs.empty()) return;
  const MomentSections sections = SectionsOf(runs);
  const size_t origin = runs.front().begin;
  for (const StateRun& run : runs) {
    const size_t n = run.end - run.begin;
    const float* from = values + (run.begin - origin);
    if (run.quantized) {
      std::vector<float> absmax((n + kAdamStateBlock - 1) / kAdamStateBlock);
      cpu::QuantizeMoments(from, n, is_signed, stored + sections.codes_offset() + run.slot,
                           absmax.data());
      std::memcpy(stored + sections.absmax_offset() + run.slot / kAdamStateBlock * 4,
                  absmax.data(), absmax.size() * 4);
    } else {
      std::memcpy(stored + run.slot * 4, from, n * 4);
    }
  }
}

void ZeroMoment(const std::vector<StateRun>& runs, bool is_signed, uint8_t* stored) {
  const MomentSections sections = SectionsOf(runs);
  // The code of 0.0 from the encoder itself, so that the two can never disagree.
  const float zero = 0.0f;
  uint8_t zero_code = 0;
  float absmax = 0.0f;
  cpu::QuantizeMoments(&zero, 1, is_signed, &zero_code, &absmax);
  std::memset(stored, 0, sections.codes_offset());
  std::memset(stored + sections.codes_offset(), zero_code, sections.codes);
  std::memset(stored + sections.absmax_offset(), 0, sections.blocks * 4);
}

}  // namespace strata
