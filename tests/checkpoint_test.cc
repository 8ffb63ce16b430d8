// Checkpoints (checkpoint/checkpoint.h) against uninterrupted runs: a checkpoint written by any
// configuration resumes in any other. At one world size every placement and stage gives
// bit-identical losses, so a resumed run must match the uninterrupted one exactly; across
// world sizes the gradient sums are added in another order, so within 1e-5 (relative).
// A damaged or mismatched checkpoint is an error naming the file or key, before any state
// changes.
#include "checkpoint/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/run_identity.h"
#include "core/testing/status_matchers.h"
#include "data/tokenizer/tokenizer.h"
#include "session/faults.h"
#include "session/ranks.h"
#include "session/session.h"
#include "tests/engine_rig.h"
#include "tests/placement_runs.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

constexpr int kSteps = 6;

// The same global batch (4 rows) at every world size: the same data, step by step.
Options Make(int world, int stage, std::vector<std::string> extra) {
  extra.insert(extra.begin(), {"zero.nvme_dir=" + TestDir("swap"),
                               "train.micro_batch=" + std::to_string(4 / world)});
  return PlacementRunOptions(world, stage, extra, kSteps);
}

// The losses of steps [from, kSteps) of `full`.
std::vector<double> Tail(const std::vector<double>& full, int from) {
  return std::vector<double>(full.begin() + from, full.end());
}

TEST(Checkpoint, ResumesInAnyConfigurationWithTheSameLosses) {
  const std::string dir = TestDir("checkpoints");
  // Written by stage 0 on the device at world 1, after steps 3 and 6.
  const PlacementRun written =
      TrainAllRanks(Make(1, 0, {"train.checkpoint_dir=" + dir, "train.checkpoint_every=3"}));
  ASSERT_OK(written.status);
  ASSERT_EQ(written.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_TRUE(std::filesystem::exists(dir + "/step-3/checkpoint.json"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/step-6/checkpoint.json"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/step-3.partial"));
  const std::string resume = "train.resume=" + dir + "/step-3";
  struct Config {
    int stage;
    std::vector<std::string> sets;
  };
  const std::vector<Config> same_world = {
      {0, {}},
      {1, {"zero.optimizer_tier=host", "zero.grad_tier=host"}},
      {3, {"zero.optimizer_tier=nvme", "zero.param_tier=nvme", "zero.grad_tier=nvme",
           "nvme.chunk_bytes=16KiB"}},
  };
  for (Config config : same_world) {
    config.sets.push_back(resume);
    const std::string what = absl::StrCat("stage ", config.stage, " ",
                                          absl::StrJoin(config.sets, " "));
    const PlacementRun resumed = TrainAllRanks(Make(1, config.stage, config.sets));
    ASSERT_OK(resumed.status) << what;
    EXPECT_EQ(resumed.losses, Tail(written.losses, 3)) << what;
  }
  // World 2 (2 rows per rank) from the world-1 checkpoint: the world-1 run's losses within
  // rounding.
  const PlacementRun resumed2 = TrainAllRanks(Make(2, 2, {resume}));
  ASSERT_OK(resumed2.status);
  ASSERT_EQ(resumed2.losses.size(), static_cast<size_t>(kSteps - 3));
  for (int i = 0; i < kSteps - 3; ++i) {
    EXPECT_NEAR(resumed2.losses[i], written.losses[3 + i], 1e-5 * std::abs(written.losses[3 + i]))
        << "world 2 from world 1, step " << 3 + i;
  }
  // And back: written at world 2 (stage 3), resumed at world 1.
  const std::string dir2 = TestDir("checkpoints-world2");
  const PlacementRun written2 =
      TrainAllRanks(Make(2, 3, {"train.checkpoint_dir=" + dir2, "train.checkpoint_every=3"}));
  ASSERT_OK(written2.status);
  const PlacementRun resumed1 = TrainAllRanks(Make(1, 0, {"train.resume=" + dir2 + "/step-3"}));
  ASSERT_OK(resumed1.status);
  ASSERT_EQ(resumed1.losses.size(), static_cast<size_t>(kSteps - 3));
  ASSERT_EQ(written2.losses.size(), static_cast<size_t>(kSteps));
  for (int i = 0; i < kSteps - 3; ++i) {
    EXPECT_NEAR(resumed1.losses[i], written2.losses[3 + i],
                1e-5 * std::abs(written2.losses[3 + i]))
        << "world 1 from world 2, step " << 3 + i;
  }
}

// A LLaMA checkpoint written at world 1 stage 0 resumes at world 1 with everything on NVMe
// (the same losses) and at world 2 stage 3 (within rounding); a GPT's run cannot resume it.
// Its rope scaling (llama3, dynamic) is recorded and must match.
TEST(Checkpoint, LlamaResumesInAnotherConfiguration) {
  const std::string dir = TestDir("checkpoints-llama");
  // With Llama 3's rope scaling, which the checkpoint records.
  std::vector<std::string> scaled = TinyLlamaSets();
  scaled.insert(scaled.end(), {"model.rope_scaling=llama3", "model.rope_original_max_seq_len=64"});
  std::vector<std::string> sets = scaled;
  sets.insert(sets.end(), {"train.checkpoint_dir=" + dir, "train.checkpoint_every=3"});
  const PlacementRun written = TrainAllRanks(Make(1, 0, sets));
  ASSERT_OK(written.status);
  std::vector<std::string> resume = scaled;
  resume.push_back("train.resume=" + dir + "/step-3");
  std::vector<std::string> nvme = resume;
  nvme.insert(nvme.end(), {"zero.optimizer_tier=nvme", "zero.param_tier=nvme",
                           "zero.grad_tier=nvme", "nvme.chunk_bytes=16KiB"});
  const PlacementRun on_nvme = TrainAllRanks(Make(1, 3, nvme));
  ASSERT_OK(on_nvme.status);
  EXPECT_EQ(on_nvme.losses, Tail(written.losses, 3));
  const PlacementRun world2 = TrainAllRanks(Make(2, 3, resume));
  ASSERT_OK(world2.status);
  ASSERT_EQ(world2.losses.size(), static_cast<size_t>(kSteps - 3));
  for (int i = 0; i < kSteps - 3; ++i) {
    EXPECT_NEAR(world2.losses[i], written.losses[3 + i], 1e-5 * std::abs(written.losses[3 + i]))
        << "step " << 3 + i;
  }
  std::vector<std::string> unscaled = TinyLlamaSets();
  unscaled.push_back("train.resume=" + dir + "/step-3");
  EXPECT_THAT(TrainAllRanks(Make(1, 3, unscaled)).status,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rope_scaling={\"factor\":\"8\",\"high_freq_factor\":\"4\"")));
  const PlacementRun gpt = TrainAllRanks(Make(1, 0, {"train.resume=" + dir + "/step-3"}));
  EXPECT_THAT(gpt.status, StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("family=llama but model.family=gpt")));
  // A dynamic scaling is recorded with its original context: the same options resume it
  // (the same losses), the llama3 ones do not.
  const std::string dynamic_dir = TestDir("checkpoints-llama-dynamic");
  std::vector<std::string> dynamic = TinyLlamaSets();
  dynamic.insert(dynamic.end(), {"model.rope_scaling=dynamic", "model.rope_factor=2",
                                 "model.max_seq_len=64", "model.rope_original_max_seq_len=64"});
  std::vector<std::string> dynamic_sets = dynamic;
  dynamic_sets.insert(dynamic_sets.end(),
                      {"train.checkpoint_dir=" + dynamic_dir, "train.checkpoint_every=3"});
  const PlacementRun dynamic_written = TrainAllRanks(Make(1, 0, dynamic_sets));
  ASSERT_OK(dynamic_written.status);
  dynamic.push_back("train.resume=" + dynamic_dir + "/step-3");
  const PlacementRun dynamic_resumed = TrainAllRanks(Make(1, 3, dynamic));
  ASSERT_OK(dynamic_resumed.status);
  EXPECT_EQ(dynamic_resumed.losses, Tail(dynamic_written.losses, 3));
  scaled.push_back("train.resume=" + dynamic_dir + "/step-3");
  EXPECT_THAT(TrainAllRanks(Make(1, 3, scaled)).status,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"original_max_seq_len\":64,\"type\":\"dynamic\"")));
}

