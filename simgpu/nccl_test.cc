// simgpu/nccl_test.cc: the NCCL double (libnccl_simgpu.so) loaded with dlopen as strata
// loads it, on the CUDA runtime double: ranks as threads (and, once, as processes), every
// rank filling its buffers from (rank, index, step) so each knows the exact expected bytes.
// Reductions are compared bit for bit with the rank-order sum (the test data is chosen so
// that another order gives other bits); every collective in place and out of place, with
// counts that need several steps and do not divide; grouped send/recv both ways; blocking
// and non-blocking communicators. Failure: an abort on one rank ends the other's wait at
// once, an absent peer times out (STRATA_SIMGPU_NCCL_TIMEOUT_S=2), mismatched calls and bad
// arguments are refused naming the problem. BUILD runs this file twice: ordering mode (work
// on the streams' threads) and blocking mode (STRATA_SIMGPU_MODE=blocking: work on the
// calling thread).
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nccl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

// The calls strata resolves (collectives/nccl_library.cc), resolved the same way.
struct Nccl {
  std::string error;  // why loading failed, or ""
  int version = 0;
  decltype(&ncclGetVersion) GetVersion = nullptr;
  decltype(&ncclGetErrorString) GetErrorString = nullptr;
  decltype(&ncclGetLastError) GetLastError = nullptr;
  decltype(&ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&ncclCommInitRankConfig) CommInitRankConfig = nullptr;
  decltype(&ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&ncclCommFinalize) CommFinalize = nullptr;
  decltype(&ncclCommDestroy) CommDestroy = nullptr;
  decltype(&ncclCommAbort) CommAbort = nullptr;
  decltype(&ncclAllReduce) AllReduce = nullptr;
  decltype(&ncclReduceScatter) ReduceScatter = nullptr;
  decltype(&ncclAllGather) AllGather = nullptr;
  decltype(&ncclBroadcast) Broadcast = nullptr;
  decltype(&ncclSend) Send = nullptr;
  decltype(&ncclRecv) Recv = nullptr;
  decltype(&ncclGroupStart) GroupStart = nullptr;
  decltype(&ncclGroupEnd) GroupEnd = nullptr;
};

template <typename F>
void Resolve(void* handle, const char* name, F* out, std::string* missing) {
  *out = reinterpret_cast<F>(dlsym(handle, name));
  if (*out == nullptr) *missing += std::string(" ") + name;
}

const Nccl& Lib() {
  static const Nccl* lib = [] {
    auto* loaded = new Nccl();
    const char* path = std::getenv("SIMGPU_NCCL_LIBRARY");
    if (path == nullptr) {
      loaded->error = "SIMGPU_NCCL_LIBRARY is not set (BUILD sets it)";
      return loaded;
    }
    void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      loaded->error = dlerror();
      return loaded;
    }
    std::string missing;
    Resolve(handle, "ncclGetVersion", &loaded->GetVersion, &missing);
    Resolve(handle, "ncclGetErrorString", &loaded->GetErrorString, &missing);
    Resolve(handle, "ncclGetLastError", &loaded->GetLastError, &missing);
    Resolve(handle, "ncclGetUniqueId", &loaded->GetUniqueId, &missing);
    Resolve(handle, "ncclCommInitRankConfig", &loaded->CommInitRankConfig, &missing);
    Resolve(handle, "ncclCommGetAsyncError", &loaded->CommGetAsyncError, &missing);
    Resolve(handle, "ncclCommFinalize", &loaded->CommFinalize, &missing);
    Resolve(handle, "ncclCommDestroy", &loaded->CommDestroy, &missing);
    Resolve(handle, "ncclCommAbort", &loaded->CommAbort, &missing);
    Resolve(handle, "ncclAllReduce", &loaded->AllReduce, &missing);
    Resolve(handle, "ncclReduceScatter", &loaded->ReduceScatter, &missing);
    Resolve(handle, "ncclAllGather", &loaded->AllGather, &missing);
    Resolve(handle, "ncclBroadcast", &loaded->Broadcast, &missing);
    Resolve(handle, "ncclSend", &loaded->Send, &missing);
    Resolve(handle, "ncclRecv", &loaded->Recv, &missing);
    Resolve(handle, "ncclGroupStart", &loaded->GroupStart, &missing);
    Resolve(handle, "ncclGroupEnd", &loaded->GroupEnd, &missing);
    if (!missing.empty()) {
      loaded->error = "missing:" + missing;
    } else if (loaded->GetVersion(&loaded->version) != ncclSuccess) {
      loaded->error = "ncclGetVersion failed";
    }
    return loaded;
  }();
  return *lib;
}

