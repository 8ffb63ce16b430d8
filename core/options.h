// The one options struct of strata. Every field states its config key, default and
// consequence; the values a key allows, its documentation and whether ranks may differ on
// it are declared once, in the key table (config/option_keys.cc; docs/config.md). Parsed from a JSON file plus `--set section.key=value` overrides by
// ParseOptions (config/options_parse.h), which rejects unknown keys and bad values, listing
// every problem at once. A key with a few possible values is an enum here, parsed once by
// the parser (OptionNames gives each value's config text): nothing else compares option
// strings. Which placements can run together is decided by ResolvePlacement
// (runtime/placement.h). Thread-safety: a plain value, copied freely.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "core/dtype.h"
#include "core/quant_format.h"
#include "core/rope.h"

namespace strata {

// device.backend.
enum class BackendKind { kCpu, kCuda };
// device.cuda_attention.
enum class CudaAttentionKind { kGemm, kFlash };
// Where one kind of training state lives (zero.optimizer_tier, grad_tier, param_tier).
enum class StateTier { kDevice, kHost, kNvme };
// zero.param_update.
enum class ParamUpdate { kExact, kDelayed };
// zero.shard_group.
enum class ShardGroup { kWorld, kNode };
// train.recompute.
enum class Recompute { kNone, kBlocks };
// train.optimizer_states: Adam's moments in fp32, or blockwise 8-bit (docs/quantization.md,
// "8-bit Adam states").
enum class OptimizerStates { kFp32, kInt8 };
// nvme.engine.
enum class IoEngineKind { kAuto, kIoUring, kPread };
// model.family: gpt (GPT-2: layernorm, learned positions, GELU MLP, tied head) | llama
// (RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention).
enum class ModelFamily { kGpt, kLlama };
// data.format: auto (a token file by its magic, else UTF-8 text; binary refused) | bytes (any
// bytes as byte-level tokens).
enum class DataFormat { kAuto, kBytes };

// OptionNames<E>::kNames[i] is the config text of E(i).
template <typename E>
struct OptionNames;
template <>
struct OptionNames<DType> {
  static constexpr std::array<const char*, 2> kNames = {"fp32", "bf16"};
};
template <>
struct OptionNames<BackendKind> {
  static constexpr std::array<const char*, 2> kNames = {"cpu", "cuda"};
};
template <>
struct OptionNames<RopeScaling> {
  static constexpr std::array<const char*, 4> kNames = {"none", "linear", "llama3", "dynamic"};
};
template <>
struct OptionNames<CudaAttentionKind> {
  static constexpr std::array<const char*, 2> kNames = {"gemm", "flash"};
};
template <>
struct OptionNames<StateTier> {
  static constexpr std::array<const char*, 3> kNames = {"device", "host", "nvme"};
};
template <>
struct OptionNames<BaseDType> {
  static constexpr std::array<const char*, 4> kNames = {"train", "bf16", "int8", "nf4"};
};
template <>
struct OptionNames<ParamUpdate> {
  static constexpr std::array<const char*, 2> kNames = {"exact", "delayed"};
};
template <>
struct OptionNames<ShardGroup> {
  static constexpr std::array<const char*, 2> kNames = {"world", "node"};
};
template <>
struct OptionNames<Recompute> {
  static constexpr std::array<const char*, 2> kNames = {"none", "blocks"};
};
template <>
struct OptionNames<OptimizerStates> {
  static constexpr std::array<const char*, 2> kNames = {"fp32", "int8"};
};
template <>
struct OptionNames<IoEngineKind> {
  static constexpr std::array<const char*, 3> kNames = {"auto", "io_uring", "pread"};
};
template <>
struct OptionNames<ModelFamily> {
  static constexpr std::array<const char*, 2> kNames = {"gpt", "llama"};
};
template <>
struct OptionNames<DataFormat> {
  static constexpr std::array<const char*, 2> kNames = {"auto", "bytes"};
};

// The config text of `value`, e.g. OptionName(StateTier::kNvme) == "nvme".
template <typename E>
const char* OptionName(E value) {
  return OptionNames<E>::kNames[static_cast<size_t>(value)];
}

// Every config text of E with its value (for command-line parsers, e.g. CLI11's
// CheckedTransformer).
template <typename E>
std::map<std::string, E> OptionValues() {
  std::map<std::string, E> values;
  for (size_t i = 0; i < OptionNames<E>::kNames.size(); ++i) {
    values.emplace(OptionNames<E>::kNames[i], static_cast<E>(i));
  }
  return values;
}

struct ModelOptions {
  // model.preset: a named model (config/option_keys.cc Presets(): "tiny", "small",
  // "gpt2-124m", "gpt2-1.5b", "llama-tiny", "llama-1b", "llama-8b"), applied first; the
  // fields below override it.
  std::string preset = "small";
  // model.from: "hf:DIR", a Hugging Face model directory (its config.json), or "llmc:FILE",
  // an llm.c GPT-2 checkpoint (its header), sets the model.* keys (after the preset, before
  // the other keys) and its weights are the initial ones (interop/import_weights.h,
  // interop/llmc_model.h). "" = random initial weights from train.seed.
  std::string from;
  ModelFamily family = ModelFamily::kGpt;  // model.family: gpt | llama
  int layers = 4;          // model.layers: transformer blocks (units 1..L).
  int heads = 4;           // model.heads: attention (query) heads; must divide channels.
  int kv_heads = 0;        // model.kv_heads: key/value heads (llama); 0 = heads.
  int head_dim = 0;        // model.head_dim: width of each head (llama); 0 = channels / heads.
  int channels = 256;      // model.channels: embedding width C.
  int ffn_hidden = 0;      // model.ffn_hidden: MLP inner width; 0 = the family's (4C; llama 8C/3
                           // rounded up to a multiple of 64).
  int vocab = 50304;       // model.vocab: real vocabulary; token ids must be < vocab.
  int padded_vocab = 0;    // model.padded_vocab: embedding rows; 0 = vocab rounded up to 64.
  int max_seq_len = 256;   // model.max_seq_len: longest sequence (gpt: position embedding rows).
  // model.rope_theta, model.rope_scaling and its model.rope_factor, rope_low_freq_factor,
  // rope_high_freq_factor, rope_original_max_seq_len: the rotary embedding (llama;
  // core/rope.h has the scalings).
  RopeSpec rope;
  float norm_eps = 1e-5f;       // model.norm_eps: RMSNorm epsilon (llama; gpt's layernorm: 1e-5).
  bool tie_embeddings = true;   // model.tie_embeddings: LM head = token embedding (gpt: always).
  bool qkv_bias = false;        // model.qkv_bias: q, k, v projections with a bias (llama: Qwen2).
  bool qk_norm = false;         // model.qk_norm: RMSNorm of each q and k head (llama: Qwen3).
  // model.sliding_window: the attention window the model was trained with (llama: Mistral's
  // sliding_window), 0 = none. strata's attention is full causal, which equals the window's
  // for sequences no longer than it: train.seq_len and sampling lengths must be <= it.
  int sliding_window = 0;
};

struct DataOptions {
  // data.path: a text file (byte-level tokens, ids 0..255) or a token file: llm.c's
  // (GPT-2 uint16, magic 20240520; Llama 3 uint32, magic 20240801) or strata's own (magic
  // 20261201, 2 or 4 bytes per token; data/README.md), detected by content. Empty = the
  // embedded default corpus.
  std::string path;
  // data.format: auto (a file starting with a token file's magic is one; anything else must
  // be text: more than 1% of invalid UTF-8 is refused as binary) | bytes (any file, every
  // byte one token).
  DataFormat format = DataFormat::kAuto;
  double val_fraction = 0.1;  // data.val_fraction: tail of the tokens held out for validation.
  // data.tokenizer: "" (the imported model's own tokenizer file, else bytes) | bytes |
  // gpt2 | sentencepiece:FILE | hf:PATH (a tokenizer.json, or a directory holding one or a
  // tokenizer.model). Text is tokenized once and cached (data/tokenizer/training_data.h); token
  // files are used as they are.
  std::string tokenizer;
  // data.cache_dir: where tokenized text is cached; "" = $XDG_CACHE_HOME/strata/tokens or
  // ~/.cache/strata/tokens.
  std::string cache_dir;
};

struct TrainOptions {
  int steps = 50;             // train.steps: optimizer steps to run.
  int micro_batch = 4;        // train.micro_batch: sequences per micro-batch per rank (B).
  int seq_len = 64;           // train.seq_len: tokens per sequence (T <= model.max_seq_len).
  int grad_accum = 1;         // train.grad_accum: micro-batches per optimizer step.
  DType dtype = DType::kF32;  // train.dtype: "fp32" | "bf16" compute/storage of params+acts.
  float lr = 1e-3f;           // train.lr: peak learning rate after warmup.
  float min_lr_fraction = 0.1f;  // train.min_lr_fraction: cosine decays to lr * this.
  int warmup_steps = 5;       // train.warmup_steps: linear warmup from lr/warmup.
  float weight_decay = 0.1f;  // train.weight_decay: AdamW decay on matrices (not biases/norms).
  float beta1 = 0.9f;         // train.beta1
  float beta2 = 0.95f;        // train.beta2
  float eps = 1e-8f;          // train.eps
  float grad_clip = 1.0f;     // train.grad_clip: global-norm clip; 0 disables.
  uint64_t seed = 1337;       // train.seed: parameter init and batch order.
  int eval_every = 25;        // train.eval_every: validation loss every N steps; 0 = never.
  int eval_batches = 4;       // train.eval_batches: micro-batches per validation.
  int log_every = 1;          // train.log_every: progress line every N steps.
  // train.checkpoint_dir, train.checkpoint_every: every N steps (0 = never) the optimizer
  // state goes to <dir>/step-<k> (checkpoint/checkpoint.h); train.checkpoint_keep: only the
  // newest N stay (0 = all). train.resume: a step-<k> directory to go on from (its step k
  // first), or a checkpoint_dir (its newest step-<k>); "" = start fresh.
  // train.recompute: none | blocks (activation checkpointing: each transformer block keeps
  // its output only and runs its forward again in the backward).
  Recompute recompute = Recompute::kNone;
  // train.optimizer_states: fp32 | int8 (the Adam moments of tensors of >= 4096 elements
  // blockwise in 8 bits; the master stays fp32; docs/quantization.md, "8-bit Adam states").
  OptimizerStates optimizer_states = OptimizerStates::kFp32;
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  int checkpoint_keep = 0;
  // train.checkpoint_async: true: a checkpoint's state is copied into host buffers at its
  // step boundary and a writer thread writes and syncs the rank file while training goes
  // on; the manifest follows at a later step boundary (checkpoint/checkpoint_writer.h).
  // false: the step waits for the whole checkpoint. train.checkpoint_buffer_bytes: the
  // host buffers of that copy (at least one unit's shard is copied at a time; when they
  // are full the copy waits for the writer).
  bool checkpoint_async = false;
  uint64_t checkpoint_buffer_bytes = 256ull << 20;
  std::string resume;
  // train.trace_steps: with `strata train --trace FILE`, the steps traced, "A:B" (1-based,
  // inclusive). Default 2:3: the first two steps after the first (which plans and touches
  // memory for the first time), so a trace stays small.
  std::string trace_steps = "2:3";
};

struct DeviceOptions {
  BackendKind backend = BackendKind::kCpu;  // device.backend: cpu | cuda (GPU = local rank).
  // device.memory_limit: device-tier capacity ("2GiB"); 0 = automatic: the GPU's memory on
  // cuda, min(8 GiB, half the rank's share of usable RAM) on cpu (runtime/backend.h).
  uint64_t memory_limit = 0;
  int threads = 0;                 // device.threads: CPU kernel threads; 0 = all cores.
  // device.cuda_attention: gemm (cuBLAS GEMMs, tensor cores in bf16, T x T scores in
  // scratch) | flash (tiled kernels on CUDA cores, no scratch, head size <= 128).
  CudaAttentionKind cuda_attention = CudaAttentionKind::kGemm;
};

struct ZeroOptions {
  // zero.stage: 0 replicated; 1 optimizer state sharded; 2 also gradients reduce-scattered
  // per unit during backward; 3 also parameters sharded between uses (gathered ahead).
  int stage = 0;
  // zero.world: ranks as threads of this process (local communicator). Under mpirun the
  // world is mpirun's and this key must be 1 or equal to it.
  int world = 1;
  float comm_timeout_s = 300.0f;  // zero.comm_timeout_s: a collective waiting longer fails.
  // zero.prefetch_bytes: stage 3: bytes of gathered parameters fetched ahead of need.
  uint64_t prefetch_bytes = 256ull << 20;
  // Placement (ZeRO-Offload, ZeRO-Infinity); the legal combinations are ResolvePlacement's.
  // zero.optimizer_tier: device | host | nvme: where the fp32 master and Adam moments live
  // (host and nvme: stepped by the SIMD CPU Adam, overlapped with backward; nvme: read,
  // stepped and written back unit by unit through a few host buffers). zero.grad_tier:
  // device | host | nvme: where the fp32 gradient sums live (host needs the optimizer off
  // the device; nvme needs it on nvme and stage 2-3). zero.param_tier: device | host | nvme:
  // stage 3's param shards between uses (host needs the optimizer on the host or nvme; nvme
  // needs it on nvme).
  StateTier optimizer_tier = StateTier::kDevice;
  StateTier grad_tier = StateTier::kDevice;
  StateTier param_tier = StateTier::kDevice;
  // zero.param_update: exact (each step's update is in place before the next step) |
  // delayed: the CPU Adam of step t runs during step t+1's forward and backward and its
  // params replace the old ones after their last use there, so step t+1's gradients are
  // computed on params one update old (ZeRO-Offload's delayed parameter update). Hides
  // the optimizer where backward is shorter than the CPU Adam; not bit-identical to exact.
  ParamUpdate param_update = ParamUpdate::kExact;
  // zero.shard_group: world (every unit's state split over all ranks) | node (hybrid
  // sharding: split over the ranks of each node, replicated across nodes; gradient shards
  // all-reduced across nodes). Needs stage >= 1 and the MPI communicator.
  ShardGroup shard_group = ShardGroup::kWorld;
  // zero.nvme_dir: directory of this rank's swap files (O_DIRECT-capable filesystem, not
  // tmpfs); required when a tier is nvme.
  std::string nvme_dir;
  // zero.nvme_allow_memory_fs: accept a tmpfs/ramfs nvme_dir. Default false: refused.
  bool nvme_allow_memory_fs = false;
};

struct NvmeOptions {
  // nvme.engine: auto (io_uring, else the pread pool, saying why) | io_uring | pread.
  IoEngineKind engine = IoEngineKind::kAuto;
  // nvme.read_ahead_units: stage 3 with param_tier=nvme: host buffers for param shards
  // read ahead of their gather (bounds host memory; >= 1).
  int read_ahead_units = 3;
  // nvme.optimizer_buffers: optimizer_tier=nvme: host chunk buffers of the optimizer
  // pipeline; more read further ahead (host memory: 5 x chunk_bytes each).
  int optimizer_buffers = 16;
  // nvme.grad_buffers: grad_tier=nvme: host buffer pairs (fp32 sum + landing, one chunk
  // each) the gradient Adds run through; a unit of more chunks than this writes its early
  // sums out even where they could be handed to the optimizer in memory.
  int grad_buffers = 8;
  int queue_depth = 32;  // nvme.queue_depth: requests in flight per rank (1..4096).
  // nvme.chunk_bytes: the optimizer state of a unit shard is read, stepped and written in
  // chunks of this many fp32 bytes (the pipeline's grain and its host buffers' size); a
  // multiple of 8 KiB.
  uint64_t chunk_bytes = 16ull << 20;
};

struct TiersOptions {
  // tiers.host_memory_limit: capacity of the host tier (pinned memory with CUDA) on this
  // rank; 0 = automatic: the rank's share of usable RAM (device/host_memory.h: physical or
  // cgroup limit, minus a reserve, divided among the ranks on the node; on cpu less the
  // device tier).
  uint64_t host_memory_limit = 0;
};

// LoRA (low-rank adapters): with lora.rank > 0 every base parameter is frozen (no
// gradient sums, optimizer state or fp32 master) and each targeted projection W of every
// block gains y += (alpha / rank) * B (A x), A [rank, in] and B [out, rank] trained
// (models/common/lora.h).
struct LoraOptions {
  int rank = 0;         // lora.rank: adapter rank; 0 = no LoRA (full training).
  float alpha = 16.0f;  // lora.alpha: the update is scaled by alpha / rank.
  // lora.targets: comma-separated projections of every block, by strata's names (gpt:
  // attn.qkv, attn.proj, mlp.fc, mlp.proj; llama: attn.q, attn.k, attn.v, attn.proj,
  // mlp.gate, mlp.up, mlp.down) or Hugging Face/PEFT's (c_attn, c_proj, c_fc, q_proj,
  // k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj), or "all"; "" = PEFT's default
  // for the family (gpt: attn.qkv; llama: attn.q, attn.v).
  std::string targets;
  float dropout = 0.0f;  // lora.dropout: dropout on the adapters' input; in [0, 1).
  // lora.base_tier: device | host | nvme: where the frozen base's params live between uses
  // (host, nvme: zero.stage=3, gathered ahead like the trainable params), whatever the
  // adapters' placement (zero.*).
  StateTier base_tier = StateTier::kDevice;
  // lora.base_dtype: train | bf16 | int8 | nf4: what the frozen base's linear matrices are
  // stored as (core/quant_format.h; docs/quantization.md), dequantized per unit just before
  // each use; train = as the trainable params (train.dtype).
  BaseDType base_dtype = BaseDType::kTrain;

  // Whether LoRA is on (the one place that says what rank 0 means).
  bool enabled() const { return rank > 0; }
};

struct Options {
  ModelOptions model;
  LoraOptions lora;
  DataOptions data;
  TrainOptions train;
  DeviceOptions device;
  ZeroOptions zero;
  TiersOptions tiers;
  NvmeOptions nvme;
};

}  // namespace strata
