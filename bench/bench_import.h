// `strata bench import --dir DIR [--file-dtype fp32|bf16]` (bench/bench_import.cc): Hugging Face import MB/s against a sequential read of the same files, written in `file_dtype`.
// Thread-safety: called once, from main.
#pragma once

#include <string>

#include "bench/bench_args.h"
#include "core/dtype.h"
#include "core/status.h"

namespace strata {

// `dir`: where the model files are written (removed after).
Status RunBenchImport(const BenchArgs& args, const std::string& dir, DType file_dtype);

}  // namespace strata
