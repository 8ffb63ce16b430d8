// `strata bench lora`: LoRA on a quantized frozen base (docs/lora.md, "A quantized base").
//   1. Bytes per parameter of gpt2-124m's, llama-1b's and llama-8b's base, from the stored
//      layouts of their units with LoRA on (nothing allocated: instant for 8B). The
//      quantized matrices: their pieces' stored bytes (codes, block scales, NF4's double-
//      quantized absmaxes and offset, 16-byte alignment) / their values; goals NF4 <= 0.53,
//      int8 <= 1.07. The whole base (embeddings, norms, head in train.dtype): reported.
//   2. Step time of LoRA on an NF4 base / on a bf16 base (and int8 / bf16), at a LLaMA shape
//      of about 124M parameters, B=4 T=256, fp32, rank 16 on every projection, stage 0,
//      base on the device. The sessions are made once and take turns step by step; the
//      figure is the median of the rounds' ratios (the machines drift by +-20% within
//      minutes, a round's configurations run within seconds of each other). Goal <= 1.15:
//      decoding 4-bit codes per use must cost little next to the matmuls.
//   3. NVMe reads per step with the base there (stage 3, lora.base_tier=nvme), NF4 / bf16:
//      of the quantized matrices from the stored layout (a gather reads a whole unit's
//      stored bytes; goal <= 0.27), and of the whole base measured (reported).
#include "bench/bench_lora.h"

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "config/options_parse.h"
#include "core/cpu_info.h"
#include "core/logging.h"
#include "core/stored_layout.h"
#include "models/create_model.h"
#include "session/session.h"

