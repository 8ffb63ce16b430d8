// The hardware probe of `strata plan --hardware probe`: this machine's rates, measured in a
// few seconds with the kernels training uses (see plan.h).
#include "plan/plan_probe.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cpu_info.h"
#include "core/quant_format.h"
#include "device/host_memory.h"
#include "kernels/counting_ops.h"
#include "nvme/io_buffer.h"
#include "runtime/backend.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Runs `work` (which enqueues on `stream`) until `seconds` have passed (at least twice after
// a warm-up); returns runs per second.
StatusOr<double> RunsPerSecond(Stream& stream, double seconds,
                               const std::function<Status()>& work) {
  RETURN_IF_ERROR(work());
  RETURN_IF_ERROR(stream.Synchronize());
  int runs = 0;
  const Clock::time_point start = Clock::now();
  while (runs < 2 || SecondsSince(start) < seconds) {
    RETURN_IF_ERROR(work());
    RETURN_IF_ERROR(stream.Synchronize());
    ++runs;
  }
  return runs / SecondsSince(start);
}

// Seconds of one call of `work` (enqueued on `stream`): a first call (kernel set-up), then
// the best of up to five within ~0.3 s.
StatusOr<double> BestSeconds(Stream& stream, const std::function<Status()>& work) {
  RETURN_IF_ERROR(stream.Synchronize());
  RETURN_IF_ERROR(work());
  RETURN_IF_ERROR(stream.Synchronize());
  double best = INFINITY, spent = 0;
  for (int run = 0; run < 5 && (run < 1 || spent < 0.3); ++run) {
    const Clock::time_point start = Clock::now();
    RETURN_IF_ERROR(work());
    RETURN_IF_ERROR(stream.Synchronize());
    const double seconds = SecondsSince(start);
    best = std::min(best, seconds);
    spent += seconds;
  }
  return best;
}

// The CPU backend of `job` in `dtype`, capped at `device_bytes` of device tier (64 MiB of
// host), with one stream and zeroed device buffers that live as long as it: what a probe
// times kernels on.
struct KernelRig {
  Backend backend;
  std::unique_ptr<Stream> stream;
  std::vector<Buffer> buffers;

  // A zeroed device buffer of `bytes` (at least 64).
  StatusOr<void*> Zeroed(size_t bytes) {
    ASSIGN_OR_RETURN(Buffer b, backend.device->Allocate(Tier::kDevice, StateKind::kWorkspace,
                                                        std::max<size_t>(bytes, 64), "probe"));
    RETURN_IF_ERROR(backend.device->MemsetAsync(b.data(), 0, b.bytes(), *stream));
    buffers.push_back(std::move(b));
    return buffers.back().data();
  }
};

StatusOr<std::unique_ptr<KernelRig>> MakeKernelRig(const Options& job, DType dtype,
                                                   uint64_t device_bytes) {
  Options options = job;
  options.train.dtype = dtype;
  options.device.backend = BackendKind::kCpu;
  options.device.memory_limit = device_bytes;
  options.tiers.host_memory_limit = 64ull << 20;
  auto rig = std::make_unique<KernelRig>();
  ASSIGN_OR_RETURN(rig->backend, CreateBackend(options));
  ASSIGN_OR_RETURN(rig->stream, rig->backend.device->CreateStream("probe"));
  return rig;
}

// GEMM rate of the backend's kernels in `dtype` at a transformer-like shape.
StatusOr<double> MatmulFlops(const Options& job, DType dtype) {
  ASSIGN_OR_RETURN(auto rig, MakeKernelRig(job, dtype, 256ull << 20));
  const int N = 1024, C = 1024, OC = 1024;
  const size_t bytes = DTypeBytes(dtype);
  ASSIGN_OR_RETURN(void* out, rig->Zeroed(size_t(N) * OC * bytes));
  ASSIGN_OR_RETURN(void* in, rig->Zeroed(size_t(N) * C * bytes));
  ASSIGN_OR_RETURN(void* w, rig->Zeroed(size_t(OC) * C * bytes));
  Stream& stream = *rig->stream;
  ASSIGN_OR_RETURN(const double runs, RunsPerSecond(stream, 0.5, [&] {
    return rig->backend.ops->MatmulForward(stream, out, in, w, nullptr, N, C, OC);
  }));
  return runs * 2.0 * N * C * OC;
}