std::string LastError() { return Lib().GetLastError(nullptr); }

// Runs fn(rank) on `world` threads at once and joins them.
template <typename Fn>
void OnRanks(int world, Fn fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back([&fn, r] { fn(r); });
  for (auto& thread : threads) thread.join();
}

// Polls a non-blocking communicator until its last call finished.
ncclResult_t Await(ncclComm_t comm, double limit_s = 30) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(limit_s);
  while (true) {
    ncclResult_t state = ncclSuccess;
    if (Lib().CommGetAsyncError(comm, &state) != ncclSuccess) return ncclInternalError;
    if (state != ncclInProgress || Clock::now() > deadline) return state;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

ncclConfig_t Config(bool blocking) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking ? 1 : 0;
  return config;
}

// `world` communicators over one id, one per thread; empty on failure.
std::vector<ncclComm_t> InitComms(int world, bool blocking) {
  ncclUniqueId id;
  if (Lib().GetUniqueId(&id) != ncclSuccess) {
    ADD_FAILURE() << LastError();
    return {};
  }
  std::vector<ncclComm_t> comms(world, nullptr);
  bool ok = true;
  OnRanks(world, [&](int r) {
    ncclConfig_t config = Config(blocking);
    ncclResult_t result = Lib().CommInitRankConfig(&comms[r], world, id, r, &config);
    if (!blocking && result == ncclInProgress) result = Await(comms[r]);
    if (result != ncclSuccess) {
      ADD_FAILURE() << "rank " << r << ": " << Lib().GetErrorString(result) << ": " << LastError();
      ok = false;
    }
  });
  if (!ok) return {};
  return comms;
}

void CloseComms(const std::vector<ncclComm_t>& comms) {
  OnRanks(static_cast<int>(comms.size()), [&](int r) {
    ncclResult_t result = Lib().CommFinalize(comms[r]);
    if (result == ncclInProgress) result = Await(comms[r]);
    EXPECT_EQ(result, ncclSuccess) << LastError();
    EXPECT_EQ(Lib().CommDestroy(comms[r]), ncclSuccess);
  });
}

