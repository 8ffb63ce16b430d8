// The key table and value conversions; see option_keys.h.
#include "config/option_keys.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/bytes.h"

namespace strata::option_keys {
namespace {

template <typename E>
EnumField Enum(E* (*field)(Options&)) {
  EnumField out;
  for (const char* name : OptionNames<E>::kNames) out.names.push_back(name);
  out.get = [field](const Options& options) {
    return static_cast<int>(*field(const_cast<Options&>(options)));
  };
  out.set = [field](Options& options, int value) { *field(options) = static_cast<E>(value); };
  return out;
}

Range In(double min, double max, const char* noun = "") {
  Range range;
  range.has_min = range.has_max = true;
  range.min = min;
  range.max = max;
  range.noun = noun;
  return range;
}
Range AtLeast(double min, const char* suffix = "") {
  Range range;
  range.has_min = true;
  range.min = min;
  range.suffix = suffix;
  return range;
}
Range Above(double min, const char* suffix = "") {
  Range range = AtLeast(min, suffix);
  range.min_open = true;
  return range;
}
Range Fraction(bool min_open, bool max_open) {
  Range range = In(0, 1, "a fraction");
  range.min_open = min_open;
  range.max_open = max_open;
  return range;
}
Range UnitInterval() {  // [0, 1)
  Range range = In(0, 1, "a value");
  range.max_open = true;
  return range;
}
Range Named(double min, double max, const char* expected) {
  Range range = In(min, max);
  range.expected = expected;
  return range;
}
Range MultipleOf(uint64_t step, const char* expected) {
  Range range;
  range.multiple_of = step;
  range.expected = expected;
  return range;
}

}  // namespace

std::string ExpectedText(const Range& range) {
  if (*range.expected != '\0') return range.expected;
  if (range.has_min && range.has_max) {
    return absl::StrCat(range.noun, *range.noun != '\0' ? " " : "", "in ",
                        range.min_open ? "(" : "[", NumberText(range.min), ", ",
                        NumberText(range.max), range.max_open ? ")" : "]");
  }
  if (range.has_min) {
    return absl::StrCat(range.min_open ? "> " : ">= ", NumberText(range.min), range.suffix);
  }
  if (range.has_max) {
    return absl::StrCat(range.max_open ? "< " : "<= ", NumberText(range.max), range.suffix);
  }
  return "";
}

std::vector<std::string> RankLocalKeyNames() {
  std::vector<std::string> names;
  for (const KeySpec& spec : Keys()) {
    if (spec.rank_local) names.push_back(spec.name);
  }
  return names;
}

std::string OneOf(const std::vector<std::string>& names) {
  if (names.size() == 1) return names[0];
  std::vector<std::string> head(names.begin(), names.end() - 1);
  return absl::StrCat(absl::StrJoin(head, ", "), " or ", names.back());
}

// The one list of keys. Defaults are not written here: they come from Options{}.
const std::vector<KeySpec>& Keys() {
  static const auto* keys = new std::vector<KeySpec>{
      {"model.preset", +[](Options& o) { return &o.model.preset; },
       "named model size, applied before every other key; the model.* keys below override "
       "it.",
       false, {}, false},
      {"model.from", +[](Options& o) { return &o.model.from; },
       "hf:DIR (a Hugging Face model directory, GPT-2 or LLaMA family: its config.json) or "
       "llmc:FILE (an llm.c GPT-2 checkpoint: its header) sets the model.* keys (after "
       "model.preset, before the others) and its weights are the initial ones; \"\" = random "
       "weights from train.seed.",
       false, {}, false},
      {"model.family", Enum(+[](Options& o) { return &o.model.family; }),
       "architecture: gpt (GPT-2: layernorm, learned positions, GELU MLP, tied head) | llama "
       "(RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention; Llama, Mistral, "
       "Qwen).",
       false, {}, false},
      {"model.layers", +[](Options& o) { return &o.model.layers; },
       "transformer blocks (units 1..L).", false, In(1, 1024), false},
      {"model.heads", +[](Options& o) { return &o.model.heads; },
       "attention (query) heads; must divide model.channels.", false, In(1, 4096), false},
      {"model.kv_heads", +[](Options& o) { return &o.model.kv_heads; },
       "key/value heads of grouped-query attention (llama); 0 = model.heads; must divide "
       "model.heads (gpt: 0 or model.heads).",
       false, In(0, 4096), false},
      {"model.head_dim", +[](Options& o) { return &o.model.head_dim; },
       "width of each attention head (llama: Hugging Face's head_dim, as Mistral Nemo and "
       "Qwen3 set it apart from the channels); 0 = model.channels / model.heads, which must "
       "then divide; even (rotary embeddings); gpt: 0 or model.channels / model.heads.",
       false, In(0, 65536), false},
      {"model.channels", +[](Options& o) { return &o.model.channels; },
       "embedding width C.", false, In(1, 1048576), false},
      {"model.ffn_hidden", +[](Options& o) { return &o.model.ffn_hidden; },
       "MLP inner width; 0 = the family's (gpt 4C; llama 8C/3 rounded up to a multiple of "
       "64) (gpt: 0 or 4C).",
       false, In(0, 4194304), false},
      {"model.vocab", +[](Options& o) { return &o.model.vocab; },
       "real vocabulary size (the softmax's classes); token ids must be < vocab.",
       false, In(1, 1073741824), false},
      {"model.padded_vocab", +[](Options& o) { return &o.model.padded_vocab; },
       "rows of the token embedding and LM head (the extra rows stay zero and take no part "
       "in the loss); 0 = model.vocab rounded up to a multiple of 64; else >= model.vocab.",
       false, {}, false},
      {"model.max_seq_len", +[](Options& o) { return &o.model.max_seq_len; },
       "longest sequence (gpt: rows of the position embedding); >= train.seq_len.", false, In(1, 1048576), false},
      {"model.rope_theta", +[](Options& o) { return &o.model.rope.theta; },
       "rotary embedding base (llama); > 0.", false, {}, false},
      {"model.rope_scaling", Enum(+[](Options& o) { return &o.model.rope.scaling; }),
       "rotary frequency scaling (llama; Hugging Face's rope_scaling): none | linear "
       "(frequencies / model.rope_factor) | llama3 (Llama 3.1/3.2: low frequencies / "
       "model.rope_factor, high ones kept, a mix between) | dynamic (dynamic NTK: the default "
       "frequencies within model.rope_original_max_seq_len, which model.max_seq_len must not "
       "exceed; core/rope.h).",
       false, {}, false},
      {"model.rope_factor", +[](Options& o) { return &o.model.rope.factor; },
       "the scaling's factor (linear, llama3, dynamic); > 0.", false, {}, false},
      {"model.rope_low_freq_factor", +[](Options& o) { return &o.model.rope.low_freq_factor; },
       "llama3 scaling: wavelengths above model.rope_original_max_seq_len / this are divided; "
       "> 0.",
       false, {}, false},
      {"model.rope_high_freq_factor", +[](Options& o) { return &o.model.rope.high_freq_factor; },
       "llama3 scaling: wavelengths below model.rope_original_max_seq_len / this are kept; > "
       "model.rope_low_freq_factor.",
       false, {}, false},
      {"model.rope_original_max_seq_len",
       +[](Options& o) { return &o.model.rope.original_max_seq_len; },
       "llama3, dynamic scalings: the context the model was first trained for; >= 1.", false, {}, false},
      {"model.norm_eps", +[](Options& o) { return &o.model.norm_eps; },
       "RMSNorm epsilon (llama; gpt's layernorm uses 1e-5).", false, Above(0), false},
      {"model.tie_embeddings", +[](Options& o) { return &o.model.tie_embeddings; },
       "the LM head is the token embedding (gpt: must be true).", false, {}, false},
      {"model.sliding_window", +[](Options& o) { return &o.model.sliding_window; },
       "the attention window the model was trained with (llama: Mistral's sliding_window); 0 "
       "= none. strata's attention is full causal, the same as the window's for sequences "
       "within it: train.seq_len (and a sample's length) must be <= it.",
       false, In(0, 1048576), false},
      {"model.qkv_bias", +[](Options& o) { return &o.model.qkv_bias; },
       "the q, k and v projections have a bias (llama: Qwen2; gpt: must be false, its biases "
       "are its own).",
       false, {}, false},
      {"model.qk_norm", +[](Options& o) { return &o.model.qk_norm; },
       "each q and k head is RMSNormed over its model.head_dim channels before the rotation "
       "(llama: Qwen3's q_norm and k_norm; not with model.qkv_bias; gpt: must be false).",
       false, {}, false},
      {"data.path", +[](Options& o) { return &o.data.path; },
       "text file (byte-level tokens) or token file (llm.c GPT-2 uint16 or Llama 3 uint32, or "
       "strata's 2/4-byte format; data/README.md); empty = the embedded corpus.",
       false, {}, false},
      {"data.format", Enum(+[](Options& o) { return &o.data.format; }),
       "auto (a token file by its magic, else UTF-8 text: a file with more than 1% "
       "invalid UTF-8 is refused as binary) | bytes (any file, each byte one token).",
       false, {}, false},
      {"data.tokenizer", +[](Options& o) { return &o.data.tokenizer; },
       "\"\" (model.from's own tokenizer.json/tokenizer.model/vocab.json + merges.txt, else "
       "bytes) | bytes | gpt2 | sentencepiece:FILE | hf:PATH (a tokenizer.json or a directory "
       "holding one, a tokenizer.model, or GPT-2's vocab.json + merges.txt); text is tokenized "
       "once and cached, token files are used as they are.",
       false, {}, false},
      {"data.cache_dir", +[](Options& o) { return &o.data.cache_dir; },
       "directory of cached tokenized text; \"\" = $XDG_CACHE_HOME/strata/tokens or "
       "~/.cache/strata/tokens.",
       false, {}, true},
      {"data.val_fraction", +[](Options& o) { return &o.data.val_fraction; },
       "tail of the tokens held out for validation.", false, Fraction(true, true), false},
      {"train.steps", +[](Options& o) { return &o.train.steps; }, "optimizer steps to run.",
       false, AtLeast(1), false},
      {"train.micro_batch", +[](Options& o) { return &o.train.micro_batch; },
       "sequences per micro-batch per rank (B).", false, In(1, 1 << 20), false},
      {"train.seq_len", +[](Options& o) { return &o.train.seq_len; },
       "tokens per sequence (T); <= model.max_seq_len.", false, AtLeast(1), false},
      {"train.grad_accum", +[](Options& o) { return &o.train.grad_accum; },
       "micro-batches per optimizer step.", false, In(1, 65536), false},
      {"train.dtype", Enum(+[](Options& o) { return &o.train.dtype; }),
       "compute/storage dtype of params and activations: fp32 | bf16.", false, {}, false},
      {"train.lr", +[](Options& o) { return &o.train.lr; }, "peak learning rate after warmup.",
       false, Above(0), false},
      {"train.min_lr_fraction", +[](Options& o) { return &o.train.min_lr_fraction; },
       "cosine schedule decays to lr * this.", false, Fraction(false, false), false},
      {"train.warmup_steps", +[](Options& o) { return &o.train.warmup_steps; },
       "linear warmup steps.", false, AtLeast(0), false},
      {"train.weight_decay", +[](Options& o) { return &o.train.weight_decay; },
       "AdamW decay on matrices (not biases/norms).", false, AtLeast(0), false},
      {"train.beta1", +[](Options& o) { return &o.train.beta1; },
       "Adam first-moment decay.", false, UnitInterval(), false},
      {"train.beta2", +[](Options& o) { return &o.train.beta2; },
       "Adam second-moment decay.", false, UnitInterval(), false},
      {"train.eps", +[](Options& o) { return &o.train.eps; }, "Adam epsilon.", false, Above(0), false},
      {"train.grad_clip", +[](Options& o) { return &o.train.grad_clip; },
       "global-norm gradient clip; 0 disables.", false, AtLeast(0, " (0 disables clipping)"), false},
      {"train.seed", +[](Options& o) { return &o.train.seed; },
       "seed of parameter init and batch order; unsigned 64-bit.", false, {}, false},
      {"train.eval_every", +[](Options& o) { return &o.train.eval_every; },
       "validation loss every N steps; 0 = never.", false, AtLeast(0), false},
      {"train.eval_batches", +[](Options& o) { return &o.train.eval_batches; },
       "micro-batches per validation.", false, In(1, 1 << 20), false},
      {"train.log_every", +[](Options& o) { return &o.train.log_every; },
       "progress line every N steps.", false, AtLeast(1), true},
      {"train.recompute", Enum(+[](Options& o) { return &o.train.recompute; }),
       "activation recompute: none | blocks (each block keeps only its output and runs its "
       "forward again during the backward: less activation memory, ~1/3 more compute).",
       false, {}, false},
      {"train.optimizer_states", Enum(+[](Options& o) { return &o.train.optimizer_states; }),
       "Adam moments: fp32 | int8 (blockwise 8-bit: a 2048-element block whose tensors all have "
       ">= 4096 elements, one weight-decay flag and no vocabulary rows (embeddings, LM heads) "
       "stores 2 bytes per element + 8 per block instead of 8 per element; the fp32 master "
       "stays; every optimizer tier: on nvme the moments' extents hold the 8-bit form).",
       false, {}, false},
      {"train.checkpoint_dir", +[](Options& o) { return &o.train.checkpoint_dir; },
       "directory of checkpoints (<dir>/step-<k>: fp32 master and Adam moments of every "
       "unit, independent of stage, placement and world size).",
       false, {}, false},
      {"train.checkpoint_every", +[](Options& o) { return &o.train.checkpoint_every; },
       "write a checkpoint after every N steps (and after the last); 0 = never.", false, AtLeast(0), false},
      {"train.checkpoint_keep", +[](Options& o) { return &o.train.checkpoint_keep; },
       "keep only the newest N checkpoints in train.checkpoint_dir; 0 = all.", false, AtLeast(0), false},
      {"train.checkpoint_async", +[](Options& o) { return &o.train.checkpoint_async; },
       "true: a checkpoint is copied into host buffers at its step and written and synced "
       "by a writer thread while the next steps run (its manifest follows at a later step "
       "boundary, the end of training or a SIGTERM stop); false: training waits for it.",
       false, {}, false},
      {"train.checkpoint_buffer_bytes",
       +[](Options& o) { return &o.train.checkpoint_buffer_bytes; },
       "with train.checkpoint_async: host memory for the checkpoint's copy (bytes or a size "
       "like 256MiB); when full the copy waits for the writer to drain a buffer (one "
       "unit's shard is copied at a time, whatever the bound); kept allocated between "
       "checkpoints.",
       true, AtLeast(1 << 20, " (1 MiB)"), true},
      {"train.resume", +[](Options& o) { return &o.train.resume; },
       "a checkpoint (<dir>/step-<k>) to resume from, at step k, or a checkpoint_dir (its "
       "newest); \"\" = start fresh.",
       false, {}, false},
      {"train.trace_steps", +[](Options& o) { return &o.train.trace_steps; },
       "with strata train --trace FILE: the steps traced, A:B (1-based, inclusive); a "
       "bounded trace of a few steps after the first.",
       false, {}, false},
      {"lora.rank", +[](Options& o) { return &o.lora.rank; },
       "LoRA adapter rank; 0 = full training; else the base is frozen and only the adapters "
       "train.",
       false, In(0, 4096), false},
      {"lora.alpha", +[](Options& o) { return &o.lora.alpha; },
       "LoRA scale numerator: the adapter's update is scaled by alpha / rank.", false, Above(0), false},
      {"lora.targets", +[](Options& o) { return &o.lora.targets; },
       "comma-separated projections given adapters: gpt attn.qkv, attn.proj, mlp.fc, "
       "mlp.proj; llama attn.q, attn.k, attn.v, attn.proj, mlp.gate, mlp.up, mlp.down; or "
       "PEFT's names (c_attn, c_proj, c_fc, q_proj, k_proj, v_proj, o_proj, gate_proj, "
       "up_proj, down_proj); all; \"\" = PEFT's default (gpt attn.qkv; llama attn.q,attn.v).",
       false, {}, false},
      {"lora.dropout", +[](Options& o) { return &o.lora.dropout; },
       "dropout on the adapters' input.", false, UnitInterval(), false},
      {"lora.base_tier", Enum(+[](Options& o) { return &o.lora.base_tier; }),
       "where the frozen base's params live between uses: device | host | nvme (host, nvme: "
       "zero.stage=3; independent of where the adapters and their optimizer live).",
       false, {}, false},
      {"lora.base_dtype", Enum(+[](Options& o) { return &o.lora.base_dtype; }),
       "what the frozen base's linear matrices are stored as: train (train.dtype) | bf16 | "
       "int8 (blockwise absmax, blocks of 64) | nf4 (QLoRA's 4-bit NormalFloat, double-"
       "quantized absmaxes); dequantized per unit before each use (docs/quantization.md).",
       false, {}, false},
      {"device.backend", Enum(+[](Options& o) { return &o.device.backend; }),
       "compute backend: cpu | cuda (one GPU per local rank; needs a CUDA build).", false, {}, false},
      {"device.memory_limit", +[](Options& o) { return &o.device.memory_limit; },
       "device-tier capacity: bytes or a size like 512MiB, 2GiB; 0 = automatic (cuda: the "
       "GPU's memory; cpu: min(8GiB, half the rank's share of usable RAM)).",
       true, {}, true},
      {"device.threads", +[](Options& o) { return &o.device.threads; },
       "CPU kernel threads; 0 = all cores.", false, In(0, 1024), true},
      {"device.cuda_attention", Enum(+[](Options& o) { return &o.device.cuda_attention; }),
       "CUDA attention kernels: gemm (every product a cuBLAS GEMM, on tensor cores in bf16; "
       "T x T scores per head in scratch, up to 256 MiB a call) | flash (tiled kernels on "
       "CUDA cores; no scratch; head size <= 128).",
       false, {}, false},
      {"zero.stage", +[](Options& o) { return &o.zero.stage; },
       "ZeRO stage: 0 replicated, 1 optimizer sharded, 2 + gradients, 3 + parameters.", false, Named(0, 3, "0, 1, 2 or 3"), false},
      {"zero.world", +[](Options& o) { return &o.zero.world; },
       "ranks as threads of this process; under mpirun 1 or mpirun's -np.", false, In(1, 64, "a rank count"), false},
      {"zero.comm_timeout_s", +[](Options& o) { return &o.zero.comm_timeout_s; },
       "a collective waiting longer than this fails naming the missing ranks.", false, Above(0, " seconds"), false},
      {"zero.prefetch_bytes", +[](Options& o) { return &o.zero.prefetch_bytes; },
       "stage 3: bytes of gathered parameters fetched ahead of need.", true, AtLeast(0), false},
      {"zero.optimizer_tier", Enum(+[](Options& o) { return &o.zero.optimizer_tier; }),
       "where fp32 master + Adam moments live: device | host | nvme (host, nvme: CPU Adam, "
       "need zero.stage >= 1).",
       false, {}, false},
      {"zero.grad_tier", Enum(+[](Options& o) { return &o.zero.grad_tier; }),
       "where the fp32 gradient shards are summed: device | host | nvme (host needs the "
       "optimizer on host or nvme; nvme needs it on nvme and zero.stage 2 or 3).",
       false, {}, false},
      {"zero.param_tier", Enum(+[](Options& o) { return &o.zero.param_tier; }),
       "stage 3: where param shards live between uses: device | host | nvme (host needs the "
       "optimizer on host or nvme, nvme needs it on nvme).",
       false, {}, false},
      {"zero.param_update", Enum(+[](Options& o) { return &o.zero.param_update; }),
       "exact | delayed: delayed runs each step's CPU Adam during the next step's forward "
       "and backward (one-step delayed parameter update of ZeRO-Offload: gradients are "
       "computed on params one update old); needs optimizer_tier=host, grad_tier=host, "
       "param_tier=device.",
       false, {}, false},
      {"zero.shard_group", Enum(+[](Options& o) { return &o.zero.shard_group; }),
       "world | node: the ranks each unit's state is split over. node (hybrid sharding): "
       "shards within each node, replicas across nodes, gradient shards all-reduced across "
       "nodes (less traffic between nodes, more memory per rank; losses equal world's "
       "within 1e-5 relative: docs/placement.md). Needs zero.stage >= 1 and mpirun on the "
       "cpu backend; the node layout is MPI's or STRATA_RANKS_PER_NODE (docs/multinode.md).",
       false, {}, false},
      {"zero.nvme_dir", +[](Options& o) { return &o.zero.nvme_dir; },
       "directory of the swap files when a tier is nvme (O_DIRECT-capable, not tmpfs); a "
       "directory a live run uses is refused, crashed runs' leftovers there are removed.",
       false, {}, true},
      {"zero.nvme_allow_memory_fs", +[](Options& o) { return &o.zero.nvme_allow_memory_fs; },
       "accept a zero.nvme_dir on tmpfs or ramfs (refused by default: swap files there take "
       "the RAM they are meant to free).",
       false, {}, true},
      {"tiers.host_memory_limit", +[](Options& o) { return &o.tiers.host_memory_limit; },
       "host-tier capacity per rank (pinned with CUDA): a size like 16GiB; 0 = automatic: "
       "the rank's share of usable RAM (physical or cgroup limit, minus max(2GiB, 1/8), "
       "divided among the node's ranks; on cpu less the device tier). Above it is refused.",
       true, {}, true},
      {"nvme.engine", Enum(+[](Options& o) { return &o.nvme.engine; }),
       "I/O engine of the nvme tier: auto (io_uring, else pread) | io_uring | pread.", false, {}, true},
      {"nvme.read_ahead_units", +[](Options& o) { return &o.nvme.read_ahead_units; },
       "param_tier=nvme: param shards read ahead of their gather (host buffers).",
       false, In(1, 1024), false},
      {"nvme.optimizer_buffers", +[](Options& o) { return &o.nvme.optimizer_buffers; },
       "optimizer_tier=nvme: host buffers (each one chunk's master, m, v, grads, params) "
       "the read -> AdamW -> write-back pipeline runs through.",
       false, In(2, 1024), false},
      {"nvme.grad_buffers", +[](Options& o) { return &o.nvme.grad_buffers; },
       "grad_tier=nvme: host buffer pairs (one chunk's fp32 sum + landing) the gradient sums "
       "run through; a unit of more chunks writes its early sums out.",
       false, In(2, 1024), false},
      {"nvme.queue_depth", +[](Options& o) { return &o.nvme.queue_depth; },
       "I/O requests in flight per rank.", false, In(1, 4096, "a depth"), true},
      {"nvme.chunk_bytes", +[](Options& o) { return &o.nvme.chunk_bytes; },
       "grain of the nvme optimizer pipeline (fp32 bytes per state array and chunk).",
       true, MultipleOf(8192, "a multiple of 8 KiB (8192 bytes)"), false},
  };
  return *keys;
}

namespace {

ModelOptions Gpt(int layers, int heads, int channels, int vocab, int max_seq_len) {
  ModelOptions m;
  m.family = ModelFamily::kGpt;
  m.layers = layers;
  m.heads = heads;
  m.channels = channels;
  m.vocab = vocab;
  m.max_seq_len = max_seq_len;
  return m;
}

// Llama 3.1/3.2's rotary embedding: theta 500000, llama3 scaling from an 8192 context.
RopeSpec Llama3Rope(float factor) {
  RopeSpec rope;
  rope.theta = 500000.0f;
  rope.scaling = RopeScaling::kLlama3;
  rope.factor = factor;
  rope.low_freq_factor = 1.0f;
  rope.high_freq_factor = 4.0f;
  rope.original_max_seq_len = 8192;
  return rope;
}

ModelOptions Llama(int layers, int heads, int kv_heads, int channels, int ffn_hidden, int vocab,
                   int max_seq_len, const RopeSpec& rope, bool tie_embeddings) {
  ModelOptions m;
  m.family = ModelFamily::kLlama;
  m.layers = layers;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.channels = channels;
  m.ffn_hidden = ffn_hidden;
  m.vocab = vocab;
  m.max_seq_len = max_seq_len;
  m.rope = rope;
  m.tie_embeddings = tie_embeddings;
  return m;
}

}  // namespace

const std::vector<Preset>& Presets() {
  static const auto* presets = new std::vector<Preset>{
      {"tiny", Gpt(2, 2, 64, 256, 64)},
      {"small", Gpt(4, 4, 256, 50304, 256)},
      {"gpt2-124m", Gpt(12, 12, 768, 50257, 1024)},   // padded to 50,304
      {"gpt2-1.5b", Gpt(48, 25, 1600, 50257, 1024)},  // GPT-2 XL; the GPU benchmark's big model
      {"llama-tiny", Llama(2, 4, 2, 64, 128, 256, 64, RopeSpec{}, false)},  // for tests
      // Shapes of Llama 3.2 1B and Llama 3.1 8B (config only: no weights are embedded),
      // with their long-context "llama3" rope scaling.
      {"llama-1b", Llama(16, 32, 8, 2048, 8192, 128256, 131072, Llama3Rope(32.0f), true)},
      {"llama-8b", Llama(32, 32, 8, 4096, 14336, 128256, 131072, Llama3Rope(8.0f), false)},
      // Llama 3.1 70B's shape (strata plan's example of a base larger than a card).
      {"llama-70b", Llama(80, 64, 8, 8192, 28672, 128256, 131072, Llama3Rope(8.0f), false)},
  };
  return *presets;
}

const Preset* FindPreset(const std::string& name) {
  for (const Preset& preset : Presets()) {
    if (name == preset.name) return &preset;
  }
  return nullptr;
}

std::string PresetList() {
  std::vector<std::string> names;
  for (const Preset& preset : Presets()) names.push_back(preset.name);
  return absl::StrJoin(names, ", ");
}

const KeySpec* FindKey(const std::string& name) {
  for (const KeySpec& spec : Keys()) {
    if (name == spec.name) return &spec;
  }
  return nullptr;
}

namespace {

template <typename T>
bool ParseWhole(const std::string& text, T* out) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  T value{};
  auto [ptr, error] = std::from_chars(begin, end, value);
  if (text.empty() || error != std::errc() || ptr != end) return false;
  *out = value;
  return true;
}

constexpr const char* kIntExpected = "an integer in [-2147483648, 2147483647]";
constexpr const char* kFloatExpected = "a finite number (fp32 range)";
constexpr const char* kDoubleExpected = "a finite number";
constexpr const char* kBoolExpected = "true or false";
constexpr const char* kSeedExpected = "an unsigned 64-bit integer";
constexpr const char* kSizeExpected =
    "a size: a byte count or a string like \"4096\", \"512MiB\", \"2GiB\"";

}  // namespace