// zero.param_update=delayed: a checkpoint puts the pending update in place first (as an
// evaluation or the end of training does), so the run that wrote it and a run resumed
// from it go on from the same state, without a pending update: the same losses. And the
// pending update is not lost: the writer's losses differ from a delayed run without
// checkpoints (which keeps its update pending across step 3).
TEST(Checkpoint, DelayedUpdateCheckpointsResumeExactly) {
  const std::string dir = TestDir("delayed");
  const std::vector<std::string> delayed = {"zero.optimizer_tier=host", "zero.grad_tier=host",
                                            "zero.param_update=delayed"};
  auto sets = delayed;
  sets.insert(sets.end(), {"train.checkpoint_dir=" + dir, "train.checkpoint_every=3"});
  const PlacementRun written = TrainAllRanks(Make(1, 2, sets));
  ASSERT_OK(written.status);
  sets = delayed;
  sets.push_back("train.resume=" + dir + "/step-3");
  const PlacementRun resumed = TrainAllRanks(Make(1, 2, sets));
  ASSERT_OK(resumed.status);
  EXPECT_EQ(resumed.losses, Tail(written.losses, 3));
  const PlacementRun uninterrupted = TrainAllRanks(Make(1, 2, delayed));
  ASSERT_OK(uninterrupted.status);
  EXPECT_EQ(Tail(uninterrupted.losses, 0).front(), written.losses.front());
  EXPECT_NE(Tail(uninterrupted.losses, 3), Tail(written.losses, 3));
}

// train.checkpoint_keep leaves the newest N; train.resume naming the directory takes its
// newest complete checkpoint (a half-written step-<k>.partial is ignored).
TEST(Checkpoint, KeepsTheNewestAndResumesFromTheNewest) {
  namespace fs = std::filesystem;
  const std::string dir = TestDir("rotated");
  const PlacementRun written = TrainAllRanks(Make(
      1, 1, {"train.checkpoint_dir=" + dir, "train.checkpoint_every=2", "train.checkpoint_keep=2"}));
  ASSERT_OK(written.status);
  EXPECT_FALSE(fs::exists(dir + "/step-2"));
  EXPECT_TRUE(fs::exists(dir + "/step-4/checkpoint.json"));
  EXPECT_TRUE(fs::exists(dir + "/step-6/checkpoint.json"));
  // A crash while writing step 8 left its partial directory: not a checkpoint.
  fs::create_directories(dir + "/step-8.partial");
  std::ofstream(dir + "/step-8.partial/unit-0.bin") << "half";
  fs::remove_all(dir + "/step-6");  // and suppose step 6 had never been written
  Options resumed_options = Make(1, 1, {"train.resume=" + dir});
  const PlacementRun resumed = TrainAllRanks(resumed_options);
  ASSERT_OK(resumed.status);
  EXPECT_EQ(resumed.losses, Tail(written.losses, 4));
  // An empty directory is an error saying what it looked for.
  const PlacementRun none = TrainAllRanks(Make(1, 1, {"train.resume=" + TestDir("empty")}));
  EXPECT_THAT(none.status,
              StatusIs(::testing::Ne(absl::StatusCode::kOk), HasSubstr("no checkpoint at")));
}

