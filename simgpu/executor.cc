// simgpu/executor.cc: the SIMT executor (executor.h): blocks in a seeded random order, each
// block's threads as Boost.Context fibers scheduled by the calling OS thread, and the
// barrier and warp operations simt.h's intrinsics call.
//
// A block runs its runnable threads first to last; a thread that waits at a barrier or warp
// operation leaves the queue until the operation completes, which the last thread to arrive
// does on the spot (completing everyone's results and queueing the others). When the queue
// is empty and live threads remain, nothing can ever complete: that is the deadlock error.
// After any error every unfinished fiber is resumed once more to unwind (AbandonThread is
// thrown where it waits), so every stack goes back to the pool and no fiber object is ever
// destroyed while its context is alive. Every switch is annotated for AddressSanitizer.
#include "simgpu/simt.h"

#include <boost/context/fiber.hpp>

#include <cinttypes>
#include <cstddef>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "simgpu/executor.h"
#include "simgpu/executor_memory.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

namespace simgpu {
namespace internal {

__thread const ThreadCoordinates* current_coordinates
    __attribute__((tls_model("initial-exec"))) = nullptr;

}  // namespace internal

namespace {

namespace context = boost::context;
using executor::Stack;
using internal::WarpOpKind;

constexpr int kWarpLanes = 32;
constexpr uint64_t kMaxThreadsPerBlock = 1024;

std::string Format(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string Format(const char* format, ...) {
  char buffer[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  return buffer;
}

// AddressSanitizer must be told about every stack switch, or it takes the fiber's frames
// for the thread's stack (false reports, broken exception unwinding under ASan).
void StartSwitch(void** fake_stack_save, const void* bottom, size_t bytes) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(fake_stack_save, bottom, bytes);
#else
  (void)fake_stack_save, (void)bottom, (void)bytes;
#endif
}
void FinishSwitch(void* fake_stack_save, const void** bottom_old, size_t* bytes_old) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake_stack_save, bottom_old, bytes_old);
#else
  (void)fake_stack_save, (void)bottom_old, (void)bytes_old;
#endif
}

// Thrown where an abandoned thread waits, to unwind its kernel frames.
struct AbandonThread {};

bool IsShuffle(WarpOpKind kind) {
  return kind == WarpOpKind::kShuffleIndex || kind == WarpOpKind::kShuffleUp ||
         kind == WarpOpKind::kShuffleDown || kind == WarpOpKind::kShuffleXor;
}

const char* OperationName(WarpOpKind kind) {
  switch (kind) {
    case WarpOpKind::kShuffleIndex: return "__shfl_sync";
    case WarpOpKind::kShuffleUp: return "__shfl_up_sync";
    case WarpOpKind::kShuffleDown: return "__shfl_down_sync";
    case WarpOpKind::kShuffleXor: return "__shfl_xor_sync";
    case WarpOpKind::kBallot: return "__ballot_sync";
    case WarpOpKind::kAny: return "__any_sync";
    case WarpOpKind::kAll: return "__all_sync";
    case WarpOpKind::kSyncWarp: return "__syncwarp";
  }
  return "a warp operation";
}

struct WarpRequest {
  WarpOpKind kind = WarpOpKind::kSyncWarp;
  unsigned mask = 0;
  uint64_t value = 0;
  int value_bytes = 0;
  int lane_argument = 0;
  int width = kWarpLanes;
};

bool SameOperation(const WarpRequest& a, const WarpRequest& b) {
  return a.kind == b.kind && a.mask == b.mask && a.value_bytes == b.value_bytes;
}

std::string Describe(const WarpRequest& request) {
  return Format("%s mask 0x%08x", OperationName(request.kind), request.mask);
}

// The lane a shuffle reads, as PTX's shfl.sync computes it for CUDA's __shfl*_sync with
// `width` (a power of two): within the lane's segment of `width` lanes; a source outside the
// rules (before the segment for up, after it for down and xor) reads the lane itself.
inline __attribute__((always_inline)) int SourceLane(WarpOpKind kind, int lane,
                                                    int lane_argument, int width) {
  const int segment_begin = lane & ~(width - 1);
  const int segment_last = segment_begin + width - 1;
  const int argument = lane_argument & (kWarpLanes - 1);
  switch (kind) {
    case WarpOpKind::kShuffleIndex: return segment_begin | (lane_argument & (width - 1));
    case WarpOpKind::kShuffleUp: return lane - argument >= segment_begin ? lane - argument : lane;
    case WarpOpKind::kShuffleDown: return lane + argument <= segment_last ? lane + argument : lane;
    case WarpOpKind::kShuffleXor: return (lane ^ argument) <= segment_last ? lane ^ argument : lane;
    default: return lane;
  }
}

enum class ThreadState { kRunnable, kAtBarrier, kAtWarpOperation, kExited };

class Block;
struct Worker;

// One thread of the running block. The coordinates come first: the thread-local
// internal::current_coordinates points at them, and CurrentThread finds the thread from it.
struct KernelThread {
  ThreadCoordinates coordinates{};  // what threadIdx & co. read
  Block* block = nullptr;
  int linear = 0;  // x + y*bx + z*bx*by
  int lane = 0;
  int warp = 0;
  ThreadState state = ThreadState::kRunnable;
  WarpRequest request;      // while at a warp operation
  uint64_t result = 0;      // the warp operation's result for this lane
  Worker* worker = nullptr;  // the fiber that runs it from its start; nullptr: not started
};
static_assert(std::is_standard_layout_v<KernelThread> && offsetof(KernelThread, coordinates) == 0,
              "CurrentThread casts the coordinates' address back to the thread");

// A fiber that runs kernel threads one after another: created when a thread starts and no
// idle one exists, reused by later threads and blocks of the grid, ended with the grid. A
// thread that returns without having waited hands its fiber straight to the next unstarted
// thread in line (grid-stride kernels with more threads than elements never switch).
struct Worker {
  Stack stack;
  context::fiber fiber;             // while suspended: its continuation
  KernelThread* thread = nullptr;   // the thread it runs; nullptr when idle (resumed: end)
  void* fake_stack = nullptr;       // ASan's fake stack while switched out
};

// One warp's lanes as bit masks (bit i is lane i), so that a warp operation checks its mask
// in O(1) and only the lane that completes it visits the lanes.
struct WarpLanes {
  unsigned existing = 0;  // lanes the block has (a partial last warp has fewer)
  unsigned waiting = 0;   // lanes waiting at a warp operation (state kAtWarpOperation)
  unsigned exited = 0;
};

// Boost.Context's stack allocator for one fiber: hands out a stack taken from the pool
// beforehand and gives it back when the fiber ends.
class PooledStack {
 public:
  explicit PooledStack(Stack stack) : stack_(stack) {}
  context::stack_context allocate() {
    context::stack_context stack_context;
    stack_context.size = stack_.bytes;
    stack_context.sp = static_cast<char*>(stack_.bottom) + stack_.bytes;
    return stack_context;
  }
  void deallocate(context::stack_context& stack_context) {
    executor::ReleaseStack(
        Stack{static_cast<char*>(stack_context.sp) - stack_context.size, stack_context.size});
  }