// The CPU Adam's params per second (fp32 params; the kernels the host tier uses), with fp32
// or (`eight_bit`) 8-bit states.
StatusOr<double> AdamRate(const Options& job, bool eight_bit) {
  Options options = job;
  options.train.dtype = DType::kF32;
  options.device.backend = BackendKind::kCpu;
  options.device.memory_limit = 64ull << 20;
  options.tiers.host_memory_limit = 512ull << 20;
  ASSIGN_OR_RETURN(Backend backend, CreateBackend(options));
  ASSIGN_OR_RETURN(auto stream, backend.device->CreateStream("probe"));
  const size_t n = 8u << 20;
  std::vector<Buffer> arrays;
  for (int k = 0; k < 5; ++k) {
    ASSIGN_OR_RETURN(Buffer b, backend.device->Allocate(Tier::kHost, StateKind::kWorkspace,
                                                        n * 4, "probe adam"));
    std::memset(b.data(), 0, b.bytes());
    arrays.push_back(std::move(b));
  }
  AdamParams hp;
  // 8-bit: the moments' codes in arrays 3 and 4 (zeros: 0.0 in either map with a zero
  // absmax), their absmaxes in a sixth.
  ASSIGN_OR_RETURN(Buffer absmax, backend.device->Allocate(Tier::kHost, StateKind::kWorkspace,
                                                           n / kAdamStateBlock * 8,
                                                           "probe adam absmax"));
  std::memset(absmax.data(), 0, absmax.bytes());
  float* m_absmax = absmax.as<float>();
  float* v_absmax = m_absmax + n / kAdamStateBlock;
  ASSIGN_OR_RETURN(const double runs, RunsPerSecond(*stream, 0.5, [&] {
    if (eight_bit) {
      return backend.host_ops->AdamW8bit(*stream, arrays[0].data(), arrays[1].as<float>(),
                                         arrays[2].as<float>(), arrays[3].as<uint8_t>(),
                                         m_absmax, arrays[4].as<uint8_t>(), v_absmax, n, hp);
    }
    return backend.host_ops->AdamW(*stream, arrays[0].data(), arrays[1].as<float>(),
                                   arrays[2].as<float>(), arrays[3].as<float>(),
                                   arrays[4].as<float>(), n, hp);
  }));
  return runs * n;
}

// memcpy bytes per second (read + write counted once: the bytes a copy moves).
double CopyRate() {
  const size_t n = 128u << 20;
  std::vector<char> a(n, 1), b(n, 2);
  std::memcpy(b.data(), a.data(), n);
  int runs = 0;
  const Clock::time_point start = Clock::now();
  while (runs < 3 || SecondsSince(start) < 0.3) {
    std::memcpy((runs % 2 ? a : b).data(), (runs % 2 ? b : a).data(), n);
    ++runs;
  }
  return runs * double(n) / SecondsSince(start);
}

