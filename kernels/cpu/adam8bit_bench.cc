// Not a test: times the fp32 CPU Adam (CpuAdam) against the 8-bit one (Adam8bitStep) on the same
// n (default 16M), bf16 params, alternating runs, plus a same-traffic memory reference for the
// 8-bit step (18 bytes/element: grad read, master read+write, bf16 param write, m and v codes
// read+write). Usage: adam8bit_bench [n] [threads] [rounds].
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/adam8bit.h"
#include "kernels/cpu/cpu_adam.h"

namespace {
using strata::bf16;
using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
}  // namespace

int main(int argc, char** argv) {
  using namespace strata;
  using namespace strata::cpu;
  const size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : size_t{16} << 20;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  std::vector<float> master(n), grad(n), m(n, 0.0f), v(n, 0.0f);
  std::vector<bf16> param(n);
  std::vector<uint8_t> mc(n, 127), vc(n, 0);
  std::vector<float> ma(Adam8bitBlocks(n), 0.0f), va(Adam8bitBlocks(n), 0.0f);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t i = 0; i < n; ++i) {
    master[i] = 0.02f * normal(rng);
    grad[i] = 0.01f * normal(rng);
  }
  AdamParams hp;
  hp.lr = 1e-3f;
  CpuAdamOptions fo;
  fo.threads = threads;
  auto fp32 = CpuAdam::Create(fo);
  if (!fp32.ok()) return 1;
  Adam8bitOptions eo;
  eo.threads = threads;
  // Warm up (and give the 8-bit moments varied codes).
  for (int s = 1; s <= 3; ++s) {
    hp.step = s;
    (void)fp32->Step(param.data(), master.data(), grad.data(), m.data(), v.data(), n, hp);
    (void)Adam8bitStep(eo, DType::kBF16, param.data(), master.data(), grad.data(), mc.data(),
                       ma.data(), vc.data(), va.data(), n, hp);
  }
  std::printf("n=%zu threads=%d fp32 path %s\n", n, threads, fp32->path_name());
  const int kSteps = 4;
  for (int r = 0; r < rounds; ++r) {
    auto t = Clock::now();
    for (int s = 0; s < kSteps; ++s) {
      hp.step = 4 + s;
      (void)fp32->Step(param.data(), master.data(), grad.data(), m.data(), v.data(), n, hp);
    }
    const double f = Since(t) / kSteps;
    t = Clock::now();
    for (int s = 0; s < kSteps; ++s) {
      hp.step = 4 + s;
      (void)Adam8bitStep(eo, DType::kBF16, param.data(), master.data(), grad.data(), mc.data(),
                         ma.data(), vc.data(), va.data(), n, hp);
    }
    const double e = Since(t) / kSteps;
    // Same-traffic reference: 18 bytes per element, trivial arithmetic.
    t = Clock::now();
    for (int s = 0; s < kSteps; ++s) {
      const long long nn = static_cast<long long>(n);
#pragma omp parallel for schedule(static) num_threads(threads)
      for (long long i = 0; i < nn; ++i) {
        const float p = master[i] - 1e-9f * grad[i];
        master[i] = p;
        uint32_t bits;
        std::memcpy(&bits, &p, 4);
        uint16_t h = static_cast<uint16_t>(bits >> 16);
        std::memcpy(&param[i], &h, 2);
        mc[i] = static_cast<uint8_t>(mc[i] ^ 1);
        vc[i] = static_cast<uint8_t>(vc[i] ^ 1);
      }
    }
    const double b = Since(t) / kSteps;
    std::printf(
        "round %d: fp32 %.0f Melem/s  int8 %.0f Melem/s  traffic-ref %.0f Melem/s  "
        "int8/fp32 %.2f  int8/ref %.2f\n",
        r, n / f / 1e6, n / e / 1e6, n / b / 1e6, f / e, b / e);
  }
  return 0;
}