 private:
  Stack stack_;
};

// The blocks of one grid, run one after another with the same threads and fibers.
class Block {
 public:
  Block(const char* name, dim3 grid, dim3 block_dim, const std::function<void()>& thread_body)
      : name_(name),
        count_(static_cast<int>(block_dim.x * block_dim.y * block_dim.z)),
        thread_body_(thread_body),
        threads_(new KernelThread[count_]),
        warps_(new WarpLanes[(count_ + kWarpLanes - 1) / kWarpLanes]),
        runnable_(new int[count_]) {
    for (int linear = 0; linear < count_; ++linear) {
      KernelThread& thread = threads_[linear];
      const unsigned x = linear % block_dim.x, y = linear / block_dim.x % block_dim.y,
                     z = linear / (block_dim.x * block_dim.y);
      thread.coordinates = ThreadCoordinates{uint3{x, y, z}, uint3{}, block_dim, grid};
      thread.block = this;
      thread.linear = linear;
      thread.lane = linear % kWarpLanes;
      thread.warp = linear / kWarpLanes;
      warps_[thread.warp].existing |= 1u << thread.lane;
    }
  }
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
  // Ends every fiber (all idle once Run returns), giving their stacks back to the pool.
  ~Block();

  // Runs block `index` to the end with `dynamic_shared` as its shared memory; "" or the
  // error. After an error the object may only be destroyed.
  std::string Run(uint3 index, void* dynamic_shared);

