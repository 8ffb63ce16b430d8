// `strata bench adam` (see bench_adam.h). For each size the arrays are allocated once
// (2 MiB aligned, transparent huge pages requested, first touched by the threads that later
// update them) and shared by both kernels, so Adam and the reference see the same pages,
// alignment and TLB behaviour. Each row alternates single passes of Adam and the reference
// (order swapped every pair, so a drift in bandwidth favours neither) for a few seconds; a
// pair's ratio compares two passes a fraction of a second apart, and the row reports the
// median of the pairs' ratios, which also shrugs off passes slowed by other processes on a
// shared machine. Throughputs are medians too.
// Thread-safety: see bench_adam.h.
#include "bench/bench_adam.h"

#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_adam.h"
#include "kernels/cpu/cpu_adam_bandwidth.h"

namespace strata {
namespace {

constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr double kGoalRatio = 0.95;

// An anonymous mapping, 2 MiB aligned, with transparent huge pages requested. Move-only.
class HugePageArray {
 public:
  static StatusOr<HugePageArray> Create(size_t bytes) {
    const size_t mapping_bytes = (bytes + 2 * kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    void* mapping =
        mmap(nullptr, mapping_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapping == MAP_FAILED) {
      return ErrnoError(errno, absl::StrCat("bench adam: mmap of ", mapping_bytes, " bytes"));
    }
    const uintptr_t aligned = (reinterpret_cast<uintptr_t>(mapping) + kHugePageBytes - 1) /
                              kHugePageBytes * kHugePageBytes;
    // Only a hint: without THP the bench still runs, on 4 KiB pages for both kernels.
    madvise(reinterpret_cast<void*>(aligned),
            mapping_bytes - (aligned - reinterpret_cast<uintptr_t>(mapping)), MADV_HUGEPAGE);
    return HugePageArray(mapping, mapping_bytes, reinterpret_cast<void*>(aligned));
  }
  HugePageArray(HugePageArray&& other) noexcept
      : mapping_(std::exchange(other.mapping_, nullptr)),
        mapping_bytes_(other.mapping_bytes_),
        data_(other.data_) {}
  HugePageArray& operator=(HugePageArray&&) = delete;
  HugePageArray(const HugePageArray&) = delete;
  HugePageArray& operator=(const HugePageArray&) = delete;
  ~HugePageArray() {
    if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
  }

  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  HugePageArray(void* mapping, size_t mapping_bytes, void* data)
      : mapping_(mapping), mapping_bytes_(mapping_bytes), data_(data) {}
  void* mapping_;
  size_t mapping_bytes_;
  void* data_;
};

// The optimizer state of one size: master, grad, m, v (fp32) and the bf16 param copy.
struct Arrays {
  size_t n;
  std::vector<HugePageArray> owners;
  float *master, *grad, *m, *v;
  bf16* param;
};

StatusOr<Arrays> AllocateArrays(size_t n, int threads) {
  Arrays arrays;
  arrays.n = n;
  for (int i = 0; i < 4; ++i) {
    ASSIGN_OR_RETURN(HugePageArray array, HugePageArray::Create(n * sizeof(float)));
    arrays.owners.push_back(std::move(array));
  }
  ASSIGN_OR_RETURN(HugePageArray params, HugePageArray::Create(n * sizeof(bf16)));
  arrays.owners.push_back(std::move(params));
  arrays.master = arrays.owners[0].as<float>();
  arrays.grad = arrays.owners[1].as<float>();
  arrays.m = arrays.owners[2].as<float>();
  arrays.v = arrays.owners[3].as<float>();
  arrays.param = arrays.owners[4].as<bf16>();
  // Training-like values from a cheap hash; first touch by the same static split of threads
  // as the kernels use.
#pragma omp parallel for schedule(static) num_threads(threads)
  for (size_t i = 0; i < n; ++i) {
    const uint32_t h = static_cast<uint32_t>(i) * 2654435761u;
    const float unit = static_cast<float>(h >> 8) * 0x1p-24f - 0.5f;  // [-0.5, 0.5)
    const float g = unit * 2e-3f;
    arrays.master[i] = unit * 0.1f;
    arrays.grad[i] = g;
    arrays.m[i] = 0.5f * g;
    arrays.v[i] = 0.5f * g * g + 1e-12f;
    arrays.param[i] = bf16{0};
  }
  return arrays;
}

using Clock = std::chrono::steady_clock;

double SecondsOf(const std::function<void()>& pass) {
  const Clock::time_point start = Clock::now();
  pass();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

struct Row {
  size_t n;
  const char* dtype;
  int bytes_per_param;
  double adam_params_per_s, reference_params_per_s;
  double ratio, ratio_min, ratio_max;
  size_t pairs;
};

std::string Millions(size_t n) { return absl::StrCat(n / 1000000, "M"); }

// Adam's arithmetic ceiling: params/s with each thread's arrays in its L2 cache (best of
// many short runs), i.e. the most memory bandwidth the kernel could keep up with.
StatusOr<double> ComputeCeilingParamsPerSecond(const cpu::CpuAdam& adam, int threads,
                                               bool with_bf16) {
  const size_t n = cpu::kCpuAdamMinElementsPerThread * threads;  // 16 KiB elements per thread
  std::vector<float> master(n, 0.01f), grad(n, 1e-3f), m(n, 5e-4f), v(n, 1e-6f);
  std::vector<bf16> param(n);
  AdamParams hp;
  hp.weight_decay = 0.1f;
  double best_seconds = 1e30;
  for (int run = 0; run < 300; ++run) {
    hp.step = 1 + run;
    const Clock::time_point start = Clock::now();
    RETURN_IF_ERROR(adam.Step(with_bf16 ? param.data() : nullptr, master.data(), grad.data(),
                              m.data(), v.data(), n, hp));
    best_seconds =
        std::min(best_seconds, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return n / best_seconds;
}

}  // namespace

Status RunBenchAdam(int threads, bool quick) {
  if (threads < 1) threads = omp_get_max_threads();
  const std::vector<size_t> sizes =
      quick ? std::vector<size_t>{5000000, 20000000} : std::vector<size_t>{50000000, 200000000};
  // Each row alternates single passes of the two kernels for row_seconds (and min_pairs).
  const int min_pairs = quick ? 3 : 10;
  const double row_seconds = quick ? 0.05 : 5.0;

  cpu::CpuAdamOptions options;
  options.threads = threads;
  ASSIGN_OR_RETURN(const cpu::CpuAdam adam, cpu::CpuAdam::Create(options));
  std::printf(
      "bench adam: CPU AdamW path %s vs a bandwidth reference kernel (%s) with the same memory "
      "traffic, %d threads, alternating single passes for %.2g s per row%s\n",
      adam.path_name(), cpu::AdamTrafficReferenceIsaName(), threads, row_seconds,
      quick ? " (quick)" : "");

  std::vector<Row> rows;
  for (size_t n : sizes) {
    StatusOr<Arrays> allocated = AllocateArrays(n, threads);
    if (!allocated.ok()) {
      return Annotate(allocated.status(),
                      absl::StrCat("bench adam at ", Millions(n), " params (needs ",
                                   n * (4 * sizeof(float) + sizeof(bf16)), " bytes)"));
    }
    Arrays& a = *allocated;
    for (bool with_bf16 : {false, true}) {
      bf16* param = with_bf16 ? a.param : nullptr;
      AdamParams hp;
      hp.lr = 3e-4f;
      hp.weight_decay = 0.1f;
      Status step_status;
      auto adam_pass = [&] {
        ++hp.step;
        const Status status = adam.Step(param, a.master, a.grad, a.m, a.v, a.n, hp);
        if (step_status.ok()) step_status = status;
      };
      auto reference_pass = [&] {
        cpu::AdamTrafficReference(param, a.master, a.grad, a.m, a.v, a.n, threads);
      };
      hp.step = 0;
      adam_pass();  // warm-up: page mappings, caches, clocks
      reference_pass();
      std::vector<double> ratios, adam_rates, reference_rates;
      const Clock::time_point row_start = Clock::now();
      for (int pair = 0;
           pair < min_pairs ||
           std::chrono::duration<double>(Clock::now() - row_start).count() < row_seconds;
           ++pair) {
        double adam_s, reference_s;
        if (pair % 2 == 0) {
          adam_s = SecondsOf(adam_pass);
          reference_s = SecondsOf(reference_pass);
        } else {
          reference_s = SecondsOf(reference_pass);
          adam_s = SecondsOf(adam_pass);
        }
        ratios.push_back(reference_s / adam_s);
        adam_rates.push_back(a.n / adam_s);
        reference_rates.push_back(a.n / reference_s);
      }
      RETURN_IF_ERROR(step_status);
      rows.push_back({n, with_bf16 ? "bf16" : "fp32", with_bf16 ? 30 : 28, Median(adam_rates),
                      Median(reference_rates), Median(ratios),
                      *std::min_element(ratios.begin(), ratios.end()),
                      *std::max_element(ratios.begin(), ratios.end()), ratios.size()});
    }
  }

  std::printf("%8s %-11s %10s %8s %12s %8s  %s\n", "params", "param copy", "adam Gp/s", "GB/s",
              "ref Gp/s", "GB/s", "adam/ref: median of pairs (min-max, pairs)");
  bool met = true;
  for (const Row& row : rows) {
    std::printf("%8s %-4s %2d B/p  %10.3f %8.1f %12.3f %8.1f  %.3f (%.3f-%.3f, %zu)\n",
                Millions(row.n).c_str(), row.dtype, row.bytes_per_param,
                row.adam_params_per_s * 1e-9, row.adam_params_per_s * row.bytes_per_param * 1e-9,
                row.reference_params_per_s * 1e-9,
                row.reference_params_per_s * row.bytes_per_param * 1e-9, row.ratio, row.ratio_min,
                row.ratio_max, row.pairs);
    met = met && row.ratio >= kGoalRatio;
  }
  for (bool with_bf16 : {false, true}) {
    ASSIGN_OR_RETURN(const double ceiling, ComputeCeilingParamsPerSecond(adam, threads, with_bf16));
    std::printf("compute ceiling, %s (arrays in L2): %.3f Gp/s = %.1f GB/s of this traffic\n",
                with_bf16 ? "bf16" : "fp32", ceiling * 1e-9,
                ceiling * (with_bf16 ? 30 : 28) * 1e-9);
  }
  std::printf("goal >= %.2f of the reference: %s\n", kGoalRatio, met ? "met" : "NOT met");
  return absl::OkStatus();
}

}  // namespace strata
