// FaultInjectingEngine: an IoEngine wrapper for tests that injects the failures a disk and
// a kernel can produce, so that every consumer (the NVMe store, pipelines) is tested for
// detecting them: EIO, ENOSPC, short reads and writes, delayed and reordered completions,
// and torn writes. Faults are chosen by rules (op, tag, skip the first N matches, hit the
// next `count`), so a test knows exactly which extent fails.
//
// How each fault surfaces (the status is what the real engines give for the same event):
// - kEio: not forwarded; the completion is ErrnoError(EIO) (kInternal, "Input/output
//   error"), naming op, file, offset and length. A read leaves the buffer untouched.
// - kEnospc (writes): not forwarded; ErrnoError(ENOSPC) (kResourceExhausted). Nothing is
//   written.
// - kShortRead / kShortWrite: only a prefix of the extent is transferred, and the
//   completion is kDataLoss "short read/write: P of L bytes transferred" with
//   bytes_transferred = P (what an engine reports when it cannot complete a transfer).
// - kTornWrite: only a prefix reaches the file (the rest keeps its old contents) while the
//   completion reports success with all bytes: a torn write is by nature invisible to the
//   I/O layer (power loss behind a volatile cache, firmware bugs). It must be caught by
//   the checksums of whoever reads the extent back; fault_stats() lists torn extents so a
//   test can check that they were.
// - kDelay: the completion is held at least `delay` after the inner engine finished it.
// - reorder_window > 1: completions are released in groups of that many, each group in
//   reverse order of arrival; a group is released early when nothing else is outstanding,
//   so no Wait hangs on an incomplete group.
// Prefix lengths are rounded down to kDirectIoAlignment, so O_DIRECT files accept them.
// Extents answered by an injected EIO or ENOSPC never reach the inner engine, so only their
// length and buffer are checked; every other extent is validated by the inner engine, and
// an invalid batch is rejected as a whole (rule counters are not advanced).
// Destruction destroys the inner engine, which drains. Drain releases delayed and grouped
// completions without waiting out the remaining delays.
// Thread-safety: thread-compatible, like every IoEngine.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "nvme/io_engine.h"

namespace strata::nvme {

enum class FaultKind { kEio, kEnospc, kShortRead, kShortWrite, kTornWrite, kDelay };
const char* FaultKindName(FaultKind kind);

inline constexpr uint64_t kEveryMatch = UINT64_MAX;

struct FaultRule {
  FaultKind kind = FaultKind::kEio;
  // kEio and kDelay: only extents of this op (default: both). The other kinds imply theirs:
  // kEnospc, kShortWrite and kTornWrite hit writes, kShortRead hits reads.
  std::optional<IoOp> op;
  // Only extents with this tag (default: any).
  std::optional<uint64_t> tag;
  // Matching extents let through before the rule fires; then it hits `count` extents
  // (kEveryMatch: all later ones).
  uint64_t skip = 0;
  uint64_t count = 1;
  // kShortRead, kShortWrite, kTornWrite: bytes transferred (rounded down to 4 KiB, less than
  // the extent). 0 means half the extent, rounded down to 4 KiB.
  uint64_t prefix_bytes = 0;
  // kDelay: how long the completion is held.
  std::chrono::milliseconds delay{0};
};

struct FaultPlan {
  std::vector<FaultRule> rules;
  uint32_t reorder_window = 0;  // 0 or 1: completions pass in arrival order
  std::string source;  // the text ParseFaultPlan read it from ("" for a plan made in code)
};

// A plan written as text, for fault tests of whole programs (STRATA_FAULT_NVME): one rule
// "KIND@N", KIND one of eio_read, eio_write, enospc, short_read, short_write, torn; N the
// matching extents let through first (FaultRule::skip). "" is no plan (nullopt);
// anything else unparsable is kInvalidArgument naming the text.
StatusOr<std::optional<FaultPlan>> ParseFaultPlan(const std::string& text);

struct TornWrite {
  FileHandle file;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t bytes_written = 0;  // the prefix that reached the file
  uint64_t tag = 0;
};

struct FaultStats {
  uint64_t eio = 0;
  uint64_t enospc = 0;
  uint64_t short_reads = 0;
  uint64_t short_writes = 0;
  uint64_t torn_writes = 0;
  uint64_t delayed = 0;
  uint64_t reordered_groups = 0;  // groups of two or more released in reverse order
  std::vector<TornWrite> torn;
};

class FaultInjectingEngine final : public IoEngine {
 public:
  FaultInjectingEngine(std::unique_ptr<IoEngine> inner, FaultPlan plan);
  ~FaultInjectingEngine() override = default;  // the inner engine drains

  // Adds a rule after the ones given at construction.
  void AddRule(const FaultRule& rule);
  FaultStats fault_stats() const { return fault_stats_; }

  StatusOr<FileHandle> OpenFile(const std::string& path, const FileOptions& options) override {
    return inner_->OpenFile(path, options);
  }
  Status CloseFile(FileHandle file) override { return inner_->CloseFile(file); }
  std::string FileName(FileHandle file) const override { return inner_->FileName(file); }
  Status RegisterBuffers(absl::Span<const BufferRegion> regions) override {
    return inner_->RegisterBuffers(regions);
  }
  Status UnregisterBuffers() override { return inner_->UnregisterBuffers(); }
  Status Submit(absl::Span<const IoRequest> requests) override;
  size_t Poll(std::vector<IoCompletion>* completions) override;
  Status Wait(size_t min_completions, std::chrono::milliseconds timeout,
              std::vector<IoCompletion>* completions) override;
  Status Drain() override;
  size_t Outstanding() const override {
    return forwarded_.size() + delayed_.size() + grouped_.size() + ready_.size();
  }
  EngineInfo info() const override { return inner_->info(); }
  EngineStats stats() const override { return inner_->stats(); }

 private:
  struct RuleState {
    FaultRule rule;
    uint64_t matched = 0;
    uint64_t hits = 0;
  };
  struct Forwarded {
    IoRequest outer;
    std::optional<FaultKind> fault;
    uint64_t prefix_bytes = 0;
    std::chrono::milliseconds delay{0};
  };
  struct Delayed {
    IoCompletion completion;
    std::chrono::steady_clock::time_point release_at;
  };

  // The rule that hits `request` (advancing rule counters), if any.
  std::optional<FaultRule> ChooseFault(const IoRequest& request);
  void OnInnerCompletion(IoCompletion inner_completion);
  void Deliver(IoCompletion completion);
  // Polls the inner engine, releases due delays, and flushes a group when idle.
  void Progress(bool release_all_delayed);
  std::string Describe(const IoRequest& request) const;

  std::unique_ptr<IoEngine> inner_;
  std::vector<RuleState> rules_;
  uint32_t reorder_window_;
  FaultStats fault_stats_;
  uint64_t next_inner_tag_ = 0;
  std::unordered_map<uint64_t, Forwarded> forwarded_;  // by inner tag
  std::vector<Delayed> delayed_;
  std::vector<IoCompletion> grouped_;  // reorder group being collected
  std::deque<IoCompletion> ready_;
};

}  // namespace strata::nvme