  void* dynamic_shared() const { return dynamic_shared_; }
  void SyncThreads(KernelThread& thread);
  // Hot: inlined into internal::WarpOperation (fewer returns to mispredict after a switch).
  // The thread's request is filled in; the thread waits there unless it rejects it.
  __attribute__((always_inline)) uint64_t WarpOperation(KernelThread& thread);

 private:
  context::fiber WorkerMain(Worker& worker, context::fiber&& from);
  void RunThread(KernelThread& thread);
  Worker& IdleWorker();
  // The switches are inlined into their callers for the same reason as WarpOperation.
  __attribute__((always_inline)) void SwitchTo(context::fiber& own, void** own_fake_stack,
                                               context::fiber& target,
                                               const void* target_bottom, size_t target_bytes);
  __attribute__((always_inline)) void Arrived(context::fiber&& from, void* fake_stack);
  void Resume(Worker& worker);
  __attribute__((always_inline)) void SwitchToNext(Worker& worker);
  __attribute__((always_inline)) void Suspend(KernelThread& thread);
  void ReleaseBarrier(const KernelThread* self);
  [[noreturn]] __attribute__((noinline, cold)) void RejectWarpOperation(
      KernelThread& thread, const WarpRequest& request);
  void CompleteWarpOperation(KernelThread& self);
  [[noreturn]] void Fail(const std::string& message);
  void RecordError(const std::string& message);
  std::string DescribeThread(const KernelThread& thread) const;
  std::string WhyStuck(const KernelThread& thread) const;
  std::string Deadlock() const;
  void Abandon();

  // The runnable threads, first to last: a ring of at most count_ (a thread is queued once).
  void PushRunnable(int linear) {
    int slot = runnable_head_ + runnable_size_;
    if (slot >= count_) slot -= count_;
    runnable_[slot] = linear;
    ++runnable_size_;
  }
  int PopRunnable() {
    const int linear = runnable_[runnable_head_];
    if (++runnable_head_ == count_) runnable_head_ = 0;
    --runnable_size_;
    return linear;
  }