// O_DIRECT write then read of a 256 MiB file in `dir`, 4 MiB requests, four in flight.
Status DiskRates(const std::string& dir, double* read, double* write, uint64_t* free_bytes) {
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("hardware probe: zero.nvme_dir ", dir,
                                                   " cannot be measured: ", std::strerror(errno)));
  }
  *free_bytes = uint64_t{fs.f_bavail} * fs.f_frsize;
  const std::string path = dir + "/.strata-probe-" + std::to_string(::getpid());
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat("hardware probe: cannot open ", path,
                                                   " with O_DIRECT: ", std::strerror(errno)));
  }
  const size_t request = 4u << 20, total = 256u << 20;
  // Four requests in flight (the NVMe tier keeps several at the disk): each thread its own
  // buffer and every fourth piece of the file. The buffers sit on 2 MiB pages, as the
  // NVMe tier's host buffers do (a virtual disk serves O_DIRECT into 4 KiB pages several
  // times slower).
  constexpr int kInFlight = 4;
  auto pass = [&](bool write) -> Status {
    std::vector<std::thread> threads;
    std::vector<Status> results(kInFlight);
    for (int t = 0; t < kInFlight; ++t) {
      threads.emplace_back([&, t] {
        StatusOr<nvme::IoBuffer> buffer = nvme::IoBuffer::Allocate(request);
        if (!buffer.ok()) {
          results[t] = buffer.status();
          return;
        }
        char* mine = buffer->data();
        std::memset(mine, 7, request);
        for (size_t at = t * request; at < total && results[t].ok(); at += kInFlight * request) {
          const ssize_t done =
              write ? ::pwrite(fd, mine, request, at) : ::pread(fd, mine, request, at);
          if (done != static_cast<ssize_t>(request)) {
            results[t] = absl::InternalError(absl::StrCat(
                "hardware probe: ", write ? "write to " : "read of ", path, " failed"));
          }
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (const Status& result : results) RETURN_IF_ERROR(result);
    return absl::OkStatus();
  };
  // The NVMe tiers overwrite swap files laid out at set-up: a first pass lays the file
  // out (allocating blocks, slower on many file systems), the second, timed, overwrites it.
  Status status = pass(/*write=*/true);
  if (status.ok() && ::fdatasync(fd) != 0) status = absl::InternalError("fdatasync failed");
  Clock::time_point start = Clock::now();
  if (status.ok()) status = pass(/*write=*/true);
  if (status.ok() && ::fdatasync(fd) != 0) status = absl::InternalError("fdatasync failed");
  *write = total / SecondsSince(start);
  start = Clock::now();
  if (status.ok()) status = pass(/*write=*/false);
  *read = total / SecondsSince(start);
  ::close(fd);
  ::unlink(path.c_str());
  return status;
}

}  // namespace

StatusOr<double> ShapeTimer::SecondsPerCall(DType dtype, const std::array<int, 6>& shape) {
  const auto key = std::make_pair(static_cast<int>(dtype), shape);
  if (auto it = seconds_.find(key); it != seconds_.end()) return it->second;
  const int kind = shape[0];
  if (kind >= OpCounts::kSoftmaxCrossEntropy) return TimeElementwise(dtype, shape, key);
  const bool attention =
      kind == OpCounts::kAttentionForward || kind == OpCounts::kAttentionBackward;
  // Rows timed: scaled down past ~2e10 FLOPs (N for GEMMs, B for attention).
  const double flops = attention ? 2.0 * shape[1] * shape[3] * double(shape[2]) * shape[2]
                                 : 2.0 * shape[1] * double(shape[2]) * shape[3];
  const int rows = shape[1];
  const int timed_rows = std::max(1, std::min(rows, static_cast<int>(rows * 2e10 / std::max(flops, 1.0))));
  size_t bytes = 0;
  const size_t e = DTypeBytes(dtype);
  if (attention) {
    const size_t B = timed_rows, T = shape[2], C = shape[3], NH = shape[4], NKV = shape[5];
    const size_t qkv = B * T * (C + 2 * NKV * (C / NH));
    bytes = (2 * qkv + 3 * B * T * C) * e + B * NH * T * 4;
  } else {
    const size_t N = timed_rows, C = shape[2], OC = shape[3];
    bytes = (2 * N * C + N * OC + 2 * OC * C) * e;
  }
  ASSIGN_OR_RETURN(auto rig, MakeKernelRig(job_, dtype, bytes + (64ull << 20)));
  std::unique_ptr<Stream>& stream = rig->stream;
  auto buffer = [&](size_t elements) { return rig->Zeroed(elements * e); };
  std::function<Status()> work;
  Ops& ops = *rig->backend.ops;
  if (attention) {
    const int B = timed_rows, T = shape[2], C = shape[3], NH = shape[4], NKV = shape[5];
    const size_t qkv_elements = size_t(B) * T * (C + 2 * NKV * (C / NH));
    ASSIGN_OR_RETURN(void* qkv, buffer(qkv_elements));
    ASSIGN_OR_RETURN(void* dqkv, buffer(qkv_elements));
    ASSIGN_OR_RETURN(void* out, buffer(size_t(B) * T * C));
    ASSIGN_OR_RETURN(void* dout, buffer(size_t(B) * T * C));
    ASSIGN_OR_RETURN(void* stats_raw, buffer(size_t(B) * NH * T * 4 / e + 1));
    float* stats = static_cast<float*>(stats_raw);
    RETURN_IF_ERROR(ops.AttentionForward(*stream, out, stats, qkv, B, T, C, NH, NKV));
    work = kind == OpCounts::kAttentionForward
               ? std::function<Status()>([&, B, T, C, NH, NKV, out, stats, qkv] {
                   return ops.AttentionForward(*stream, out, stats, qkv, B, T, C, NH, NKV);
                 })
               : std::function<Status()>([&, B, T, C, NH, NKV, out, dout, stats, qkv, dqkv] {
                   return ops.AttentionBackward(*stream, dqkv, dout, qkv, out, stats, B, T, C,
                                                NH, NKV);
                 });
  } else {
    const int N = timed_rows, C = shape[2], OC = shape[3];
    ASSIGN_OR_RETURN(void* in, buffer(size_t(N) * C));
    ASSIGN_OR_RETURN(void* out, buffer(size_t(N) * OC));
    ASSIGN_OR_RETURN(void* weight, buffer(size_t(OC) * C));
    ASSIGN_OR_RETURN(void* din, buffer(size_t(N) * C));
    ASSIGN_OR_RETURN(void* dweight, buffer(size_t(OC) * C));
    work = [&, N, C, OC, in, out, weight, din, dweight, kind]() -> Status {
      if (kind == OpCounts::kMatmulForward) {
        return ops.MatmulForward(*stream, out, in, weight, nullptr, N, C, OC);
      }
      // dinp += dout * W, or dweight += dout^T * inp (the other left out).
      if (kind == OpCounts::kMatmulDinp) {
        return ops.MatmulBackward(*stream, din, nullptr, nullptr, out, in, weight, N, C, OC);
      }
      return ops.MatmulBackward(*stream, nullptr, dweight, nullptr, out, in, weight, N, C, OC);
    };
  }
  ASSIGN_OR_RETURN(const double best, BestSeconds(*stream, work));
  const double per_call = best * rows / timed_rows;
  seconds_[key] = per_call;
  return per_call;
}

StatusOr<double> ShapeTimer::TimeElementwise(DType dtype, const std::array<int, 6>& shape,
                                             const std::pair<int, std::array<int, 6>>& key) {
  const int kind = shape[0];
  const size_t e = DTypeBytes(dtype);
  // Rows timed: the shape's, or fewer past ~2^26 elements, scaled.
  const bool rows_first = kind != OpCounts::kGeluForward && kind != OpCounts::kGeluBackward;
  const size_t width = kind == OpCounts::kSoftmaxCrossEntropy ? shape[3]
                       : rows_first                          ? shape[2]
                                                             : 1;
  const size_t rows = shape[1];
  const size_t timed_rows =
      std::max<size_t>(1, std::min(rows, (size_t{1} << 26) / std::max<size_t>(width, 1)));
  const size_t n = timed_rows * width;
  ASSIGN_OR_RETURN(auto rig,
                   MakeKernelRig(job_, dtype, 4 * n * e + 8 * timed_rows * 4 + (64ull << 20)));
  std::unique_ptr<Stream>& stream = rig->stream;
  auto buffer = [&](size_t bytes) { return rig->Zeroed(bytes); };
  Ops& ops = *rig->backend.ops;
  std::function<Status()> work;
  const int N = static_cast<int>(timed_rows);
  if (kind == OpCounts::kSoftmaxCrossEntropy) {
    const int V = shape[2], Vp = shape[3];
    const float dloss = shape[4] != 0 ? 1e-3f : 0.0f;
    ASSIGN_OR_RETURN(void* logits, buffer(n * e));
    ASSIGN_OR_RETURN(void* losses, buffer(timed_rows * 4));
    ASSIGN_OR_RETURN(void* targets, buffer(timed_rows * 4));
    work = [&, N, V, Vp, dloss, logits, losses, targets] {
      return ops.SoftmaxCrossEntropy(*stream, static_cast<float*>(losses), logits,
                                     static_cast<const int32_t*>(targets), N, V, Vp, dloss);
    };
  } else if (!rows_first) {
    ASSIGN_OR_RETURN(void* out, buffer(n * e));
    ASSIGN_OR_RETURN(void* in, buffer(n * e));
    ASSIGN_OR_RETURN(void* dout, buffer(n * e));
    work = [&, n, out, in, dout, kind] {
      return kind == OpCounts::kGeluForward ? ops.GeluForward(*stream, out, in, n)
                                            : ops.GeluBackward(*stream, out, in, dout, n);
    };
  } else {
    const int C = shape[2];
    ASSIGN_OR_RETURN(void* out, buffer(n * e));
    ASSIGN_OR_RETURN(void* in, buffer(n * e));
    ASSIGN_OR_RETURN(void* dout, buffer(n * e));
    ASSIGN_OR_RETURN(void* weight, buffer(C * e));
    ASSIGN_OR_RETURN(void* bias, buffer(C * e));
    ASSIGN_OR_RETURN(void* dweight, buffer(C * e));
    ASSIGN_OR_RETURN(void* dbias, buffer(C * e));
    ASSIGN_OR_RETURN(void* mean, buffer(timed_rows * 4));
    ASSIGN_OR_RETURN(void* rstd, buffer(timed_rows * 4));
    work = [&, N, C, out, in, dout, weight, bias, dweight, dbias, mean, rstd, kind] {
      float* m = static_cast<float*>(mean);
      float* r = static_cast<float*>(rstd);
      return kind == OpCounts::kLayerNormForward
                 ? ops.LayerNormForward(*stream, out, m, r, in, weight, bias, N, C)
                 : ops.LayerNormBackward(*stream, out, dweight, dbias, dout, in, weight, m, r,
                                         N, C);
    };
  }
  ASSIGN_OR_RETURN(const double best, BestSeconds(*stream, work));
  const double per_call = best * double(rows) / double(timed_rows);
  seconds_[key] = per_call;
  return per_call;
}

Status FillMachineMemory(const Options& job, int world, Hardware* hw) {
  const HostMemory memory = ProbeHostMemory();
  ASSIGN_OR_RETURN(const TierCapacities capacities, ResolveTierCapacities(job, world, memory));
  hw->device_memory_bytes = capacities.device_bytes;
  hw->host_memory_bytes = memory.usable_bytes;
  hw->ranks_per_node = world;
  return absl::OkStatus();
}

std::string ProbeDiskDir(const Options& job) {
  const char* tmp = std::getenv("TMPDIR");
  return !job.zero.nvme_dir.empty() ? job.zero.nvme_dir
                                    : (tmp != nullptr && *tmp ? tmp : "/tmp");
}

std::string ProbeSource(const Options& job) {
  return absl::StrCat("probe of ", DescribeCpu(), ", disk of ", ProbeDiskDir(job));
}

StatusOr<Hardware> ProbeHardware(const Options& job, int world) {
  Hardware hw;
  hw.source = ProbeSource(job);
  hw.backend = BackendKind::kCpu;
  RETURN_IF_ERROR(FillMachineMemory(job, world, &hw));
  ASSIGN_OR_RETURN(hw.matmul_flops_fp32, MatmulFlops(job, DType::kF32));
  ASSIGN_OR_RETURN(hw.matmul_flops_bf16, MatmulFlops(job, DType::kBF16));
  ASSIGN_OR_RETURN(hw.cpu_adam_params, AdamRate(job, /*eight_bit=*/false));
  ASSIGN_OR_RETURN(hw.cpu_adam8bit_params, AdamRate(job, /*eight_bit=*/true));
  const double copy = CopyRate();
  // On the CPU backend the device tier is RAM: its "PCIe" and elementwise rates are
  // memcpy's; ranks on one node (threads) send to each other at memcpy speed too.
  hw.device_memory_bandwidth = 2 * copy;
  hw.host_to_device = hw.device_to_host = copy;
  hw.network = copy;
  // The disk of zero.nvme_dir, else of $TMPDIR (or /tmp); a directory without O_DIRECT
  // (tmpfs) leaves the disk's rates unknown.
  const std::string dir = ProbeDiskDir(job);
  Status disk = DiskRates(dir, &hw.disk_read, &hw.disk_write, &hw.disk_free_bytes);
  if (!disk.ok()) {
    if (!job.zero.nvme_dir.empty()) return disk;
    hw.disk_read = hw.disk_write = 0;
    absl::StrAppend(&hw.source, " (no disk rates: ", dir, " has no O_DIRECT)");
  }
  return hw;
}

}  // namespace strata
