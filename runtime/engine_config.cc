// See engine_config.h.
#include "runtime/engine_config.h"

namespace strata {

StatusOr<EngineConfig> EngineConfig::From(const Options& options, int world) {
  EngineConfig config;
  ASSIGN_OR_RETURN(config.placement, ResolvePlacement(options, world));
  const TrainOptions& train = options.train;
  config.dtype = train.dtype;
  config.micro_batch = train.micro_batch;
  config.seq_len = train.seq_len;
  config.grad_accum = train.grad_accum;
  config.seed = train.seed;
  config.beta1 = train.beta1;
  config.beta2 = train.beta2;
  config.eps = train.eps;
  config.weight_decay = train.weight_decay;
  config.grad_clip = train.grad_clip;
  config.lora_dropout = options.lora.dropout;
  config.base_dtype = options.lora.enabled() ? options.lora.base_dtype : BaseDType::kTrain;
  config.prefetch_bytes = options.zero.prefetch_bytes;
  NvmeSettings& nvme = config.nvme;
  nvme.dir = options.zero.nvme_dir;
  nvme.allow_memory_fs = options.zero.nvme_allow_memory_fs;
  nvme.engine = options.nvme.engine;
  nvme.queue_depth = options.nvme.queue_depth;
  nvme.chunk_bytes = options.nvme.chunk_bytes;
  nvme.read_ahead_units = options.nvme.read_ahead_units;
  nvme.optimizer_buffers = options.nvme.optimizer_buffers;
  nvme.grad_buffers = options.nvme.grad_buffers;
  return config;
}

}  // namespace strata