  const char* const name_;
  const int count_;
  const std::function<void()>& thread_body_;
  const std::unique_ptr<KernelThread[]> threads_;
  const std::unique_ptr<WarpLanes[]> warps_;
  const std::unique_ptr<int[]> runnable_;
  int runnable_head_ = 0;
  int runnable_size_ = 0;
  uint3 index_{};
  void* dynamic_shared_ = nullptr;
  int at_barrier_ = 0;
  int exited_ = 0;
  bool abandoning_ = false;
  std::string error_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<Worker*> idle_workers_;
  // While a worker runs: the scheduler's continuation.
  context::fiber scheduler_;
  void* scheduler_fake_stack_ = nullptr;
  // Set by the context that switches away: the slot its continuation goes to, filled by
  // the context it switched to (Arrived).
  context::fiber* from_slot_ = nullptr;
  // The scheduler's stack, learnt from ASan when the scheduler switches to a fiber.
  const void* scheduler_stack_bottom_ = nullptr;
  size_t scheduler_stack_bytes_ = 0;
};

Block::~Block() {
  for (const std::unique_ptr<Worker>& worker : workers_) {
    worker->thread = nullptr;
    Resume(*worker);
    if (worker->fiber) {
      std::fprintf(stderr, "simgpu: kernel %s: a fiber did not end\n", name_);
      std::abort();
    }
  }
  internal::current_coordinates = nullptr;
}

std::string Block::Run(uint3 index, void* dynamic_shared) {
  index_ = index;
  dynamic_shared_ = dynamic_shared;
  for (int linear = 0; linear < count_; ++linear) {
    KernelThread& thread = threads_[linear];
    thread.coordinates.block_index = index;
    thread.state = ThreadState::kRunnable;
    thread.worker = nullptr;
    runnable_[linear] = linear;
  }
  for (int warp = 0; warp < (count_ + kWarpLanes - 1) / kWarpLanes; ++warp) {
    warps_[warp].waiting = 0;
    warps_[warp].exited = 0;
  }
  runnable_head_ = 0;
  runnable_size_ = count_;
  at_barrier_ = 0;
  exited_ = 0;
  while (runnable_size_ > 0 && error_.empty()) {
    KernelThread& thread = threads_[PopRunnable()];
    if (thread.worker == nullptr) {
      Worker& worker = IdleWorker();
      worker.thread = &thread;
      thread.worker = &worker;
    }
    Resume(*thread.worker);
  }
  if (error_.empty() && exited_ < count_) RecordError(Deadlock());
  if (!error_.empty()) Abandon();
  internal::current_coordinates = nullptr;
  return error_;
}

Worker& Block::IdleWorker() {
  if (!idle_workers_.empty()) {
    Worker* worker = idle_workers_.back();
    idle_workers_.pop_back();
    return *worker;
  }
  workers_.push_back(std::make_unique<Worker>());
  Worker& worker = *workers_.back();
  worker.stack = executor::AcquireStack();
  worker.fiber = context::fiber(std::allocator_arg, PooledStack(worker.stack),
                                [this, &worker](context::fiber&& scheduler) {
                                  return WorkerMain(worker, std::move(scheduler));
                                });
  return worker;
}

context::fiber Block::WorkerMain(Worker& worker, context::fiber&& from) {
  Arrived(std::move(from), nullptr);
  while (worker.thread != nullptr) {
    RunThread(*worker.thread);
    // The next thread in line has not started: it runs here, as the scheduler would run it
    // next, without a switch to a fiber of its own.
    if (runnable_size_ > 0 && error_.empty() && !abandoning_) {
      KernelThread& next = threads_[runnable_[runnable_head_]];
      if (next.worker == nullptr) {
        PopRunnable();
        next.worker = &worker;
        worker.thread = &next;
        internal::current_coordinates = &next.coordinates;
        continue;
      }
    }
    worker.thread = nullptr;
    idle_workers_.push_back(&worker);
    SwitchToNext(worker);  // the next thread in line has a fiber: no idle one is taken
  }
  // The fiber ends (only the scheduler ends workers): ASan may free its fake stack.
  from_slot_ = &worker.fiber;
  StartSwitch(nullptr, scheduler_stack_bottom_, scheduler_stack_bytes_);
  return std::move(scheduler_);
}

void Block::RunThread(KernelThread& thread) {
  if (!abandoning_) {
    try {
      thread_body_();
    } catch (const AbandonThread&) {
    } catch (const std::exception& exception) {
      RecordError(DescribeThread(thread) + " threw: " + exception.what());
    } catch (...) {
      RecordError(DescribeThread(thread) + " threw an exception");
    }
  }
  thread.state = ThreadState::kExited;
  warps_[thread.warp].exited |= 1u << thread.lane;
  ++exited_;
  if (at_barrier_ > 0 && at_barrier_ + exited_ == count_) ReleaseBarrier(nullptr);
}

// Every switch between the scheduler and the fibers, and between fibers, goes through here.
void Block::SwitchTo(context::fiber& own, void** own_fake_stack, context::fiber& target,
                     const void* target_bottom, size_t target_bytes) {
  from_slot_ = &own;
  StartSwitch(own_fake_stack, target_bottom, target_bytes);
  context::fiber from = std::move(target).resume();
  Arrived(std::move(from), *own_fake_stack);
}

// Where a context continues after a switch (or a fiber starts): keeps the continuation of
// the context that switched here in that context's slot.
void Block::Arrived(context::fiber&& from, void* fake_stack) {
  const void* from_bottom = nullptr;
  size_t from_bytes = 0;
  FinishSwitch(fake_stack, &from_bottom, &from_bytes);
  if (from_slot_ == &scheduler_) {
    scheduler_stack_bottom_ = from_bottom;
    scheduler_stack_bytes_ = from_bytes;
  }
  *from_slot_ = std::move(from);
}

// From the scheduler to `worker`, until some fiber switches back to the scheduler.
void Block::Resume(Worker& worker) {
  internal::current_coordinates =
      worker.thread != nullptr ? &worker.thread->coordinates : nullptr;
  SwitchTo(scheduler_, &scheduler_fake_stack_, worker.fiber, worker.stack.bottom,
           worker.stack.bytes);
}

// From `worker` straight to the fiber of the next runnable thread, in the scheduler's order
// (half the switches of going through the scheduler); to the scheduler when no thread is
// runnable or after an error.
void Block::SwitchToNext(Worker& worker) {
  if (runnable_size_ > 0 && error_.empty() && !abandoning_) {
    KernelThread& next = threads_[PopRunnable()];
    if (next.worker == nullptr) {
      Worker& idle = IdleWorker();
      idle.thread = &next;
      next.worker = &idle;
    }
    internal::current_coordinates = &next.coordinates;
    Worker& target = *next.worker;
    SwitchTo(worker.fiber, &worker.fake_stack, target.fiber, target.stack.bottom,
             target.stack.bytes);
  } else {
    SwitchTo(worker.fiber, &worker.fake_stack, scheduler_, scheduler_stack_bottom_,
             scheduler_stack_bytes_);
  }
}

void Block::Suspend(KernelThread& thread) {
  SwitchToNext(*thread.worker);
  if (abandoning_) throw AbandonThread{};
}

void Block::SyncThreads(KernelThread& thread) {
  if (abandoning_) throw AbandonThread{};
  thread.state = ThreadState::kAtBarrier;
  ++at_barrier_;
  if (at_barrier_ + exited_ == count_) {
    ReleaseBarrier(&thread);
  } else {
    Suspend(thread);
  }
}

void Block::ReleaseBarrier(const KernelThread* self) {
  for (int linear = 0; linear < count_; ++linear) {
    KernelThread& thread = threads_[linear];
    if (thread.state != ThreadState::kAtBarrier) continue;
    thread.state = ThreadState::kRunnable;
    if (&thread != self) PushRunnable(linear);
  }
  at_barrier_ = 0;
}

// The checks of WarpOperation again, in their order, each with its message: out of the hot
// path, reached only when one of them fails.
void Block::RejectWarpOperation(KernelThread& thread, const WarpRequest& request) {
  auto who_string = [&] { return DescribeThread(thread); };
  const bool shuffle = IsShuffle(request.kind);
  if (shuffle &&
      (request.width < 1 || request.width > kWarpLanes || (request.width & (request.width - 1)))) {
    Fail(Format("%s calls %s with width %d, not a power of two from 1 to 32", who_string().c_str(),
                Describe(request).c_str(), request.width));
  }
  const unsigned own_bit = 1u << thread.lane;
  if ((request.mask & own_bit) == 0) {
    Fail(Format("%s (lane %d) calls %s, whose mask does not include its own lane", who_string().c_str(),
                thread.lane, Describe(request).c_str()));
  }
  WarpLanes& warp = warps_[thread.warp];
  // The lowest lane of the mask that has exited or does not exist (exited lanes exist, and
  // every existing lane is below every missing one).
  const unsigned unusable = request.mask & (warp.exited | ~warp.existing);
  if (unusable != 0) {
    const int lane = __builtin_ctz(unusable);
    if ((warp.existing >> lane & 1u) == 0) {
      Fail(Format("%s calls %s, which names lane %d of warp %d; the block has %d threads, so "
                  "that lane does not exist",
                  who_string().c_str(), Describe(request).c_str(), lane, thread.warp, count_));
    }
    const KernelThread& other = threads_[thread.warp * kWarpLanes + lane];
    Fail(Format("%s calls %s, which names lane %d (%s), which has exited", who_string().c_str(),
                Describe(request).c_str(), lane, DescribeThread(other).c_str()));
  }
  if (shuffle) {
    const int source = SourceLane(request.kind, thread.lane, request.lane_argument, request.width);
    if ((request.mask >> source & 1u) == 0) {
      Fail(Format("%s calls %s reading lane %d, which is not in the mask (an inactive lane)",
                  who_string().c_str(), Describe(request).c_str(), source));
    }
  }
  std::abort();  // WarpOperation found a fault that none of the checks above names
}

uint64_t Block::WarpOperation(KernelThread& thread) {
  if (abandoning_) throw AbandonThread{};
  const WarpRequest& request = thread.request;
  const bool shuffle = IsShuffle(request.kind);
  const unsigned own_bit = 1u << thread.lane;
  WarpLanes& warp = warps_[thread.warp];
  // Its own lane in the mask, no exited or missing lane in it; a shuffle's width a power of
  // two up to 32 and its source lane in the mask.
  bool rejected = (request.mask & own_bit) == 0 ||
                  (request.mask & (warp.exited | ~warp.existing)) != 0;
  if (shuffle) {
    const int width = request.width;
    rejected = rejected || width < 1 || width > kWarpLanes || (width & (width - 1)) != 0 ||
               (request.mask >> SourceLane(request.kind, thread.lane, request.lane_argument,
                                           width) & 1u) == 0;
  }
  if (__builtin_expect(rejected, 0)) RejectWarpOperation(thread, request);
  thread.state = ThreadState::kAtWarpOperation;
  warp.waiting |= own_bit;
  bool complete = (warp.waiting & request.mask) == request.mask;
  if (complete) {
    const KernelThread* lanes = &threads_[thread.warp * kWarpLanes];
    for (unsigned others = request.mask & ~own_bit; others != 0 && complete;
         others &= others - 1) {
      complete = SameOperation(lanes[__builtin_ctz(others)].request, request);
    }
  }
  if (complete) {
    CompleteWarpOperation(thread);
  } else {
    Suspend(thread);
  }
  return thread.result;
}

void Block::CompleteWarpOperation(KernelThread& self) {
  const WarpRequest& request = self.request;
  const unsigned mask = request.mask;
  const WarpOpKind kind = request.kind;
  KernelThread* const lanes = &threads_[self.warp * kWarpLanes];
  if (IsShuffle(kind)) {
    // Each lane's own source: lanes may pass different arguments to one shuffle.
    for (unsigned remaining = mask; remaining != 0; remaining &= remaining - 1) {
      const int lane = __builtin_ctz(remaining);
      KernelThread& thread = lanes[lane];
      const int source =
          SourceLane(kind, lane, thread.request.lane_argument, thread.request.width);
      thread.result = lanes[source].request.value;
    }
  } else {
    uint64_t ballot = 0;
    if (kind != WarpOpKind::kSyncWarp) {
      for (unsigned remaining = mask; remaining != 0; remaining &= remaining - 1) {
        const int lane = __builtin_ctz(remaining);
        if (lanes[lane].request.value != 0) ballot |= uint64_t{1} << lane;
      }
    }
    uint64_t result = 0;
    switch (kind) {
      case WarpOpKind::kBallot: result = ballot; break;
      case WarpOpKind::kAny: result = ballot != 0; break;
      case WarpOpKind::kAll: result = ballot == mask; break;
      default: break;
    }
    for (unsigned remaining = mask; remaining != 0; remaining &= remaining - 1) {
      lanes[__builtin_ctz(remaining)].result = result;
    }
  }
  warps_[self.warp].waiting &= ~mask;
  for (unsigned remaining = mask; remaining != 0; remaining &= remaining - 1) {
    const int lane = __builtin_ctz(remaining);
    KernelThread& thread = lanes[lane];
    thread.state = ThreadState::kRunnable;
    if (&thread != &self) PushRunnable(thread.linear);
  }
}

void Block::RecordError(const std::string& message) {
  if (!error_.empty()) return;
  error_ = Format("kernel %s block (%u,%u,%u): ", name_, index_.x, index_.y, index_.z) + message;
}

void Block::Fail(const std::string& message) {
  RecordError(message);
  throw AbandonThread{};
}

std::string Block::DescribeThread(const KernelThread& thread) const {
  const uint3& index = thread.coordinates.thread_index;
  return Format("thread (%u,%u,%u)", index.x, index.y, index.z);
}

std::string Block::WhyStuck(const KernelThread& thread) const {
  const int warp_begin = thread.warp * kWarpLanes;
  for (int lane = 0; lane < kWarpLanes; ++lane) {
    if ((thread.request.mask >> lane & 1u) == 0) continue;
    const KernelThread& other = threads_[warp_begin + lane];
    switch (other.state) {
      case ThreadState::kExited:
        return Format(" (its lane %d has exited)", lane);
      case ThreadState::kAtBarrier:
        return Format(" (its lane %d waits at __syncthreads)", lane);
      case ThreadState::kAtWarpOperation:
        if (!SameOperation(other.request, thread.request)) {
          return Format(" (its lane %d waits at %s%s)", lane, Describe(other.request).c_str(),
                        other.request.kind == thread.request.kind ? " of another value size" : "");
        }
        break;
      case ThreadState::kRunnable:
        break;
    }
  }
  return "";
}

std::string Block::Deadlock() const {
  constexpr int kListed = 4;
  std::string message = "deadlock: ";
  bool first = true;
  auto add = [&](const std::string& part) {
    message += first ? part : "; " + part;
    first = false;
  };
  if (at_barrier_ > 0) {
    add(Format("__syncthreads reached by %d of %d live threads", at_barrier_, count_ - exited_));
  }
  int listed = 0, unlisted = 0;
  for (int linear = 0; linear < count_; ++linear) {
    const KernelThread& thread = threads_[linear];
    if (thread.state != ThreadState::kAtWarpOperation) continue;
    if (listed == kListed) {
      ++unlisted;
      continue;
    }
    add(DescribeThread(thread) + " waits at " + Describe(thread.request) + WhyStuck(thread));
    ++listed;
  }
  if (unlisted > 0) add(Format("%d more threads wait at warp operations", unlisted));
  return message;
}

void Block::Abandon() {
  abandoning_ = true;
  for (int linear = 0; linear < count_; ++linear) {
    KernelThread& thread = threads_[linear];
    if (thread.worker == nullptr || thread.state == ThreadState::kExited) continue;
    Resume(*thread.worker);
    if (thread.state != ThreadState::kExited) {
      std::fprintf(stderr,
                   "simgpu: kernel %s: %s did not end when abandoned (does the kernel catch "
                   "every exception?)\n",
                   name_, DescribeThread(thread).c_str());
      std::abort();
    }
  }
}

KernelThread& CurrentThread(const char* what) {
  const ThreadCoordinates* coordinates = internal::current_coordinates;
  if (coordinates == nullptr) internal::OutsideKernel(what);
  // The coordinates are a KernelThread's first member (static_assert above).
  return *reinterpret_cast<KernelThread*>(const_cast<ThreadCoordinates*>(coordinates));
}

// A random permutation of [0, count) visited without storing it: a four-round Feistel
// network over the smallest even number of bits covering count, its outputs of count or
// more skipped (at most three of four).
class BlockOrder {
 public:
  BlockOrder(uint64_t count, uint64_t seed) : count_(count) {
    int bits = 0;
    while (bits < 64 && (uint64_t{1} << bits) < count) ++bits;
    half_bits_ = bits < 2 ? 1 : (bits + 1) / 2;
    half_mask_ = (uint64_t{1} << half_bits_) - 1;
    uint64_t state = seed;
    for (uint64_t& key : keys_) key = Mix(state += 0x9e3779b97f4a7c15ull);
  }