// Device memory of the simulated GPU.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&data_, bytes == 0 ? 1 : bytes), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  char* data() const { return static_cast<char*>(data_); }

  void Upload(const std::vector<uint8_t>& host, cudaStream_t stream) {
    ASSERT_LE(host.size(), bytes_);
    ASSERT_EQ(cudaMemcpyAsync(data_, host.data(), host.size(), cudaMemcpyHostToDevice, stream),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  }
  std::vector<uint8_t> Download(size_t offset, size_t bytes, cudaStream_t stream) const {
    std::vector<uint8_t> host(bytes);
    EXPECT_EQ(cudaMemcpyAsync(host.data(), data() + offset, bytes, cudaMemcpyDeviceToHost, stream),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    return host;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

// Test data: values of many magnitudes, so the order of a sum shows in its bits.
float Value(int rank, size_t index, int step) {
  uint64_t h = (static_cast<uint64_t>(rank) + 1) * 0x9e3779b97f4a7c15ull ^
               (index + 1) * 0xc2b2ae3d27d4eb4full ^ (static_cast<uint64_t>(step) << 40);
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  const float mantissa = static_cast<float>(static_cast<int64_t>(h % 2000001) - 1000000) / 1e6f;
  return std::ldexp(mantissa, static_cast<int>((h >> 24) % 24) - 12);
}

uint16_t ToBf16(float value) {  // round to nearest even; the test data has no NaN
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}
float FromBf16(uint16_t bits) {
  const uint32_t widened = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &widened, 4);
  return value;
}

// `count` elements of rank `rank`'s data starting at `first`, as fp32 or bf16 bytes.
std::vector<uint8_t> Fill(int rank, size_t first, size_t count, int step, ncclDataType_t type) {
  const size_t e = type == ncclFloat32 ? 4 : 2;
  std::vector<uint8_t> bytes(count * e);
  for (size_t i = 0; i < count; ++i) {
    const float value = Value(rank, first + i, step);
    if (type == ncclFloat32) {
      std::memcpy(&bytes[i * 4], &value, 4);
    } else {
      const uint16_t half = ToBf16(value);
      std::memcpy(&bytes[i * 2], &half, 2);
    }
  }
  return bytes;
}

float Stored(int rank, size_t index, int step, ncclDataType_t type) {
  const float value = Value(rank, index, step);
  return type == ncclFloat32 ? value : FromBf16(ToBf16(value));
}

// The rank-order sum (fp32 accumulator, one rounding to bf16 at the end) of elements
// [first, first + count), or the reverse order's with `reverse`.
std::vector<uint8_t> Sum(int world, size_t first, size_t count, int step, ncclDataType_t type,
                         bool reverse = false) {
  const size_t e = type == ncclFloat32 ? 4 : 2;
  std::vector<uint8_t> bytes(count * e);
  for (size_t i = 0; i < count; ++i) {
    float acc = Stored(reverse ? world - 1 : 0, first + i, step, type);
    for (int k = 1; k < world; ++k) {
      acc += Stored(reverse ? world - 1 - k : k, first + i, step, type);
    }
    if (type == ncclFloat32) {
      std::memcpy(&bytes[i * 4], &acc, 4);
    } else {
      const uint16_t half = ToBf16(acc);
      std::memcpy(&bytes[i * 2], &half, 2);
    }
  }
  return bytes;
}

// "" when equal, else the first differing element.
std::string Compare(const std::vector<uint8_t>& got, const std::vector<uint8_t>& expected,
                    ncclDataType_t type) {
  if (got.size() != expected.size()) return "sizes differ";
  const size_t e = type == ncclFloat32 ? 4 : 2;
  for (size_t i = 0; i < got.size(); i += e) {
    if (std::memcmp(&got[i], &expected[i], e) != 0) {
      float a = 0, b = 0;
      if (e == 4) {
        std::memcpy(&a, &got[i], 4);
        std::memcpy(&b, &expected[i], 4);
      } else {
        uint16_t x, y;
        std::memcpy(&x, &got[i], 2);
        std::memcpy(&y, &expected[i], 2);
        a = FromBf16(x);
        b = FromBf16(y);
      }
      return "[" + std::to_string(i / e) + "] got " + std::to_string(a) + " expected " +
             std::to_string(b);
    }
  }
  return "";
}

class NcclLoads : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(Lib().error, "") << "loading the NCCL double"; }
};

TEST_F(NcclLoads, EverySymbolStrataResolvesAndAVersionItAccepts) {
  EXPECT_EQ(Lib().version, NCCL_VERSION_CODE);
  EXPECT_GE(Lib().version, 21400);  // strata's kMinNcclVersionCode
  std::vector<std::string> seen;
  for (int code = ncclSuccess; code < ncclNumResults; ++code) {
    const std::string text = Lib().GetErrorString(static_cast<ncclResult_t>(code));
    EXPECT_FALSE(text.empty()) << code;
    for (const std::string& other : seen) EXPECT_NE(text, other) << code;
    seen.push_back(text);
  }
  EXPECT_STREQ(Lib().GetErrorString(static_cast<ncclResult_t>(99)), "unknown result code");
}

// (world, blocking communicator)
class NcclCollectives : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  void SetUp() override {
    ASSERT_EQ(Lib().error, "");
    comms_ = InitComms(world(), blocking());
    ASSERT_EQ(comms_.size(), static_cast<size_t>(world()));
  }
  void TearDown() override {
    if (!comms_.empty()) CloseComms(comms_);
  }
  int world() const { return std::get<0>(GetParam()); }
  bool blocking() const { return std::get<1>(GetParam()); }

  // Checks a call's result; on a non-blocking communicator, awaits it first.
  void Check(ncclResult_t result, int rank) {
    if (!blocking() && result == ncclInProgress) result = Await(comms_[rank]);
    ASSERT_EQ(result, ncclSuccess) << "rank " << rank << ": " << LastError();
  }

  // After the stream ran: the communicator has no error.
  void ExpectHealthy(int rank) {
    ncclResult_t state = ncclInternalError;
    ASSERT_EQ(Lib().CommGetAsyncError(comms_[rank], &state), ncclSuccess);
    EXPECT_EQ(state, ncclSuccess) << "rank " << rank << ": " << LastError();
  }

  std::vector<ncclComm_t> comms_;
};

