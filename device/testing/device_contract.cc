// See device_contract.h.
#include "device/testing/device_contract.h"

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/trace.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/testing/status_matchers.h"

namespace strata::testing {

void ExpectSteadyStateMakesNoDriverCalls(Device& device) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> stream, device.CreateStream("contract"));
  const std::vector<size_t> sizes = {100, 5000, 1u << 20, (3u << 20) + 17, 7u << 20};
  auto round = [&] {
    for (Tier tier : {Tier::kDevice, Tier::kHost}) {
      std::vector<Buffer> live;
      for (size_t bytes : sizes) {
        ASSERT_OK_AND_ASSIGN(Buffer buffer,
                             device.Allocate(tier, StateKind::kWorkspace, bytes, "round"));
        ASSERT_OK(device.MemsetAsync(buffer.data(), 1, bytes, *stream));
        live.push_back(std::move(buffer));
      }
      ASSERT_OK(stream->Synchronize());
    }
  };
  round();
  round();  // the first round's blocks may still wait for their fences
  ASSERT_OK(stream->Synchronize());
  const uint64_t before = device.driver_calls();
  for (int i = 0; i < 3; ++i) round();
  EXPECT_EQ(device.driver_calls(), before) << "a steady-state round called the driver";
  EXPECT_GT(before, 0u) << "the first rounds must have allocated";
}

void ExpectNoReuseWhileAStreamIsBehind(Device& device) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> stream, device.CreateStream("behind"));
  for (Tier tier : {Tier::kDevice, Tier::kHost}) {
    SCOPED_TRACE(TierName(tier));
    // Settle the class: one block of it, freed while nothing runs.
    {
      ASSERT_OK_AND_ASSIGN(Buffer warm, device.Allocate(tier, StateKind::kWorkspace, 9000, "warm"));
    }
    ASSERT_OK(stream->Synchronize());
    auto release = std::make_shared<std::atomic<bool>>(false);
    stream->EnqueueHost([release] {
      while (!release->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return absl::OkStatus();
    });
    void* freed = nullptr;
    {
      ASSERT_OK_AND_ASSIGN(Buffer first, device.Allocate(tier, StateKind::kWorkspace, 9000, "a"));
      freed = first.data();
    }  // freed while the stream is held back
    ASSERT_OK_AND_ASSIGN(Buffer second, device.Allocate(tier, StateKind::kWorkspace, 9000, "b"));
    EXPECT_NE(second.data(), freed) << "handed out while a stream was behind its free";
    release->store(true);
    ASSERT_OK(stream->Synchronize());
    ASSERT_OK_AND_ASSIGN(Buffer third, device.Allocate(tier, StateKind::kWorkspace, 9000, "c"));
    EXPECT_EQ(third.data(), freed) << "not reused once every stream had passed";
  }
}

void ExpectHostWorkOfStreamsIsIndependent(Device& device) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> first, device.CreateStream("first"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> second, device.CreateStream("second"));
  ASSERT_OK_AND_ASSIGN(Buffer source, device.Allocate(Tier::kHost, StateKind::kWorkspace, 256, "s"));
  ASSERT_OK_AND_ASSIGN(Buffer target, device.Allocate(Tier::kDevice, StateKind::kWorkspace, 256, "t"));
  ASSERT_OK_AND_ASSIGN(Buffer back, device.Allocate(Tier::kHost, StateKind::kWorkspace, 256, "b"));
  std::memset(source.data(), 7, 256);
  std::memset(back.data(), 0, 256);
  auto flag = std::make_shared<std::atomic<bool>>(false);
  auto timed_out = std::make_shared<std::atomic<bool>>(false);
  // The first stream's host work waits for the second's, which is enqueued after it.
  first->EnqueueHost([flag, timed_out] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!flag->load()) {
      if (std::chrono::steady_clock::now() > deadline) {
        timed_out->store(true);
        return absl::DeadlineExceededError("the other stream's host work never ran");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return absl::OkStatus();
  });
  // The second stream's host work enqueues device work (copies) on its own stream.
  Device* dev = &device;
  Stream* stream = second.get();
  void* src = source.data();
  void* dst = target.data();
  void* out = back.data();
  second->EnqueueHost([flag, dev, stream, src, dst, out] {
    RETURN_IF_ERROR(dev->CopyAsync(dst, src, 256, *stream));
    RETURN_IF_ERROR(dev->CopyAsync(out, dst, 256, *stream));
    flag->store(true);
    return absl::OkStatus();
  });
  EXPECT_OK(first->Synchronize());
  EXPECT_FALSE(timed_out->load()) << "host work of two streams held each other up";
  EXPECT_OK(second->Synchronize());
  EXPECT_EQ(static_cast<unsigned char*>(back.data())[255], 7)
      << "device work enqueued by host work did not run";
}

