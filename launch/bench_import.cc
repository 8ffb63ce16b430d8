// `strata bench import --dir DIR`: Hugging Face import against the disk it reads from, in
// one run. A model of the chosen shape (default gpt2-124m) is written to DIR as fp32
// safetensors with random values, dropped from the page cache (fsync + fadvise), then
//   1. read back sequentially in 16 MiB pieces: the disk's sequential read rate through the
//      page cache, the reference (dropped from the cache again after);
//   2. imported into a one-rank engine on the CPU backend (ImportHfWeights: every tensor
//      checked, then unit by unit, each unit's range read and stored in its home), twice:
//      cold (the engine's state memory touched for the first time, as any set-up does,
//      random init included) and, after dropping the files from the cache again, warm (the
//      import's own cost): file bytes / import time, divided by the reference. Goal >= 0.8
//      for the warm import.
// The importer holds two units' ranges at a time (one read ahead while the other is
// stored); the line says how large the largest is.
// The files are removed at the end.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/local_communicator.h"
#include "core/cpu_info.h"
#include "launch/commands.h"
#include "launch/import_weights.h"
#include "launch/options_parse.h"
#include "models/create_model.h"
#include "models/hf/hf_model.h"
#include "models/hf/safetensors.h"
#include "runtime/backend.h"
#include "runtime/engine.h"

namespace strata {
namespace {

constexpr double kGoalImportVsRead = 0.8;

using Clock = std::chrono::steady_clock;

// Writes back and drops `path` from the page cache, so the next read comes from the disk.
void DropFromCache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Reads every file front to back in 16 MiB pieces; returns the bytes read.
StatusOr<uint64_t> ReadSequentially(const std::vector<std::string>& files) {
  std::vector<char> buffer(16 << 20);
  uint64_t total = 0;
  for (const std::string& path : files) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) return absl::NotFoundError("bench import: cannot open " + path);
    ssize_t got = 0;
    while ((got = ::read(fd, buffer.data(), buffer.size())) > 0) total += got;
    ::close(fd);
    if (got < 0) return absl::DataLossError("bench import: reading " + path);
  }
  return total;
}

}  // namespace