  // Calls visit(index) for each index in the permuted order while it returns true.
  template <typename Visit>
  void ForEach(Visit visit) const {
    const unsigned __int128 domain = static_cast<unsigned __int128>(1) << (2 * half_bits_);
    for (unsigned __int128 x = 0; x < domain; ++x) {
      const uint64_t index = Permute(static_cast<uint64_t>(x));
      if (index < count_ && !visit(index)) return;
    }
  }

 private:
  static uint64_t Mix(uint64_t z) {  // splitmix64's finalizer
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t Permute(uint64_t x) const {
    uint64_t left = x >> half_bits_, right = x & half_mask_;
    for (uint64_t key : keys_) {
      const uint64_t next = left ^ (Mix(right ^ key) & half_mask_);
      left = right;
      right = next;
    }
    return left << half_bits_ | right;
  }

  uint64_t count_;
  int half_bits_;
  uint64_t half_mask_;
  uint64_t keys_[4];
};

// One block at a time in the process: a static __shared__ variable is one object per
// function, so two blocks running at once would share it.
std::mutex& BlockMutex() {
  static std::mutex* const mutex = new std::mutex();  // never destroyed: streams run at exit
  return *mutex;
}

}  // namespace

namespace internal {

void OutsideKernel(const char* what) {
  std::fprintf(stderr, "simgpu: %s used outside a kernel's thread\n", what);
  std::abort();
}

uint64_t WarpOperation(WarpOpKind kind, unsigned mask, uint64_t value, int value_bytes,
                       int lane_argument, int width) {
  const ThreadCoordinates* coordinates = current_coordinates;
  if (__builtin_expect(coordinates == nullptr, 0)) OutsideKernel(OperationName(kind));
  KernelThread& thread = CurrentThread("");
  // Straight into the thread: completing lanes read every lane's request there.
  thread.request = WarpRequest{kind, mask, value, value_bytes, lane_argument, width};
  return thread.block->WarpOperation(thread);
}

void SyncThreads() {
  KernelThread& thread = CurrentThread("__syncthreads");
  thread.block->SyncThreads(thread);
}

void* CurrentDynamicShared() { return CurrentThread("DynamicSharedMemory").block->dynamic_shared(); }

}  // namespace internal

std::string RunGrid(const char* name, dim3 grid, dim3 block, size_t dynamic_shared_bytes,
                    uint64_t seed, const std::function<void()>& thread_body) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > kMaxThreadsPerBlock) {
    return Format("kernel %s: a block of %ux%ux%u threads (1 to %" PRIu64 " can run)", name,
                  block.x, block.y, block.z, kMaxThreadsPerBlock);
  }
  const uint64_t blocks = uint64_t{grid.x} * grid.y * grid.z;
  if (blocks == 0) return Format("kernel %s: an empty grid %ux%ux%u", name, grid.x, grid.y, grid.z);
  if (dynamic_shared_bytes > executor::kMaxSharedBytesPerBlock) {
    return Format("kernel %s: %zu bytes of dynamic shared memory (at most %zu)", name,
                  dynamic_shared_bytes, executor::kMaxSharedBytesPerBlock);
  }
  std::string error;
  Block running(name, grid, block, thread_body);
  BlockOrder(blocks, seed).ForEach([&](uint64_t index) {
    const uint3 block_index{static_cast<unsigned>(index % grid.x),
                            static_cast<unsigned>(index / grid.x % grid.y),
                            static_cast<unsigned>(index / (uint64_t{grid.x} * grid.y))};
    std::lock_guard<std::mutex> lock(BlockMutex());
    error = running.Run(block_index, executor::PrepareDynamicShared(dynamic_shared_bytes));
    return error.empty();
  });
  return error;
}

}  // namespace simgpu
