// NvmeTier: the rank's I/O thread over its NvmeStore, so that the engine's host thread and
// the streams' host work can post extent reads and writes without blocking, and wait for
// them by ticket. Requests on one extent (unit, kind) run in the order they were posted:
// a read posted after a write sees that write, even when the write's bytes are only
// ready later. A write may be posted "held" (its buffer is not filled yet) and Released
// later from any thread, or when a device Event completes (polled by the I/O thread): the
// position in the order is taken at Post. That is how the optimizer reserves the
// write-back of its state and of an updated param shard before the next forward's read of
// it is posted, and has it start as soon as its AdamW has run on the host stream. (Events
// complete even on a failed stream, so such a write is never held forever.)
// Errors: a failed request fails its ticket (Wait returns its status, naming unit, kind,
// file and offset); the thread keeps serving other requests.
// A tier over a dry-run store (NvmeStoreOptions::dry_run) works the same, its requests
// completing as soon as they are submitted, without touching their buffers.
// Thread-safety: every method may be called from any thread. Buffers must stay valid and
// untouched until the ticket is done. Destruction drains everything posted (held writes
// that were never released are dropped).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "device/device.h"
#include "nvme/nvme_store.h"

namespace strata {

class NvmeTier {
 public:
  using Ticket = uint64_t;
  struct Part {
    ExtentKind kind;
    void* buffer;  // PaddedBytes(unit, kind) bytes, 4 KiB-aligned
  };

  static StatusOr<std::unique_ptr<NvmeTier>> Create(const NvmeStoreOptions& options,
                                                    const std::vector<ExtentSpec>& extents);
  ~NvmeTier();

  // Posts a read (or write) of several extents of one unit; the ticket is done when all
  // are. A held write waits for Release(ticket) before it is submitted.
  Ticket Read(int unit, std::vector<Part> parts);
  // A read held until ticket `after` is done (its buffers are still being written out by
  // that earlier request). 0: not held.
  Ticket ReadAfter(int unit, std::vector<Part> parts, Ticket after);
  Ticket Write(int unit, std::vector<Part> parts, bool held = false);
  // A write held until `release_after`'s most recent record (made before this call) has
  // completed. The event must outlive the ticket and must not be recorded again before
  // the ticket is done (the I/O thread polls the event's latest record).
  Ticket WriteAfter(int unit, std::vector<Part> parts, Event* release_after);
  void Release(Ticket ticket);
  // Blocks until the ticket is done; returns its status.
  Status Wait(Ticket ticket);
  bool Done(Ticket ticket);
  // Blocks until everything posted is done, except writes held for a Release that has not
  // come (writes held on an event are waited for); the first error since the last Drain,
  // if any.
  Status Drain();

  uint64_t PaddedBytes(int unit, ExtentKind kind) const { return store_->PaddedBytes(unit, kind); }
  // Total bytes of the store's swap files (in a dry run, of those a real run would create).
  uint64_t file_bytes() const { return store_->file_bytes(); }
  // Bytes moved so far (in a dry run, those a real run would move), for benchmarks, metrics
  // and `strata plan`: counted when a request is posted, in program order, so that a
  // step's count does not depend on when the I/O thread got to it (counted at submission,
  // a step's reads ahead fell into the next step or not by timing: a dry run's second
  // step read 0.4-1.6x a real step's bytes).
  uint64_t bytes_read() const;
  uint64_t bytes_written() const;
  // Wall time so far with at least one request at the disk (the store), in ms.
  double busy_ms() const;

 private:
  struct Request {
    Ticket ticket = 0;
    int unit = 0;
    bool write = false;
    bool released = true;
    Event* release_after = nullptr;  // held until it completes
    Ticket after = 0;                // held until this ticket is done
    std::vector<Part> parts;
    size_t submitted = 0;  // parts handed to the store
    size_t completed = 0;
    Status status;
  };
  explicit NvmeTier(std::unique_ptr<NvmeStore> store);
  Ticket Post(int unit, bool write, std::vector<Part> parts, bool held, Event* release_after,
              Ticket after = 0);
  void Loop();
  // True when nothing posted earlier on the same extents is still outstanding.
  bool CanStart(const Request& request) const;
  bool Outstanding(Ticket ticket) const;
  void Finish(Request& request);

  std::unique_ptr<NvmeStore> store_;
  mutable std::mutex mutex_;
  std::condition_variable work_cv_;  // the I/O thread sleeps on it
  std::condition_variable done_cv_;  // waiters sleep on it
  std::deque<Request> queue_;        // posted, not finished, in posting order
  std::map<Ticket, Status> failed_;  // tickets that finished with an error
  Ticket next_ticket_ = 1;
  Status first_error_;
  bool stopping_ = false;
  uint64_t bytes_read_ = 0, bytes_written_ = 0;
  double busy_ms_ = 0.0;  // closed busy intervals
  std::chrono::steady_clock::time_point busy_since_;
  bool busy_ = false;
  std::thread thread_;
};

}  // namespace strata