void ExpectIdleTimeCountsStarvationAndStalls(Device& device) {
  using std::chrono::milliseconds;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> compute, device.CreateStream("compute"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> other, device.CreateStream("other"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Event> read, device.CreateEvent());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Event> copied, device.CreateEvent());
  auto sleep = [](int ms) {
    return [ms] {
      std::this_thread::sleep_for(milliseconds(ms));
      return absl::OkStatus();
    };
  };
  const auto start = std::chrono::steady_clock::now();
  const IdleMeter meter(*compute);
  // Starved: compute has 30 ms of work; this thread then blocks 120 ms on the other stream.
  compute->EnqueueHost(sleep(30));
  other->EnqueueHost(sleep(120));
  ASSERT_OK(device.Record(*read, *other));
  ASSERT_OK(read->Synchronize());
  // Stalled: compute waits 40 ms on the other stream's event, then works 20 ms.
  other->EnqueueHost(sleep(40));
  ASSERT_OK(device.Record(*copied, *other));
  ASSERT_OK(device.Wait(*compute, *copied));
  compute->EnqueueHost(sleep(20));
  ASSERT_OK(compute->Synchronize());
  const double wall =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const double idle = meter.IdleMs(wall);
  // About 90 ms starved and 40 ms stalled; the stream worked at least 50 ms of the wall time.
  EXPECT_GE(idle, 100.0) << "wall " << wall << " ms";
  EXPECT_LE(idle, wall - 45.0) << "wall " << wall << " ms";
  ASSERT_OK(other->Synchronize());
}

namespace {

// Spans of the track named `track` in a parsed trace, in time order.
std::vector<nlohmann::json> SpansOn(const nlohmann::json& trace, const std::string& track) {
  int tid = -1;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "M" && event["name"] == "thread_name" && event["args"]["name"] == track) {
      tid = event["tid"];
    }
  }
  std::vector<nlohmann::json> spans;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "X" && event["tid"] == tid) spans.push_back(event);
  }
  return spans;
}

Status Sleep(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return absl::OkStatus();
}

}  // namespace

void ExpectTracedStreamsShowLabelsAndWaits(Device& device_ref) {
  Device* device = &device_ref;
  Trace trace;
  device->SetTrace(&trace);
  ASSERT_OK_AND_ASSIGN(auto compute, device->CreateStream("compute"));
  ASSERT_OK_AND_ASSIGN(auto comm, device->CreateStream("comm"));
  ASSERT_OK_AND_ASSIGN(auto event, device->CreateEvent());
  EXPECT_FALSE(compute->tracing());  // not recording yet
  trace.SetRecording(true);
  ASSERT_TRUE(compute->tracing());
  {
    StreamLabel outer(*comm, "gather h3", "comm");
    StreamLabel inner(*comm, "all-gather", "comm", {{"bytes", "4096"}});
    comm->EnqueueHost([] { return Sleep(30); });
  }
  ASSERT_OK(device->Record(*event, *comm));
  {
    StreamLabel label(*compute, "forward a", "compute");
    for (int i = 0; i < 3; ++i) compute->EnqueueHost([] { return Sleep(2); });
  }
  ASSERT_OK(device->Wait(*compute, *event));
  {
    StreamLabel label(*compute, "forward b", "compute");
    compute->EnqueueHost([] { return Sleep(1); });
  }
  ASSERT_OK(compute->Synchronize());
  ASSERT_OK(comm->Synchronize());
  const double stalled_ms = compute->stalled_ms();  // (CUDA: resolves the timed waits)
  EXPECT_EQ(compute->trace_label(), nullptr);  // every label restored

  const nlohmann::json parsed = nlohmann::json::parse(trace.ToJson());
  const auto on_compute = SpansOn(parsed, "compute");
  ASSERT_EQ(on_compute.size(), 3u) << parsed.dump(1);
  EXPECT_EQ(on_compute[0]["name"], "forward a");  // three tasks, one span
  EXPECT_GE(static_cast<double>(on_compute[0]["dur"]), 6000.0);
  EXPECT_EQ(on_compute[1]["name"], "wait");
  EXPECT_EQ(on_compute[1]["cat"], "stall");
  EXPECT_EQ(on_compute[1]["args"]["for"], "comm");
  EXPECT_NEAR(static_cast<double>(on_compute[1]["dur"]) / 1000.0, stalled_ms, 0.01);
  EXPECT_GT(stalled_ms, 10.0);
  EXPECT_EQ(on_compute[2]["name"], "forward b");
  for (size_t i = 1; i < on_compute.size(); ++i) {  // never overlapping on one track
    EXPECT_GE(static_cast<double>(on_compute[i]["ts"]),
              static_cast<double>(on_compute[i - 1]["ts"]) +
                  static_cast<double>(on_compute[i - 1]["dur"]) - 0.001);
  }
  const auto on_comm = SpansOn(parsed, "comm");
  ASSERT_EQ(on_comm.size(), 1u) << parsed.dump(1);
  EXPECT_EQ(on_comm[0]["name"], "all-gather");
  EXPECT_EQ(on_comm[0]["args"]["bytes"], "4096");
  EXPECT_EQ(on_comm[0]["args"]["for"], "gather h3");

  // Off: labels are not even built, nothing more is recorded.
  trace.SetRecording(false);
  const uint64_t before = trace.events();
  {
    StreamLabel label(*compute, "forward c", "compute");
    EXPECT_EQ(compute->trace_label(), nullptr);
    compute->EnqueueHost([] { return Sleep(1); });
  }
  ASSERT_OK(compute->Synchronize());
  EXPECT_EQ(trace.events(), before);
  device->SetTrace(nullptr);
}


}  // namespace strata::testing
