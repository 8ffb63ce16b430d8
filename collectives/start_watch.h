// StartWatch: catches a collective that never starts. Host-run communicators (local, MPI)
// enqueue each collective as host work on a stream; work queued before it that never
// finishes (a hung task, a wait for an event never recorded) keeps it from ever starting,
// and its own timeout (which runs only once it started) never fires. The watch follows each
// collective from issue to start; one that has waited longer than timeout_s fails the
// communicator through `fail`, naming the call, its stream and the wait.
//
// Time spent behind an earlier collective of the same communicator does not count: that
// one has its own timeout. A pending call's clock starts at its issue or at the previous
// collective's end, whichever is later.
// Thread-safety: thread-safe. The watch runs one thread (started at the first Issued);
// `fail` is called on it, without the watch's lock held, at most once, after the error is
// logged (the issuing thread may be stuck behind the same work).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "collectives/communicator.h"
#include "core/status.h"

namespace strata {

class StartWatch {
 public:
  using Clock = std::chrono::steady_clock;
  // `who` prefixes the message ("local rank 0 of 2"); `fail(status, sequence)` fails the
  // communicator with kDeadlineExceeded for the call of that sequence number.
  StartWatch(std::string who, double timeout_s,
             std::function<void(const Status&, uint64_t sequence)> fail);
  ~StartWatch();  // stops the thread; pending calls are no longer followed
  StartWatch(const StartWatch&) = delete;
  StartWatch& operator=(const StartWatch&) = delete;

  // `call` was enqueued on the stream named `stream` (in sequence order).
  void Issued(const CollectiveCall& call, const std::string& stream);
  // The collective of `sequence` began to run (earlier ones have too).
  void Started(uint64_t sequence);
  // The collective that started last has ended.
  void Finished();

 private:
  struct Pending {
    CollectiveCall call;
    std::string stream;
    Clock::time_point since;  // issue, or the previous collective's end if later
  };
  void Watch();

  const std::string who_;
  const Clock::duration timeout_;
  const std::function<void(const Status&, uint64_t)> fail_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;  // in sequence order
  bool running_ = false;         // a collective has started and not finished
  bool failed_ = false;
  bool stopping_ = false;
  std::thread thread_;  // started by the first Issued
};

}  // namespace strata