TEST_P(NcclCollectives, AllReduceIsTheRankOrderSumBitForBit) {
  int step = 0;
  for (ncclDataType_t type : {ncclFloat32, ncclBfloat16}) {
    const size_t e = type == ncclFloat32 ? 4 : 2;
    // 1000003 elements: several 1 MiB steps, the last one partial.
    for (size_t count : {size_t{1}, size_t{7}, size_t{1000003}}) {
      ++step;
      if (world() == 3 && count > 1000) {
        // The data is order-sensitive: the test would see a sum in another order.
        EXPECT_NE(Compare(Sum(3, 0, count, step, type),
                          Sum(3, 0, count, step, type, /*reverse=*/true), type),
                  "");
      }
      const std::vector<uint8_t> expected = Sum(world(), 0, count, step, type);
      for (bool in_place : {false, true}) {
        OnRanks(world(), [&](int r) {
          cudaStream_t stream;
          ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
          DeviceBuffer send(count * e), recv(count * e);
          send.Upload(Fill(r, 0, count, step, type), stream);
          char* out = in_place ? send.data() : recv.data();
          Check(Lib().AllReduce(send.data(), out, count, type, ncclSum, comms_[r], stream), r);
          ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
          ExpectHealthy(r);
          const DeviceBuffer& result = in_place ? send : recv;
          EXPECT_EQ(Compare(result.Download(0, count * e, stream), expected, type), "")
              << "rank " << r << " count " << count << (in_place ? " in place" : "");
          cudaStreamDestroy(stream);
        });
      }
    }
  }
}

TEST_P(NcclCollectives, ReduceScatterAllGatherBroadcastInPlaceAndOut) {
  const int n = world();
  int step = 100;
  for (ncclDataType_t type : {ncclFloat32, ncclBfloat16}) {
    const size_t e = type == ncclFloat32 ? 4 : 2;
    for (size_t count : {size_t{7}, size_t{300001}}) {  // 300001: several steps per segment
      for (bool in_place : {false, true}) {
        ++step;
        OnRanks(n, [&](int r) {
          cudaStream_t stream;
          ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);

          // reduce-scatter: rank r gets the sum of segment r
          DeviceBuffer input(n * count * e), output(count * e);
          input.Upload(Fill(r, 0, n * count, step, type), stream);
          char* out = in_place ? input.data() + r * count * e : output.data();
          Check(Lib().ReduceScatter(input.data(), out, count, type, ncclSum, comms_[r], stream), r);
          ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
          ExpectHealthy(r);
          EXPECT_EQ(Compare((in_place ? input : output)
                                .Download(in_place ? r * count * e : 0, count * e, stream),
                            Sum(n, r * count, count, step, type), type),
                    "")
              << "reduce-scatter rank " << r << " count " << count;

          // all-gather: every rank's `count` elements, in rank order
          DeviceBuffer gathered(n * count * e), mine(count * e);
          std::vector<uint8_t> own = Fill(r, 0, count, step + 7, type);
          std::vector<uint8_t> initial(n * count * e, 0xcd);
          if (in_place) std::memcpy(&initial[r * count * e], own.data(), own.size());
          gathered.Upload(initial, stream);
          mine.Upload(own, stream);
          const char* in = in_place ? gathered.data() + r * count * e : mine.data();
          Check(Lib().AllGather(in, gathered.data(), count, type, comms_[r], stream), r);
          ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
          ExpectHealthy(r);
          std::vector<uint8_t> all;
          for (int q = 0; q < n; ++q) {
            std::vector<uint8_t> part = Fill(q, 0, count, step + 7, type);
            all.insert(all.end(), part.begin(), part.end());
          }
          EXPECT_EQ(Compare(gathered.Download(0, n * count * e, stream), all, type), "")
              << "all-gather rank " << r << " count " << count;

          // broadcast from the last rank; the others start with other data
          const int root = n - 1;
          DeviceBuffer source(count * e), target(count * e);
          source.Upload(Fill(r, 0, count, r == root ? step : step + 1000, type), stream);
          target.Upload(std::vector<uint8_t>(count * e, 0xab), stream);
          char* to = in_place ? source.data() : target.data();
          Check(Lib().Broadcast(source.data(), to, count, type, root, comms_[r], stream), r);
          ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
          ExpectHealthy(r);
          EXPECT_EQ(Compare((in_place ? source : target).Download(0, count * e, stream),
                            Fill(root, 0, count, step, type), type),
                    "")
              << "broadcast rank " << r << " count " << count;
          cudaStreamDestroy(stream);
        });
      }
    }
  }
}

