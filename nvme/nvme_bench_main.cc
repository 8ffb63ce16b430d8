// nvme_bench_main: runs RunDiskBench (disk_bench.h) from the command line and prints its
// figures; `strata bench nvme` calls the same function. Exit status 1 on error, 2 on usage.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "nvme/disk_bench.h"
#include "core/logging.h"
#include "core/bytes.h"

int main(int argc, char** argv) {
  CLI::App app{"nvme bench: engine vs fio vs a plain pread loop, sequential 1 MiB O_DIRECT"};
  strata::nvme::DiskBenchOptions options;
  std::string size = "1GiB";
  std::string request_size = "1MiB";
  bool no_fio = false;
  bool no_small_pages = false;
  app.add_option("--dir", options.dir, "directory for the test file (on the disk to measure)")
      ->required();
  app.add_option("--size", size, "test file size, e.g. 1GiB, 2GiB (default 1GiB)");
  app.add_option("--request-size", request_size, "request size (default 1MiB)");
  app.add_option("--depths", options.queue_depths, "queue depths, e.g. 1,4,16,32")->delimiter(',');
  app.add_option("--passes", options.passes,
                 "alternating passes per figure, median counts (default 3)")
      ->check(CLI::Range(1, 100));
  app.add_option("--engine", options.engine, "auto | io_uring | pread (default auto)")
      ->transform(CLI::CheckedTransformer(strata::OptionValues<strata::IoEngineKind>()));
  app.add_flag("--no-fio", no_fio, "skip fio's reference figures");
  app.add_flag("--no-small-pages", no_small_pages,
               "skip the engine-into-4-KiB-page-buffers figure");
  app.add_flag("--keep-file", options.keep_file, "keep the test file afterwards");
  CLI11_PARSE(app, argc, argv);

  strata::InitLogging(0, 1);
  auto file_bytes = strata::ParseBytes(size);
  auto request_bytes = strata::ParseBytes(request_size);
  if (!file_bytes.ok() || !request_bytes.ok()) {
    std::fprintf(
        stderr, "nvme bench: error: %s\n",
        std::string((!file_bytes.ok() ? file_bytes.status() : request_bytes.status()).message())
            .c_str());
    return 2;
  }
  options.file_bytes = *file_bytes;
  options.request_bytes = *request_bytes;
  options.run_fio = !no_fio;
  options.measure_small_page_buffers = !no_small_pages;
  auto result = strata::nvme::RunDiskBench(options);
  if (!result.ok()) {
    std::fprintf(stderr, "nvme bench: error: %s\n", std::string(result.status().message()).c_str());
    return 1;
  }
  std::printf("%s", strata::nvme::FormatDiskBench(*result).c_str());
  return 0;
}
