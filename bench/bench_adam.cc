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
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/cpu_info.h"
#include "kernels/cpu/adam8bit.h"
#include "kernels/cpu/cpu_adam.h"
#include "kernels/cpu/cpu_adam_bandwidth.h"

namespace strata {
namespace {

constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr double kGoalRatio = 0.95;
// 8-bit states (train.optimizer_states = int8): against the same traffic (master read and
// written, grad read, one byte per moment read and written, an absmax per 2048).
constexpr double kGoalRatio8bit = 0.8;

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

// The 8-bit moments of one size: m and v codes (quantized from Arrays' m and v), absmaxes.
struct Arrays8bit {
  std::vector<HugePageArray> owners;
  uint8_t *m_codes, *v_codes;
  float *m_absmax, *v_absmax;
};

StatusOr<Arrays8bit> AllocateArrays8bit(const Arrays& a, int threads) {
  Arrays8bit out;
  const size_t blocks = cpu::Adam8bitBlocks(a.n);
  for (size_t bytes : {a.n, a.n, blocks * 4, blocks * 4}) {
    ASSIGN_OR_RETURN(HugePageArray array, HugePageArray::Create(bytes));
    out.owners.push_back(std::move(array));
  }
  out.m_codes = out.owners[0].as<uint8_t>();
  out.v_codes = out.owners[1].as<uint8_t>();
  out.m_absmax = out.owners[2].as<float>();
  out.v_absmax = out.owners[3].as<float>();
  // First touch by whole blocks, as the 8-bit step splits its work.
#pragma omp parallel for schedule(static) num_threads(threads)
  for (size_t b = 0; b < blocks; ++b) {
    const size_t lo = b * kAdamStateBlock, len = std::min(a.n - lo, kAdamStateBlock);
    cpu::QuantizeMoments(a.m + lo, len, true, out.m_codes + lo, out.m_absmax + b);
    cpu::QuantizeMoments(a.v + lo, len, false, out.v_codes + lo, out.v_absmax + b);
  }
  return out;
}

// The bandwidth reference of the 8-bit step: its memory traffic (16 bytes per element, 18
// with the bf16 param copy, plus 16 per block) and next to no arithmetic; the stores
// rewrite what was read (x + 0 * y, the 0 unknown to the compiler). Same split by blocks.
__attribute__((noinline)) void Traffic8bit(bf16* param, float* master, const float* grad,
                                           uint8_t* m_codes, float* m_absmax,
                                           uint8_t* v_codes, float* v_absmax, size_t n,
                                           int threads, float zero) {
  const size_t blocks = cpu::Adam8bitBlocks(n);
  const uint8_t zero_code = static_cast<uint8_t>(zero);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (size_t b = 0; b < blocks; ++b) {
    const size_t lo = b * kAdamStateBlock, hi = std::min(n, lo + kAdamStateBlock);
#pragma omp simd
    for (size_t i = lo; i < hi; ++i) {
      master[i] = master[i] + zero * grad[i];
      m_codes[i] = static_cast<uint8_t>(m_codes[i] + zero_code);
      v_codes[i] = static_cast<uint8_t>(v_codes[i] + zero_code);
    }
    if (param != nullptr) {
#pragma omp simd
      for (size_t i = lo; i < hi; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &master[i], 4);
        param[i] = bf16{static_cast<uint16_t>(bits >> 16)};
      }
    }
    m_absmax[b] += zero;
    v_absmax[b] += zero;
  }
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
  const char* states;  // "fp32" or "int8"
  const char* dtype;
  int bytes_per_param;
  double adam_params_per_s, reference_params_per_s;
  double ratio, ratio_min, ratio_max;
  size_t pairs;
};

// Alternating single passes of `kernel` and `reference` (order swapped every pair) for
// `row_seconds` and at least `min_pairs`, after one warm-up pass of each.
Row MeasureRow(size_t n, const char* states, const char* dtype, int bytes_per_param,
               const std::function<void()>& kernel, const std::function<void()>& reference,
               int min_pairs, double row_seconds) {
  kernel();  // warm-up: page mappings, caches, clocks
  reference();
  std::vector<double> ratios, rates, reference_rates;
  const Clock::time_point row_start = Clock::now();
  for (int pair = 0;
       pair < min_pairs ||
       std::chrono::duration<double>(Clock::now() - row_start).count() < row_seconds;
       ++pair) {
    double kernel_s, reference_s;
    if (pair % 2 == 0) {
      kernel_s = SecondsOf(kernel);
      reference_s = SecondsOf(reference);
    } else {
      reference_s = SecondsOf(reference);
      kernel_s = SecondsOf(kernel);
    }
    ratios.push_back(reference_s / kernel_s);
    rates.push_back(n / kernel_s);
    reference_rates.push_back(n / reference_s);
  }
  return {n,
          states,
          dtype,
          bytes_per_param,
          Median(rates),
          Median(reference_rates),
          Median(ratios),
          *std::min_element(ratios.begin(), ratios.end()),
          *std::max_element(ratios.begin(), ratios.end()),
          ratios.size()};
}

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
  cpu::Adam8bitOptions options8;
  options8.threads = threads;
  std::printf("bench adam: %s\n", DescribeCpu().c_str());
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
    // fp32 states, then 8-bit over the same master, grads and params (m and v quantized).
    ASSIGN_OR_RETURN(const Arrays8bit q, AllocateArrays8bit(a, threads));
    for (bool eight_bit : {false, true}) {
      for (bool with_bf16 : {false, true}) {
        bf16* param = with_bf16 ? a.param : nullptr;
        AdamParams hp;
        hp.lr = 3e-4f;
        hp.weight_decay = 0.1f;
        hp.step = 0;
        Status step_status;
        auto adam_pass = [&] {
          ++hp.step;
          const Status status =
              eight_bit
                  ? cpu::Adam8bitStep(options8, with_bf16 ? DType::kBF16 : DType::kF32, param,
                                      a.master, a.grad, q.m_codes, q.m_absmax, q.v_codes,
                                      q.v_absmax, a.n, hp)
                  : adam.Step(param, a.master, a.grad, a.m, a.v, a.n, hp);
          if (step_status.ok()) step_status = status;
        };
        volatile float zero = 0.0f;
        auto reference_pass = [&] {
          if (eight_bit) {
            Traffic8bit(param, a.master, a.grad, q.m_codes, q.m_absmax, q.v_codes, q.v_absmax,
                        a.n, threads, zero);
          } else {
            cpu::AdamTrafficReference(param, a.master, a.grad, a.m, a.v, a.n, threads);
          }
        };
        const int bytes = (eight_bit ? 16 : 28) + (with_bf16 ? 2 : 0);
        rows.push_back(MeasureRow(n, eight_bit ? "int8" : "fp32", with_bf16 ? "bf16" : "fp32",
                                  bytes, adam_pass, reference_pass, min_pairs, row_seconds));
        RETURN_IF_ERROR(step_status);
      }
    }
  }

  std::printf("%8s %-6s %-11s %10s %8s %12s %8s  %s\n", "params", "states", "param copy",
              "adam Gp/s", "GB/s", "ref Gp/s", "GB/s",
              "adam/ref: median of pairs (min-max, pairs)");
  bool met = true, met8 = true;
  for (const Row& row : rows) {
    std::printf("%8s %-6s %-4s %2d B/p  %10.3f %8.1f %12.3f %8.1f  %.3f (%.3f-%.3f, %zu)\n",
                Millions(row.n).c_str(), row.states, row.dtype, row.bytes_per_param,
                row.adam_params_per_s * 1e-9, row.adam_params_per_s * row.bytes_per_param * 1e-9,
                row.reference_params_per_s * 1e-9,
                row.reference_params_per_s * row.bytes_per_param * 1e-9, row.ratio, row.ratio_min,
                row.ratio_max, row.pairs);
    if (std::string(row.states) == "int8") {
      met8 = met8 && row.ratio >= kGoalRatio8bit;
    } else {
      met = met && row.ratio >= kGoalRatio;
    }
  }
  // 8-bit against fp32 states: the rows' medians (not paired; each against its reference).
  for (const Row& row : rows) {
    if (std::string(row.states) != "int8") continue;
    for (const Row& fp32 : rows) {
      if (std::string(fp32.states) != "fp32" || fp32.n != row.n ||
          std::string(fp32.dtype) != row.dtype) {
        continue;
      }
      std::printf("%s %s: int8 / fp32 states %.3f params/s (the traffic allows %.2f)\n",
                  Millions(row.n).c_str(), row.dtype,
                  row.adam_params_per_s / fp32.adam_params_per_s,
                  double(fp32.bytes_per_param) / row.bytes_per_param);
    }
  }
  for (bool with_bf16 : {false, true}) {
    ASSIGN_OR_RETURN(const double ceiling, ComputeCeilingParamsPerSecond(adam, threads, with_bf16));
    std::printf("compute ceiling, %s (arrays in L2): %.3f Gp/s = %.1f GB/s of this traffic\n",
                with_bf16 ? "bf16" : "fp32", ceiling * 1e-9,
                ceiling * (with_bf16 ? 30 : 28) * 1e-9);
  }
  std::printf("goal >= %.2f of the reference (fp32 states): %s\n", kGoalRatio,
              met ? "met" : "NOT met");
  std::printf("goal >= %.2f of the reference (int8 states): %s%s\n", kGoalRatio8bit,
              met8 ? "met" : "NOT met",
              met8 ? "" : " (the 8-bit step is bound by its arithmetic: decoding and encoding "
                          "the moments through the dynamic map, not by memory)");
  return absl::OkStatus();
}

}  // namespace strata