Status RunBenchImport(const CommandArgs& args, const std::string& dir) {
  std::vector<std::string> sets = {"model.preset=gpt2-124m", "train.micro_batch=1",
                                   "train.seq_len=64"};
  sets.insert(sets.end(), args.sets.begin(), args.sets.end());
  ASSIGN_OR_RETURN(const Options options, ParseOptions(args.config_path, sets));
  const ModelOptions model_options = ResolveModelOptions(options.model);
  ASSIGN_OR_RETURN(auto model, CreateModel(model_options, Recompute::kNone, DType::kF32));
  ASSIGN_OR_RETURN(const std::vector<HfTensor> map, HfTensorMap(model_options, model->units()));
  const std::string out = dir + "/strata-bench-import";
  std::filesystem::remove_all(out);
  std::filesystem::create_directories(out);

  // 1. The model as fp32 safetensors, values from a cheap hash.
  std::vector<StOutputTensor> tensors;
  for (const HfTensor& entry : map) {
    tensors.push_back({entry.name, entry.shape, [](uint64_t begin, uint64_t count, float* values) {
                         for (uint64_t i = 0; i < count; ++i) {
                           const uint64_t x = (begin + i) * 0x9e3779b97f4a7c15ull;
                           values[i] = static_cast<float>(x >> 40) * 0x1.0p-30f - 0.0078f;
                         }
                         return absl::OkStatus();
                       }});
  }
  std::printf("bench import: %s, %s\n", DescribeCpu().c_str(), model->Describe().c_str());
  ASSIGN_OR_RETURN(const std::vector<std::string> files,
                   WriteSafetensorsDirectory(out, tensors, StDType::kF32, uint64_t{5} << 30,
                                             {{"format", "pt"}}));
  {
    std::FILE* config = std::fopen((out + "/config.json").c_str(), "w");
    const std::string text = HfConfigJson(model_options, "float32");
    if (config == nullptr) return absl::PermissionDeniedError("bench import: cannot write " + out);
    std::fwrite(text.data(), 1, text.size(), config);
    std::fclose(config);
  }
  for (const std::string& file : files) DropFromCache(file);

  // 2. The reference: a plain sequential read.
  auto start = Clock::now();
  ASSIGN_OR_RETURN(const uint64_t bytes, ReadSequentially(files));
  const double read_s = std::chrono::duration<double>(Clock::now() - start).count();
  for (const std::string& file : files) DropFromCache(file);
  const double read_mb_s = bytes / read_s / 1e6;

  // 3. The import into a one-rank engine.
  Options engine_options = options;
  engine_options.model = model_options;
  engine_options.model.from = "hf:" + out;
  ASSIGN_OR_RETURN(Backend backend, CreateBackend(engine_options));
  ASSIGN_OR_RETURN(auto group, CreateLocalGroup(1, LocalGroupOptions{}));
  ASSIGN_OR_RETURN(auto engine_model,
                   CreateModel(model_options, Recompute::kNone, engine_options.train.dtype));
  ASSIGN_OR_RETURN(auto engine,
                   Engine::Create(engine_options, backend.device.get(), backend.ops.get(),
                                  backend.host_ops.get(), engine_model.get(), group[0].get(),
                                  Engine::InitialState::kLoadedLater));
  double import_s[2] = {0, 0};
  for (int pass = 0; pass < 2; ++pass) {
    start = Clock::now();
    RETURN_IF_ERROR(ImportHfWeights(out, model_options, *engine_model, *engine, false));
    import_s[pass] = std::chrono::duration<double>(Clock::now() - start).count();
    for (const std::string& file : files) DropFromCache(file);
  }
  const double cold_mb_s = bytes / import_s[0] / 1e6, import_mb_s = bytes / import_s[1] / 1e6;
  // The import's reading alone (every unit's values into one reused buffer, no engine):
  // what the engine's stores add is the difference.
  double fill_s = 0;
  {
    ASSIGN_OR_RETURN(const HfWeights weights, HfWeights::Open(out, model_options, *engine_model));
    std::vector<float> values;
    start = Clock::now();
    for (size_t u = 0; u < engine_model->units().size(); ++u) {
      values.resize(engine_model->units()[u].used_elements());
      RETURN_IF_ERROR(weights.Fill(static_cast<int>(u), 0, values.size(), values.data(), nullptr));
    }
    fill_s = std::chrono::duration<double>(Clock::now() - start).count();
    for (const std::string& file : files) DropFromCache(file);
  }
  size_t largest = 0;
  for (const UnitLayout& unit : engine_model->units()) {
    largest = std::max(largest, unit.used_elements() * sizeof(float));
  }
  std::filesystem::remove_all(out);

  const double ratio = import_mb_s / read_mb_s;
  std::printf("bench import: %.1f MB in %zu file(s)\n", bytes / 1e6, files.size());
  std::printf("  sequential read (16 MiB pieces, cold cache): %8.1f MB/s\n", read_mb_s);
  std::printf("  import into a 1-rank engine (%s), cold: %8.1f MB/s, %.2f s (first touch of "
              "the engine's state)\n",
              DTypeName(engine_options.train.dtype), cold_mb_s, import_s[0]);
  std::printf("  import into a 1-rank engine (%s), warm: %8.1f MB/s, %.2f s\n",
              DTypeName(engine_options.train.dtype), import_mb_s, import_s[1]);
  std::printf("  reading alone (no engine):                  %8.1f MB/s, %.2f s\n",
              bytes / fill_s / 1e6, fill_s);
  std::printf("  importer memory: two units' ranges at a time, the largest %.1f MiB\n",
              largest / 1048576.0);
  std::printf("warm import / sequential read: %.2f (goal >= %.1f: %s)\n", ratio, kGoalImportVsRead,
              ratio >= kGoalImportVsRead ? "MET" : "NOT MET");
  return absl::OkStatus();
}

}  // namespace strata
