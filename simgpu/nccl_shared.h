// simgpu/nccl_shared.h: the rendezvous of the NCCL double's ranks: one file per
// communicator that every rank maps with mmap, so ranks may be threads of one process or
// processes of one machine (mpirun) alike. ncclGetUniqueId creates the file (a random name
// under $TMPDIR, or /tmp when that path would not fit the id) and the id carries its path;
// each rank opens and maps it, claims its rank, and the last rank to join unlinks it (the
// mappings keep it alive).
//
// Layout: a header page (nranks, joined, the first failure published by any rank), then per
// rank a control page and a collective slot of kSlotBytes, then per ordered pair of ranks
// (from, to) a control page and a channel buffer of kChannelBytes for ncclSend/ncclRecv.
// Counters are plain integers in the mapping read and written only with acquire/release
// atomics (__atomic builtins), which work across processes; nothing here takes a lock, so a
// rank that dies leaves nothing held.
// Thread-safety: Rendezvous's methods are thread-safe; the slot and channel memory belongs
// to the protocol in nccl_ops.cc.
#pragma once

#include <nccl.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace simgpu {
namespace nccl {

inline constexpr size_t kPageBytes = 4096;
inline constexpr size_t kSlotBytes = size_t{1} << 20;       // per rank, per collective step
inline constexpr size_t kChannelBytes = size_t{256} << 10;  // per (from, to), per chunk
inline constexpr int kMaxRanks = 64;                        // the file is sparse; bounds its size

template <typename T>
T AtomicLoad(const T* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
template <typename T>
void AtomicStore(T* p, T value) {
  __atomic_store_n(p, value, __ATOMIC_RELEASE);
}
template <typename T>
bool AtomicCompareExchange(T* p, T expected, T desired) {
  return __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE);
}

// What a rank posts with each collective step, checked by every other rank: all ranks must
// be in the same collective with the same arguments.
struct StepHeader {
  uint64_t sequence;  // the communicator's collective number, from 0
  uint64_t step;      // the step's communicator-wide number, from 1
  uint64_t count;
  int32_t kind;
  int32_t type;
  int32_t reduction;
  int32_t root;
};

// One rank's control page.
struct RankControl {
  alignas(64) uint64_t posted;    // the last collective step whose slot contents are written
  alignas(64) uint64_t consumed;  // the last collective step this rank has read every slot of
  alignas(64) int32_t claimed;    // 1 once a rank joined as this rank
  int32_t pid;
  int32_t device;
  int32_t left;  // 1 once this rank destroyed or aborted its communicator, its work done
  alignas(64) StepHeader header;  // of step `posted`
};

// The control page of the channel (from, to): one chunk in flight at a time; messages go
// whole and in order (a send or receive waits for the previous one's last chunk).
struct ChannelControl {
  alignas(64) uint64_t written;  // chunks written by `from`
  uint64_t sent_messages;        // messages `from` wrote completely
  alignas(64) uint64_t read;     // chunks read by `to`
  uint64_t received_messages;    // messages `to` read completely
  alignas(64) uint64_t message;  // the chunk's message: `from`'s send number to `to`, from 0
  uint64_t message_bytes;
  uint64_t offset;  // of the chunk in its message
  uint64_t bytes;   // of the chunk
};

// Fills `id` with a new rendezvous (creating its file). ncclSystemError with `error` set
// when no file can be made.
ncclResult_t MakeRendezvous(ncclUniqueId* id, std::string* error);

// One rank's mapping of a rendezvous file.
class Rendezvous {
 public:
  // Opens the rendezvous of `id`, checks that every rank agrees on nranks, and claims `rank`
  // for this caller (with its pid and device). On failure `error` says why: ncclInvalidUsage
  // for an id this library did not make, a disagreement on nranks, or a rank claimed twice
  // (those two are also published as the rendezvous's failure, so the other ranks stop
  // waiting); ncclSystemError for a file that cannot be opened or mapped.
  static ncclResult_t Join(const ncclUniqueId& id, int nranks, int rank, int device,
                           std::unique_ptr<Rendezvous>* out, std::string* error);

  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  int nranks() const { return nranks_; }
  const std::string& path() const { return path_; }

  // Ranks that joined so far.
  int Joined() const;
  // Removes the file once (the last rank to join, or a rank giving up on the others).
  void Unlink();

  RankControl* control(int rank) const;
  char* slot(int rank) const;
  ChannelControl* channel(int from, int to) const;
  char* channel_data(int from, int to) const;

  // Records the communicator's first failure, by `rank`, for every rank to see; later ones
  // are dropped.
  void PublishFailure(int rank, const std::string& text);
  // True once a failure is published; `rank` and `text` say whose and what.
  bool Failure(int* rank, std::string* text) const;

  // "" while `rank`'s process lives (or is this process), else a sentence saying it exited.
  std::string DeadPeer(int rank) const;

 private:
  Rendezvous() = default;

  std::string path_;
  int nranks_ = 0;
  int rank_ = 0;
  char* base_ = nullptr;
  size_t bytes_ = 0;
  int unlinked_ = 0;  // set once (atomically) by the first Unlink of this mapping
};

}  // namespace nccl
}  // namespace simgpu