TEST(Checkpoint, NotEnoughRoomIsAClearErrorBeforeWriting) {
  const std::string dir = TestDir("room");
  EXPECT_OK(CheckRoomForCheckpoint(dir, 1 << 20));
  EXPECT_THAT(
      CheckRoomForCheckpoint(dir, 1ull << 50),  // 1 PiB
      StatusIs(absl::StatusCode::kResourceExhausted,
               ::testing::AllOf(HasSubstr(dir), HasSubstr("a checkpoint needs 1125899906842624"))));
}

TEST(Checkpoint, DamagedOrMismatchedCheckpointsAreClearErrors) {
  const std::string dir = TestDir("damaged");
  const PlacementRun written =
      TrainAllRanks(Make(1, 2, {"train.checkpoint_dir=" + dir, "train.checkpoint_every=2"}));
  ASSERT_OK(written.status);
  const std::string step = dir + "/step-2";
  auto resume_error = [&](std::vector<std::string> sets) {
    sets.push_back("train.resume=" + step);
    const PlacementRun run = TrainAllRanks(Make(1, 2, sets));
    EXPECT_THAT(run.status, ::testing::Not(testing::IsOk())) << absl::StrJoin(sets, " ");
    EXPECT_TRUE(run.losses.empty()) << "trained from a bad checkpoint";
    return std::string(run.status.message());
  };
  // The model's shape differs: named.
  EXPECT_THAT(resume_error({"model.channels=64"}), ::testing::HasSubstr("model.channels"));
  // Resuming past train.steps.
  EXPECT_THAT(resume_error({"train.steps=2"}), ::testing::HasSubstr("raise train.steps"));
  // A flipped byte in a unit's file: the checksum names the file.
  const std::string unit = step + "/rank-00000.bin";  // one rank: one file
  {
    std::fstream file(unit, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(100);
    file.put('\x5a');
  }
  std::string message = resume_error({});
  EXPECT_THAT(message, ::testing::HasSubstr("checksum mismatch"));
  EXPECT_THAT(message, ::testing::HasSubstr(unit));
  // A truncated file.
  std::filesystem::resize_file(unit, 12);
  EXPECT_THAT(resume_error({}), ::testing::HasSubstr("has 12 bytes"));
  // No checkpoint there at all.
  std::filesystem::remove_all(step);
  EXPECT_THAT(resume_error({}), ::testing::HasSubstr(step + "/checkpoint.json"));
}

// At two ranks each checks the file of its own shard (rank r the file rank r wrote) and both
// learn of a failure before any state changes: a damaged file is named by both ranks,
// whichever checked it, and nothing trains.
TEST(Checkpoint, RanksShareTheFileChecksAndAgreeOnTheOutcome) {
  const std::string dir = TestDir("shared-checks");
  ASSERT_OK(TrainAllRanks(Make(2, 3, {"train.checkpoint_dir=" + dir, "train.checkpoint_every=2"}))
                .status);
  const std::string step = dir + "/step-2";
  ASSERT_OK_AND_ASSIGN(const OpenedCheckpoint opened, OpenCheckpoint(step));
  ASSERT_GE(opened.units.size(), 2u);
  for (int damaged = 0; damaged < 2; ++damaged) {
    SCOPED_TRACE(damaged);
    ASSERT_EQ(opened.files.size(), 2u);  // one per rank
    const std::string file = opened.files[damaged].path;
    std::string original;
    {
      std::ifstream in(file, std::ios::binary);
      original.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    {
      std::fstream out(file, std::ios::in | std::ios::out | std::ios::binary);
      out.seekp(8);
      out.put(static_cast<char>(original[8] ^ 0x5a));
    }
    // Its share alone: the rank that checks the file finds it, the other does not look.
    int failed = -1;
    EXPECT_THAT(VerifyCheckpointFiles(opened, false, damaged, 2, &failed),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr(file)));
    EXPECT_EQ(failed, damaged);
    EXPECT_OK(VerifyCheckpointFiles(opened, false, 1 - damaged, 2));
    // A resume at two ranks: each rank's own session refuses it, naming the file (not one
    // rank's error and the other's abort, nor a rank that did not look loading it).
    const Options resume = Make(2, 3, {"train.resume=" + step});
    std::mutex mutex;
    std::vector<Status> created(2);
    ASSERT_OK(RunRanks(resume, [&](Communicator& communicator) -> Status {
      StatusOr<std::unique_ptr<TrainingSession>> session =
          TrainingSession::Create(resume, &communicator);
      std::lock_guard<std::mutex> lock(mutex);
      created[communicator.rank()] = session.status();
      return absl::OkStatus();
    }));
    for (const Status& status : created) {
      EXPECT_THAT(status,
                  StatusIs(absl::StatusCode::kDataLoss,
                           ::testing::AllOf(HasSubstr(file), HasSubstr("checksum mismatch"))));
    }
    std::ofstream(file, std::ios::binary | std::ios::trunc) << original;
  }
  // Mended, it resumes.
  EXPECT_OK(TrainAllRanks(Make(2, 3, {"train.resume=" + step})).status);
}

// A checkpoint carries a copy of its tokenizer's files (step-<k>/tokenizer/, hashed in
// checkpoint.json): with the run's own file gone, the copy opens as the same tokenizer; a
// changed copy is kDataLoss naming it; a file unreadable when the checkpoint is written
// leaves the spec alone recorded.
TEST(Checkpoint, CarriesACopyOfItsTokenizer) {
  namespace fs = std::filesystem;
  const std::string dir = TestDir("with-tokenizer");
  const std::string model = dir + "/pieces.model";
  fs::copy_file("data/tokenizer/testdata/persuasion_bpe512.model", model,
                fs::copy_options::overwrite_existing);
  const std::string spec = "sentencepiece:" + model;
  auto run = [&](const std::string& checkpoints) {
    return TrainAllRanks(
        Make(1, 1,
             {"train.checkpoint_dir=" + checkpoints, "train.checkpoint_every=2", "train.steps=2",
              "model.vocab=512", "data.tokenizer=" + spec, "data.cache_dir=" + dir + "/cache"}));
  };
  ASSERT_OK(run(dir + "/ck").status);
  const std::string step = dir + "/ck/step-2";
  ASSERT_OK_AND_ASSIGN(const OpenedCheckpoint opened, OpenCheckpoint(step));
  EXPECT_EQ(opened.tokenizer, spec);
  ASSERT_EQ(opened.tokenizer_files.size(), 1u);
  EXPECT_EQ(opened.tokenizer_files[0].first, step + "/tokenizer/tokenizer.model");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Tokenizer> original, OpenTokenizer(spec));
  ASSERT_OK_AND_ASSIGN(const std::vector<uint32_t> expected,
                       original->Encode("Anne Elliot walked to Uppercross."));
  fs::remove(model);  // the run's own file gone: the checkpoint does not need it
  ASSERT_OK_AND_ASSIGN(const std::string own, CheckpointTokenizer(opened));
  EXPECT_EQ(own, "hf:" + step + "/tokenizer");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Tokenizer> copy, OpenTokenizer(own));
  EXPECT_THAT(copy->Describe(), HasSubstr("SentencePiece"));
  EXPECT_EQ(copy->Encode("Anne Elliot walked to Uppercross.").value(), expected);
  // A changed copy is named.
  std::ofstream(opened.tokenizer_files[0].first, std::ios::app) << "x";
  EXPECT_THAT(
      CheckpointTokenizer(opened),
      StatusIs(absl::StatusCode::kDataLoss,
               ::testing::AllOf(HasSubstr(opened.tokenizer_files[0].first), HasSubstr("XXH3"))));
  // A checkpoint.json (its checksum made again) naming a tokenizer file outside the
  // checkpoint's tokenizer directory is refused when opened.
  {
    const std::string meta_path = step + "/checkpoint.json";
    std::ifstream in(meta_path);
    nlohmann::json meta = nlohmann::json::parse(in);
    meta["tokenizer_files"][0]["name"] = "../../elsewhere.model";
    meta.erase("checksum");
    const std::string compact = meta.dump();
    meta["checksum"] = absl::StrFormat("%016x", XXH3_64bits(compact.data(), compact.size()));
    std::ofstream(meta_path, std::ios::trunc) << meta.dump(2);
    EXPECT_THAT(OpenCheckpoint(step),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::AllOf(HasSubstr("../../elsewhere.model"),
                                          HasSubstr("outside its tokenizer directory"))));
  }
  // The tokenizer's file not readable when a checkpoint is written (moved while the run
  // went on): the spec alone is recorded, as by a strata older than the copies.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<EngineRig> rig, MakeEngineRig(Make(1, 1, {})));
  Options options = Make(1, 1, {"train.checkpoint_dir=" + dir + "/ck-without"});
  CheckpointContext context;
  context.tokenizer = spec;
  ASSERT_OK_AND_ASSIGN(const std::string written,
                       SaveCheckpoint(*rig->engine, *rig->model, options, 2, context));
  ASSERT_OK_AND_ASSIGN(const OpenedCheckpoint without, OpenCheckpoint(written));
  EXPECT_EQ(without.tokenizer, spec);
  EXPECT_TRUE(without.tokenizer_files.empty());
  EXPECT_FALSE(fs::exists(written + "/tokenizer"));
  EXPECT_THAT(CheckpointTokenizer(without), testing::IsOkAndHolds(spec));
}

