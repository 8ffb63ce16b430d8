// CPU device: streams run in order, events order two streams, errors are sticky, copies
// land, and the device pool rejects allocations over device.memory_limit.
#include "core/cpu_device.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata {
namespace {

std::unique_ptr<Device> MakeDevice(uint64_t device_bytes = 1 << 20) {
  CpuDeviceOptions options;
  options.device_memory_bytes = device_bytes;
  return CreateCpuDevice(options);
}

TEST(CpuDevice, StreamRunsWorkInOrder) {
  auto device = MakeDevice();
  auto stream = *device->CreateStream("compute");
  std::vector<int> order;
  for (int i = 0; i < 100; ++i) {
    stream->EnqueueHost([&order, i] {
      order.push_back(i);
      return absl::OkStatus();
    });
  }
  ASSERT_TRUE(stream->Synchronize().ok());
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

TEST(CpuDevice, EventOrdersTwoStreams) {
  auto device = MakeDevice();
  auto producer = *device->CreateStream("copy");
  auto consumer = *device->CreateStream("compute");
  auto event = *device->CreateEvent();
  std::atomic<int> value{0};
  producer->EnqueueHost([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    value = 42;
    return absl::OkStatus();
  });
  ASSERT_TRUE(device->Record(*event, *producer).ok());
  ASSERT_TRUE(device->Wait(*consumer, *event).ok());
  int seen = -1;
  consumer->EnqueueHost([&] {
    seen = value.load();
    return absl::OkStatus();
  });
  ASSERT_TRUE(consumer->Synchronize().ok());
  EXPECT_EQ(seen, 42);
  EXPECT_TRUE(event->Query());
}

// One event recorded on a slow stream, waited on, then re-recorded on a fast stream: the
// wait must still be for the slow stream's record (CUDA captures the record at wait time).
TEST(CpuDevice, WaitIsForTheRecordItSawEvenWhenALaterRecordCompletesFirst) {
  auto device = MakeDevice();
  auto slow = *device->CreateStream("slow");
  auto fast = *device->CreateStream("fast");
  auto waiter = *device->CreateStream("waiter");
  auto event = *device->CreateEvent();
  std::atomic<bool> slow_done{false};
  slow->EnqueueHost([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    slow_done = true;
    return absl::OkStatus();
  });
  ASSERT_TRUE(device->Record(*event, *slow).ok());
  ASSERT_TRUE(device->Wait(*waiter, *event).ok());
  ASSERT_TRUE(device->Record(*event, *fast).ok());  // completes at once
  bool seen = false;
  waiter->EnqueueHost([&] {
    seen = slow_done.load();
    return absl::OkStatus();
  });
  ASSERT_TRUE(waiter->Synchronize().ok());
  EXPECT_TRUE(seen) << "the wait ended on the later record of the fast stream";
  ASSERT_TRUE(event->Synchronize().ok());
  EXPECT_TRUE(event->Query());
}

TEST(CpuDevice, WaitOnUnrecordedEventDoesNotBlock) {
  auto device = MakeDevice();
  auto stream = *device->CreateStream("s");
  auto event = *device->CreateEvent();
  ASSERT_TRUE(device->Wait(*stream, *event).ok());
  EXPECT_TRUE(stream->Synchronize().ok());
}

TEST(CpuDevice, ErrorsAreStickyAndSkipLaterWork) {
  auto device = MakeDevice();
  auto stream = *device->CreateStream("io");
  bool ran_after = false;
  stream->EnqueueHost([] { return absl::DataLossError("checksum mismatch"); });
  stream->EnqueueHost([&] {
    ran_after = true;
    return absl::OkStatus();
  });
  Status status = stream->Synchronize();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("stream 'io'"), std::string::npos);
  EXPECT_FALSE(ran_after);
}

TEST(CpuDevice, CopyAndMemset) {
  auto device = MakeDevice();
  auto stream = *device->CreateStream("copy");
  auto src = *device->Allocate(Tier::kHost, StateKind::kParams, 4096, "src");
  auto dst = *device->Allocate(Tier::kDevice, StateKind::kParams, 4096, "dst");
  for (int i = 0; i < 1024; ++i) src.as<float>()[i] = i * 0.5f;
  ASSERT_TRUE(device->CopyAsync(dst.data(), src.data(), 4096, *stream).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  for (int i = 0; i < 1024; ++i) ASSERT_EQ(dst.as<float>()[i], i * 0.5f);
  ASSERT_TRUE(device->MemsetAsync(dst.data(), 0, 4096, *stream).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  for (int i = 0; i < 1024; ++i) ASSERT_EQ(dst.as<float>()[i], 0.0f);
}

TEST(CpuDevice, DevicePoolEnforcesLimitAndAccounts) {
  auto device = MakeDevice(1 << 20);
  auto a = device->Allocate(Tier::kDevice, StateKind::kParams, 768 << 10, "unit 0 params");
  ASSERT_TRUE(a.ok());
  auto b = device->Allocate(Tier::kDevice, StateKind::kOptimizer, 512 << 10, "unit 0 master");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("device.memory_limit"), std::string::npos);
  EXPECT_EQ(device->pool(Tier::kDevice).Stats().current_bytes, 768u << 10);
  a->Reset();
  EXPECT_EQ(device->pool(Tier::kDevice).Stats().current_bytes, 0u);
  EXPECT_EQ(device->pool(Tier::kDevice).Stats().peak_bytes, 768u << 10);
  // Host tier is accounted separately.
  auto h = device->Allocate(Tier::kHost, StateKind::kGrads, 4 << 20, "host grads");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(device->pool(Tier::kHost).Stats().current_bytes, 4u << 20);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// Destroying an event while a stream still has to record or wait on it is safe.
TEST(CpuDevice, EventMayBeDestroyedWithWorkQueued) {
  auto device = MakeDevice();
  auto producer = *device->CreateStream("copy");
  auto consumer = *device->CreateStream("compute");
  std::atomic<bool> go{false};
  producer->EnqueueHost([&] {
    while (!go) std::this_thread::yield();
    return absl::OkStatus();
  });
  {
    auto event = *device->CreateEvent();
    ASSERT_TRUE(device->Record(*event, *producer).ok());
    ASSERT_TRUE(device->Wait(*consumer, *event).ok());
  }  // destroyed while both streams still hold work on it
  go = true;
  EXPECT_TRUE(producer->Synchronize().ok());
  EXPECT_TRUE(consumer->Synchronize().ok());
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// A failed stream still completes its event records: nobody waits forever on it.
TEST(CpuDevice, FailedStreamStillCompletesRecords) {
  auto device = MakeDevice();
  auto stream = *device->CreateStream("comm");
  auto event = *device->CreateEvent();
  stream->EnqueueHost([] { return absl::DeadlineExceededError("all_gather timed out"); });
  ASSERT_TRUE(device->Record(*event, *stream).ok());
  EXPECT_TRUE(event->Synchronize().ok());  // returns instead of hanging
  EXPECT_EQ(stream->Synchronize().code(), absl::StatusCode::kDeadlineExceeded);
}

// A stream that waits for a record made after another stream failed fails with that error
// and skips its later work (it would compute on what the failed copy never wrote); a
// record made before the failure passes no error on.
TEST(CpuDevice, WaitingOnAFailedStreamsRecordFailsTheWaiter) {
  auto device = MakeDevice();
  auto copy = *device->CreateStream("copy");
  auto compute = *device->CreateStream("compute");
  auto before = *device->CreateEvent();
  auto after = *device->CreateEvent();
  ASSERT_TRUE(device->Record(*before, *copy).ok());
  copy->EnqueueHost([] { return absl::DataLossError("checksum mismatch in extent 3"); });
  ASSERT_TRUE(device->Record(*after, *copy).ok());

  auto bystander = *device->CreateStream("bystander");
  ASSERT_TRUE(device->Wait(*bystander, *before).ok());
  EXPECT_TRUE(bystander->Synchronize().ok());

  bool ran = false;
  ASSERT_TRUE(device->Wait(*compute, *after).ok());
  compute->EnqueueHost([&ran] {
    ran = true;
    return absl::OkStatus();
  });
  const Status status = compute->Synchronize();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("checksum mismatch"));
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("stream 'compute'"));
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace strata