// Every rank sends to and receives from every other rank in one group, with messages of
// several chunks: the group must not deadlock. Then a ring, each rank's send and receive
// in one group.
TEST_P(NcclCollectives, SendRecvInAGroupBothDirections) {
  const int n = world();
  const size_t count = 200003;  // ~800 KB of fp32: four 256 KiB chunks
  OnRanks(n, [&](int r) {
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    DeviceBuffer outgoing(n * count * 4), incoming(n * count * 4);
    outgoing.Upload(Fill(r, 0, n * count, 500, ncclFloat32), stream);
    incoming.Upload(std::vector<uint8_t>(n * count * 4, 0), stream);
    Check(Lib().GroupStart(), r);
    for (int peer = 0; peer < n; ++peer) {
      if (peer == r) continue;
      // To `peer`: my segment `peer`. From `peer`: into my segment `peer`.
      Check(Lib().Send(outgoing.data() + peer * count * 4, count, ncclFloat32, peer, comms_[r],
                       stream),
            r);
      Check(Lib().Recv(incoming.data() + peer * count * 4, count, ncclFloat32, peer, comms_[r],
                       stream),
            r);
    }
    Check(Lib().GroupEnd(), r);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ExpectHealthy(r);
    for (int peer = 0; peer < n; ++peer) {
      if (peer == r) continue;
      EXPECT_EQ(Compare(incoming.Download(peer * count * 4, count * 4, stream),
                        Fill(peer, r * count, count, 500, ncclFloat32), ncclFloat32),
                "")
          << "rank " << r << " from " << peer;
    }

    // A ring: receive from the left first in call order, send to the right.
    const int left = (r + n - 1) % n, right = (r + 1) % n;
    DeviceBuffer ring(count * 4);
    Check(Lib().GroupStart(), r);
    Check(Lib().Recv(ring.data(), count, ncclFloat32, left, comms_[r], stream), r);
    Check(Lib().Send(outgoing.data(), count, ncclFloat32, right, comms_[r], stream), r);
    Check(Lib().GroupEnd(), r);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ExpectHealthy(r);
    EXPECT_EQ(Compare(ring.Download(0, count * 4, stream), Fill(left, 0, count, 500, ncclFloat32),
                      ncclFloat32),
              "")
        << "ring rank " << r;
    cudaStreamDestroy(stream);
  });
}

INSTANTIATE_TEST_SUITE_P(WorldsAndModes, NcclCollectives,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<int, bool>>& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_blocking" : "_nonblocking");
                         });

// Enqueues a 1000-element all-reduce on `comm` and waits for its stream; returns the
// communicator's error afterwards and the seconds the stream took.
ncclResult_t LoneAllReduce(ncclComm_t comm, double* seconds) {
  cudaStream_t stream;
  EXPECT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  DeviceBuffer data(4000);
  const auto start = Clock::now();
  ncclResult_t result =
      Lib().AllReduce(data.data(), data.data(), 1000, ncclFloat32, ncclSum, comm, stream);
  if (result == ncclSuccess || result == ncclInProgress) {
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);  // the stream stays healthy
    EXPECT_EQ(Lib().CommGetAsyncError(comm, &result), ncclSuccess);
  }
  *seconds = std::chrono::duration<double>(Clock::now() - start).count();
  cudaStreamDestroy(stream);
  return result;
}

class NcclFailures : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(Lib().error, ""); }
};