// Every array of every unit of checkpoint `path`, read through the manifest.
std::vector<std::vector<float>> Arrays(const std::string& path) {
  std::vector<std::vector<float>> arrays;
  StatusOr<OpenedCheckpoint> opened = OpenCheckpoint(path);
  EXPECT_OK(opened.status());
  if (!opened.ok()) return arrays;
  for (size_t u = 0; u < opened->units.size(); ++u) {
    for (int k = 0; k < 3; ++k) {
      std::vector<float> values(opened->units[u].elements);
      EXPECT_OK(ReadCheckpointArray(*opened, static_cast<int>(u), k, 0, values.size(),
                                    values.data()));
      arrays.push_back(std::move(values));
    }
  }
  return arrays;
}

// Loads `options`' train.resume on every rank and writes the state straight back (no step
// between) as the checkpoint of `next_step` in options' train.checkpoint_dir.
Status LoadAndWriteBack(const Options& options, int next_step) {
  return RunRanks(options, [&](Communicator& communicator) -> Status {
    ASSIGN_OR_RETURN(auto session, TrainingSession::Create(options, &communicator));
    return session->Checkpoint(next_step).status();
  });
}

// Format 6: one file per rank, each holding that rank's shards, and a manifest naming each
// array's dtype, element ranges and file offsets. A checkpoint written at world 2 (stage 3)
// loads at world 1, 2 and 3 and at stages 0-3, each rank reading only the elements it
// holds: written straight back, every array is element for element the same.
TEST(Checkpoint, WritesOneFilePerRankAndLoadsAtAnyWorldSizeElementForElement) {
  namespace fs = std::filesystem;
  const std::string dir = TestDir("per-rank");
  ASSERT_OK(TrainAllRanks(Make(2, 3, {"train.checkpoint_dir=" + dir, "train.checkpoint_every=3"}))
                .status);
  const std::string step = dir + "/step-3";
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(step)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"checkpoint.json", "rank-00000.bin",
                                             "rank-00001.bin"}));
  std::ifstream in(step + "/checkpoint.json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  EXPECT_EQ(meta["version"], 8);
  EXPECT_EQ(meta["world"], 2);
  ASSERT_EQ(meta["files"].size(), 2u);
  for (int r = 0; r < 2; ++r) {
    const nlohmann::json& file = meta["files"][r];
    EXPECT_EQ(file["rank"], r);
    EXPECT_EQ(file["host"], HostName());
    EXPECT_EQ(file["bytes"].get<uint64_t>(),
              fs::file_size(step + "/" + file["name"].get<std::string>()));
  }
  size_t elements = 0;
  for (const nlohmann::json& unit : meta["units"]) {
    elements += unit["elements"].get<size_t>();
    ASSERT_EQ(unit["arrays"].size(), 3u);
    for (const nlohmann::json& array : unit["arrays"]) {
      EXPECT_EQ(array["dtype"], "f32");
      EXPECT_EQ(array["block"], 0);
      EXPECT_TRUE(array["scales"].is_null());
      // Shards in rank order, each rank's elements from rank * shard on.
      size_t covered = 0;
      for (const nlohmann::json& shard : array["shards"]) {
        EXPECT_EQ(shard["begin"].get<size_t>(), covered);
        covered = shard["end"].get<size_t>();
      }
      EXPECT_EQ(covered, unit["elements"].get<size_t>());
    }
  }
  // The two files hold every element's three arrays once.
  EXPECT_EQ(fs::file_size(step + "/rank-00000.bin") + fs::file_size(step + "/rank-00001.bin"),
            3 * elements * sizeof(float));
  const std::vector<std::vector<float>> written = Arrays(step);
  ASSERT_FALSE(written.empty());
  struct Config {
    int world, stage;
    std::vector<std::string> sets;
  };
  const std::vector<Config> configs = {
      {1, 0, {}},
      {2, 1, {"zero.optimizer_tier=host", "zero.grad_tier=host"}},
      {3, 3, {}},
      {3, 2, {}},
      {3, 3, {"zero.optimizer_tier=nvme", "zero.param_tier=nvme", "nvme.chunk_bytes=16KiB"}},
  };
  for (const Config& config : configs) {
    const std::string what = absl::StrCat("world ", config.world, " stage ", config.stage, " ",
                                          absl::StrJoin(config.sets, " "));
    const std::string again = TestDir(absl::StrCat("per-rank-again-", config.world, "-",
                                                   config.stage, "-", config.sets.size()));
    std::vector<std::string> sets = config.sets;
    sets.insert(sets.end(), {"train.resume=" + step, "train.checkpoint_dir=" + again});
    ASSERT_OK(LoadAndWriteBack(Make(config.world, config.stage, sets), 3)) << what;
    ASSERT_OK_AND_ASSIGN(const OpenedCheckpoint reopened, OpenCheckpoint(again + "/step-3"));
    EXPECT_EQ(reopened.world, config.world) << what;
    EXPECT_OK(VerifyCheckpointFiles(reopened, false)) << what;
    EXPECT_TRUE(Arrays(again + "/step-3") == written) << what;
  }
}