std::string SizeText(uint64_t bytes) {
  static const char* kUnits[] = {"TiB", "GiB", "MiB", "KiB"};
  for (int i = 0; i < 4; ++i) {
    uint64_t unit = 1ull << (10 * (4 - i));
    if (bytes != 0 && bytes % unit == 0) return absl::StrCat(bytes / unit, kUnits[i]);
  }
  return absl::StrCat(bytes);
}

std::string JsonText(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return absl::StrCat(text, " (", value.type_name(), ")");
}

std::string SetFromText(const KeySpec& spec, const std::string& text, Options& options) {
  std::string got = absl::StrCat("got '", text, "', expected ");
  if (auto* field = std::get_if<int* (*)(Options&)>(&spec.field)) {
    int value;
    if (!ParseWhole(text, &value)) return got + kIntExpected;
    *(*field)(options) = value;
  } else if (auto* field = std::get_if<float* (*)(Options&)>(&spec.field)) {
    float value;
    if (!ParseWhole(text, &value) || !std::isfinite(value)) return got + kFloatExpected;
    *(*field)(options) = value;
  } else if (auto* field = std::get_if<double* (*)(Options&)>(&spec.field)) {
    double value;
    if (!ParseWhole(text, &value) || !std::isfinite(value)) return got + kDoubleExpected;
    *(*field)(options) = value;
  } else if (auto* field = std::get_if<uint64_t* (*)(Options&)>(&spec.field)) {
    uint64_t value;
    if (spec.is_size) {
      StatusOr<uint64_t> bytes = ParseBytes(text);
      if (!bytes.ok()) return got + kSizeExpected;
      value = *bytes;
    } else if (!ParseWhole(text, &value)) {
      return got + kSeedExpected;
    }
    *(*field)(options) = value;
  } else if (auto* field = std::get_if<std::string* (*)(Options&)>(&spec.field)) {
    *(*field)(options) = text;
  } else if (auto* field = std::get_if<EnumField>(&spec.field)) {
    const auto it = std::find(field->names.begin(), field->names.end(), text);
    if (it == field->names.end()) return got + OneOf(field->names);
    field->set(options, static_cast<int>(it - field->names.begin()));
  } else if (auto* field = std::get_if<bool* (*)(Options&)>(&spec.field)) {
    if (text != "true" && text != "false") return got + kBoolExpected;
    *(*field)(options) = text == "true";
  }
  return "";
}

