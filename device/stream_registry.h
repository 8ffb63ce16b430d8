// The live streams of one Device, for fences over all of them (BlockCache: a freed block
// is reused only once every stream has passed the moment it was freed, as cudaFree's
// implicit device synchronisation would guarantee, without blocking anyone).
// Thread-safety: thread-safe; a stream registers when the device creates it and leaves
// when it is destroyed (after draining).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "device/device.h"

namespace strata {

class StreamRegistry {
 public:
  void Add(Stream* stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    streams_.insert(stream);
  }
  void Remove(Stream* stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    streams_.erase(stream);
  }
  // Calls fn on every live stream, under the registry's lock (a stream cannot leave meanwhile).
  void ForEach(const std::function<void(Stream&)>& fn) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Stream* stream : streams_) fn(*stream);
  }

  // Records an event of `device` on every live stream now; the predicate is true once all
  // have completed. An event that cannot be made or recorded makes the fence wait for
  // nothing on that stream (the stream has failed; its work is skipped).
  std::function<bool()> Fence(Device& device) {
    auto events = std::make_shared<std::vector<std::unique_ptr<Event>>>();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (Stream* stream : streams_) {
        StatusOr<std::unique_ptr<Event>> event = device.CreateEvent();
        if (!event.ok() || !device.Record(**event, *stream).ok()) continue;
        events->push_back(std::move(*event));
      }
    }
    return [events] {
      for (const std::unique_ptr<Event>& event : *events) {
        if (!event->Query()) return false;
      }
      return true;
    };
  }

 private:
  std::mutex mutex_;
  std::set<Stream*> streams_;
};

}  // namespace strata