// A rank's file missing (a node-local directory of another node): the error names the file,
// the rank and host that wrote it.
TEST(Checkpoint, AMissingRankFileIsNamedWithTheHostThatWroteIt) {
  namespace fs = std::filesystem;
  const std::string dir = TestDir("missing-rank-file");
  ASSERT_OK(TrainAllRanks(Make(2, 3, {"train.checkpoint_dir=" + dir, "train.checkpoint_every=2",
                                      "train.steps=2"}))
                .status);
  const std::string file = dir + "/step-2/rank-00001.bin";
  ASSERT_TRUE(fs::remove(file));
  for (const int world : {1, 2}) {
    const PlacementRun resumed = TrainAllRanks(Make(world, 3, {"train.resume=" + dir}));
    EXPECT_THAT(resumed.status,
                StatusIs(::testing::Ne(absl::StatusCode::kOk),
                         ::testing::AllOf(HasSubstr(file), HasSubstr("is missing on host"),
                                          HasSubstr("written by rank 1 on host " + HostName()))))
        << "world " << world;
    EXPECT_TRUE(resumed.losses.empty());
  }
}

// A checkpoint of format 5 (one file per unit, written by rank 0) still loads: made here
// from a format-6 one (the same arrays), it resumes with the same losses.
TEST(Checkpoint, FormatFiveStillLoads) {
  const std::string dir = TestDir("format-five");
  const PlacementRun written =
      TrainAllRanks(Make(2, 1, {"train.checkpoint_dir=" + dir, "train.checkpoint_every=3"}));
  ASSERT_OK(written.status);
  const std::string step = dir + "/step-3", old = TestDir("format-five-old") + "/step-3";
  std::filesystem::create_directories(old);
  std::ifstream in(step + "/checkpoint.json");
  nlohmann::json meta = nlohmann::json::parse(in);
  const std::vector<std::vector<float>> arrays = Arrays(step);
  nlohmann::json units = nlohmann::json::array();
  for (size_t u = 0; u < meta["units"].size(); ++u) {
    std::string bytes;
    for (int k = 0; k < 3; ++k) {
      bytes.append(reinterpret_cast<const char*>(arrays[3 * u + k].data()),
                   arrays[3 * u + k].size() * sizeof(float));
    }
    const std::string name = absl::StrCat("unit-", u, ".bin");
    std::ofstream(old + "/" + name, std::ios::binary) << bytes;
    units.push_back({{"name", meta["units"][u]["name"]},
                     {"elements", meta["units"][u]["elements"]},
                     {"file", name},
                     {"xxh3", absl::StrFormat("%016x", XXH3_64bits(bytes.data(), bytes.size()))}});
  }
  meta["units"] = units;
  meta["version"] = 5;
  meta.erase("world");
  meta.erase("files");
  meta.erase("checksum");
  const std::string compact = meta.dump();
  meta["checksum"] = absl::StrFormat("%016x", XXH3_64bits(compact.data(), compact.size()));
  std::ofstream(old + "/checkpoint.json") << meta.dump(2);
  ASSERT_OK_AND_ASSIGN(const OpenedCheckpoint opened, OpenCheckpoint(old));
  EXPECT_EQ(opened.version, 5);
  EXPECT_TRUE(Arrays(old) == arrays);
  for (const int world : {1, 2}) {
    const PlacementRun from_new = TrainAllRanks(Make(world, 3, {"train.resume=" + step}));
    const PlacementRun from_old = TrainAllRanks(Make(world, 3, {"train.resume=" + old}));
    ASSERT_OK(from_new.status);
    ASSERT_OK(from_old.status);
    EXPECT_EQ(from_old.losses, from_new.losses) << "world " << world;
    ASSERT_EQ(from_old.losses.size(), static_cast<size_t>(kSteps - 3));
  }
}