std::string SetFromJson(const KeySpec& spec, const Json& value, Options& options) {
  std::string got = absl::StrCat("got ", JsonText(value), ", expected ");
  if (auto* field = std::get_if<int* (*)(Options&)>(&spec.field)) {
    if (!value.is_number_integer()) return got + kIntExpected;
    bool fits = value.is_number_unsigned()
                    ? value.get<uint64_t>() <= uint64_t{std::numeric_limits<int>::max()}
                    : value.get<int64_t>() >= std::numeric_limits<int>::min() &&
                          value.get<int64_t>() <= std::numeric_limits<int>::max();
    if (!fits) return got + kIntExpected;
    *(*field)(options) = static_cast<int>(value.get<int64_t>());
  } else if (auto* field = std::get_if<float* (*)(Options&)>(&spec.field)) {
    if (!value.is_number()) return got + kFloatExpected;
    double number = value.get<double>();
    if (!std::isfinite(number) || std::fabs(number) > std::numeric_limits<float>::max()) {
      return got + kFloatExpected;
    }
    *(*field)(options) = static_cast<float>(number);
  } else if (auto* field = std::get_if<double* (*)(Options&)>(&spec.field)) {
    if (!value.is_number() || !std::isfinite(value.get<double>())) return got + kDoubleExpected;
    *(*field)(options) = value.get<double>();
  } else if (auto* field = std::get_if<uint64_t* (*)(Options&)>(&spec.field)) {
    if (spec.is_size) {
      if (value.is_number_unsigned()) {
        *(*field)(options) = value.get<uint64_t>();
      } else if (value.is_string()) {
        StatusOr<uint64_t> bytes = ParseBytes(value.get<std::string>());
        if (!bytes.ok()) return got + kSizeExpected;
        *(*field)(options) = *bytes;
      } else {
        return got + kSizeExpected;
      }
    } else {
      if (!value.is_number_unsigned()) return got + kSeedExpected;
      *(*field)(options) = value.get<uint64_t>();
    }
  } else if (auto* field = std::get_if<std::string* (*)(Options&)>(&spec.field)) {
    if (!value.is_string()) return got + "a string";
    *(*field)(options) = value.get<std::string>();
  } else if (auto* field = std::get_if<EnumField>(&spec.field)) {
    if (!value.is_string()) return got + "a string: " + OneOf(field->names);
    return SetFromText(spec, value.get<std::string>(), options).empty()
               ? ""
               : got + OneOf(field->names);
  } else if (auto* field = std::get_if<bool* (*)(Options&)>(&spec.field)) {
    if (!value.is_boolean()) return got + kBoolExpected;
    *(*field)(options) = value.get<bool>();
  }
  return "";
}

