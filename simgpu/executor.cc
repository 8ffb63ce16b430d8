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
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "simgpu/executor.h"
#include "simgpu/executor_memory.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

namespace simgpu {
namespace internal {

thread_local const ThreadCoordinates* current_coordinates = nullptr;

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
int SourceLane(WarpOpKind kind, int lane, int lane_argument, int width) {
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

// One thread of the running block.
struct KernelThread {
  ThreadCoordinates coordinates{};  // what threadIdx & co. read
  Block* block = nullptr;
  int linear = 0;  // x + y*bx + z*bx*by
  int lane = 0;
  int warp = 0;
  ThreadState state = ThreadState::kRunnable;
  WarpRequest request;  // while at a warp operation
  uint64_t result = 0;  // the warp operation's result for this lane
  Stack stack;
  context::fiber fiber;                 // while suspended: the thread's continuation
  context::fiber* scheduler = nullptr;  // while running: the scheduler's continuation
  void* fake_stack = nullptr;           // ASan's fake stack while switched out
};

// The running kernel thread of this OS thread (nullptr outside a kernel).
thread_local KernelThread* current_thread = nullptr;

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

class Block {
 public:
  Block(const char* name, uint3 index, dim3 grid, dim3 block_dim, void* dynamic_shared,
        const std::function<void()>& thread_body)
      : name_(name),
        index_(index),
        count_(static_cast<int>(block_dim.x * block_dim.y * block_dim.z)),
        dynamic_shared_(dynamic_shared),
        thread_body_(thread_body),
        threads_(new KernelThread[count_]) {
    for (int linear = 0; linear < count_; ++linear) {
      KernelThread& thread = threads_[linear];
      const unsigned x = linear % block_dim.x, y = linear / block_dim.x % block_dim.y,
                     z = linear / (block_dim.x * block_dim.y);
      thread.coordinates = ThreadCoordinates{uint3{x, y, z}, index, block_dim, grid};
      thread.block = this;
      thread.linear = linear;
      thread.lane = linear % kWarpLanes;
      thread.warp = linear / kWarpLanes;
    }
  }
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  // Runs the block to the end; "" or the error.
  std::string Run();

  void* dynamic_shared() const { return dynamic_shared_; }
  void SyncThreads(KernelThread& thread);
  uint64_t WarpOperation(KernelThread& thread, const WarpRequest& request);

 private:
  context::fiber Main(KernelThread& thread, context::fiber&& scheduler);
  void Resume(KernelThread& thread);
  void Suspend(KernelThread& thread);
  void ReleaseBarrier(const KernelThread* self);
  void CompleteWarpOperation(KernelThread& self);
  [[noreturn]] void Fail(const std::string& message);
  void RecordError(const std::string& message);
  std::string DescribeThread(const KernelThread& thread) const;
  std::string WhyStuck(const KernelThread& thread) const;
  std::string Deadlock() const;
  void Abandon();

  const char* name_;
  const uint3 index_;
  const int count_;
  void* const dynamic_shared_;
  const std::function<void()>& thread_body_;
  std::unique_ptr<KernelThread[]> threads_;
  std::deque<int> runnable_;
  int at_barrier_ = 0;
  int exited_ = 0;
  bool abandoning_ = false;
  std::string error_;
  // The scheduler's stack, learnt from ASan when a fiber first starts.
  const void* scheduler_stack_bottom_ = nullptr;
  size_t scheduler_stack_bytes_ = 0;
};

std::string Block::Run() {
  for (int linear = 0; linear < count_; ++linear) {
    KernelThread& thread = threads_[linear];
    thread.stack = executor::AcquireStack();
    thread.fiber = context::fiber(std::allocator_arg, PooledStack(thread.stack),
                                  [this, &thread](context::fiber&& scheduler) {
                                    return Main(thread, std::move(scheduler));
                                  });
    runnable_.push_back(linear);
  }
  while (!runnable_.empty() && error_.empty()) {
    const int next = runnable_.front();
    runnable_.pop_front();
    Resume(threads_[next]);
  }
  if (error_.empty() && exited_ < count_) RecordError(Deadlock());
  if (!error_.empty()) Abandon();
  return error_;
}

context::fiber Block::Main(KernelThread& thread, context::fiber&& scheduler) {
  FinishSwitch(nullptr, &scheduler_stack_bottom_, &scheduler_stack_bytes_);
  thread.scheduler = &scheduler;
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
  ++exited_;
  if (at_barrier_ > 0 && at_barrier_ + exited_ == count_) ReleaseBarrier(nullptr);
  thread.scheduler = nullptr;
  // The fiber ends: ASan may free its fake stack.
  StartSwitch(nullptr, scheduler_stack_bottom_, scheduler_stack_bytes_);
  return std::move(scheduler);
}

void Block::Resume(KernelThread& thread) {
  current_thread = &thread;
  internal::current_coordinates = &thread.coordinates;
  void* fake_stack = nullptr;
  StartSwitch(&fake_stack, thread.stack.bottom, thread.stack.bytes);
  thread.fiber = std::move(thread.fiber).resume();
  FinishSwitch(fake_stack, nullptr, nullptr);
  current_thread = nullptr;
  internal::current_coordinates = nullptr;
}

void Block::Suspend(KernelThread& thread) {
  StartSwitch(&thread.fake_stack, scheduler_stack_bottom_, scheduler_stack_bytes_);
  *thread.scheduler = std::move(*thread.scheduler).resume();
  FinishSwitch(thread.fake_stack, &scheduler_stack_bottom_, &scheduler_stack_bytes_);
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
    if (&thread != self) runnable_.push_back(linear);
  }
  at_barrier_ = 0;
}

uint64_t Block::WarpOperation(KernelThread& thread, const WarpRequest& request) {
  if (abandoning_) throw AbandonThread{};
  // Messages only: the checks below are on every warp operation's path.
  auto who_string = [&] { return DescribeThread(thread); };
  if (IsShuffle(request.kind) &&
      (request.width < 1 || request.width > kWarpLanes || (request.width & (request.width - 1)))) {
    Fail(Format("%s calls %s with width %d, not a power of two from 1 to 32", who_string().c_str(),
                Describe(request).c_str(), request.width));
  }
  if ((request.mask >> thread.lane & 1u) == 0) {
    Fail(Format("%s (lane %d) calls %s, whose mask does not include its own lane", who_string().c_str(),
                thread.lane, Describe(request).c_str()));
  }
  const int warp_begin = thread.warp * kWarpLanes;
  for (int lane = 0; lane < kWarpLanes; ++lane) {
    if ((request.mask >> lane & 1u) == 0) continue;
    if (warp_begin + lane >= count_) {
      Fail(Format("%s calls %s, which names lane %d of warp %d; the block has %d threads, so "
                  "that lane does not exist",
                  who_string().c_str(), Describe(request).c_str(), lane, thread.warp, count_));
    }
    const KernelThread& other = threads_[warp_begin + lane];
    if (other.state == ThreadState::kExited) {
      Fail(Format("%s calls %s, which names lane %d (%s), which has exited", who_string().c_str(),
                  Describe(request).c_str(), lane, DescribeThread(other).c_str()));
    }
  }
  if (IsShuffle(request.kind)) {
    const int source = SourceLane(request.kind, thread.lane, request.lane_argument, request.width);
    if ((request.mask >> source & 1u) == 0) {
      Fail(Format("%s calls %s reading lane %d, which is not in the mask (an inactive lane)",
                  who_string().c_str(), Describe(request).c_str(), source));
    }
  }
  thread.request = request;
  thread.state = ThreadState::kAtWarpOperation;
  bool complete = true;
  for (int lane = 0; lane < kWarpLanes && complete; ++lane) {
    if ((request.mask >> lane & 1u) == 0) continue;
    const KernelThread& other = threads_[warp_begin + lane];
    complete = other.state == ThreadState::kAtWarpOperation && SameOperation(other.request, request);
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
  const int warp_begin = self.warp * kWarpLanes;
  uint64_t ballot = 0;
  for (int lane = 0; lane < kWarpLanes; ++lane) {
    if ((mask >> lane & 1u) != 0 && threads_[warp_begin + lane].request.value != 0) {
      ballot |= uint64_t{1} << lane;
    }
  }
  for (int lane = 0; lane < kWarpLanes; ++lane) {
    if ((mask >> lane & 1u) == 0) continue;
    KernelThread& thread = threads_[warp_begin + lane];
    switch (request.kind) {
      case WarpOpKind::kBallot: thread.result = ballot; break;
      case WarpOpKind::kAny: thread.result = ballot != 0; break;
      case WarpOpKind::kAll: thread.result = ballot == mask; break;
      case WarpOpKind::kSyncWarp: thread.result = 0; break;
      default: {
        const int source = SourceLane(request.kind, lane, thread.request.lane_argument,
                                      thread.request.width);
        thread.result = threads_[warp_begin + source].request.value;
      }
    }
  }
  for (int lane = 0; lane < kWarpLanes; ++lane) {
    if ((mask >> lane & 1u) == 0) continue;
    KernelThread& thread = threads_[warp_begin + lane];
    thread.state = ThreadState::kRunnable;
    if (&thread != &self) runnable_.push_back(warp_begin + lane);
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
    if (!thread.fiber) continue;
    Resume(thread);
    if (thread.fiber) {
      std::fprintf(stderr,
                   "simgpu: kernel %s: %s did not end when abandoned (does the kernel catch "
                   "every exception?)\n",
                   name_, DescribeThread(thread).c_str());
      std::abort();
    }
  }
}

KernelThread& CurrentThread(const char* what) {
  KernelThread* thread = current_thread;
  if (thread == nullptr) internal::OutsideKernel(what);
  return *thread;
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
  KernelThread& thread = CurrentThread(OperationName(kind));
  return thread.block->WarpOperation(
      thread, WarpRequest{kind, mask, value, value_bytes, lane_argument, width});
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
  BlockOrder(blocks, seed).ForEach([&](uint64_t index) {
    const uint3 block_index{static_cast<unsigned>(index % grid.x),
                            static_cast<unsigned>(index / grid.x % grid.y),
                            static_cast<unsigned>(index / (uint64_t{grid.x} * grid.y))};
    std::lock_guard<std::mutex> lock(BlockMutex());
    Block running(name, block_index, grid, block,
                  executor::PrepareDynamicShared(dynamic_shared_bytes), thread_body);
    error = running.Run();
    return error.empty();
  });
  return error;
}

}  // namespace simgpu
