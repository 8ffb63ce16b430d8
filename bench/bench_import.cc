// `strata bench import --dir DIR [--file-dtype fp32|bf16]`: Hugging Face import against the
// disk it reads from, in one run. A model of the chosen shape (default gpt2-124m) is written
// to DIR as safetensors of the chosen dtype (fp32 as GPT-2 ships, bf16 as the LLaMA family
// does) with random values and dropped from the page cache (fsync + fadvise); a
// one-rank engine on the CPU backend imports it once cold (its state memory touched for the
// first time, as any set-up does), then five rounds alternate
//   - the reference: the files read back sequentially in 16 MiB pieces with O_DIRECT, two
//     in flight, as fio measures a disk, into buffers on 2 MiB pages (this virtual disk's
//     rate; fio's default buffers sit on 4 KiB pages, which it serves several times
//     slower: that figure is printed beside it), and
//   - the warm import (ImportHfWeights: every tensor checked, then unit by unit, each
//     unit's range read, with O_DIRECT as the importer does, and stored in its home),
// each after dropping the files from the cache again, so both see the same moods of a
// shared virtual disk. Figures: median and best of each, and how many CPUs the import
// kept busy (process CPU time / wall time); the goal (>= 0.8) is on the ratio of the
// medians. Then the import's two halves alone: its reading (no engine, into one buffer
// reused across rounds) and the engine's stores (no reading).
// The importer reads each unit straight into its fp32 master where the engine allows
// (EngineState::WriteTargets: master), else into two buffers of one unit's range; the line says which.
// The files are removed at the end.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_import.h"
#include "collectives/local_communicator.h"
#include "config/options_parse.h"
#include "core/cpu_info.h"
#include "interop/import_weights.h"
#include "models/create_model.h"
#include "models/hf/hf_model.h"
#include "models/hf/safetensors.h"
#include "nvme/io_buffer.h"
#include "runtime/backend.h"
#include "runtime/engine.h"