std::string ValueText(const KeySpec& spec, const Options& options) {
  Options& mutable_options = const_cast<Options&>(options);  // accessors only read here
  if (auto* field = std::get_if<int* (*)(Options&)>(&spec.field)) {
    return NumberText(*(*field)(mutable_options));
  } else if (auto* field = std::get_if<float* (*)(Options&)>(&spec.field)) {
    return NumberText(*(*field)(mutable_options));
  } else if (auto* field = std::get_if<double* (*)(Options&)>(&spec.field)) {
    return NumberText(*(*field)(mutable_options));
  } else if (auto* field = std::get_if<uint64_t* (*)(Options&)>(&spec.field)) {
    uint64_t value = *(*field)(mutable_options);
    return spec.is_size ? SizeText(value) : NumberText(value);
  } else if (auto* field = std::get_if<std::string* (*)(Options&)>(&spec.field)) {
    return *(*field)(mutable_options);
  } else if (auto* field = std::get_if<EnumField>(&spec.field)) {
    return field->names[field->get(options)];
  } else if (auto* field = std::get_if<bool* (*)(Options&)>(&spec.field)) {
    return *(*field)(mutable_options) ? "true" : "false";
  }
  return "?";
}

std::string TypeName(const KeySpec& spec) {
  if (std::holds_alternative<int* (*)(Options&)>(spec.field)) return "int";
  if (std::holds_alternative<float* (*)(Options&)>(spec.field)) return "float";
  if (std::holds_alternative<double* (*)(Options&)>(spec.field)) return "float";
  if (std::holds_alternative<uint64_t* (*)(Options&)>(spec.field)) {
    return spec.is_size ? "size" : "uint64";
  }
  if (auto* field = std::get_if<EnumField>(&spec.field)) return absl::StrJoin(field->names, "|");
  if (std::holds_alternative<bool* (*)(Options&)>(spec.field)) return "bool";
  return "string";
}

}  // namespace strata::option_keys