// A run at two ranks with a fault injected into the checkpoint writer: every rank's status
// and rank 0's losses.
struct FaultedRun {
  std::vector<Status> statuses{2};
  std::vector<double> losses;
};
FaultedRun TrainWithFault(const Options& options, const std::string& fault) {
  FaultedRun run;
  StatusOr<std::optional<CheckpointFault>> parsed = ParseCheckpointFault(fault);
  EXPECT_OK(parsed.status());
  RunFaults faults;
  if (parsed.ok()) faults.checkpoint = *parsed;
  std::mutex mutex;
  RunRanks(options, [&](Communicator& communicator) -> Status {
    Status status = [&]() -> Status {
      ASSIGN_OR_RETURN(auto session, TrainingSession::Create(options, &communicator, false, faults));
      for (int step = session->first_step(); step < options.train.steps; ++step) {
        ASSIGN_OR_RETURN(StepReport report, session->Step(step));
        if (communicator.rank() == 0) run.losses.push_back(report.result.loss);
      }
      return absl::OkStatus();
    }();
    std::lock_guard<std::mutex> lock(mutex);
    run.statuses[communicator.rank()] = status;
    return absl::OkStatus();
  }).IgnoreError();
  return run;
}

// A failure at each phase of writing step-4 (some rank files written; every file durable
// but no manifest; the manifest durable everywhere but the older checkpoints not yet
// removed) fails every rank and leaves step-2 valid: the run resumed from the directory
// goes on with the uninterrupted run's losses. A crash (a directory left without its
// manifest) is not a checkpoint either.
TEST(Checkpoint, AFailureAtEachPhaseLeavesThePreviousCheckpointValid) {
  namespace fs = std::filesystem;
  const PlacementRun reference = TrainAllRanks(Make(2, 3, {}));
  ASSERT_OK(reference.status);
  struct Case {
    std::string fault, error;
    bool new_one_complete;
  };
  const std::vector<Case> cases = {
      {"enospc@4:1:1", "rank-00001.bin", false},  // rank 1's file, unit 1
      {"enospc@4:manifest", "writing checkpoint.json", false},
      // Rank 1 writes no manifest (rank 0 does, for the host): its failure still makes
      // the checkpoint absent.
      {"enospc@4:manifest:1", "writing checkpoint.json", false},
      {"enospc@4:keep", "removing older checkpoints", true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.fault);
    const std::string dir = TestDir("phase-" + c.fault);
    fs::remove_all(dir);
    const FaultedRun run = TrainWithFault(
        Make(2, 3, {"train.checkpoint_dir=" + dir, "train.checkpoint_every=2",
                    "train.checkpoint_keep=1"}),
        c.fault);
    for (const Status& status : run.statuses) {
      EXPECT_THAT(status, StatusIs(::testing::Ne(absl::StatusCode::kOk), HasSubstr(c.error)));
    }
    EXPECT_EQ(run.losses.size(), 3u);  // step 4's report is the failed checkpoint's
    // step-2 complete and intact.
    ASSERT_OK_AND_ASSIGN(const OpenedCheckpoint previous, OpenCheckpoint(dir + "/step-2"));
    EXPECT_OK(VerifyCheckpointFiles(previous, false));
    EXPECT_EQ(fs::exists(dir + "/step-4/checkpoint.json"), c.new_one_complete);
    if (!c.new_one_complete) {
      EXPECT_FALSE(fs::exists(dir + "/step-4"));
    }
    EXPECT_EQ(LatestCheckpoint(dir), dir + (c.new_one_complete ? "/step-4" : "/step-2"));
    const int from = c.new_one_complete ? 4 : 2;
    const PlacementRun resumed = TrainAllRanks(Make(2, 3, {"train.resume=" + dir}));
    ASSERT_OK(resumed.status);
    EXPECT_EQ(resumed.losses, Tail(reference.losses, from));
  }
  // A crash after some rank files: step-4 without its manifest.
  const std::string dir = TestDir("phase-crash");
  ASSERT_OK(TrainAllRanks(Make(2, 3, {"train.checkpoint_dir=" + dir, "train.checkpoint_every=2",
                                      "train.steps=2"}))
                .status);
  fs::create_directories(dir + "/step-4");
  fs::copy_file(dir + "/step-2/rank-00000.bin", dir + "/step-4/rank-00000.bin");
  EXPECT_EQ(LatestCheckpoint(dir), dir + "/step-2");
  const PlacementRun explicit_step = TrainAllRanks(Make(2, 3, {"train.resume=" + dir + "/step-4"}));
  EXPECT_THAT(explicit_step.status,
              StatusIs(::testing::Ne(absl::StatusCode::kOk),
                       HasSubstr(dir + "/step-4 has no checkpoint.json: its writing did not finish")));
  const PlacementRun resumed = TrainAllRanks(Make(2, 3, {"train.resume=" + dir}));
  ASSERT_OK(resumed.status);
  EXPECT_EQ(resumed.losses, Tail(reference.losses, 2));
  EXPECT_EQ(RemovePartialCheckpoints(dir), std::vector<std::string>{dir + "/step-4"});
  EXPECT_TRUE(fs::exists(dir + "/step-2/checkpoint.json"));
}

