// InlineStream: a Stream that runs enqueued host work at once, on the calling thread, with
// the Stream contract's sticky first error. For one-off host collectives outside any device
// (the NCCL unique-id broadcast through a host Communicator, set-up code, tests).
// Thread-safety: as Stream; work enqueued from several threads runs on each caller's thread.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <utility>

#include "device/device.h"

namespace strata {

class InlineStream : public Stream {
 public:
  explicit InlineStream(std::string name = "inline") : name_(std::move(name)) {}

  void EnqueueHost(std::function<Status()> work) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!first_error_.ok()) return;  // sticky: later work is skipped
    }
    Status status = work();
    if (status.ok()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (first_error_.ok()) first_error_ = Annotate(status, "stream '" + name_ + "'");
  }

  Status Synchronize() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return first_error_;
  }

  const std::string& name() const override { return name_; }

 private:
  const std::string name_;
  std::mutex mutex_;
  Status first_error_;
};

}  // namespace strata