namespace strata {
namespace {

constexpr double kGoalImportVsRead = 0.8;
constexpr int kRounds = 5;

using Clock = std::chrono::steady_clock;

// Writes back and drops `path` from the page cache, so the next read comes from the disk.
void DropFromCache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Reads every file front to back in 16 MiB pieces with O_DIRECT, two pieces in flight
// (two threads taking alternate pieces), as fio measures a disk, into buffers on 2 MiB pages
// (`huge`: the disk's rate; shared/MACHINE.md) or on 4 KiB pages (fio's default buffers,
// which this virtual disk serves several times slower); through the page cache where the
// file system refuses O_DIRECT (said in `direct`). Returns the bytes read.
StatusOr<uint64_t> ReadSequentially(const std::vector<std::string>& files, bool huge,
                                    bool* direct) {
  constexpr size_t kPiece = size_t{16} << 20;
  nvme::IoBufferOptions buffer_options;
  buffer_options.huge_pages = huge;
  nvme::IoBuffer buffers[2];
  for (nvme::IoBuffer& buffer : buffers) {
    ASSIGN_OR_RETURN(buffer, nvme::IoBuffer::Allocate(kPiece, buffer_options));
  }
  uint64_t total = 0;
  *direct = true;
  for (const std::string& path : files) {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
    if (fd < 0) {
      *direct = false;
      fd = ::open(path.c_str(), O_RDONLY);
    }
    if (fd < 0) return absl::NotFoundError("bench import: cannot open " + path);
    const uint64_t size = std::filesystem::file_size(path);
    std::atomic<bool> failed{false};
    auto reader = [&](int which) {
      for (uint64_t offset = which * kPiece; offset < size; offset += 2 * kPiece) {
        if (::pread(fd, buffers[which].data(), kPiece, static_cast<off_t>(offset)) <= 0) {
          failed = true;
        }
      }
    };
    std::thread second(reader, 1);
    reader(0);
    second.join();
    ::close(fd);
    if (failed) return absl::DataLossError("bench import: reading " + path);
    total += size;
  }
  return total;
}

// CPU time of every thread of the process so far.
double ProcessCpuSeconds() {
  timespec now{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return now.tv_sec + now.tv_nsec * 1e-9;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// The model the bench imports: the job's options and the files written for it.
struct ModelFiles {
  Options options;                 // the bench's defaults, then the job's --set
  ModelOptions model;              // options.model resolved
  std::string dir;                 // DIR/strata-bench-import, removed at the end
  std::vector<std::string> files;  // the safetensors files in it
};

// 1. The model of the job as safetensors of `file_dtype` under DIR/strata-bench-import, with
// its config.json, values from a cheap hash; then dropped from the page cache. Prints the
// run's first line (the CPU and the model).
StatusOr<ModelFiles> WriteModelFiles(const BenchArgs& args, const std::string& dir,
                                     DType file_dtype) {
  std::vector<std::string> sets = {"model.preset=gpt2-124m", "train.micro_batch=1",
                                   "train.seq_len=64"};
  sets.insert(sets.end(), args.sets.begin(), args.sets.end());
  ModelFiles written;
  ASSIGN_OR_RETURN(written.options, ParseOptions(args.config_path, sets));
  written.model = ResolveModelOptions(written.options.model);
  ASSIGN_OR_RETURN(auto model, CreateModel(written.model, Recompute::kNone, DType::kF32));
  ASSIGN_OR_RETURN(const std::vector<HfTensor> map, HfTensorMap(written.model, model->units()));
  written.dir = dir + "/strata-bench-import";
  const std::string& out = written.dir;
  std::error_code error;
  std::filesystem::remove_all(out, error);
  std::filesystem::create_directories(out, error);
  if (error) {
    return absl::FailedPreconditionError(absl::StrCat(
        "bench import: cannot create ", out, " (--dir ", dir, "): ", error.message()));
  }

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
  ASSIGN_OR_RETURN(written.files,
                   WriteSafetensorsDirectory(
                       out, tensors, file_dtype == DType::kBF16 ? StDType::kBF16 : StDType::kF32,
                       uint64_t{5} << 30, {{"format", "pt"}}));
  {
    std::FILE* config = std::fopen((out + "/config.json").c_str(), "w");
    const std::string text =
        HfConfigJson(written.model, file_dtype == DType::kBF16 ? "bfloat16" : "float32");
    if (config == nullptr) return absl::PermissionDeniedError("bench import: cannot write " + out);
    std::fwrite(text.data(), 1, text.size(), config);
    std::fclose(config);
  }
  for (const std::string& file : written.files) DropFromCache(file);
  return written;
}

// 2. The engine the import fills (one rank, the job's backend, its state loaded later) and
// the import into it, timed.
class ImportRig {
 public:
  static StatusOr<std::unique_ptr<ImportRig>> Create(const ModelFiles& files) {
    std::unique_ptr<ImportRig> rig(new ImportRig(files));
    Options engine_options = files.options;
    engine_options.model = files.model;
    engine_options.model.from = "hf:" + files.dir;
    rig->dtype_ = engine_options.train.dtype;
    ASSIGN_OR_RETURN(rig->backend_, CreateBackend(engine_options));
    ASSIGN_OR_RETURN(rig->group_, CreateLocalGroup(1, LocalGroupOptions{}));
    ASSIGN_OR_RETURN(rig->model_, CreateModel(files.model, Recompute::kNone,
                                              engine_options.train.dtype, engine_options.lora));
    ASSIGN_OR_RETURN(const EngineConfig engine_config, EngineConfig::From(engine_options, 1));
    ASSIGN_OR_RETURN(
        rig->engine_,
        Engine::Create(engine_config, rig->backend_.device.get(), rig->backend_.ops.get(),
                       rig->backend_.host_ops.get(), rig->model_.get(), rig->group_[0].get(),
                       Engine::InitialState::kLoadedLater));
    return rig;
  }

  // One import of the files (every tensor checked, then unit by unit), then the files
  // dropped from the cache again. Returns its wall time in seconds.
  StatusOr<double> Import() {
    const double cpu_start = ProcessCpuSeconds();
    const auto start = Clock::now();
    RETURN_IF_ERROR(ImportHfWeights(files_.dir, files_.model, *model_, *engine_, false));
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    import_cpu_s_ = ProcessCpuSeconds() - cpu_start;
    for (const std::string& file : files_.files) DropFromCache(file);
    return seconds;
  }

  double import_cpu_s() const { return import_cpu_s_; }  // of the last import, every thread
  DType dtype() const { return dtype_; }                 // the engine's (train.dtype)
  Model& model() { return *model_; }
  Engine& engine() { return *engine_; }

 private:
  explicit ImportRig(const ModelFiles& files) : files_(files) {}

  const ModelFiles& files_;
  DType dtype_ = DType::kF32;
  Backend backend_;  // the members below it point into it: destroyed last
  std::vector<std::unique_ptr<Communicator>> group_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Engine> engine_;
  double import_cpu_s_ = 0;
};

// The reference's and the warm import's seconds, round by round.
struct Rounds {
  uint64_t bytes = 0;  // of the files
  bool direct = true;  // the reference read with O_DIRECT (else through the page cache)
  std::vector<double> read_s, small_page_read_s, import_s;
  std::vector<double> busy_cpus;  // the import's process CPU time / its wall time
};

// 3. Rounds of the reference (a plain sequential read) and the warm import, interleaved
// so both see the same moods of a shared disk.
StatusOr<Rounds> MeasureRounds(const std::vector<std::string>& files, ImportRig& rig) {
  Rounds rounds;
  for (int round = 0; round < kRounds; ++round) {
    auto start = Clock::now();
    ASSIGN_OR_RETURN(rounds.bytes, ReadSequentially(files, true, &rounds.direct));
    rounds.read_s.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    for (const std::string& file : files) DropFromCache(file);
    start = Clock::now();
    ASSIGN_OR_RETURN(rounds.bytes, ReadSequentially(files, false, &rounds.direct));
    rounds.small_page_read_s.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    for (const std::string& file : files) DropFromCache(file);
    ASSIGN_OR_RETURN(const double seconds, rig.Import());
    rounds.import_s.push_back(seconds);
    rounds.busy_cpus.push_back(rig.import_cpu_s() / seconds);
  }
  return rounds;
}

// The import's two halves alone, median seconds of kRounds rounds.
struct Halves {
  double fill_s = 0;   // its reading (no engine)
  double store_s = 0;  // the engine's stores (no reading)
};

// 4. The import's reading alone (every unit into one reused buffer, no engine): what the
// engine's stores add is the difference. Then the engine's stores alone (no reading), as
// the import makes them: from the values already in the master where the engine takes
// them there, else from a buffer.
StatusOr<Halves> MeasureHalves(const std::vector<std::string>& files, const HfWeights& weights,
                               const ImportPlan& plan, ImportRig& rig) {
  const std::vector<int>& base = plan.units;
  std::map<int, UnitImportRoute> routes;
  for (size_t i = 0; i < base.size(); ++i) routes[base[i]] = plan.routes[i];
  auto needs_values = [&](int unit) {
    return routes[unit].master_straight || routes[unit].fp32_buffer;
  };
  Model& model = rig.model();
  EngineState& state = rig.engine().state();
  size_t most = 0;
  for (const int unit : base) most = std::max(most, model.units()[unit].used_elements());
  std::vector<float> values(most);
  std::vector<bf16> raw(most);
  Halves halves;
  std::vector<double> fills;
  for (int round = 0; round < kRounds; ++round) {
    const auto start = Clock::now();
    for (const int unit : base) {
      RETURN_IF_ERROR(weights.Fill(unit, 0, model.units()[unit].used_elements(),
                                   needs_values(unit) ? values.data() : nullptr, nullptr,
                                   routes[unit].raw_params ? raw.data() : nullptr));
    }
    fills.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    for (const std::string& file : files) DropFromCache(file);
  }
  halves.fill_s = Median(fills);
  std::vector<double> stores;
  for (int round = 0; round < kRounds; ++round) {
    const auto start = Clock::now();
    for (const int unit : base) {
      const auto [begin, end] = state.StoredRange(unit);
      if (values.size() < end - begin) values.resize(end - begin);
      const UnitImportRoute& route = routes[unit];
      const float* from = route.master_straight ? state.WriteTargets(unit).master
                          : route.fp32_buffer   ? values.data()
                                                : nullptr;
      const bf16* params = route.params_straight ? state.WriteTargets(unit).params
                           : route.bf16_buffer   ? raw.data()
                                                 : nullptr;
      RETURN_IF_ERROR(state.WriteStoredValues(unit, from, params));
    }
    stores.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  halves.store_s = Median(stores);
  return halves;
}

// Bytes the import writes to memory for its values: each stored element's fp32 master
// (trainable units) and params in the engine's dtype, and the buffers' copies where a
// unit goes through them.
uint64_t BytesWritten(const ImportPlan& plan, ImportRig& rig) {
  const EngineState& state = rig.engine().state();
  uint64_t written = 0;
  for (size_t i = 0; i < plan.units.size(); ++i) {
    const int unit = plan.units[i];
    const auto [begin, end] = state.StoredRange(unit);
    const UnitImportRoute& route = plan.routes[i];
    // The params where they are not the master itself (UnitWriteTargets::params_share_master).
    uint64_t per_element =
        state.WriteTargets(unit).params_share_master ? 0 : DTypeBytes(rig.dtype());
    if (rig.model().units()[unit].trainable()) per_element += sizeof(float);
    if (route.fp32_buffer) per_element += sizeof(float);
    if (route.bf16_buffer) per_element += sizeof(bf16);
    written += per_element * (end - begin);
  }
  return written;
}

// What a plain copy writes on this machine, GB/s: one thread, 256 MiB, best of three.
double PlainCopyGbPerS() {
  double copy_gb_s = 0;
  std::vector<char> from(size_t{256} << 20, 1), to(size_t{256} << 20, 0);
  for (int round = 0; round < 3; ++round) {
    const auto start = Clock::now();
    std::memcpy(to.data(), from.data(), from.size());
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    copy_gb_s = std::max(copy_gb_s, from.size() / seconds / 1e9);
  }
  return copy_gb_s;
}

unsigned Cpus() { return std::max(1u, std::thread::hardware_concurrency()); }

// Everything the report prints, measured in this run, and the figures made from it.
struct Report {
  DType file_dtype = DType::kF32;
  DType engine_dtype = DType::kF32;
  size_t files = 0;
  double cold_s = 0;  // the first import's seconds
  Rounds rounds;
  Halves halves;
  uint64_t written = 0;  // BytesWritten
  double copy_gb_s = 0;  // PlainCopyGbPerS

  double MbS(double seconds) const { return rounds.bytes / seconds / 1e6; }
  double Best(const std::vector<double>& seconds) const {
    return MbS(*std::min_element(seconds.begin(), seconds.end()));
  }
  double read_mb_s() const { return MbS(Median(rounds.read_s)); }
  double import_mb_s() const { return MbS(Median(rounds.import_s)); }
  double ratio() const { return import_mb_s() / read_mb_s(); }
  double best_ratio() const { return Best(rounds.import_s) / Best(rounds.read_s); }
  double busy() const { return Median(rounds.busy_cpus); }
  double written_per_byte() const { return static_cast<double>(written) / rounds.bytes; }
};

// 5. The report: the rates (medians and bests), the import's CPUs, its cold run and its
// two halves alone.
void PrintRates(const Report& r) {
  std::printf("bench import: %.1f MB of %s safetensors in %zu file(s), %d rounds (median / best)\n",
              r.rounds.bytes / 1e6, DTypeName(r.file_dtype), r.files, kRounds);
  std::printf("  sequential read (16 MiB pieces, 2 in flight, %s, 2 MiB pages): %8.1f / %8.1f "
              "MB/s\n",
              r.rounds.direct ? "O_DIRECT" : "page cache: O_DIRECT refused", r.read_mb_s(),
              r.Best(r.rounds.read_s));
  std::printf("  the same into 4 KiB pages (fio's default buffers):  %8.1f MB/s\n",
              r.MbS(Median(r.rounds.small_page_read_s)));
  std::printf("  import into a 1-rank engine (%s), warm:     %8.1f / %8.1f MB/s\n",
              DTypeName(r.engine_dtype), r.import_mb_s(), r.Best(r.rounds.import_s));
  std::printf("  CPUs the warm import kept busy: %.2f of %u (median)\n", r.busy(), Cpus());
  std::printf("  import, cold (first touch of the engine's state): %8.1f MB/s, %.2f s\n",
              r.MbS(r.cold_s), r.cold_s);
  const double fill_s = r.halves.fill_s, store_s = r.halves.store_s;
  std::printf("  reading alone (no engine):                    %8.1f MB/s, %.2f s (%.2f of the "
              "sequential read)\n",
              r.MbS(fill_s), fill_s, r.MbS(fill_s) / r.read_mb_s());
  if (store_s >= 1e-3) {
    std::printf("  the engine's stores alone (no reading):       %8.1f MB/s, %.2f s\n",
                r.MbS(store_s), store_s);
  } else {
    std::printf(
        "  the engine's stores alone (no reading):       %.4f s (nothing to cast or copy)\n",
        store_s);
  }
}

// The importer's memory: which units go straight into their state and which through its
// buffers (fp32 values of units not read into their master, bf16 params of units whose
// params the host cannot write: two of each, of the largest range); then the memory the
// import writes, against the files' bytes and against what a plain copy writes here.
void PrintMemory(const Report& r, const ImportPlan& plan) {
  const size_t largest = plan.largest_fp32 * sizeof(float);
  const size_t largest_raw = plan.largest_bf16 * sizeof(bf16);
  int straight = 0, raw_units = 0, raw_in_place = 0;
  for (const UnitImportRoute& route : plan.routes) {
    raw_units += route.raw_params ? 1 : 0;
    raw_in_place += route.params_straight ? 1 : 0;
    straight += route.fp32_buffer || route.bf16_buffer ? 0 : 1;
  }
  if (largest == 0 && largest_raw == 0) {
    std::printf(
        "  importer memory: every unit read straight into its state (%d units); "
        "one bounce buffer per reading thread\n",
        straight);
  } else {
    std::string buffers;
    if (largest > 0) {
      buffers =
          absl::StrFormat("two of the largest range's fp32 values (%.1f MiB)", largest / 1048576.0);
    }
    if (largest_raw > 0) {
      absl::StrAppend(&buffers, buffers.empty() ? "" : " and ",
                      absl::StrFormat("two of the largest range's bf16 params (%.1f MiB)",
                                      largest_raw / 1048576.0));
    }
    std::printf(
        "  importer memory: %d of %zu units straight into their state; the others "
        "through buffers: %s\n",
        straight, plan.units.size(), buffers.c_str());
  }
  std::printf(
      "  importer buffers in all: %.1f MiB with %d reading threads' bounce buffers "
      "(ImportPlan::HostBytes, which strata plan's RSS counts)\n",
      plan.HostBytes() / 1048576.0, plan.reader_threads);
  if (raw_units > 0) {
    std::printf(
        "  bf16 params: %d of %zu units' the files' bits as they are (no cast), %d "
        "straight into the params, %d through two buffers of their own\n",
        raw_units, plan.units.size(), raw_in_place, raw_units - raw_in_place);
  }
  std::printf(
      "  memory the import writes: %.1f bytes per byte of the files (%s files, %s engine): "
      "%.1f GB/s at the disk's sequential rate; a plain copy here writes %.1f GB/s\n",
      r.written_per_byte(), DTypeName(r.file_dtype), DTypeName(r.engine_dtype),
      r.written_per_byte() * r.read_mb_s() / 1e3, r.copy_gb_s);
}

// The goal on the ratio of the medians and, where it is missed, which half holds it back.
void PrintVerdict(const Report& r) {
  const double ratio = r.ratio(), read_mb_s = r.read_mb_s();
  std::printf("warm import / sequential read: median %.3f, best %.3f (goal >= %.1f: %s)\n", ratio,
              r.best_ratio(), kGoalImportVsRead, ratio >= kGoalImportVsRead ? "MET" : "NOT MET");
  if (ratio >= kGoalImportVsRead) return;
  const double fill_s = r.halves.fill_s, store_s = r.halves.store_s;
  const double read_alone = r.MbS(fill_s) / read_mb_s;
  const double stores_alone = r.MbS(store_s) / read_mb_s;
  if (read_alone < kGoalImportVsRead) {
    std::printf("  why: the importer's reading alone runs at %.2f of the disk\n", read_alone);
  } else if (stores_alone < kGoalImportVsRead) {
    std::printf("  why: the engine's stores alone run at %.2f of the disk\n", stores_alone);
  } else {
    std::printf("  why: each half alone keeps up with the disk (reading %.2f, stores %.2f), "
                "but the import takes %.2f of their summed times: they compete for this "
                "machine's %u CPUs and its memory bandwidth (%.2f CPUs busy)\n",
                read_alone, stores_alone, Median(r.rounds.import_s) / (fill_s + store_s), Cpus(),
                r.busy());
  }
  const double written_per_byte = r.written_per_byte();
  std::printf(
      "  and at the goal's rate the import writes %.1f GB/s to memory, %.2f of what a "
      "plain copy writes here (%.1f bytes per byte read: each value's fp32 master "
      "and %s params, unless they share it)\n",
      written_per_byte * read_mb_s * kGoalImportVsRead / 1e3,
      written_per_byte * read_mb_s * kGoalImportVsRead / 1e3 / r.copy_gb_s, written_per_byte,
      DTypeName(r.engine_dtype));
}

}  // namespace

Status RunBenchImport(const BenchArgs& args, const std::string& dir, DType file_dtype) {
  // The model files go, whatever the outcome: a failed bench leaves nothing in --dir.
  struct RemoveOnExit {
    std::string dir;
    ~RemoveOnExit() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } remove_on_exit{dir + "/strata-bench-import"};
  ASSIGN_OR_RETURN(const ModelFiles model, WriteModelFiles(args, dir, file_dtype));
  ASSIGN_OR_RETURN(const std::unique_ptr<ImportRig> rig, ImportRig::Create(model));
  Report report;
  report.file_dtype = file_dtype;
  report.engine_dtype = rig->dtype();
  report.files = model.files.size();
  // The first import is cold: the engine's state memory touched for the first time.
  ASSIGN_OR_RETURN(report.cold_s, rig->Import());
  ASSIGN_OR_RETURN(report.rounds, MeasureRounds(model.files, *rig));
  // The units the files hold (a LoRA model's base) and, for each, what the import does
  // (PlanImport).
  ASSIGN_OR_RETURN(const HfWeights weights, HfWeights::Open(model.dir, model.model, rig->model()));
  const ImportPlan plan = PlanImport(weights, rig->engine(), rig->model());
  ASSIGN_OR_RETURN(report.halves, MeasureHalves(model.files, weights, plan, *rig));
  report.written = BytesWritten(plan, *rig);
  report.copy_gb_s = PlainCopyGbPerS();

  PrintRates(report);
  PrintMemory(report, plan);
  PrintVerdict(report);
  return absl::OkStatus();
}

}  // namespace strata