// Background checkpoints (train.checkpoint_async=true) at world 2, stage 3, the optimizer
// state and params on NVMe (the snapshot reads the swap files), the copy bounded by 1 MiB
// of buffers (the snapshot waits for the writer): the same losses as without checkpoints,
// rank files byte for byte those of synchronous checkpoints (the state after the
// checkpoint's step, not a later one), and a resume from step-2 gives the uninterrupted
// losses exactly.
std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(Checkpoint, BackgroundCheckpointsMatchSynchronousOnesAndResumeExactly) {
  namespace fs = std::filesystem;
  const std::vector<std::string> nvme = {"zero.optimizer_tier=nvme", "zero.param_tier=nvme",
                                         "nvme.chunk_bytes=16KiB"};
  const auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), nvme.begin(), nvme.end());
    return Make(2, 3, extra);
  };
  const PlacementRun reference = TrainAllRanks(with({}));
  ASSERT_OK(reference.status);
  const std::string sync_dir = TestDir("sync-checkpoints");
  const std::string async_dir = TestDir("background-checkpoints");
  fs::remove_all(sync_dir);
  fs::remove_all(async_dir);
  const PlacementRun sync = TrainAllRanks(
      with({"train.checkpoint_dir=" + sync_dir, "train.checkpoint_every=2"}));
  const PlacementRun background = TrainAllRanks(
      with({"train.checkpoint_dir=" + async_dir, "train.checkpoint_every=2",
            "train.checkpoint_async=true", "train.checkpoint_buffer_bytes=1MiB"}));
  ASSERT_OK(sync.status);
  ASSERT_OK(background.status);
  EXPECT_EQ(sync.losses, reference.losses);
  EXPECT_EQ(background.losses, reference.losses);
  for (const std::string step : {"step-2", "step-4", "step-6"}) {
    SCOPED_TRACE(step);
    ASSERT_OK_AND_ASSIGN(const OpenedCheckpoint opened, OpenCheckpoint(async_dir + "/" + step));
    EXPECT_OK(VerifyCheckpointFiles(opened, false));
    for (const std::string file : {"rank-00000.bin", "rank-00001.bin"}) {
      const std::string written = FileBytes(async_dir + "/" + step + "/" + file);
      EXPECT_FALSE(written.empty()) << file;
      EXPECT_TRUE(written == FileBytes(sync_dir + "/" + step + "/" + file)) << file;
    }
  }
  const PlacementRun resumed = TrainAllRanks(
      with({"train.resume=" + async_dir + "/step-2", "train.checkpoint_async=true"}));
  ASSERT_OK(resumed.status);
  EXPECT_EQ(resumed.losses, Tail(reference.losses, 2));
}

// The background snapshot's buffers stay within train.checkpoint_buffer_bytes (1 MiB)
// although the rank's state is larger: never the whole state in RAM; its file is still
// complete and equal to the synchronous one.
TEST(Checkpoint, TheBackgroundSnapshotStaysWithinItsBuffers) {
  namespace fs = std::filesystem;
  const std::string dir = TestDir("background-bounded");
  const std::string sync_dir = TestDir("background-bounded-sync");
  fs::remove_all(dir);
  fs::remove_all(sync_dir);
  const auto run = [](const Options& options) -> StatusOr<std::vector<StepReport>> {
    ASSIGN_OR_RETURN(auto session, TrainingSession::CreateSingleRank(options));
    std::vector<StepReport> reports;
    for (int step = 0; step < options.train.steps; ++step) {
      ASSIGN_OR_RETURN(StepReport report, session->Step(step));
      reports.push_back(std::move(report));
    }
    RETURN_IF_ERROR(session->Finish());
    return reports;
  };
  ASSERT_OK_AND_ASSIGN(
      const std::vector<StepReport> reports,
      run(Make(1, 1, {"model.channels=64", "zero.optimizer_tier=host", "train.checkpoint_dir=" + dir,
                      "train.checkpoint_every=2", "train.checkpoint_async=true",
                      "train.checkpoint_buffer_bytes=1MiB"})));
  ASSERT_OK(run(Make(1, 1, {"model.channels=64", "zero.optimizer_tier=host",
                            "train.checkpoint_dir=" + sync_dir,
                            "train.checkpoint_every=2"}))
                .status());
  const uint64_t file_bytes = fs::file_size(dir + "/step-2/rank-00000.bin");
  EXPECT_GT(file_bytes, 1u << 20);  // the bound matters
  int started = 0;
  for (const StepReport& report : reports) {
    if (report.checkpoint_started == 0) continue;
    ++started;
    EXPECT_GT(report.checkpoint_buffer_peak_bytes, 0u);
    EXPECT_LE(report.checkpoint_buffer_peak_bytes, 1u << 20) << "step " << report.step + 1;
  }
  EXPECT_EQ(started, 2);  // after steps 2 and 4; step 6's (the last) is synchronous
  for (const std::string step : {"step-2", "step-4", "step-6"}) {
    EXPECT_TRUE(FileBytes(dir + "/" + step + "/rank-00000.bin") ==
                FileBytes(sync_dir + "/" + step + "/rank-00000.bin"))
        << step;
  }
}

