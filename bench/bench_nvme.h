// `strata bench nvme --dir DIR [--size 1GiB] [--engine auto]` (bench/bench_nvme.cc, over nvme/disk_bench.h): sequential O_DIRECT MB/s of the I/O engine against fio and a plain loop.
// Thread-safety: called once, from main.
#pragma once

#include <string>

#include "core/options.h"
#include "core/status.h"

namespace strata {

// `size`: the test file's size as text ("1GiB"); `dir`: where it is written (removed after).
Status RunBenchNvme(const std::string& dir, const std::string& size, IoEngineKind engine);

}  // namespace strata
