// The CUDA objects behind a CUDA Device's streams and events, for code that launches
// kernels or calls CUDA libraries on them (kernels/cuda, collectives' NCCL). Only built
// where CUDA is (it includes cudart's header).
// Thread-safety: the accessors only read; the handles stay owned by their Stream/Event.
#pragma once

#include <cuda_runtime_api.h>

#include "device/device.h"
#include "core/status.h"

namespace strata {

// The cudaStream_t of a Stream made by a CUDA Device; kInvalidArgument for another
// backend's stream. Valid while the Stream lives.
StatusOr<cudaStream_t> NativeStream(Stream& stream);

// The cudaEvent_t of an Event made by a CUDA Device; kInvalidArgument otherwise.
StatusOr<cudaEvent_t> NativeEvent(Event& event);

// The CUDA ordinal of the GPU a CUDA Device drives; kInvalidArgument for other backends.
StatusOr<int> NativeDeviceId(Device& device);

}  // namespace strata
