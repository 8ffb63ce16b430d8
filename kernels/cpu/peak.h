// Measures this machine's fp32 FMA peak: the ceiling that GEMM and other compute-bound kernel
// throughputs are quoted against (as a fraction of peak, since clocks and memory speed vary).
// The loop keeps 16 (AVX-512, scalar) or 12 (AVX2, which has only 16 vector registers)
// independent accumulator chains in registers, enough to cover FMA latency x throughput on
// current x86 cores. The instruction set is chosen at run time from what the CPU supports,
// never from the build machine.
// Thread-safety: reentrant; each call runs its own OpenMP parallel region.
#pragma once

namespace strata::cpu {

// Runs the FMA loop on `threads` OpenMP threads (< 1: omp_get_max_threads()) for about
// `seconds` of wall time each (at least one short chunk) and returns the total rate in
// GFLOP/s, counting 2 flops per FMA lane.
double MeasureFp32FmaPeakGflops(int threads, double seconds);

// The instruction set MeasureFp32FmaPeakGflops uses on this CPU: "avx512f", "avx2+fma" or
// "scalar".
const char* Fp32FmaPeakIsaName();

}  // namespace strata::cpu