namespace strata {
namespace {

double Median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

constexpr double kNf4MatrixGoal = 0.53;   // bytes per parameter
constexpr double kInt8MatrixGoal = 1.07;  // bytes per parameter
constexpr double kStepGoal = 1.15;        // NF4 / bf16 step time
constexpr double kNvmeMatrixGoal = 0.27;  // NF4 / bf16 bytes read of the matrices

// The stored bytes of `model`'s base, from the layouts alone.
StoredBaseBytes BaseBytesOfUnits(const std::vector<UnitLayout>& units, DType dtype,
                                 BaseDType base) {
  StoredBaseBytes out;
  const size_t element_bytes = DTypeBytes(dtype);
  for (const UnitLayout& unit : units) {
    if (unit.trainable()) continue;
    const StoredUnit stored = StoredUnit::Of(unit, base, dtype);
    out.base_params += unit.num_params();
    out.base_padded_bytes += stored.StoredLayout(unit).PaddedElements(1) * element_bytes;
    for (const TensorSpec& tensor : unit.tensors()) {
      if (tensor.linear) out.matrix_elements += tensor.numel;
    }
    if (stored.packed()) {
      out.base_bytes += stored.bytes();
      for (const StoredTensor& tensor : stored.tensors()) {
        if (tensor.quantized) out.matrix_bytes += tensor.bytes;
      }
    } else {
      out.base_bytes += unit.used_elements() * element_bytes;
      for (const TensorSpec& tensor : unit.tensors()) {
        if (tensor.linear) out.matrix_bytes += tensor.numel * element_bytes;
      }
    }
  }
  return out;
}

StatusOr<std::unique_ptr<TrainingSession>> Session(const BenchArgs& args,
                                                   std::vector<std::string> sets, BaseDType base) {
  sets.push_back(absl::StrCat("lora.base_dtype=", BaseDTypeName(base)));
  ASSIGN_OR_RETURN(const Options options, ParseOptions(args.config_path, sets));
  return TrainingSession::CreateSingleRank(options);
}

uint64_t FrozenParams(const Model& model) {
  uint64_t params = 0;
  for (const UnitLayout& unit : model.units()) {
    if (!unit.trainable()) params += unit.num_params();
  }
  return params;
}

// "<parent>/strata-bench-lora-XXXXXX", made. parent "": /var/tmp where it exists (a disk on
// most systems, where /tmp may be tmpfs), else the current directory. A directory on tmpfs
// is refused by the session itself (zero.nvme_dir), naming it.
StatusOr<std::string> MakeSwapDir(const std::string& parent) {
  std::string where = parent;
  if (where.empty()) where = std::filesystem::is_directory("/var/tmp") ? "/var/tmp" : ".";
  std::string path = (std::filesystem::path(where) / "strata-bench-lora-XXXXXX").string();
  if (mkdtemp(path.data()) == nullptr) {
    return absl::InternalError(
        absl::StrCat("bench lora: cannot create a directory in ", where, " (--dir)"));
  }
  return std::filesystem::absolute(path).string();
}

double Mb(double bytes) { return bytes / 1e6; }

// The sessions' keys: the bench's shape and LoRA (about 124M parameters), then `defaults`,
// then the caller's --set keys (which may change any of those), then `forced` and what
// every session needs (a flat schedule, one rank, no evaluation).
std::vector<std::string> Compose(const BenchArgs& args, std::vector<std::string> defaults,
                                 std::vector<std::string> forced = {}) {
  std::vector<std::string> sets = {
      "model.family=llama",   "model.channels=768",         "model.layers=12",
      "model.heads=12",       "model.kv_heads=4",           "model.ffn_hidden=2048",
      "model.vocab=32000",    "model.tie_embeddings=false", "model.max_seq_len=256",
      "train.micro_batch=4",  "train.seq_len=256",          "train.dtype=fp32",
      "lora.rank=16",         "lora.targets=all",           "zero.stage=0",
      "lora.base_tier=device"};
  sets.insert(sets.end(), defaults.begin(), defaults.end());
  sets.insert(sets.end(), args.sets.begin(), args.sets.end());
  sets.insert(sets.end(), forced.begin(), forced.end());
  sets.insert(sets.end(), {"train.eval_every=0", "train.steps=1000000", "zero.world=1"});
  return sets;
}

}  // namespace

StatusOr<StoredBaseBytes> ComputeStoredBaseBytes(const ModelOptions& model, DType dtype,
                                                 BaseDType base) {
  LoraOptions lora;
  lora.rank = 16;
  ASSIGN_OR_RETURN(const std::unique_ptr<Model> created,
                   CreateModel(model, Recompute::kNone, dtype, lora));
  return BaseBytesOfUnits(created->units(), dtype, base);
}

std::vector<std::string> LoraStepSets(const BenchArgs& args) { return Compose(args, {}); }

StatusOr<LoraStepFigures> MeasureLoraStepTime(const BenchArgs& args, int rounds, bool int8) {
  if (rounds < 1 || args.steps < 1) {
    return absl::InvalidArgumentError("bench lora: --pairs >= 1 and --steps >= 1");
  }
  const std::vector<std::string> sets = LoraStepSets(args);
  std::vector<BaseDType> bases = {BaseDType::kBF16, BaseDType::kNF4};
  if (int8) bases.push_back(BaseDType::kInt8);
  std::vector<std::unique_ptr<TrainingSession>> sessions;
  for (BaseDType base : bases) {
    ASSIGN_OR_RETURN(auto session, Session(args, sets, base));
    sessions.push_back(std::move(session));
  }
  // The warm-up, once every session is made (making one initializes and quantizes a whole
  // base): first steps create the kernels' primitives and fault memory in.
  for (auto& session : sessions) RETURN_IF_ERROR(session->Step(0).status());
  LoraStepFigures figures;
  const Options& options = sessions[0]->options();
  figures.model = sessions[0]->model().Describe();
  figures.num_params = sessions[0]->num_params();
  figures.base_params = FrozenParams(sessions[0]->model());
  figures.micro_batch = options.train.micro_batch;
  figures.seq_len = options.train.seq_len;
  figures.dtype = options.train.dtype;
  figures.steps = args.steps;
  std::vector<double> nf4_ratios, int8_ratios;
  for (int round = 0; round < rounds; ++round) {
    std::vector<double> ms(bases.size(), 0.0);
    for (int i = 0; i < args.steps; ++i) {
      // Step by step, in turn, the order reversed at every step: a drift of the machine over
      // the round then weighs on every configuration alike.
      const int step = 1 + round * args.steps + i;
      for (size_t turn = 0; turn < bases.size(); ++turn) {
        const size_t k = step % 2 == 1 ? turn : bases.size() - 1 - turn;
        ASSIGN_OR_RETURN(const StepReport report, sessions[k]->Step(step));
        ms[k] += report.ms_per_step / args.steps;
      }
    }
    LoraStepRound r;
    r.bf16_ms = ms[0];
    r.nf4_ms = ms[1];
    if (int8) r.int8_ms = ms[2];
    figures.rounds.push_back(r);
    nf4_ratios.push_back(r.nf4_ms / r.bf16_ms);
    if (int8) int8_ratios.push_back(r.int8_ms / r.bf16_ms);
  }
  figures.nf4_ratio = Median(nf4_ratios);
  figures.int8_ratio = Median(int8_ratios);
  for (auto& session : sessions) RETURN_IF_ERROR(session->Finish());
  return figures;
}

std::vector<std::string> LoraNvmeSets(const BenchArgs& args, const std::string& dir) {
  return Compose(args, {"train.micro_batch=1", "train.seq_len=64"},
                 {"zero.stage=3", "lora.base_tier=nvme", "zero.nvme_dir=" + dir});
}

StatusOr<LoraNvmeFigures> MeasureLoraNvmeReads(const BenchArgs& args, const std::string& dir,
                                               int steps) {
  if (steps < 1) return absl::InvalidArgumentError("bench lora: --nvme-steps >= 1");
  const std::vector<std::string> sets = LoraNvmeSets(args, dir);
  LoraNvmeFigures figures;
  figures.steps = steps;
  for (BaseDType base : {BaseDType::kBF16, BaseDType::kNF4, BaseDType::kInt8}) {
    ASSIGN_OR_RETURN(auto session, Session(args, sets, base));
    const Options& options = session->options();
    figures.model = session->model().Describe();
    figures.micro_batch = options.train.micro_batch;
    figures.seq_len = options.train.seq_len;
    figures.dtype = options.train.dtype;
    figures.prefetch_bytes = options.zero.prefetch_bytes;
    LoraNvmeReads reads;
    reads.base = base;
    reads.stored = BaseBytesOfUnits(session->model().units(), options.train.dtype, base);
    RETURN_IF_ERROR(session->Step(0).status());  // warm-up
    for (int i = 0; i < steps; ++i) {
      ASSIGN_OR_RETURN(const StepReport report, session->Step(1 + i));
      reads.read_bytes_per_step += static_cast<double>(report.result.param_nvme_read_bytes) / steps;
    }
    RETURN_IF_ERROR(session->Finish());
    figures.reads.push_back(reads);
  }
  return figures;
}

Status RunBenchLora(const BenchArgs& args, const LoraBenchArgs& lora) {
  InitLogging(0, 1);
  const std::string cpu = DescribeCpu();
  std::printf(
      "bench lora: LoRA on a quantized frozen base (lora.base_dtype); %s, %u hardware "
      "threads\n",
      cpu.c_str(), std::thread::hardware_concurrency());

  // 1. Bytes per parameter, from the layouts.
  std::printf(
      "\n1. bytes per parameter of the frozen base, from the stored layouts (LoRA on; "
      "computed, nothing allocated; the same on every CPU)\n");
  double worst_nf4 = 0.0, worst_int8 = 0.0;
  std::string worst_nf4_preset, worst_int8_preset;
  for (const char* preset : {"gpt2-124m", "llama-1b", "llama-8b"}) {
    ASSIGN_OR_RETURN(const Options options,
                     ParseOptions("", {absl::StrCat("model.preset=", preset)}));
    StoredBaseBytes by[2][4];  // [fp32, bf16 train.dtype][train, bf16, int8, nf4]
    const DType dtypes[2] = {DType::kF32, DType::kBF16};
    const BaseDType bases[4] = {BaseDType::kTrain, BaseDType::kBF16, BaseDType::kInt8,
                                BaseDType::kNF4};
    for (int d = 0; d < 2; ++d) {
      for (int b = 0; b < 4; ++b) {
        ASSIGN_OR_RETURN(by[d][b], ComputeStoredBaseBytes(options.model, dtypes[d], bases[b]));
      }
    }
    const StoredBaseBytes& nf4 = by[0][3];
    std::printf("%-10s base %.1fM params, of which %.1fM (%.0f%%) in quantized matrices\n", preset,
                nf4.base_params / 1e6, nf4.matrix_elements / 1e6,
                100.0 * nf4.matrix_elements / nf4.base_params);
    std::printf(
        "  quantized matrices: nf4 %.4f, int8 %.4f, bf16 %.4f bytes/param "
        "(codes, scales, alignment)\n",
        by[0][3].matrix_bytes_per_param(), by[0][2].matrix_bytes_per_param(),
        by[0][1].matrix_bytes_per_param());
    for (int d = 0; d < 2; ++d) {
      std::printf(
          "  whole base, train.dtype=%s: nf4 %.4f, int8 %.4f, bf16 %.4f, "
          "unquantized %.4f bytes/param (nf4 %.2f GB, unquantized %.2f GB)\n",
          DTypeName(dtypes[d]), by[d][3].base_bytes_per_param(), by[d][2].base_bytes_per_param(),
          by[d][1].base_bytes_per_param(), by[d][0].base_bytes_per_param(),
          by[d][3].base_bytes / 1e9, by[d][0].base_bytes / 1e9);
    }
    if (nf4.matrix_bytes_per_param() > worst_nf4) {
      worst_nf4 = nf4.matrix_bytes_per_param();
      worst_nf4_preset = preset;
    }
    if (by[0][2].matrix_bytes_per_param() > worst_int8) {
      worst_int8 = by[0][2].matrix_bytes_per_param();
      worst_int8_preset = preset;
    }
  }
  std::printf(
      "goal NF4 matrices <= %.2f bytes/param (double-quantized scales included): worst "
      "%.4f (%s) -> %s\n",
      kNf4MatrixGoal, worst_nf4, worst_nf4_preset.c_str(),
      worst_nf4 <= kNf4MatrixGoal ? "met" : "NOT met");
  if (worst_nf4 > kNf4MatrixGoal) {
    std::printf(
        "  why: matrices whose pieces are not multiples of %zu values pad their last "
        "block, and small pieces pay the 16-byte alignment of four arrays\n",
        kQuantBlock);
  }
  std::printf("goal int8 matrices <= %.2f bytes/param: worst %.4f (%s) -> %s\n", kInt8MatrixGoal,
              worst_int8, worst_int8_preset.c_str(),
              worst_int8 <= kInt8MatrixGoal ? "met" : "NOT met");
  if (worst_int8 > kInt8MatrixGoal) {
    std::printf(
        "  why: a piece not a multiple of %zu values stores its last block's padding "
        "codes too, beside the 4-byte absmax of every block (1.0625 for whole blocks)\n",
        kQuantBlock);
  }
  std::fflush(stdout);
  if (lora.skip_steps) return absl::OkStatus();

  // 2. Step time.
  ASSIGN_OR_RETURN(const Options step_options, ParseOptions(args.config_path, LoraStepSets(args)));
  std::printf(
      "\n2. step time on %s, device.backend=%s (%s kernel threads), one rank: %d rounds "
      "of %d measured steps per base (bf16, nf4%s) after a warm-up step each; the "
      "sessions kept, taking turns step by step, the order reversed at every step\n",
      cpu.c_str(), step_options.device.backend == BackendKind::kCpu ? "cpu" : "cuda",
      step_options.device.threads > 0 ? std::to_string(step_options.device.threads).c_str() : "all",
      lora.rounds, args.steps, lora.int8 ? ", int8" : "");
  std::fflush(stdout);
  ASSIGN_OR_RETURN(const LoraStepFigures step, MeasureLoraStepTime(args, lora.rounds, lora.int8));
  std::printf("   %s\n", step.model.c_str());
  std::printf(
      "   %.1fM parameters: base %.1fM, adapters %.2fM (lora.rank=%d, lora.targets=%s); "
      "B=%d T=%d, train.dtype=%s, zero.stage=%d, base on the device\n",
      step.num_params / 1e6, step.base_params / 1e6, (step.num_params - step.base_params) / 1e6,
      step_options.lora.rank, step_options.lora.targets.c_str(), step.micro_batch, step.seq_len,
      DTypeName(step.dtype), step_options.zero.stage);
  std::vector<std::string> nf4_rounds, int8_rounds;
  for (size_t r = 0; r < step.rounds.size(); ++r) {
    const LoraStepRound& round = step.rounds[r];
    std::printf("  round %zu: bf16 base %.1f ms/step, nf4 %.1f (%.3f)", r + 1, round.bf16_ms,
                round.nf4_ms, round.nf4_ms / round.bf16_ms);
    if (lora.int8) std::printf(", int8 %.1f (%.3f)", round.int8_ms, round.int8_ms / round.bf16_ms);
    std::printf("\n");
    nf4_rounds.push_back(absl::StrFormat("%.3f", round.nf4_ms / round.bf16_ms));
    int8_rounds.push_back(absl::StrFormat("%.3f", round.int8_ms / round.bf16_ms));
  }
  std::printf(
      "step time nf4 / bf16 base on %s: median %.3f of %zu rounds (%s); goal <= %.2f -> "
      "%s\n",
      cpu.c_str(), step.nf4_ratio, step.rounds.size(), absl::StrJoin(nf4_rounds, ", ").c_str(),
      kStepGoal, step.nf4_ratio <= kStepGoal ? "met" : "NOT met");
  if (step.nf4_ratio > kStepGoal) {
    std::vector<double> bf16_ms, nf4_ms;
    for (const LoraStepRound& round : step.rounds) {
      bf16_ms.push_back(round.bf16_ms);
      nf4_ms.push_back(round.nf4_ms);
    }
    const double extra_ms = Median(nf4_ms) - Median(bf16_ms);
    // Every matrix is dequantized before each use: once in the forward, once in the backward.
    ASSIGN_OR_RETURN(const StoredBaseBytes stored,
                     ComputeStoredBaseBytes(step_options.model, step.dtype, BaseDType::kNF4));
    std::printf(
        "  why: the NF4 base costs %.0f ms/step more than the bf16 one, %.2f ns per "
        "value dequantized (%.1fM matrix values, each decoded in the forward and again "
        "in the backward), against the step's matmuls on the same cores\n",
        extra_ms, extra_ms * 1e6 / (2.0 * stored.matrix_elements), stored.matrix_elements / 1e6);
  }
  if (lora.int8) {
    std::printf("step time int8 / bf16 base on %s: median %.3f of %zu rounds (%s); no goal\n",
                cpu.c_str(), step.int8_ratio, step.rounds.size(),
                absl::StrJoin(int8_rounds, ", ").c_str());
  } else {
    std::printf("step time int8 / bf16: left out (--no-int8)\n");
  }

  // 3. NVMe reads.
  ASSIGN_OR_RETURN(const std::string dir, MakeSwapDir(lora.dir));
  std::printf(
      "\n3. NVMe reads per step with the base there (zero.stage=3, lora.base_tier=nvme, "
      "swap files in %s, removed after) on %s\n",
      dir.c_str(), cpu.c_str());
  std::fflush(stdout);
  StatusOr<LoraNvmeFigures> measured = MeasureLoraNvmeReads(args, dir, lora.nvme_steps);
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  RETURN_IF_ERROR(measured.status());
  const LoraNvmeFigures& nvme = *measured;
  std::printf(
      "   the same model, B=%d T=%d (the bytes read do not depend on the batch), %d "
      "measured steps per base after a warm-up step\n",
      nvme.micro_batch, nvme.seq_len, nvme.steps);
  const LoraNvmeReads& bf16 = nvme.reads[0];
  for (const LoraNvmeReads& reads : nvme.reads) {
    std::printf(
        "  %-4s base: %8.1f MB read per step = %.2f passes over the base's stored %.1f MB "
        "(matrices %.1f MB; %.4f bytes/param of the whole base); %.3f of bf16's\n",
        BaseDTypeName(reads.base), Mb(reads.read_bytes_per_step),
        reads.read_bytes_per_step / reads.stored.base_padded_bytes,
        Mb(reads.stored.base_padded_bytes), Mb(reads.stored.matrix_bytes),
        reads.stored.base_bytes_per_param(), reads.read_bytes_per_step / bf16.read_bytes_per_step);
  }
  const LoraNvmeReads& nf4 = nvme.reads[1];
  const double matrix_ratio =
      static_cast<double>(nf4.stored.matrix_bytes) / bf16.stored.matrix_bytes;
  std::printf(
      "NVMe reads of the quantized matrices nf4 / bf16 (their stored bytes: a gather "
      "reads whole units) on %s: %.4f; goal <= %.2f -> %s\n",
      cpu.c_str(), matrix_ratio, kNvmeMatrixGoal,
      matrix_ratio <= kNvmeMatrixGoal ? "met" : "NOT met");
  const double measured_ratio = nf4.read_bytes_per_step / bf16.read_bytes_per_step;
  const double layout_ratio =
      static_cast<double>(nf4.stored.base_padded_bytes) / bf16.stored.base_padded_bytes;
  std::printf(
      "NVMe reads of the whole base nf4 / bf16, measured on %s: %.4f (the layouts' "
      "ratio %.4f; embeddings and head stay in %s); reported, no goal\n",
      cpu.c_str(), measured_ratio, layout_ratio, DTypeName(nvme.dtype));
  const double nf4_passes = nf4.read_bytes_per_step / nf4.stored.base_padded_bytes;
  const double bf16_passes = bf16.read_bytes_per_step / bf16.stored.base_padded_bytes;
  if (std::abs(nf4_passes - bf16_passes) > 0.01) {
    std::printf(
        "  the bases were read %.2f (nf4) and %.2f (bf16) times per step: a unit "
        "gathered for its forward is kept for its backward while the gathered units fit "
        "in zero.prefetch_bytes (%.0f MB), re-read otherwise; a smaller base keeps more\n",
        nf4_passes, bf16_passes, Mb(nvme.prefetch_bytes));
  }
  return absl::OkStatus();
}

}  // namespace strata
