// See placement_runs.h.
#include "tests/placement_runs.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "config/options_parse.h"
#include "core/testing/status_matchers.h"
#include "session/ranks.h"
#include "session/session.h"

namespace strata {

Options PlacementRunOptions(int world, int stage, const std::vector<std::string>& extra,
                            int steps) {
  std::vector<std::string> sets = {
      "model.preset=tiny", "model.layers=2", "model.channels=32", "model.heads=2",
      "train.seq_len=16", "train.lr=3e-3", "train.warmup_steps=2", "train.grad_accum=2",
      "train.eval_every=0", "device.threads=1", "zero.comm_timeout_s=60",
      "train.micro_batch=2", "zero.prefetch_bytes=64KiB",
      "train.steps=" + std::to_string(steps), "zero.world=" + std::to_string(world),
      "zero.stage=" + std::to_string(stage)};
  sets.insert(sets.end(), extra.begin(), extra.end());
  auto options = ParseOptions("", sets);
  EXPECT_OK(options);
  return options.ok() ? *options : Options{};
}

const std::vector<std::string>& TinyLlamaSets() {
  static const auto* sets =
      new std::vector<std::string>{
          "model.family=llama",         "model.heads=4",
          "model.kv_heads=2",           "model.vocab=250",
          "model.tie_embeddings=false", "model.rope_theta=500",
          "model.head_dim=12"};  // not channels / heads (8): q is 48 wide, as Qwen3 shapes it
  return *sets;
}

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
  std::filesystem::create_directories(dir);
  return dir;
}

PlacementRun TrainAllRanks(const Options& options) {
  PlacementRun run;
  std::mutex mutex;
  run.status = RunRanks(options, [&](Communicator& communicator) -> Status {
    ASSIGN_OR_RETURN(auto session, TrainingSession::Create(options, &communicator));
    const PoolStats device_setup = session->device().pool(Tier::kDevice).Stats();
    const PoolStats host_setup = session->device().pool(Tier::kHost).Stats();
    std::vector<StepResult> steps;
    for (int step = session->first_step(); step < options.train.steps; ++step) {
      ASSIGN_OR_RETURN(StepReport report, session->Step(step));
      steps.push_back(report.result);
    }
    if (communicator.rank() == 0) {
      std::lock_guard<std::mutex> lock(mutex);
      run.steps = steps;
      for (const StepResult& s : steps) run.losses.push_back(s.loss);
      run.device = session->device().pool(Tier::kDevice).Stats();
      run.device_setup = device_setup;
      run.host_setup = host_setup;
      run.host = session->device().pool(Tier::kHost).Stats();
      run.device_description = session->device().Describe();
      run.communicator_description = session->engine_communicator().Describe();
    }
    return absl::OkStatus();
  });
  return run;
}

}  // namespace strata
