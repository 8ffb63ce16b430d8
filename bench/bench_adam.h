// `strata bench adam`: throughput of the CPU AdamW of ZeRO-Offload (kernels/cpu/cpu_adam.h)
// as a ratio to a bandwidth reference kernel with the same memory traffic
// (kernels/cpu/cpu_adam_bandwidth.h), measured alternately in the same process, because
// memory bandwidth on the target machines drifts between levels and only the paired ratio
// is meaningful. Goal: Adam >= 0.95 of the reference, for fp32 params (28 bytes/param) and
// with the bf16 param copy written in the same pass (30 bytes/param). With 8-bit states
// (kernels/cpu/adam8bit.h; train.optimizer_states = int8) against a reference with its
// traffic (16 and 18 bytes/param, plus 16 per 2048-block): goal >= 0.8; and the 8-bit rate
// over the fp32 one (reported; the traffic allows ~1.7x).
// Thread-safety: call from one thread; it runs OpenMP regions of `threads` threads.
#pragma once

#include "core/status.h"

namespace strata {

// Measures at 50M and 200M params (quick: 5M and 20M, for smoke tests) and prints params/s,
// GB/s and the ratio per size and dtype, then the goal line. threads < 1: all OpenMP threads.
// Fails only when memory for the arrays cannot be had (the message names the bytes); a
// missed goal is printed, not an error.
Status RunBenchAdam(int threads, bool quick);

}  // namespace strata