// A failure of the background writer (a full disk on rank 1 while unit 1 goes into its
// file) is an error on every rank when the checkpoint is completed, at a later step; the
// incomplete step-4 is removed, step-2 stays valid and the resume from the directory gives
// the uninterrupted losses.
TEST(Checkpoint, ABackgroundWriterFailureLeavesThePreviousCheckpointValid) {
  namespace fs = std::filesystem;
  const PlacementRun reference = TrainAllRanks(Make(2, 3, {}));
  ASSERT_OK(reference.status);
  const std::string dir = TestDir("background-enospc");
  fs::remove_all(dir);
  const FaultedRun run = TrainWithFault(
      Make(2, 3, {"train.checkpoint_dir=" + dir, "train.checkpoint_every=2",
                  "train.checkpoint_keep=1", "train.checkpoint_async=true"}),
      "enospc@4:1:1");
  for (const Status& status : run.statuses) {
    EXPECT_THAT(status, StatusIs(::testing::Ne(absl::StatusCode::kOk),
                                 HasSubstr("rank-00001.bin")));
  }
  // Steps 1-4 ran and reported; the failure surfaces at step 5 or 6 (whenever the ranks
  // complete the checkpoint).
  EXPECT_GE(run.losses.size(), 4u);
  EXPECT_LE(run.losses.size(), 5u);
  ASSERT_OK_AND_ASSIGN(const OpenedCheckpoint previous, OpenCheckpoint(dir + "/step-2"));
  EXPECT_OK(VerifyCheckpointFiles(previous, false));
  EXPECT_FALSE(fs::exists(dir + "/step-4"));
  EXPECT_EQ(LatestCheckpoint(dir), dir + "/step-2");
  const PlacementRun resumed = TrainAllRanks(Make(2, 3, {"train.resume=" + dir}));
  ASSERT_OK(resumed.status);
  EXPECT_EQ(resumed.losses, Tail(reference.losses, 2));
}

// Node-local directories: rank 1's file on "another node". Consolidation finds it in the
// directory given, checks every file and writes one rank's checkpoint with the same arrays,
// which resumes with the same losses as the original.
TEST(Checkpoint, ConsolidatesRankFilesFromSeveralDirectories) {
  namespace fs = std::filesystem;
  const std::string dir = TestDir("consolidate"), node1 = TestDir("consolidate-node1");
  ASSERT_OK(TrainAllRanks(Make(2, 3, {"train.checkpoint_dir=" + dir, "train.checkpoint_every=3"}))
                .status);
  const std::string step = dir + "/step-3";
  const std::vector<std::vector<float>> arrays = Arrays(step);
  const PlacementRun from_original = TrainAllRanks(Make(1, 0, {"train.resume=" + step}));
  ASSERT_OK(from_original.status);
  fs::create_directories(node1 + "/step-3");
  fs::rename(step + "/rank-00001.bin", node1 + "/step-3/rank-00001.bin");
  const std::string to = TestDir("consolidated") + "/step-3";
  EXPECT_THAT(ConsolidateCheckpoint({{step}, to}),
              StatusIs(absl::StatusCode::kNotFound,
                       ::testing::AllOf(HasSubstr("rank-00001.bin (written by rank 1 on host " +
                                                  HostName() + ")"),
                                        HasSubstr("another --from"))));
  EXPECT_FALSE(fs::exists(to));
  ASSERT_OK_AND_ASSIGN(const std::string written, ConsolidateCheckpoint({{step, node1}, to}));
  EXPECT_EQ(written, to);
  ASSERT_OK_AND_ASSIGN(const OpenedCheckpoint one, OpenCheckpoint(to));
  EXPECT_EQ(one.world, 1);
  ASSERT_EQ(one.files.size(), 1u);
  EXPECT_OK(VerifyCheckpointFiles(one, false));
  EXPECT_TRUE(Arrays(to) == arrays);
  const PlacementRun from_one = TrainAllRanks(Make(1, 0, {"train.resume=" + to}));
  ASSERT_OK(from_one.status);
  EXPECT_EQ(from_one.losses, from_original.losses);
  // Never over an existing directory.
  EXPECT_THAT(ConsolidateCheckpoint({{step, node1}, to}),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("not an empty directory")));
}

// A format-6 manifest (its checksum made again) with an array this strata cannot read, or
// shards that leave elements uncovered or lie outside their file, is refused when opened,
// naming the unit and the array.
TEST(Checkpoint, AManifestOfArraysItCannotReadIsRefusedNamingThem) {
  const std::string dir = TestDir("manifest-arrays");
  ASSERT_OK(TrainAllRanks(Make(2, 3, {"train.checkpoint_dir=" + dir, "train.checkpoint_every=2",
                                      "train.steps=2"}))
                .status);
  const std::string meta_path = dir + "/step-2/checkpoint.json";
  nlohmann::json original;
  {
    std::ifstream in(meta_path);
    original = nlohmann::json::parse(in);
  }
  const std::string unit = original["units"][1]["name"].get<std::string>();
  auto write = [&](nlohmann::json meta) {
    meta.erase("checksum");
    const std::string compact = meta.dump();
    meta["checksum"] = absl::StrFormat("%016x", XXH3_64bits(compact.data(), compact.size()));
    std::ofstream(meta_path, std::ios::trunc) << meta.dump(2);
  };
  nlohmann::json quantized = original;
  quantized["units"][1]["arrays"][0]["dtype"] = "nf4";
  quantized["units"][1]["arrays"][0]["block"] = 64;
  write(quantized);
  EXPECT_THAT(OpenCheckpoint(dir + "/step-2"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("unit " + unit + "'s master is of dtype nf4"),
                                        HasSubstr("reads f32 arrays without blocks or scales"))));
  nlohmann::json gap = original;
  gap["units"][1]["arrays"][2]["shards"].erase(1);  // rank 1's part of exp_avg_sq
  write(gap);
  EXPECT_THAT(OpenCheckpoint(dir + "/step-2"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unit " + unit + "'s exp_avg_sq covers [0, ")));
  nlohmann::json outside = original;
  outside["units"][1]["arrays"][1]["shards"][0]["offset"] = 1ull << 40;
  write(outside);
  EXPECT_THAT(OpenCheckpoint(dir + "/step-2"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("unit " + unit + "'s exp_avg has a shard of rank 0"),
                                        HasSubstr("lies outside its file"))));
  write(original);
  EXPECT_OK(OpenCheckpoint(dir + "/step-2").status());
}

}  // namespace
}  // namespace strata