TEST_F(NcclFailures, AbortOnOneRankEndsTheOthersWait) {
  for (bool blocking : {true, false}) {
    std::vector<ncclComm_t> comms = InitComms(2, blocking);
    ASSERT_EQ(comms.size(), 2u);
    ncclResult_t result = ncclSuccess;
    double seconds = 0;
    std::thread rank0([&] { result = LoneAllReduce(comms[0], &seconds); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ASSERT_EQ(Lib().CommAbort(comms[1]), ncclSuccess);  // rank 1 never joins the all-reduce
    rank0.join();
    EXPECT_EQ(result, ncclRemoteError);
    EXPECT_LT(seconds, 10.0);  // far below the 60 s timeout
    EXPECT_NE(LastError().find("rank 1 of 2 aborted its communicator"), std::string::npos)
        << LastError();
    // The failed communicator refuses new work, naming its error.
    double ignored = 0;
    EXPECT_EQ(LoneAllReduce(comms[0], &ignored), ncclRemoteError);
    EXPECT_EQ(Lib().CommAbort(comms[0]), ncclSuccess);
    EXPECT_EQ(Lib().CommAbort(comms[0]), ncclInvalidArgument);  // gone
  }
}

TEST_F(NcclFailures, AbortOnTheWaitingRankEndsItsOwnWait) {
  std::vector<ncclComm_t> comms = InitComms(2, false);
  ASSERT_EQ(comms.size(), 2u);
  double seconds = 0;
  // As strata's watchdog: the rank whose collective hangs aborts its own communicator.
  std::thread rank0([&] {
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    DeviceBuffer data(4000);
    const auto start = Clock::now();
    ASSERT_EQ(
        Lib().AllReduce(data.data(), data.data(), 1000, ncclFloat32, ncclSum, comms[0], stream),
        ncclSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    seconds = std::chrono::duration<double>(Clock::now() - start).count();
    cudaStreamDestroy(stream);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(Lib().CommAbort(comms[0]), ncclSuccess);
  rank0.join();
  EXPECT_LT(seconds, 10.0);
  // The peer learns of it at its next collective.
  double peer_seconds = 0;
  EXPECT_EQ(LoneAllReduce(comms[1], &peer_seconds), ncclRemoteError);
  EXPECT_LT(peer_seconds, 10.0);
  EXPECT_EQ(Lib().CommDestroy(comms[1]), ncclSuccess);
}

TEST_F(NcclFailures, AnAbsentPeerTimesOut) {
  setenv("STRATA_SIMGPU_NCCL_TIMEOUT_S", "2", 1);
  std::vector<ncclComm_t> comms = InitComms(2, false);
  ASSERT_EQ(comms.size(), 2u);
  double seconds = 0;
  EXPECT_EQ(LoneAllReduce(comms[0], &seconds), ncclSystemError);  // rank 1 never calls it
  EXPECT_GE(seconds, 1.9);
  EXPECT_LT(seconds, 10.0);
  const std::string error = LastError();
  EXPECT_NE(error.find("STRATA_SIMGPU_NCCL_TIMEOUT_S"), std::string::npos) << error;
  EXPECT_NE(error.find("for rank 1 to post its part"), std::string::npos) << error;
  // Rank 1's next collective fails at once: rank 0 published its failure.
  double peer_seconds = 0;
  EXPECT_EQ(LoneAllReduce(comms[1], &peer_seconds), ncclRemoteError);
  EXPECT_LT(peer_seconds, 1.0);
  EXPECT_EQ(Lib().CommAbort(comms[0]), ncclSuccess);
  EXPECT_EQ(Lib().CommAbort(comms[1]), ncclSuccess);

  // Initialization without the other rank: a blocking init fails after the timeout.
  ncclUniqueId id;
  ASSERT_EQ(Lib().GetUniqueId(&id), ncclSuccess);
  ncclComm_t alone = nullptr;
  ncclConfig_t config = Config(true);
  const auto start = Clock::now();
  EXPECT_EQ(Lib().CommInitRankConfig(&alone, 2, id, 0, &config), ncclSystemError);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10.0);
  EXPECT_NE(LastError().find("rank(s) 1 to join"), std::string::npos) << LastError();
  EXPECT_EQ(alone, nullptr);
  // The late rank finds the rendezvous given up.
  EXPECT_EQ(Lib().CommInitRankConfig(&alone, 2, id, 1, &config), ncclInvalidUsage);
  unsetenv("STRATA_SIMGPU_NCCL_TIMEOUT_S");
}

TEST_F(NcclFailures, MismatchedCollectivesFailOnBothRanks) {
  std::vector<ncclComm_t> comms = InitComms(2, true);
  ASSERT_EQ(comms.size(), 2u);
  std::vector<ncclResult_t> states(2, ncclSuccess);
  OnRanks(2, [&](int r) {
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    DeviceBuffer data(64);
    if (r == 0) {
      ASSERT_EQ(
          Lib().AllReduce(data.data(), data.data(), 16, ncclFloat32, ncclSum, comms[r], stream),
          ncclSuccess);
    } else {
      ASSERT_EQ(Lib().Broadcast(data.data(), data.data(), 16, ncclFloat32, 0, comms[r], stream),
                ncclSuccess);
    }
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    Lib().CommGetAsyncError(comms[r], &states[r]);
    cudaStreamDestroy(stream);
  });
  EXPECT_TRUE(states[0] == ncclInvalidUsage || states[1] == ncclInvalidUsage);
  EXPECT_NE(states[0], ncclSuccess);
  EXPECT_NE(states[1], ncclSuccess);
  EXPECT_NE(LastError().find("collective mismatch"), std::string::npos) << LastError();
  for (ncclComm_t comm : comms) EXPECT_EQ(Lib().CommAbort(comm), ncclSuccess);
}

TEST_F(NcclFailures, BadArgumentsAreRefusedNamingTheProblem) {
  ncclUniqueId id;
  ASSERT_EQ(Lib().GetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  ncclConfig_t config = Config(true);
  EXPECT_EQ(Lib().CommInitRankConfig(&comm, 2, id, 2, &config), ncclInvalidArgument);
  EXPECT_EQ(Lib().CommInitRankConfig(&comm, 0, id, 0, &config), ncclInvalidArgument);
  ncclConfig_t uninitialized = {};
  EXPECT_EQ(Lib().CommInitRankConfig(&comm, 1, id, 0, &uninitialized), ncclInvalidArgument);
  EXPECT_NE(LastError().find("NCCL_CONFIG_INITIALIZER"), std::string::npos);
  ncclUniqueId foreign = {};
  EXPECT_EQ(Lib().CommInitRankConfig(&comm, 1, foreign, 0, &config), ncclInvalidUsage);

  // One rank claimed twice: refused at once, and the other claimant stops waiting.
  std::vector<ncclResult_t> results(2, ncclSuccess);
  std::vector<ncclComm_t> twins(2, nullptr);
  const auto start = Clock::now();
  OnRanks(2, [&](int r) { results[r] = Lib().CommInitRankConfig(&twins[r], 2, id, 0, &config); });
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10.0);
  EXPECT_TRUE(results[0] == ncclInvalidUsage || results[1] == ncclInvalidUsage);
  EXPECT_NE(results[0], ncclSuccess);
  EXPECT_NE(results[1], ncclSuccess);

  // Buffers: host memory, past the end, a partial overlap.
  std::vector<ncclComm_t> comms = InitComms(1, true);
  ASSERT_EQ(comms.size(), 1u);
  std::vector<float> host(16);
  DeviceBuffer device(64);
  EXPECT_EQ(
      Lib().AllReduce(host.data(), device.data(), 16, ncclFloat32, ncclSum, comms[0], nullptr),
      ncclInvalidArgument);
  EXPECT_NE(LastError().find("is not device memory"), std::string::npos) << LastError();
  EXPECT_EQ(
      Lib().AllReduce(device.data(), device.data(), 17, ncclFloat32, ncclSum, comms[0], nullptr),
      ncclInvalidArgument);
  EXPECT_NE(LastError().find("runs past the end"), std::string::npos) << LastError();
  EXPECT_EQ(
      Lib().AllReduce(device.data(), device.data() + 4, 8, ncclFloat32, ncclSum, comms[0], nullptr),
      ncclInvalidArgument);
  EXPECT_NE(LastError().find("in-place position"), std::string::npos) << LastError();
  EXPECT_EQ(
      Lib().AllReduce(device.data(), device.data(), 8, ncclFloat8e4m3, ncclSum, comms[0], nullptr),
      ncclInvalidArgument);
  EXPECT_EQ(Lib().Send(device.data(), 4, ncclFloat32, 1, comms[0], nullptr), ncclInvalidArgument);
  // A failed call inside a group fails the group, which launches nothing.
  EXPECT_EQ(Lib().GroupStart(), ncclSuccess);
  EXPECT_EQ(Lib().Send(device.data(), 4, ncclFloat32, 5, comms[0], nullptr), ncclInvalidArgument);
  EXPECT_EQ(Lib().GroupEnd(), ncclInvalidArgument);
  EXPECT_EQ(Lib().GroupEnd(), ncclInvalidUsage);  // no group open
  CloseComms(comms);
  EXPECT_EQ(Lib().CommDestroy(comms[0]), ncclInvalidArgument);  // already destroyed
}

// Ranks as processes, as under mpirun: this binary again, twice, running the Child case
// with the id in the environment.
TEST(NcclProcesses, TwoProcessesAllReduceAndExchange) {
  ASSERT_EQ(Lib().error, "");
  if (std::getenv("SIMGPU_NCCL_TEST_ID") != nullptr) GTEST_SKIP() << "in a child";
  ncclUniqueId id;
  ASSERT_EQ(Lib().GetUniqueId(&id), ncclSuccess);
  std::string hex;
  for (unsigned char byte : id.internal) {
    char pair[3];
    std::snprintf(pair, sizeof(pair), "%02x", byte);
    hex += pair;
  }
  std::vector<pid_t> children;
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      // The children must not write this test's XML or premature-exit files.
      const std::string entry = *e;
      if (entry.rfind("XML_OUTPUT_FILE=", 0) == 0 || entry.rfind("GTEST_", 0) == 0 ||
          entry.rfind("TEST_PREMATURE_EXIT_FILE=", 0) == 0 || entry.rfind("TEST_SHARD_", 0) == 0) {
        continue;
      }
      env_strings.push_back(entry);
    }
    env_strings.push_back("SIMGPU_NCCL_TEST_ID=" + hex);
    env_strings.push_back("SIMGPU_NCCL_TEST_RANK=" + std::to_string(rank));
    std::vector<char*> envp;
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string self = "/proc/self/exe";
    std::string filter = "--gtest_filter=NcclProcesses.DISABLED_Child";
    std::string disabled = "--gtest_also_run_disabled_tests";
    char* argv[] = {self.data(), filter.data(), disabled.data(), nullptr};
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()), 0);
    children.push_back(pid);
  }
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  for (pid_t pid : children) {
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        ADD_FAILURE() << "child " << pid << " did not finish within 120 s";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
}

// One rank of TwoProcesses (disabled: only its child processes run it, by name).
TEST(NcclProcesses, DISABLED_Child) {
  const char* hex = std::getenv("SIMGPU_NCCL_TEST_ID");
  const char* rank_text = std::getenv("SIMGPU_NCCL_TEST_RANK");
  ASSERT_TRUE(hex != nullptr && rank_text != nullptr) << "run by NcclProcesses.TwoProcesses";
  ASSERT_EQ(Lib().error, "");
  ncclUniqueId id;
  ASSERT_EQ(std::strlen(hex), 2 * sizeof(id.internal));
  for (size_t i = 0; i < sizeof(id.internal); ++i) {
    id.internal[i] = static_cast<char>(std::stoul(std::string(hex + 2 * i, 2), nullptr, 16));
  }
  const int rank = std::atoi(rank_text);
  ncclComm_t comm = nullptr;
  ncclConfig_t config = Config(false);
  ncclResult_t result = Lib().CommInitRankConfig(&comm, 2, id, rank, &config);
  if (result == ncclInProgress) result = Await(comm);
  ASSERT_EQ(result, ncclSuccess) << LastError();
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const size_t count = 600001;  // several steps
  DeviceBuffer data(count * 4);
  data.Upload(Fill(rank, 0, count, 900, ncclFloat32), stream);
  ASSERT_EQ(Lib().AllReduce(data.data(), data.data(), count, ncclFloat32, ncclSum, comm, stream),
            ncclSuccess);
  DeviceBuffer mine(count * 4), theirs(count * 4);
  mine.Upload(Fill(rank, 0, count, 901, ncclFloat32), stream);
  ASSERT_EQ(Lib().GroupStart(), ncclSuccess);
  ASSERT_EQ(Lib().Send(mine.data(), count, ncclFloat32, 1 - rank, comm, stream), ncclSuccess);
  ASSERT_EQ(Lib().Recv(theirs.data(), count, ncclFloat32, 1 - rank, comm, stream), ncclSuccess);
  ASSERT_EQ(Lib().GroupEnd(), ncclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(Await(comm), ncclSuccess) << LastError();
  EXPECT_EQ(
      Compare(data.Download(0, count * 4, stream), Sum(2, 0, count, 900, ncclFloat32), ncclFloat32),
      "");
  EXPECT_EQ(Compare(theirs.Download(0, count * 4, stream),
                    Fill(1 - rank, 0, count, 901, ncclFloat32), ncclFloat32),
            "");
  result = Lib().CommFinalize(comm);
  if (result == ncclInProgress) result = Await(comm);
  EXPECT_EQ(result, ncclSuccess) << LastError();
  EXPECT_EQ(Lib().CommDestroy(comm), ncclSuccess);
  cudaStreamDestroy(stream);
}

}  // namespace
