// Activation recompute (train.recompute=blocks) against the same runs keeping every
// activation, for both families: the recomputed block insides are the same values from the same kernels, so
// losses are bit-identical (fp32 and bf16, stage 0 and stage 3 with the params gathered
// again for the backward, one and two ranks), while the device's activation peak falls to
// the block outputs plus one block's inside.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "core/testing/status_matchers.h"
#include "tests/placement_runs.h"

namespace strata {
namespace {

TEST(Recompute, SameLossesLessActivationMemory) {
  const int activations = static_cast<int>(StateKind::kActivations);
  for (const char* family : {"gpt", "llama"}) {
  for (const char* dtype : {"train.dtype=fp32", "train.dtype=bf16"}) {
    for (int stage : {0, 3}) {
      for (int world : {1, 2}) {
        const bool llama = std::string(family) == "llama";
        // LLaMA pairwise: bf16 at stage 3 on two ranks, fp32 at stage 0 on one.
        if (llama && !((stage == 3 && world == 2 && std::string(dtype) == "train.dtype=bf16") ||
                       (stage == 0 && world == 1 && std::string(dtype) == "train.dtype=fp32"))) {
          continue;
        }
        // 6 layers: the kept activations shrink from 6 blocks' insides to one.
        std::vector<std::string> sets = {dtype, "model.layers=6"};
        if (llama) sets.insert(sets.end(), TinyLlamaSets().begin(), TinyLlamaSets().end());
        const std::string what =
            absl::StrCat(family, " ", dtype, " stage ", stage, " world ", world);
        const PlacementRun kept = TrainAllRanks(PlacementRunOptions(world, stage, sets, 3));
        sets.push_back("train.recompute=blocks");
        const PlacementRun recomputed = TrainAllRanks(PlacementRunOptions(world, stage, sets, 3));
        ASSERT_OK(kept.status) << what;
        ASSERT_OK(recomputed.status) << what;
        ASSERT_EQ(kept.losses.size(), 3u) << what;
        EXPECT_EQ(recomputed.losses, kept.losses) << what;
        const uint64_t before = kept.device.peak_by_kind[activations];
        const uint64_t after = recomputed.device.peak_by_kind[activations];
        EXPECT_LT(after * 2, before) << what << ": activation peak " << before << " -> " << after;
      }
    }
  }
  }
}

}  // namespace
}  // namespace strata
